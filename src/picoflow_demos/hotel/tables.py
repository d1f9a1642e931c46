"""Markdown the guest sees, built in code: the numbered hotel list and the comparison tables.

Prices come from ``pricing`` and layout is fixed, so there is nothing here for a model to get
wrong: a table a model retypes is a table with a wrong number in it sooner or later.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Literal

from picoflow_demos._common import usd
from picoflow_demos.hotel.pricing import AMENITIES, AMENITY_LABELS, ROOM_TYPES, HotelQuote, hotel_named

Feature = Literal["price", "roomType", "amenities", "distance"]

YES, NO = "✅", "❌"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def night_label(night: date) -> str:
    return f"{night:%a} {night.month}/{night.day}/{night.year}"


def hotel_list(quotes: Sequence[HotelQuote], nights: int) -> str:
    """The numbered list the guest picks from, with each stay's total."""
    stay = f"{nights} night{'s' if nights != 1 else ''}"
    return "\n".join(
        f"{number}. **{quote.name}** ({quote.room_type}): {usd(quote.total)} total for {stay}"
        for number, quote in enumerate(quotes, start=1)
    )


def _table(corner: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: bool) -> str:
    align = "---:" if numeric else ":---:"
    lines = [
        "| " + " | ".join(_cell(text) for text in (corner, *headers)) + " |",
        "| --- | " + " | ".join(align for _ in headers) + " |",
    ]
    lines.extend("| " + " | ".join(_cell(text) for text in row) + " |" for row in rows)
    return "\n".join(lines)


def _flags(label: str, present: Sequence[bool]) -> list[str]:
    return [label, *(YES if flag else NO for flag in present)]


def comparison(feature: Feature, chosen: Sequence[tuple[int, HotelQuote]], nights: Sequence[date]) -> str:
    """A Markdown table comparing the chosen hotels (``(list number, quote)`` pairs) on one feature."""
    headers = [f"#{number} {quote.name}" for number, quote in chosen]
    quotes = [quote for _, quote in chosen]
    records = []
    for quote in quotes:
        record = hotel_named(quote.name)
        if record is None:
            raise LookupError(f"{quote.name} is not in the catalog")
        records.append(record)
    if feature == "price":
        rows = [["Room", *(quote.room_type for quote in quotes)]]
        rows.extend(
            [night_label(night), *(usd(quote.nightly[index]) for quote in quotes)]
            for index, night in enumerate(nights)
        )
        rows.append(["**Total**", *(f"**{usd(quote.total)}**" for quote in quotes)])
        return _table("Night", headers, rows, numeric=True)
    if feature == "distance":
        rows = [
            ["Airport", *(f"{record.airport_miles:g} mi" for record in records)],
            ["City center", *(f"{record.city_center_miles:g} mi" for record in records)],
        ]
        return _table("Distance", headers, rows, numeric=True)
    if feature == "roomType":
        offered = [kind for kind in ROOM_TYPES if any(kind in record.room_types for record in records)]
        rows = [_flags(kind, [kind in record.room_types for record in records]) for kind in offered]
        return _table("Room type", headers, rows, numeric=False)
    union = [name for name in AMENITIES if any(name in record.amenities for record in records)]
    rows = [_flags(AMENITY_LABELS[name], [name in record.amenities for record in records]) for name in union]
    return _table("Amenity", headers, rows, numeric=False)
