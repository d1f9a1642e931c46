"""The one dispatch every protocol's writer inherits: each kind of turn event has a method of its own,
which writes nothing unless overridden (a turn event's goes through ``on_other`` first), and the items
around the events (load status, heartbeat, end, a run lost) have theirs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

from picoflow.events import (
    HandedOff,
    PatternFired,
    ReadingJudged,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
    TurnEvent,
)
from picoflow.models.readiness import LoadStatus
from picoflow.server.protocols._writer import _ON, EventWriter
from picoflow.server.streams import BEAT, STARTED

EVENTS = [
    StepEntered("Explore", None),
    TextChunk("Explore", "Hi"),
    ToolCalled("Explore", "c1", "note", {"city": "Lyon"}),
    ToolReturned("Explore", "c1", "note", "noted", False),
    ReadingJudged("Explore", ()),
    PatternFired("Explore", "repeat"),
    HandedOff("Explore", "asked for a person", "Wants a person."),
]


class Told(EventWriter[str]):
    """Names what reached ``on_other``; a tool call has its own words."""

    def on_tool_called(self, event: ToolCalled) -> Iterator[str]:
        yield f"called {event.name}"

    def on_other(self, event: TurnEvent) -> Iterator[str]:
        yield type(event).__name__


def test_every_kind_of_turn_event_is_dispatched() -> None:
    assert set(get_args(TurnEvent)) <= set(_ON)


def test_an_event_without_a_method_of_its_own_reaches_on_other() -> None:
    told = Told()
    assert [frame for event in EVENTS for frame in told.write(event)] == [
        "StepEntered",
        "TextChunk",
        "called note",
        "ToolReturned",
        "ReadingJudged",
        "PatternFired",
        "HandedOff",
    ]


def test_a_writer_that_overrides_nothing_writes_nothing() -> None:
    quiet = EventWriter[str]()
    for item in [*EVENTS, LoadStatus(), BEAT, STARTED, None, "not an item"]:
        assert list(quiet.write(item)) == []
