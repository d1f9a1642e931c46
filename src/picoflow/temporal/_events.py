"""A turn's (or a decision's) step, tool and approval events on Temporal: recorded in the workflow
(and, for the sub-step runs a tool handler starts, in the tool activity), read by the client with
a query while the turn runs, and handed to the caller's observer in order. Its timeline's entries,
when the caller watches them live, come back the same way (``TimelineRelay``).

Text is not streamed: a model activity returns the whole response.
"""

from __future__ import annotations

from collections.abc import Sequence

from picoflow._run.observers import EventStream, Observers, TurnObserver
from picoflow._run.timeline import TimelineRecorder
from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
    TurnEvent,
)
from picoflow.exceptions import RunError
from picoflow.messages import ToolCall
from picoflow.results import TurnResult
from picoflow.temporal import _codec as codec
from picoflow.timeline import TimelineUpdate

POLL_SECONDS = 0.2
"""How often the client asks a running turn for its new events."""


class EventLog(EventStream):
    """The events of a turn (or of the sub-step runs of one handler), encoded, in order."""

    wants_text = False  # a model activity answers whole: the model is never asked to stream

    def __init__(self) -> None:
        self.encoded: list[codec.EncodedEvent] = []
        super().__init__(self._record)

    def _record(self, event: TurnEvent) -> None:
        self.encoded.append(codec.encode_event(event))

    def since(self, index: int) -> list[codec.EncodedEvent]:
        return self.encoded[max(index, 0) :]


class SubStepEvents(EventLog):
    """In the tool activity: only what the handler's sub-step runs report (the workflow reports
    the call itself)."""

    def step_entered(self, step: str, previous: str | None) -> None:
        return None

    def tool_started(self, step: str, call: ToolCall) -> None:
        return None

    def tool_answered(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        return None


def watchers(observer: TurnObserver) -> tuple[list[EventStream], list[TimelineRecorder]]:
    """Who in the workflow gets what a tool activity reports of its handler's sub-step runs: the
    event streams (the log the client reads) their events, the timeline's recorders their entries."""
    found = observer.observers if isinstance(observer, Observers) else (observer,)
    streams = [one for one in found if isinstance(one, EventStream)]
    recorders = [one for one in found if isinstance(one, TimelineRecorder)]
    return streams, recorders


class TimelineRelay:
    """Hands a job's timeline, as the workflow records it, to ``observer.timeline_entry``: each
    update once, in the order recorded (an entry's later update replaces its earlier one)."""

    def __init__(self, observer: TurnObserver) -> None:
        self.observer = observer
        self.count = 0
        """How many of the job's updates were handed over (or passed: see ``new``)."""

    def new(self, updates: Sequence[TimelineUpdate], first: int) -> None:
        """Hand over ``updates``, the job's from position ``first`` on, skipping those handed. A
        gap (updates the client never saw: its polls fell too far behind) is passed over; the
        stored timeline has them."""
        for update in updates[max(self.count - first, 0) :]:
            self.observer.timeline_entry(update)
        self.count = max(self.count, first + len(updates))


class Delivery:
    """Hands a turn's events to ``observer`` by calling its callbacks, each event once, in order.

    An event with a ``parent`` goes to the observer of its sub-step run: ``sub_turn`` of the
    observer that saw the tool call named by ``parent`` (or of the turn's observer, for a sub-step
    run a hook started, whose ``parent`` is the calling step).
    """

    def __init__(self, observer: TurnObserver, opens: str | None = None, *, timeline: bool = False) -> None:
        """``opens``: a session to report opened before the first event (a decision's session is
        opened once the decision passed its checks, which its first event shows). ``timeline``:
        the workflow relays the turn's timeline too (``self.timeline`` hands it over)."""
        self.observer = observer
        self.opens = opens
        self.timeline = TimelineRelay(observer) if timeline else None
        self.count = 0
        """How many of the turn's events were delivered."""
        self._calls: dict[str, tuple[TurnObserver, str, ToolCall]] = {}
        self._open: dict[str, tuple[TurnObserver, str, ToolCall]] = {}
        self._subs: dict[str, TurnObserver] = {}

    def new(self, events: Sequence[TurnEvent], first: int) -> None:
        """Deliver ``events``, the turn's events from index ``first`` on, skipping those delivered."""
        for event in events[max(self.count - first, 0) :]:
            if self.opens is not None:
                self.observer.session_opened(self.opens)
                self.opens = None
            self._deliver(event)
            self.count += 1

    def close(self, result: TurnResult) -> None:
        """The turn is over: close what its events left open (a tool that failed the turn, the
        sub-step runs)."""
        error = None if result.error is None else RunError(result.error.message)
        for target, step, call in self._open.values():
            target.tool_failed(step, call, error or RunError("the turn ended before the tool answered"))
        self._open.clear()
        for sub in self._subs.values():
            sub.turn_ended(error)
        self._subs.clear()

    def _target(self, parent: str | None) -> TurnObserver:
        if parent is None:
            return self.observer
        sub = self._subs.get(parent)
        if sub is None:
            known = self._calls.get(parent)
            if known is not None:
                sub = known[0].sub_turn(known[1], known[2])
            else:
                sub = self.observer.sub_turn(parent, None)
            self._subs[parent] = sub
        return sub

    def _deliver(self, event: TurnEvent) -> None:
        target = self._target(event.parent)
        if isinstance(event, StepEntered):
            target.step_entered(event.step, event.previous)
        elif isinstance(event, ToolCalled):
            call = ToolCall(event.name, dict(event.args), event.id)
            self._calls[event.id] = self._open[event.id] = (target, event.step, call)
            target.tool_started(event.step, call)
        elif isinstance(event, ToolReturned):
            known = self._calls.get(event.id)
            call = known[2] if known is not None else ToolCall(event.name, {}, event.id)
            if self._open.pop(event.id, None) is not None:
                target.tool_finished(event.step, call, event.content, event.is_error)
            target.tool_answered(event.step, call, event.content, event.is_error)
        elif isinstance(event, TextChunk):
            target.text(event.step, event.text)
        elif isinstance(event, ApprovalRequested):
            target.approval_requested(event.step, event.approval)
        elif isinstance(event, ApprovalDecided):
            target.approval_decided(event.approval)
        elif isinstance(event, HandedOff):
            target.handed_off(event.step, event.reason, event.summary)
