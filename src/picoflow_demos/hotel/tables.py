"""Markdown the guest sees, built in code: the numbered hotel list and the comparison tables.

Prices come from ``pricing`` and layout is fixed, so there is nothing here for a model to get
wrong: a table a model retypes is a table with a wrong number in it sooner or later.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Literal

from picoflow_demos.hotel.pricing import AMENITIES, ROOM_TYPES, HotelQuote, cheapest_first, hotel_named
from picoflow_demos.hotel.replies import ENGLISH, night_day, nights, per_night, say

Feature = Literal["price", "roomType", "amenities", "distance"]

YES, NO = "✅", "❌"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def in_stated_order(quotes: Sequence[HotelQuote]) -> bool:
    """Whether a list of ``quotes`` is one whose order is worth saying: more than one hotel, in the
    order lists are shown (``cheapest_first``)."""
    return len(quotes) > 1 and list(quotes) == cheapest_first(quotes)


def hotel_list(
    quotes: Sequence[HotelQuote], count: int, locale: str = ENGLISH, *, nightly: bool = False
) -> str:
    """The numbered list the guest picks from, each stay's total for ``count`` nights, and with
    ``nightly`` (the guest's budget is per night) each hotel's price per night beside it.

    The hotels are numbered in the order given, which is the order the list numbers name: a list in
    the shown order (``cheapest_first``) says so, and one in another (kept by a session from
    before the order was stated) is numbered as it always was, without saying an order it lacks.
    """
    stay = nights(count, locale)
    lines = [
        say(
            "listed_nightly" if nightly else "listed",
            locale,
            number=number,
            hotel=quote.name,
            room=say(f"room:{quote.room_type}", locale),
            total=quote.total,
            nights=stay,
            nightly=per_night(quote.nightly, locale),
        )
        for number, quote in enumerate(quotes, start=1)
    ]
    if in_stated_order(quotes):
        return f"{say('list_order', locale)}\n\n" + "\n".join(lines)
    return "\n".join(lines)


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


def comparison(
    feature: Feature, chosen: Sequence[tuple[int, HotelQuote]], nights: Sequence[date], locale: str = ENGLISH
) -> str:
    """A Markdown table comparing the chosen hotels (``(list number, quote)`` pairs) on one feature,
    in ``locale``."""
    headers = [f"#{number} {quote.name}" for number, quote in chosen]
    quotes = [quote for _, quote in chosen]
    records = []
    for quote in quotes:
        record = hotel_named(quote.name)
        if record is None:
            raise LookupError(f"{quote.name} is not in the catalog")
        records.append(record)
    if feature == "price":
        rows = [[say("room", locale), *(say(f"room:{quote.room_type}", locale) for quote in quotes)]]
        rows.extend(
            [
                night_day(night, locale),
                *(say("money", locale, amount=quote.nightly[index]) for quote in quotes),
            ]
            for index, night in enumerate(nights)
        )
        rows.append(
            [say("total", locale), *(f"**{say('money', locale, amount=quote.total)}**" for quote in quotes)]
        )
        return _table(say("night", locale), headers, rows, numeric=True)
    if feature == "distance":
        rows = [
            [
                say("airport", locale),
                *(say("miles", locale, miles=record.airport_miles) for record in records),
            ],
            [
                say("city_center", locale),
                *(say("miles", locale, miles=record.city_center_miles) for record in records),
            ],
        ]
        return _table(say("distance", locale), headers, rows, numeric=True)
    if feature == "roomType":
        offered = [kind for kind in ROOM_TYPES if any(kind in record.room_types for record in records)]
        rows = [
            _flags(say(f"room:{kind}", locale), [kind in record.room_types for record in records])
            for kind in offered
        ]
        return _table(say("room_type", locale), headers, rows, numeric=False)
    union = [name for name in AMENITIES if any(name in record.amenities for record in records)]
    rows = [
        _flags(say(f"amenity:{name}", locale), [name in record.amenities for record in records])
        for name in union
    ]
    return _table(say("amenity", locale), headers, rows, numeric=False)
