"""The plan the traveller reads, written in code as Markdown.

Names, areas, prices, ratings, dates and forecasts come from the shipped records; the only words
of a model in it are the reasons of its picks and the line of each day, each in a cell of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from picoflow_demos._common import usd
from picoflow_demos.travel.listings import DayWeather, Event, Hotel
from picoflow_demos.travel.trip import Trip, short_date

NO_FORECAST = "no forecast yet"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or "—"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(_cell(text) for text in row) + " |" for row in rows)
    return "\n".join(lines)


def weather_text(day: DayWeather | None) -> str:
    if day is None:
        return NO_FORECAST
    return f"{day.sky}, {day.high}°F / {day.low}°F, rain {day.rain}%"


def plan_reply(
    trip: Trip,
    hotels: Sequence[tuple[Hotel, str]],
    events: Sequence[tuple[Event, str]],
    weather: dict[date, DayWeather],
    lines: dict[date, str],
    closing: str,
) -> str:
    """The whole plan: the stay, the hotels with their reasons, the events, and each day."""
    parts = [f"**Your trip to {trip.heading()}**"]
    if wishes := trip.wishes():
        parts.append(wishes[0].upper() + wishes[1:] + ".")
    parts.append("**Where to stay**")
    parts.append(
        _table(
            ["Hotel", "Area", "Per night", "Rating", "Why"],
            [[hotel.name, hotel.area, usd(hotel.price), f"{hotel.rating:.1f}", why] for hotel, why in hotels],
        )
    )
    parts.append("**Events during your stay**")
    if events:
        parts.append(
            _table(
                ["Date", "Event", "Venue", "Ticket", "Why"],
                [
                    [
                        short_date(event.date),
                        event.name,
                        event.venue,
                        usd(event.price) if event.price else "free",
                        why,
                    ]
                    for event, why in events
                ],
            )
        )
    else:
        parts.append("No listed events fall on your dates.")
    parts.append("**Day by day**")
    parts.append(
        _table(
            ["Day", "Weather", "Plan"],
            [[short_date(day), weather_text(weather.get(day)), lines.get(day, "")] for day in trip.days],
        )
    )
    parts.append(closing)
    return "\n\n".join(parts)
