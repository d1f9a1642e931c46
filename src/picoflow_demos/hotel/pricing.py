"""The hotel catalog and its pricing rules: deterministic, in code, never left to a model.

A night costs ``level × season × room × holiday × weekend``, rounded to cents half up; a stay
costs the sum of its rounded nights. Holidays are the 11 US federal holidays on their actual
dates (no observed-day shifts). Everything is ``Decimal`` so a table never shows ``$599.9999``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Literal, get_args

from picoflow_demos._common import cents

RoomType = Literal["one bed", "two beds", "suite"]
Amenity = Literal[
    "freeWiFi",
    "freeParking",
    "freeBreakfast",
    "indoorPool",
    "outdoorPool",
    "fitnessCenter",
    "petFriendly",
    "nonSmoking",
    "digitalKey",
    "evCharging",
    "airportShuttle",
    "onSiteRestaurant",
    "roomService",
    "businessCenter",
    "meetingRoom",
    "connectingRooms",
    "streaming",
    "kitchen",
    "concierge",
    "boutique",
    "eveningReception",
    "tennis",
    "newHotel",
]

ROOM_TYPES: tuple[RoomType, ...] = get_args(RoomType)
AMENITIES: tuple[Amenity, ...] = get_args(Amenity)

AMENITY_LABELS: dict[str, str] = {
    "freeWiFi": "Free Wi-Fi",
    "freeParking": "Free parking",
    "freeBreakfast": "Free breakfast",
    "indoorPool": "Indoor pool",
    "outdoorPool": "Outdoor pool",
    "fitnessCenter": "Fitness center",
    "petFriendly": "Pet friendly",
    "nonSmoking": "Non-smoking",
    "digitalKey": "Digital key",
    "evCharging": "EV charging",
    "airportShuttle": "Airport shuttle",
    "onSiteRestaurant": "On-site restaurant",
    "roomService": "Room service",
    "businessCenter": "Business center",
    "meetingRoom": "Meeting rooms",
    "connectingRooms": "Connecting rooms",
    "streaming": "Streaming TV",
    "kitchen": "Kitchen",
    "concierge": "Concierge",
    "boutique": "Boutique hotel",
    "eveningReception": "Evening reception",
    "tennis": "Tennis",
    "newHotel": "New hotel",
}

SEASON_BY_MONTH: dict[int, Decimal] = {
    **dict.fromkeys((1, 2, 3), Decimal("1.2")),
    **dict.fromkeys((4, 5, 6), Decimal("1.4")),
    **dict.fromkeys((7, 8, 9), Decimal("1.8")),
    10: Decimal("1.5"),
    **dict.fromkeys((11, 12), Decimal("1.2")),
}
ROOM_FACTOR: dict[str, Decimal] = {
    "one bed": Decimal("1.0"),
    "two beds": Decimal("1.6"),
    "suite": Decimal("2.5"),
}
HOLIDAY_FACTOR = Decimal("1.2")
WEEKEND_FACTOR = Decimal("1.15")
DEFAULT_ROOM: RoomType = "one bed"


@dataclass(frozen=True, slots=True)
class Hotel:
    """One record of ``hotels.json``."""

    name: str
    address: str
    amenities: frozenset[str]
    level: Decimal
    """Nightly base price in USD."""
    room_types: tuple[str, ...]
    airport_miles: float
    city_center_miles: float


@dataclass(frozen=True, slots=True)
class HotelQuote:
    """The price of one stay at one hotel."""

    name: str
    room_type: str
    """The room type the nights are priced for."""
    nightly: list[Decimal]
    """One price per night, check-in first, each rounded to cents."""
    total: Decimal


@cache
def hotels() -> tuple[Hotel, ...]:
    """The catalog shipped with the package, in file order."""
    raw = json.loads(
        resources.files("picoflow_demos.hotel").joinpath("data/hotels.json").read_text(encoding="utf-8")
    )
    catalog = tuple(
        Hotel(
            name=item["name"],
            address=item["address"],
            amenities=frozenset(key for key, present in item["amenities"].items() if present),
            level=Decimal(str(item["level"])),
            room_types=tuple(item["roomType"]),
            airport_miles=float(item["nearby"]["airport"]),
            city_center_miles=float(item["nearby"]["cityCenter"]),
        )
        for item in raw
    )
    # A data file with a name outside the vocabulary would make that amenity unsearchable.
    unknown = {key for hotel in catalog for key in hotel.amenities} - set(AMENITIES)
    unknown |= {kind for hotel in catalog for kind in hotel.room_types} - set(ROOM_TYPES)
    if unknown:
        raise ValueError(f"hotels.json uses names outside the vocabulary: {sorted(unknown)}")
    return catalog


def hotel_named(name: str) -> Hotel | None:
    return next((hotel for hotel in hotels() if hotel.name == name), None)


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


def _last_weekday(year: int, month: int, weekday: int) -> date:
    following = date(year + (month == 12), month % 12 + 1, 1)
    last = following - timedelta(days=1)
    return last - timedelta(days=(last.weekday() - weekday) % 7)


@cache
def federal_holidays(year: int) -> frozenset[date]:
    """The 11 US federal holidays of ``year`` on their actual dates."""
    monday, thursday = 0, 3
    return frozenset(
        {
            date(year, 1, 1),
            _nth_weekday(year, 1, monday, 3),  # Martin Luther King Jr. Day
            _nth_weekday(year, 2, monday, 3),  # Washington's Birthday
            _last_weekday(year, 5, monday),  # Memorial Day
            date(year, 6, 19),
            date(year, 7, 4),
            _nth_weekday(year, 9, monday, 1),  # Labor Day
            _nth_weekday(year, 10, monday, 2),  # Columbus Day
            date(year, 11, 11),
            _nth_weekday(year, 11, thursday, 4),  # Thanksgiving
            date(year, 12, 25),
        }
    )


def stay_nights(check_in: date, check_out: date) -> list[date]:
    """Every night of the stay: check-in up to, not including, check-out."""
    return [check_in + timedelta(days=offset) for offset in range((check_out - check_in).days)]


def night_price(level: Decimal, room_type: str, night: date) -> Decimal:
    price = level * SEASON_BY_MONTH[night.month] * ROOM_FACTOR[room_type]
    if night in federal_holidays(night.year):
        price *= HOLIDAY_FACTOR
    if night.weekday() >= 5:
        price *= WEEKEND_FACTOR
    return cents(price)


def _priced_room(hotel: Hotel, room_types: Sequence[str]) -> str | None:
    if not room_types:
        return DEFAULT_ROOM
    return next((kind for kind in room_types if kind in hotel.room_types), None)


def _as_decimal(value: Decimal | float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _check_names(values: Iterable[str], allowed: Sequence[str], what: str) -> None:
    unknown = [value for value in values if value not in allowed]
    if unknown:
        raise ValueError(f"unknown {what}; allowed: {', '.join(allowed)}")


def cheapest_first(quotes: Iterable[HotelQuote]) -> list[HotelQuote]:
    """``quotes`` in the order a guest is shown them: the cheapest stay first, equal totals by the
    hotel's name. Each list number is a place in this order, so it is the only order a list has."""
    return sorted(quotes, key=lambda quote: (quote.total, quote.name.casefold(), quote.name))


