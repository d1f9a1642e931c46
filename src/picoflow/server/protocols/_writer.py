"""What every protocol's writer shares: a turn's items (its events, the models' load status, a
heartbeat, its end) handed one by one to the method of their kind. The dispatch is written here
once; a protocol overrides the kinds it shows, and an event added to ``picoflow.events`` is added
here, with a default that writes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, Generic, TypeVar

from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    PatternFired,
    ReadingJudged,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
    TurnEvent,
)
from picoflow.flow import FlowSpec
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnFinished, TurnResult
from picoflow.server.streams import Beat

__all__ = ["EventWriter", "speaks"]

Frame = TypeVar("Frame")


def speaks(flow: FlowSpec | None, step: str) -> bool:
    """Whether the text a model writes in ``step`` is its reply, to show as it comes: not a step
    that answers with a structured value (its code turns that into the reply)."""
    spec = None if flow is None else flow.steps.get(step)
    return spec is not None and spec.output is None and not spec.is_logic


class EventWriter(Generic[Frame]):
    """One protocol's frames for a turn's items: ``write(item)`` gives those of one item (bytes of
    a stream, or JSON values), from the method named for its kind.

    Nothing is written unless a method is overridden. Each turn event's method defaults to
    ``on_other``, so a protocol that treats most events alike says it once (and hears of an event
    added later); the items around the events (``on_loading``, ``on_beat``, ``on_finished``,
    ``on_lost``) have methods of their own."""

    __slots__ = ()

    def write(self, item: object) -> Iterable[Frame]:
        """The frames of one item of a turn's feed (``STARTED`` has none)."""
        on = _ON.get(type(item))
        return () if on is None else on(self, item)

    def on_step_entered(self, event: StepEntered) -> Iterable[Frame]:
        return self.on_other(event)

    def on_text(self, event: TextChunk) -> Iterable[Frame]:
        return self.on_other(event)

    def on_tool_called(self, event: ToolCalled) -> Iterable[Frame]:
        return self.on_other(event)

    def on_tool_returned(self, event: ToolReturned) -> Iterable[Frame]:
        return self.on_other(event)

    def on_approval_requested(self, event: ApprovalRequested) -> Iterable[Frame]:
        return self.on_other(event)

    def on_approval_decided(self, event: ApprovalDecided) -> Iterable[Frame]:
        return self.on_other(event)

    def on_reading_judged(self, event: ReadingJudged) -> Iterable[Frame]:
        return self.on_other(event)

    def on_pattern_fired(self, event: PatternFired) -> Iterable[Frame]:
        return self.on_other(event)

    def on_handed_off(self, event: HandedOff) -> Iterable[Frame]:
        return self.on_other(event)

    def on_other(self, event: TurnEvent) -> Iterable[Frame]:
        """A turn event its own method leaves here."""
        return ()

    def on_loading(self, status: LoadStatus) -> Iterable[Frame]:
        """The flow's models are still loading: the turn waits for them."""
        return ()

    def on_beat(self) -> Iterable[Frame]:
        """Nothing happened for ``ServerSettings.sse_heartbeat`` seconds."""
        return ()

    def on_finished(self, result: TurnResult) -> Iterable[Frame]:
        """The turn's end: its result (``result.error`` for one that failed)."""
        return ()

    def on_lost(self) -> Iterable[Frame]:
        """The run ended without a result (cancelled, or a bug logged where it happened)."""
        return ()


_ON: Final[dict[type, Callable[[EventWriter[Any], Any], Iterable[Any]]]] = {
    StepEntered: lambda writer, event: writer.on_step_entered(event),
    TextChunk: lambda writer, event: writer.on_text(event),
    ToolCalled: lambda writer, event: writer.on_tool_called(event),
    ToolReturned: lambda writer, event: writer.on_tool_returned(event),
    ApprovalRequested: lambda writer, event: writer.on_approval_requested(event),
    ApprovalDecided: lambda writer, event: writer.on_approval_decided(event),
    ReadingJudged: lambda writer, event: writer.on_reading_judged(event),
    PatternFired: lambda writer, event: writer.on_pattern_fired(event),
    HandedOff: lambda writer, event: writer.on_handed_off(event),
    LoadStatus: lambda writer, status: writer.on_loading(status),
    Beat: lambda writer, _: writer.on_beat(),
    TurnFinished: lambda writer, end: writer.on_finished(end.result),
    type(None): lambda writer, _: writer.on_lost(),
}
"""Each item's method, by the item's type (the events are final dataclasses)."""
