"""A room booking whose model mostly reads: the flow, a script for it, and what the user sees of it.

``Dates`` is a ``SlotStep`` (the model reads each message into ``{"found": [...]}``), ``Confirm`` a
step with a typed ``output`` (``{"action": "book"}``); ``Quote`` answers with words beside a tool
call, and ``Booked`` says goodbye in the model's own words. Four turns cover every kind of message a
transcript holds: the user's words, replies written in code (``direct``) and by the model, words
written beside a call, corrections, crossings, tool traffic, and structured answers that code read
(the SlotStep's after a correction and on completion, the typed step's on its way to another step).
The server, page and CLI tests share it so that all of them check the same conversation.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import date
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from picoflow import Flow, Outcome, SlotStep, Step, TerminateStep, ask, direct, direct_to, go, tool
from picoflow.messages import ModelResponse, ToolCall
from picoflow.models.scripted import ScriptItem

WELCOME = "Welcome! When do you arrive?"
NIGHTS = "How many nights?"
PRICE_WORDS = "Let me price 3 nights."
QUOTE = "3 nights from May 10, 2027 come to $360. Shall I book it?"
GOODBYE = "You're booked. Enjoy your stay!"
NIGHTS_RULE = (
    "These fields were not accepted:\n- nights: input should be less than or equal to 30\n"
    "Answer again with those items corrected, or without them where the message does not give them."
)


class Booking(BaseModel):
    """The stay being booked."""

    check_in: date | None = Field(None, description="The day the guest arrives")
    nights: int | None = Field(None, gt=0, le=30, description="How many nights")


class Dates(SlotStep):
    """Learn when the guest arrives and for how long."""

    slots = Booking
    intro = "Welcome!"
    questions = [ask("When do you arrive?", "check_in"), ask(NIGHTS, "nights")]

    def on_complete(self, values: Booking) -> Outcome:
        return go(Quote).with_state(check_in=values.check_in.isoformat() if values.check_in else None)


class Quote(Step):
    """Price the stay."""

    @tool
    def price(self) -> Outcome:
        """Price the stay the guest gave."""
        return direct_to(Confirm, QUOTE)


class Decision(BaseModel):
    """What the guest decided about the quote."""

    action: Literal["book", "cancel"]


class Confirm(Step):
    """Read whether the guest books the quoted stay."""

    output = Decision

    def on_response(self, decision: Decision) -> Outcome:
        if decision.action == "book":
            return go(Booked)
        return direct("Cancelled: nothing is booked.")


class Booked(TerminateStep):
    """The stay is booked; say goodbye."""


class BookingFlow(Flow):
    """Book a room: the dates, a quote, a yes."""

    name = "booking"
    steps = [Dates, Quote, Confirm, Booked]


def found(*items: tuple[str, str, Any]) -> str:
    """A SlotStep reading: one item (field, quote, value) per thing the model read."""
    return json.dumps({"found": [{"field": f, "quote": q, "value": v} for f, q, v in items]})


FIRST_READING = found(("check_in", "2027-05-10", "2027-05-10"), ("nights", "40", 40))
SECOND_READING = found(("check_in", "2027-05-10", "2027-05-10"))
NIGHTS_READING = found(("nights", "3", 3))
BOOK = '{"action": "book"}'

TURNS: list[tuple[str, list[ScriptItem]]] = [
    ("Hi", [found()]),
    ("I arrive on 2027-05-10 for 40 nights", [FIRST_READING, SECOND_READING]),
    ("3 nights", [NIGHTS_READING, ModelResponse(text=PRICE_WORDS, tool_calls=[ToolCall("price", {}, "c1")])]),
    ("Yes, book it", [BOOK, GOODBYE]),
]
"""Each turn: what the user says, and the model's answers to it in order."""


def script() -> list[ScriptItem]:
    """Every model answer of the four turns, in order."""
    return [item for _, answers in TURNS for item in answers]


TRANSCRIPT: list[tuple[str, str | None, bool, str, str]] = [
    ("user", None, True, "Dates", "Hi"),
    ("assistant", "direct", True, "Dates", WELCOME),
    ("user", None, True, "Dates", "I arrive on 2027-05-10 for 40 nights"),
    ("assistant", "output", False, "Dates", FIRST_READING),
    ("user", "correction", False, "Dates", NIGHTS_RULE),
    ("assistant", "direct", True, "Dates", NIGHTS),
    ("user", None, True, "Dates", "3 nights"),
    ("assistant", "output", False, "Dates", NIGHTS_READING),
    ("user", "crossing", False, "Quote", "Continue."),
    ("assistant", None, True, "Quote", PRICE_WORDS),
    ("tool", None, False, "Quote", "Accepted."),
    ("assistant", "direct", True, "Confirm", QUOTE),
    ("user", None, True, "Confirm", "Yes, book it"),
    ("assistant", "output", False, "Confirm", BOOK),
    ("user", "crossing", False, "Booked", "I'm done, thank you."),
    ("assistant", None, True, "Booked", GOODBYE),
]
"""The whole transcript: role, kind, whether the user saw it, step, content."""

SEEN = [(role, content) for role, _, shown, _, content in TRANSCRIPT if shown]
"""What a chat shows of it: the user's words and what they were sent, in order."""


def stored_as_before_output(path: Path) -> int:
    """Rewrite the SQLite store at ``path`` as picoflow stored a transcript before ``kind="output"``
    existed: a structured answer was a plain assistant message. Returns how many were rewritten."""
    with sqlite3.connect(path) as db:
        return db.execute(
            "UPDATE picoflow_messages SET body = replace(body, :marked, :plain) WHERE instr(body, :marked)",
            {"marked": '"kind":"output"', "plain": '"kind":null'},
        ).rowcount
