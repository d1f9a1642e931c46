"""The 14-turn hotel conversation, scripted: what the guest says and what a good model answers. Its
last turn chooses a hotel, and the booking then waits for the guest's approval.

Used by the test suite, ``bench/hotel.py`` and anyone who wants to replay the demo offline:

    engine = FlowEngine([HotelFlow], model=ScriptedModel(model_script()))
    for turn in CONVERSATION:
        result = await engine.run("hotel", turn.user, session_id)
    (booking,) = result.pending  # the guest's choice waits for their approval
    booked = await engine.decide(session_id, booking.id, "approve")

Run it with ``HOTEL_FLOW_CURRENT_DATE=2027-07-15`` (``CURRENT_DATE``): the dates below are in
August 2027 and a check-in must be after today.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CURRENT_DATE = "2027-07-15"

AIRPORT = "Hampton Inn Portland-Airport"
CLACKAMAS = "Hampton Inn Portland/Clackamas"
SHERWOOD = "Hampton Inn Sherwood Portland"


def found(*items: tuple[str, str, Any]) -> str:
    """Explore's answer: what the guest's message says, as ``(field, quoted words, value)`` items."""
    return json.dumps(
        {"found": [{"field": name, "quote": quote, "value": value} for name, quote, value in items]}
    )


def day(month: int, number: int, year: int | None = None) -> dict[str, int | None]:
    return {"month": month, "day": number, "year": year}


def wants(action: str, hotels: Sequence[int] = (), features: Sequence[str] = (), pick: str = "none") -> str:
    """Present's and Compare's answer: what the guest wants done with the list."""
    return json.dumps({"hotels": list(hotels), "features": list(features), "action": action, "pick": pick})


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One turn: the guest's message and the model's responses during that turn, in order."""

    user: str
    model: Sequence[Any]


CONVERSATION: tuple[ScriptedTurn, ...] = (
    ScriptedTurn("Hi", [found()]),
    ScriptedTurn("yes", [found(("in_portland", "yes", True))]),
    ScriptedTurn(
        "8/1/2027 to 8/8/2027",
        [found(("check_in", "8/1/2027", day(8, 1, 2027)), ("check_out", "8/8/2027", day(8, 8, 2027)))],
    ),
    ScriptedTurn("max 700", [found(("max_price", "max 700", 700))]),
    ScriptedTurn("suite", [found(("room_types", "suite", ["suite"]))]),
    ScriptedTurn(
        "free wifi, parking",
        [found(("amenities", "free wifi", ["freeWiFi"]), ("amenities", "parking", ["freeParking"]))],
    ),
    # "none" answers the last question: code searches and lists, cheapest first; the reading is the
    # only model call. The numbers below are places in that list (2: Sherwood, 3: Clackamas, 9: Airport).
    ScriptedTurn("none", [found()]),
    ScriptedTurn("search", [wants("change_search"), found()]),
    ScriptedTurn(
        "change to 2 bed rooms, search",
        [wants("change_search"), found(("room_types", "2 bed rooms", ["two beds"]))],
    ),
    ScriptedTurn("compare hotel 2,3,9 on price", [wants("compare", [2, 3, 9], ["price"])]),
    ScriptedTurn("compare on amenities", [wants("compare", [], ["amenities"])]),
    ScriptedTurn("compare hotels 3,9 on price", [wants("compare", [3, 9], ["price"])]),
    ScriptedTurn("resume booking", [wants("show_list")]),
    # Choosing proposes the booking, which waits for the guest's approval (``FlowEngine.decide``);
    # the approval card and the confirmation are written by code too.
    ScriptedTurn("2", [wants("book", [2])]),
)


def model_script() -> list[Any]:
    """Every model response of the conversation, in order (for ``ScriptedModel``)."""
    return [item for turn in CONVERSATION for item in turn.model]