def quote_hotels(
    check_in: date,
    check_out: date,
    *,
    room_types: Sequence[str] = (),
    amenities: Sequence[str] = (),
    max_airport: float | None = None,
    max_city_center: float | None = None,
    min_price: Decimal | float | None = None,
    max_price: Decimal | float | None = None,
) -> list[HotelQuote]:
    """Price the stay at every hotel that fits the criteria, in catalog order.

    A hotel fits when it has every requested amenity, offers at least one requested room type
    (any, when none is requested) and is strictly closer than each given distance. Its nights are
    priced for the first requested room type it offers ("one bed" when none is requested). It is
    dropped when a night costs more than ``max_price`` or less than ``min_price``.
    """
    if check_out <= check_in:
        raise ValueError("check_out must be after check_in")
    _check_names(room_types, ROOM_TYPES, "room type")
    _check_names(amenities, AMENITIES, "amenity")
    low, high = _as_decimal(min_price), _as_decimal(max_price)
    nights = stay_nights(check_in, check_out)
    quotes: list[HotelQuote] = []
    for hotel in hotels():
        room = _priced_room(hotel, room_types)
        if room is None or not hotel.amenities.issuperset(amenities):
            continue
        if max_airport is not None and not hotel.airport_miles < max_airport:
            continue
        if max_city_center is not None and not hotel.city_center_miles < max_city_center:
            continue
        nightly = [night_price(hotel.level, room, night) for night in nights]
        if high is not None and max(nightly) > high:
            continue
        if low is not None and min(nightly) < low:
            continue
        quotes.append(HotelQuote(hotel.name, room, nightly, sum(nightly, Decimal("0"))))
    return quotes
