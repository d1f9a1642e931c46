"""The 14-turn hotel conversation, scripted: what the guest says and what a good model answers.

Used by the test suite, ``bench/hotel.py`` and anyone who wants to replay the demo offline:

    engine = FlowEngine([HotelFlow], model=ScriptedModel(model_script()))
    for turn in CONVERSATION:
        result = await engine.run("hotel", turn.user, session_id)

Run it with ``HOTEL_FLOW_CURRENT_DATE=2027-07-15`` (``CURRENT_DATE``): the dates below are in
August 2027 and a check-in must be after today.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from picoflow.models import ToolCall

CURRENT_DATE = "2027-07-15"

SUITE_SEARCH: dict[str, Any] = {
    "check_in": "2027-08-01",
    "check_out": "2027-08-08",
    "max_price": 700,
    "room_types": ["suite"],
    "amenities": ["freeWiFi", "freeParking"],
}
TWO_BEDS_SEARCH: dict[str, Any] = {**SUITE_SEARCH, "room_types": ["two beds"]}

AIRPORT = "Hampton Inn Portland-Airport"
CLACKAMAS = "Hampton Inn Portland/Clackamas"
SHERWOOD = "Hampton Inn Sherwood Portland"


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One turn: the guest's message and the model's responses during that turn, in order."""

    user: str
    model: Sequence[Any]


CONVERSATION: tuple[ScriptedTurn, ...] = (
    ScriptedTurn(
        "Hi", ["Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in Portland?"]
    ),
    ScriptedTurn("yes", ["Great. What are your check-in and check-out dates?"]),
    ScriptedTurn(
        "8/1/2027 to 8/8/2027",
        ["Check-in Sunday 2027-08-01, check-out Sunday 2027-08-08: 7 nights. What is your nightly budget?"],
    ),
    ScriptedTurn("max 700", ["Up to $700 a night. Which room type: one bed, two beds or suite?"]),
    ScriptedTurn(
        "suite",
        ["A suite. Any amenities you need? For example freeWiFi, freeParking, freeBreakfast or indoorPool."],
    ),
    ScriptedTurn(
        "free wifi, parking",
        ["Noted: freeWiFi and freeParking. Any maximum distance to the airport or the city center?"],
    ),
    ScriptedTurn(
        "none",
        [
            "Your search:\n- 2027-08-01 to 2027-08-08 (7 nights)\n- up to $700 a night\n- suite\n"
            "- freeWiFi, freeParking\nShall I search?"
        ],
    ),
    # The list and its question are written by code: the search is the turn's only model call.
    ScriptedTurn("search", [ToolCall("capture_choices", {"criteria": SUITE_SEARCH})]),
    ScriptedTurn(
        "change to 2 bed rooms, search",
        [ToolCall("search_again", {}), ToolCall("capture_choices", {"criteria": TWO_BEDS_SEARCH})],
    ),
    ScriptedTurn(
        "compare hotel 2,5,8 on price",
        [
            ToolCall("go_compare", {"hotels": [AIRPORT, CLACKAMAS, SHERWOOD]}),
            ToolCall("generate_comparison", {"hotels": [AIRPORT, CLACKAMAS, SHERWOOD], "feature": "price"}),
        ],
    ),
    ScriptedTurn("compare on amenities", [ToolCall("generate_comparison", {"feature": "amenities"})]),
    ScriptedTurn(
        "compare hotels 2,5 on price",
        [ToolCall("generate_comparison", {"hotels": [AIRPORT, CLACKAMAS], "feature": "price"})],
    ),
    ScriptedTurn("resume booking", [ToolCall("resume_booking", {})]),
    # The confirmation and the goodbye are written by code too.
    ScriptedTurn("8", [ToolCall("chosen_hotel", {"hotel": SHERWOOD})]),
)


def model_script() -> list[Any]:
    """Every model response of the conversation, in order (for ``ScriptedModel``)."""
    return [item for turn in CONVERSATION for item in turn.model]
