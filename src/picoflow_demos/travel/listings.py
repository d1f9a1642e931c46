"""The travel demo's data, shipped inside the package: cities, hotels, local events and daily weather.

Everything here is invented. Code filters it (a city's hotels within a budget, the events of a
stay's dates, the weather of each day) before a model sees any of it, and the reply is written
from these records, so a price, a name or a forecast never comes from a model's text.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import date, timedelta
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

Interest = Literal["music", "food", "art", "sport", "outdoors", "history"]
INTERESTS: tuple[Interest, ...] = ("music", "food", "art", "sport", "outdoors", "history")


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class City(_Record):
    name: str
    state: str
    aliases: tuple[str, ...] = ()


class Hotel(_Record):
    id: str
    city: str
    name: str
    area: str
    price: int
    """Per night, in USD."""
    rating: float


class Event(_Record):
    id: str
    city: str
    date: date
    name: str
    category: Interest
    venue: str
    price: int
    """Per ticket, in USD; 0 is free."""


class DayWeather(_Record):
    date: date
    sky: str
    high: int
    """Degrees Fahrenheit."""
    low: int
    rain: int
    """Chance of rain, in percent."""


def _read(name: str) -> Any:
    text = resources.files("picoflow_demos.travel").joinpath(f"data/{name}").read_text(encoding="utf-8")
    return json.loads(text)


@cache
def cities() -> tuple[City, ...]:
    return tuple(TypeAdapter(list[City]).validate_python(_read("cities.json")))


@cache
def hotels() -> tuple[Hotel, ...]:
    return tuple(TypeAdapter(list[Hotel]).validate_python(_read("hotels.json")))


@cache
def events() -> tuple[Event, ...]:
    return tuple(TypeAdapter(list[Event]).validate_python(_read("events.json")))


@cache
def _weather() -> dict[str, dict[date, DayWeather]]:
    raw: dict[str, dict[str, dict[str, Any]]] = _read("weather.json")
    return {
        city: {date.fromisoformat(day): DayWeather(date=day, **values) for day, values in days.items()}
        for city, days in raw.items()
    }


def find_city(name: str) -> City | None:
    """The city ``name`` stands for (its name or an alias, any case and spacing), or None."""
    wanted = " ".join(name.casefold().split())
    return next(
        (city for city in cities() if wanted in (city.name.casefold(), *city.aliases)),
        None,
    )


def city_names() -> str:
    """ "Seattle, San Francisco, ... and Boston"."""
    names = [city.name for city in cities()]
    return f"{', '.join(names[:-1])} and {names[-1]}"


def hotels_in(city: str, max_price: float | None = None) -> list[Hotel]:
    """The city's hotels within the nightly budget, best rated first."""
    found = [
        hotel for hotel in hotels() if hotel.city == city and (max_price is None or hotel.price <= max_price)
    ]
    return sorted(found, key=lambda hotel: (-hotel.rating, hotel.price))


def events_in(city: str, first: date, last: date, interests: Collection[str] = ()) -> list[Event]:
    """The city's events from ``first`` to ``last`` (both included): those matching an interest
    first, then by date."""
    found = [event for event in events() if event.city == city and first <= event.date <= last]
    return sorted(found, key=lambda event: (bool(interests) and event.category not in interests, event.date))


def trip_days(check_in: date, check_out: date) -> list[date]:
    """Every day of a stay, arrival and departure included."""
    return [check_in + timedelta(days=offset) for offset in range((check_out - check_in).days + 1)]


def weather_on(city: str, days: Collection[date]) -> list[DayWeather]:
    """The forecasts the data holds for those days (days outside it have none)."""
    known = _weather().get(city, {})
    return [known[day] for day in sorted(days) if day in known]
