"""Two versions of one small flow, ``stays``, for the tests of flow versions and migration.

Version 1 learns the stay in a form whose counts are text (``guests: str``), shows two hotels in
``Compare``, offers breakfast in ``Extras`` when the guest picks the second, and books in ``Book``,
where ``book(hotel)`` and ``hold(hotel)`` wait for an approval.

Version 2 changes what a deploy typically changes: the counts are numbers (``guests: int``, so a
stored ``"two"`` no longer validates while ``"2"`` still does), ``Compare`` is renamed ``Review``
(``Flow.renamed``; it keeps its memory with ``memory = "Compare"`` and its ``migrate`` renames the
state key it kept the hotels under), ``Extras`` is gone (``Flow.fallback`` sends its sessions back
to ``Explore``) and ``book`` takes the number of guests too (its pending approvals are withdrawn),
while ``hold`` is the same (its pending approvals stay).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from picoflow import Flow, FlowEngine, Outcome, SlotStep, Step, ask, direct_to, tool
from picoflow.models import ScriptedModel, ToolCall
from picoflow.sessions import SessionStore

HOTELS = ["Lumière", "Rive"]
SHOWN = "I found Hotel Lumière and Hotel Rive. Which one?"
NOTICE = (
    "This assistant has been updated since your last message, and the part of the conversation you "
    "were in no longer exists, so we continue from here."
)
"""What a session sent to the fallback step is told (``Flow.fallback_message``, its default)."""
CITY = ask("Which city?", "city")
GUESTS = ask("How many guests?", "guests")
NIGHTS = ask("How many nights?", "nights")

BOOKED: list[tuple[str, ...]] = []
"""What ``book`` and ``hold`` did, in order, whichever version ran them."""
MIGRATED_FROM: list[str] = []
"""The ``from_version`` each call of ``Review.migrate`` was given."""


# --- version 1 -----------------------------------------------------------------------------------


class StayV1(BaseModel):
    """The stay, as the guest wrote it."""

    city: str | None = Field(None, description="The city")
    guests: str | None = Field(None, description="How many guests")
    nights: str | None = Field(None, description="How many nights")


class ExploreV1(SlotStep):
    """Learn where and for how many the guest wants to stay."""

    name = "Explore"
    slots = StayV1
    questions = [CITY, GUESTS, NIGHTS]

    def on_complete(self, values: StayV1) -> Outcome:
        return direct_to("Compare", SHOWN).with_state(hotels=HOTELS)


class Compare(Step):
    """Help the guest choose one of the hotels shown."""

    @tool
    def pick(self, number: int) -> Outcome:
        """Choose the hotel the guest named by its number in the list."""
        hotel = self.state["hotels"][number - 1]
        if number == 2:
            return direct_to("Extras", f"Hotel {hotel} it is. Breakfast with it?").with_state(hotel=hotel)
        return direct_to("Book", f"Shall I book Hotel {hotel}?").with_state(hotel=hotel)


class Extras(Step):
    """Offer breakfast with the stay."""

    @tool
    def breakfast(self, wanted: bool) -> Outcome:
        """Add breakfast, or not, as the guest said."""
        return direct_to("Book", "Noted. Shall I book it?").with_state(breakfast=wanted)


class BookV1(Step):
    """Book the hotel the guest chose once they say so, or hold it for a day."""

    name = "Book"

    @tool(approval=True, approval_summary="Book Hotel {hotel}")
    def book(self, hotel: str) -> str:
        """Book the hotel."""
        BOOKED.append(("book", hotel))
        return "booked"

    @tool(approval=True, approval_summary="Hold Hotel {hotel} for a day")
    def hold(self, hotel: str) -> str:
        """Hold the hotel for a day without booking it."""
        BOOKED.append(("hold", hotel))
        return "held"


class StaysV1(Flow):
    """Find and book a hotel (version 1)."""

    name = "stays"
    steps = [ExploreV1, Compare, Extras, BookV1]


# --- version 2 -----------------------------------------------------------------------------------


class StayV2(BaseModel):
    """The stay, its counts as numbers."""

    city: str | None = Field(None, description="The city")
    guests: int | None = Field(None, gt=0, le=8, description="How many guests")
    nights: int | None = Field(None, gt=0, le=30, description="How many nights")


class ExploreV2(SlotStep):
    """Learn where and for how many the guest wants to stay."""

    name = "Explore"
    slots = StayV2
    questions = [CITY, GUESTS, NIGHTS]

    def on_complete(self, values: StayV2) -> Outcome:
        return direct_to("Review", SHOWN).with_state(options=HOTELS)


class Review(Step):
    """Help the guest choose one of the hotels shown."""

    memory = "Compare"  # the memory it kept when it was called Compare

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: str) -> dict[str, Any]:
        MIGRATED_FROM.append(from_version)
        if "hotels" in state:  # Compare kept the hotels it showed under "hotels"
            state["options"] = state.pop("hotels")
        return state

    @tool
    def pick(self, number: int) -> Outcome:
        """Choose the hotel the guest named by its number in the list."""
        hotel = self.state["options"][number - 1]
        return direct_to("Book", f"Shall I book Hotel {hotel}?").with_state(hotel=hotel)


class BookV2(Step):
    """Book the hotel the guest chose once they say so, or hold it for a day."""

    name = "Book"

    @tool(approval=True, approval_summary="Book Hotel {hotel} for {guests}")
    def book(self, hotel: str, guests: int) -> str:
        """Book the hotel for that many guests."""
        BOOKED.append(("book", hotel, str(guests)))
        return "booked"

    @tool(approval=True, approval_summary="Hold Hotel {hotel} for a day")
    def hold(self, hotel: str) -> str:
        """Hold the hotel for a day without booking it."""
        BOOKED.append(("hold", hotel))
        return "held"


class StaysV2(Flow):
    """Find and book a hotel (version 2)."""

    name = "stays"
    steps = [ExploreV2, Review, BookV2]
    renamed = {"Compare": Review}
    fallback = ExploreV2


class StaysV2WithoutFallback(Flow):
    """Version 2 as first written: nowhere to send a session whose step is gone."""

    name = "stays"
    steps = [ExploreV2, Review, BookV2]
    renamed = {"Compare": Review}


# --- the first version's sessions ---------------------------------------------------------------


def found(*items: tuple[str, str, Any]) -> str:
    """A SlotStep reading: one item (field, quote, value) per thing the model read."""
    return json.dumps({"found": [{"field": f, "quote": q, "value": v} for f, q, v in items]})


FOR_2 = found(("city", "Paris", "Paris"), ("guests", "2", "2"), ("nights", "3", "3"))
"""A whole stay read, its guests as digits (a count version 2 still reads)."""
FOR_TWO = found(("city", "Paris", "Paris"), ("guests", "two", "two"), ("nights", "3", "3"))
"""A whole stay read, its guests in words (version 2 no longer reads them: asked again)."""

SEEDED: list[tuple[str, str, list[Any]]] = [
    ("renamed", "Paris for 2, 3 nights", [FOR_2]),
    ("removed", "Paris for two, 3 nights", [FOR_TWO]),
    ("removed", "Number 2", [ToolCall("pick", {"number": 2})]),
    ("retyped", "A hotel in Paris for two", [found(("city", "Paris", "Paris"), ("guests", "two", "two"))]),
    ("changed", "Paris for 2, 3 nights", [FOR_2]),
    ("changed", "Number 1", [ToolCall("pick", {"number": 1})]),
    ("changed", "Yes, book Lumière", [ToolCall("book", {"hotel": "Lumière"})]),
    ("same", "Paris for 2, 3 nights", [FOR_2]),
    ("same", "Number 1", [ToolCall("pick", {"number": 1})]),
    ("same", "Hold Lumière for me", [ToolCall("hold", {"hotel": "Lumière"})]),
]
"""The first version's sessions, turn by turn: the session, the user's message, the model's answers.
``renamed`` stands in Compare, ``removed`` in Extras, ``retyped`` in the middle of the form with
its guests in words, ``changed`` waits for the approval of ``book`` and ``same`` for that of ``hold``."""


async def seed(store: SessionStore, now: float) -> dict[str, str]:
    """Store the first version's five sessions (``SEEDED``), each at ``now``; returns the id of
    the approval each session that waits for one waits for."""
    model = ScriptedModel([answer for _, _, answers in SEEDED for answer in answers])
    first = FlowEngine([StaysV1], store=store, model=model, clock=lambda: now)
    approvals: dict[str, str] = {}
    for session_id in dict.fromkeys(session_id for session_id, _, _ in SEEDED):
        await first.create_session("stays", session_id=session_id)
    for session_id, message, _ in SEEDED:
        result = await first.run("stays", message, session_id=session_id)
        assert result.error is None, result.error
        if result.pending:
            approvals[session_id] = result.pending[0].id
    return approvals
