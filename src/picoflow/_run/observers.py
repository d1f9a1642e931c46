"""Whatever watches a turn — tracing, event streams, metrics — is a ``TurnObserver``.

The loop calls the observer at fixed points and has one code path: a turn nobody watches calls
``NO_OBSERVER``, whose methods do nothing. Observers see; they never change what the turn does,
and they never see a value the caller was not entitled to (tool arguments reach an observer only
after validation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    PatternFired,
    ReadingJudged,
    SessionMigrated,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
    TurnEvent,
)

if TYPE_CHECKING:
    from picoflow.approvals import Approval
    from picoflow.messages import ModelRequest, ModelResponse, ToolCall
    from picoflow.results import TurnResult
    from picoflow.session import Session, SessionMigration
    from picoflow.slots.grounding import Verdict
    from picoflow.timeline import TimelineUpdate


class TurnObserver:
    """Receives what happens in one turn. Every method does nothing unless overridden."""

    wants_text = False
    """True when the observer wants the answer's text as it is generated (``text``): the model is
    then asked to stream."""

    wants_session = False
    """True when the observer wants to see the session as the turn found it and as it left it
    (``session_before``, ``session_after``): a turn nobody asks it of copies nothing."""

    wants_timeline = False
    """True when the observer wants the turn's timeline entries as they are recorded: an executor
    that records the timeline where the job runs (a durable executor's worker) then relays them
    (``timeline_relayed``, ``timeline_entry``)."""

    def turn_started(self, flow: str, session_id: str | None, message: str) -> None:
        """The engine took a turn of ``flow`` (``session_id`` None for a new session)."""

    def session_opened(self, session_id: str) -> None:
        """The turn's session is known (loaded, or created for a first turn)."""

    def turn_finished(self, result: TurnResult) -> None:
        """The turn is over, committed or failed: ``result`` is what the caller gets."""

    def session_before(self, session: Session) -> None:
        """The session as the turn found it, before any step ran (only when ``wants_session``).
        Read it now: the turn goes on changing it."""

    def session_after(self, session: Session) -> None:
        """The session as the turn left it, before the commit, or as a failure left it (only when
        ``wants_session``): never stored when the turn failed."""

    def turn_aborted(self, error: BaseException) -> None:
        """The turn was interrupted (cancelled) and gives no result."""

    def session_migrated(self, migration: SessionMigration) -> None:
        """The session was stored under another version of its flow: ``migration`` says what was
        done to bring it to this one (before any step ran; committed with the turn)."""

    def step_started(self, step: str) -> None:
        """The loop starts running ``step`` (the turn's first step, or another one it moved to)."""

    def step_entered(self, step: str, previous: str | None) -> None:
        """The conversation moved into ``step``."""

    def model_started(self, step: str, model: str, request: ModelRequest) -> None:
        """``request`` is about to be sent to ``model``."""

    def text(self, step: str, text: str) -> None:
        """Part of the answer's text, as generated (only when ``wants_text``)."""

    def model_finished(self, step: str, response: ModelResponse) -> None:
        """The model answered (before the answer is checked)."""

    def model_failed(self, step: str, error: BaseException) -> None:
        """The model call raised."""

    def response_accepted(self, step: str, response: ModelResponse, parsed: Any) -> None:
        """The model's answer passed every check: ``response`` as the turn reads it (calls written
        as text read as calls, each with its id), ``parsed`` the step's ``output`` value (or None)."""

    def response_rejected(self, step: str, check: str, reason: str) -> None:
        """The model's answer was refused and it is asked again: ``check`` names what refused it
        (``check_response``, ``empty``, ``unusable``, ``output``), ``reason`` says why."""

    def tool_started(self, step: str, call: ToolCall) -> None:
        """A validated tool call is about to run."""

    def tool_finished(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        """The handler of ``call`` returned; ``content`` is what the model will be told."""

    def tool_failed(self, step: str, call: ToolCall, error: BaseException) -> None:
        """The handler of ``call`` raised something that fails the turn."""

    def tool_answered(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        """The tool message answering ``call`` was written (every call gets exactly one)."""

    def approval_requested(self, step: str, approval: Approval) -> None:
        """A call of ``step`` waits for a decision (the turn ends with it pending)."""

    def approval_decided(self, approval: Approval) -> None:
        """Someone decided ``approval``; it holds who, when, what and why."""

    def reading_judged(self, step: str, verdicts: tuple[Verdict, ...]) -> None:
        """A reading of the user's message in ``step`` was judged: a verdict per item read."""

    def pattern_fired(self, step: str, pattern: str, detail: str | None) -> None:
        """A repair pattern took over in ``step`` (``picoflow.repairs``)."""

    def handed_off(self, step: str, reason: str | None, summary: str) -> None:
        """The conversation was handed to a person from ``step``: the session awaits a human."""

    def memory_erased(self, namespace: str) -> None:
        """The memory of ``namespace`` was erased (``erase_memory``)."""

    def turn_ended(self, error: BaseException | None) -> None:
        """The loop stopped (before the commit): ``error`` is None when it produced a reply."""

    def timeline_relayed(self) -> None:
        """The job's timeline is recorded where it runs, not from what this observer sees: its
        entries come through ``timeline_entry`` (only when ``wants_timeline``; called before any
        event of the job)."""

    def timeline_entry(self, update: TimelineUpdate) -> None:
        """An entry of the job's timeline as recorded where it runs, cleaned: each update once, in
        the order recorded (an entry handed again with the same index replaces the earlier)."""

    def timeline_stored(self, session_id: str, turn: int) -> None:
        """The job's timeline was stored where the job ran, as turn ``turn`` of ``session_id``
        (once the job's result is in, before ``turn_finished``; whether or not ``wants_timeline``)."""

    def sub_turn(self, step: str, call: ToolCall | None) -> TurnObserver:
        """The observer of a sub-step run (``run_step``) that ``step`` started in the handler of
        ``call`` (None when a hook or ``run_logic`` started it). Its ``turn_ended`` is called when
        the run ends. By default a sub-step run is not watched."""
        return NO_OBSERVER


NO_OBSERVER = TurnObserver()


class Observers(TurnObserver):
    """Several observers, each told everything in the order given."""

    def __init__(self, observers: Sequence[TurnObserver]) -> None:
        self.observers = tuple(observers)
        self.wants_text = any(observer.wants_text for observer in observers)
        self.wants_session = any(observer.wants_session for observer in observers)
        self.wants_timeline = any(observer.wants_timeline for observer in observers)

    def turn_started(self, flow: str, session_id: str | None, message: str) -> None:
        for observer in self.observers:
            observer.turn_started(flow, session_id, message)

    def session_opened(self, session_id: str) -> None:
        for observer in self.observers:
            observer.session_opened(session_id)

    def turn_finished(self, result: TurnResult) -> None:
        for observer in self.observers:
            observer.turn_finished(result)

    def turn_aborted(self, error: BaseException) -> None:
        for observer in self.observers:
            observer.turn_aborted(error)

    def session_migrated(self, migration: SessionMigration) -> None:
        for observer in self.observers:
            observer.session_migrated(migration)

    def session_before(self, session: Session) -> None:
        for observer in self.observers:
            if observer.wants_session:
                observer.session_before(session)

    def session_after(self, session: Session) -> None:
        for observer in self.observers:
            if observer.wants_session:
                observer.session_after(session)

    def step_started(self, step: str) -> None:
        for observer in self.observers:
            observer.step_started(step)

    def step_entered(self, step: str, previous: str | None) -> None:
        for observer in self.observers:
            observer.step_entered(step, previous)

    def model_started(self, step: str, model: str, request: ModelRequest) -> None:
        for observer in self.observers:
            observer.model_started(step, model, request)

    def text(self, step: str, text: str) -> None:
        for observer in self.observers:
            observer.text(step, text)

    def model_finished(self, step: str, response: ModelResponse) -> None:
        for observer in self.observers:
            observer.model_finished(step, response)

    def model_failed(self, step: str, error: BaseException) -> None:
        for observer in self.observers:
            observer.model_failed(step, error)

    def response_accepted(self, step: str, response: ModelResponse, parsed: Any) -> None:
        for observer in self.observers:
            observer.response_accepted(step, response, parsed)

    def response_rejected(self, step: str, check: str, reason: str) -> None:
        for observer in self.observers:
            observer.response_rejected(step, check, reason)

    def memory_erased(self, namespace: str) -> None:
        for observer in self.observers:
            observer.memory_erased(namespace)

    def tool_started(self, step: str, call: ToolCall) -> None:
        for observer in self.observers:
            observer.tool_started(step, call)

    def tool_finished(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        for observer in self.observers:
            observer.tool_finished(step, call, content, is_error)

    def tool_failed(self, step: str, call: ToolCall, error: BaseException) -> None:
        for observer in self.observers:
            observer.tool_failed(step, call, error)

    def tool_answered(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        for observer in self.observers:
            observer.tool_answered(step, call, content, is_error)

    def approval_requested(self, step: str, approval: Approval) -> None:
        for observer in self.observers:
            observer.approval_requested(step, approval)

    def approval_decided(self, approval: Approval) -> None:
        for observer in self.observers:
            observer.approval_decided(approval)

    def reading_judged(self, step: str, verdicts: tuple[Verdict, ...]) -> None:
        for observer in self.observers:
            observer.reading_judged(step, verdicts)

    def pattern_fired(self, step: str, pattern: str, detail: str | None) -> None:
        for observer in self.observers:
            observer.pattern_fired(step, pattern, detail)

    def handed_off(self, step: str, reason: str | None, summary: str) -> None:
        for observer in self.observers:
            observer.handed_off(step, reason, summary)

    def turn_ended(self, error: BaseException | None) -> None:
        for observer in self.observers:
            observer.turn_ended(error)

    def timeline_relayed(self) -> None:
        for observer in self.observers:
            if observer.wants_timeline:
                observer.timeline_relayed()

    def timeline_entry(self, update: TimelineUpdate) -> None:
        for observer in self.observers:
            if observer.wants_timeline:
                observer.timeline_entry(update)

    def timeline_stored(self, session_id: str, turn: int) -> None:
        for observer in self.observers:
            observer.timeline_stored(session_id, turn)

    def sub_turn(self, step: str, call: ToolCall | None) -> TurnObserver:
        return combine(*(observer.sub_turn(step, call) for observer in self.observers))


def combine(*observers: TurnObserver | None) -> TurnObserver:
    """One observer telling each of ``observers`` (None entries skipped); ``NO_OBSERVER`` for none."""
    present = [observer for observer in observers if observer is not None]
    if not present:
        return NO_OBSERVER
    return present[0] if len(present) == 1 else Observers(present)


class EventStream(TurnObserver):
    """Turns what happens into ``TurnEvent`` values for ``engine.run(on_event=...)`` and streams.

    A sub-step run reports its steps and tools with ``parent`` set to the id of the tool call it
    runs under (or to the calling step's name when a hook started it). Its text is not streamed:
    the step that ran it gets the answer, not the user.
    """

    wants_text = True

    def __init__(self, emit: Callable[[TurnEvent], Any], *, parent: str | None = None) -> None:
        self.emit = emit
        self.parent = parent
        if parent is not None:
            self.wants_text = False

    def step_entered(self, step: str, previous: str | None) -> None:
        self.emit(StepEntered(step, previous, self.parent))

    def text(self, step: str, text: str) -> None:
        self.emit(TextChunk(step, text, self.parent))

    def tool_started(self, step: str, call: ToolCall) -> None:
        args = {} if isinstance(call.args, str) else dict(call.args)
        self.emit(ToolCalled(step, call.id, call.name, args, self.parent))

    def tool_answered(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        self.emit(ToolReturned(step, call.id, call.name, content, is_error, self.parent))

    def approval_requested(self, step: str, approval: Approval) -> None:
        self.emit(ApprovalRequested(step, approval))

    def approval_decided(self, approval: Approval) -> None:
        self.emit(ApprovalDecided(approval))

    def reading_judged(self, step: str, verdicts: tuple[Verdict, ...]) -> None:
        self.emit(ReadingJudged(step, tuple(verdict.to_json() for verdict in verdicts), self.parent))

    def pattern_fired(self, step: str, pattern: str, detail: str | None) -> None:
        self.emit(PatternFired(step, pattern, detail))

    def handed_off(self, step: str, reason: str | None, summary: str) -> None:
        self.emit(HandedOff(step, reason, summary))

    def session_migrated(self, migration: SessionMigration) -> None:
        self.emit(SessionMigrated(migration))

    def sub_turn(self, step: str, call: ToolCall | None) -> TurnObserver:
        return EventStream(self.emit, parent=call.id if call is not None else step)
