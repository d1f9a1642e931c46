"""What crosses between the workflow, its activities and the client, as JSON text.

Every payload is one string: Temporal's converter then only carries text, and each value keeps
picoflow's own shape (the values' dataclasses, read and written with pydantic ``TypeAdapter``s).
Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator
from pydantic_core import to_jsonable_python

from picoflow import exceptions
from picoflow.approvals import Approval, Decision
from picoflow.context import Caller
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
from picoflow.exceptions import RunError, SubStepFailed, ToolFailure
from picoflow.messages import Message, ModelRequest, ModelResponse
from picoflow.outcomes import PATTERNS, Direct, Go, Outcome, Repair, Stay
from picoflow.results import TurnError, TurnResult
from picoflow.session import LogRecord, SessionMigration
from picoflow.timeline import TimelineUpdate
from picoflow.usage import Usage

_BYTES = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")


class _Request(BaseModel):
    model_config = _BYTES  # a request carries the bytes of the files its messages show
    request: ModelRequest


class ModelCallIn(BaseModel):
    """A model request of a step: the worker asks that step's model."""

    model_config = _BYTES
    flow: str
    step: str
    request: ModelRequest


class SaveIn(BaseModel):
    """A turn's commit: the session (``session_to_json``) and the messages it appended."""

    session: str
    expected_revision: int | None
    appended: list[tuple[str, Message]] = Field(default_factory=list)


class _Files(BaseModel):
    model_config = _BYTES
    files: dict[str, bytes]


def encode_files(files: dict[str, bytes]) -> str:
    return _Files(files=files).model_dump_json()


def decode_files(data: str) -> dict[str, bytes]:
    return _Files.model_validate_json(data).files


_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
_USAGE: TypeAdapter[Usage] = TypeAdapter(Usage)


def encode_request(request: ModelRequest) -> str:
    return _Request(request=request).model_dump_json()


def decode_request(data: str) -> ModelRequest:
    return _Request.model_validate_json(data).request


def encode_response(response: ModelResponse) -> str:
    return _RESPONSE.dump_json(response).decode()


def decode_response(data: str) -> ModelResponse:
    return _RESPONSE.validate_json(data)


# --- failures -------------------------------------------------------------------------------------


class EncodedError(BaseModel):
    """A ``RunError`` by its class name (every class is in ``picoflow.exceptions``)."""

    error_class: str
    message: str
    step: str | None = None
    retry_after: float | None = None


def encode_error(exc: RunError) -> EncodedError:
    # A sub-step's failure fails the turn as its root cause did; the message keeps the whole story.
    cls = type(exc.root_cause) if isinstance(exc, SubStepFailed) else type(exc)
    return EncodedError(
        error_class=cls.__name__, message=str(exc), step=exc.step, retry_after=exc.retry_after
    )


def error_class(name: str) -> type[RunError]:
    found = getattr(exceptions, name, None)
    return found if isinstance(found, type) and issubclass(found, RunError) else RunError


def decode_error(encoded: EncodedError) -> RunError:
    """The error as it was raised, of its class (built without its constructor, whose arguments
    differ from class to class)."""
    cls = error_class(encoded.error_class)
    if issubclass(cls, SubStepFailed):  # needs its cause; it never crosses (see ``encode_error``)
        cls = ToolFailure
    error = cls.__new__(cls)
    Exception.__init__(error, encoded.message)
    error.session_id = None
    error.step = encoded.step
    if encoded.retry_after is not None:
        error.retry_after = encoded.retry_after
    return error


# --- the turn ---------------------------------------------------------------------------------------


class Watching(BaseModel):
    """What the worker records of what crosses to it (a turn, a decision, a tool call)."""

    events: bool = False
    """Whether the client listens: the worker then records the events (of the turn or decision,
    or of the sub-step runs a tool handler starts)."""
    timeline: bool = False
    """Whether the client's engine records timelines: the worker then records the job's and
    stores it with the session."""
    timeline_live: bool = False
    """Whether the client watches the job's timeline as it is recorded (``on_timeline``, a
    session's followers): the workflow then keeps each update for the ``timeline`` query, and its
    result carries the last ones."""


class CallerInput(Watching):
    """The caller of what crosses to a worker (a turn, a decision, a tool call), and what is
    recorded there."""

    principal: str | None = None
    visibilities: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)

    def caller(self, deps: Any = None) -> Caller:
        return Caller(
            principal=self.principal, visibilities=frozenset(self.visibilities), deps=deps, config=self.config
        )


def caller_fields(caller: Caller) -> dict[str, Any]:
    """The caller as ``CallerInput``'s fields (its ``deps`` stay behind: workers have their own)."""
    return {
        "principal": caller.principal,
        "visibilities": sorted(caller.visibilities),
        "config": to_jsonable_python(dict(caller.config)),
    }


class TurnInput(CallerInput):
    """A checked turn, as the client hands it to the workflow."""

    flow: str | None
    text: str
    session_id: str
    """The session the turn continues, or the id of the one it starts (``starts``)."""
    starts: bool = False
    revision: int = 0
    """The session's revision the client saw: the turn continues exactly that one."""

    @property
    def continues(self) -> str | None:
        """The stored session the turn continues (``TurnRequest.continues``)."""
        return None if self.starts else self.session_id


class DecisionInput(CallerInput):
    """A checked decision (``DecisionRequest``), as the client hands it to the decision workflow.
    Validated again when the workflow reads it: the decision, the ids, a finite time."""

    model_config = ConfigDict(extra="forbid")
    session_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")
    approval_id: str = Field(pattern=r"^apr_[0-9a-f]{24}$")
    decision: Decision
    reason: str | None = Field(default=None, max_length=2000)
    at: float
    """When the client took the decision (its clock): the workflow decides by it."""
    revision: int = Field(default=0, ge=0)
    """The session's revision the client saw: part of the execution's id, not checked."""

    @property
    def continues(self) -> str:
        """A decision is taken in a stored session."""
        return self.session_id

    @field_validator("at")
    @classmethod
    def _finite(cls, at: float) -> float:
        if not math.isfinite(at):
            raise ValueError("the decision's time must be a finite number")
        return at

    def digest(self) -> str:
        """What makes two requests the same decision: the approval, the session's revision the
        client saw, the decision, its reason and the caller — not the time, not whether events are
        listened to (a client's retry takes a new time)."""
        same = json.dumps(self.model_dump(mode="json", exclude={"at", "events", "timeline"}), sort_keys=True)
        return hashlib.sha256(same.encode()).hexdigest()[:24]


class TimelineIn(BaseModel):
    """A job's timeline, as the workflow hands it to the store (``TimelineStore.record_timeline``)."""

    session_id: str
    turn: int
    body: str
    keep_turns: int | None = None


class CancelIn(BaseModel):
    """A cancel, as the client hands it to a running job (the ``cancel`` update)."""

    checked: bool
    """The caller's access was checked on the stored session; otherwise (a first turn, whose
    session is not stored yet) the job must be of a session ``principal`` owns."""
    principal: str | None = None
    any_principal: bool = False
    """The caller may reach every session (``ANY_PRINCIPAL``)."""


# --- events -----------------------------------------------------------------------------------------


class EncodedEvent(BaseModel):
    """A ``TurnEvent``: ``kind`` names its class, the other fields are its own."""

    kind: Literal[
        "step",
        "tool_call",
        "tool_result",
        "text",
        "approval_requested",
        "approval_decided",
        "reading",
        "pattern",
        "handoff",
        "migrated",
    ]
    step: str
    parent: str | None = None
    approval: Approval | None = None
    previous: str | None = None
    id: str = ""
    name: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    content: str = ""
    is_error: bool = False
    verdicts: list[dict[str, Any]] = Field(default_factory=list)
    reason: str | None = None
    migration: SessionMigration | None = None


def encode_event(event: TurnEvent) -> EncodedEvent:
    if isinstance(event, StepEntered):
        return EncodedEvent(kind="step", step=event.step, previous=event.previous, parent=event.parent)
    if isinstance(event, ToolCalled):
        args = to_jsonable_python(dict(event.args), fallback=str)
        return EncodedEvent(
            kind="tool_call", step=event.step, id=event.id, name=event.name, args=args, parent=event.parent
        )
    if isinstance(event, ToolReturned):
        return EncodedEvent(
            kind="tool_result",
            step=event.step,
            id=event.id,
            name=event.name,
            content=event.content,
            is_error=event.is_error,
            parent=event.parent,
        )
    if isinstance(event, ApprovalRequested):
        return EncodedEvent(kind="approval_requested", step=event.step, approval=event.approval)
    if isinstance(event, ApprovalDecided):
        return EncodedEvent(kind="approval_decided", step=event.approval.step, approval=event.approval)
    if isinstance(event, ReadingJudged):
        verdicts = [to_jsonable_python(dict(verdict), fallback=str) for verdict in event.verdicts]
        return EncodedEvent(kind="reading", step=event.step, verdicts=verdicts, parent=event.parent)
    if isinstance(event, PatternFired):
        return EncodedEvent(kind="pattern", step=event.step, name=event.pattern, content=event.detail or "")
    if isinstance(event, HandedOff):
        return EncodedEvent(kind="handoff", step=event.step, reason=event.reason, content=event.summary)
    if isinstance(event, SessionMigrated):
        return EncodedEvent(kind="migrated", step="", migration=event.migration)
    return EncodedEvent(kind="text", step=event.step, content=event.text, parent=event.parent)


def decode_event(encoded: EncodedEvent) -> TurnEvent:
    e = encoded
    if e.kind == "step":
        return StepEntered(e.step, e.previous, e.parent)
    if e.kind == "tool_call":
        return ToolCalled(e.step, e.id, e.name, e.args, e.parent)
    if e.kind == "tool_result":
        return ToolReturned(e.step, e.id, e.name, e.content, e.is_error, e.parent)
    if e.kind == "approval_requested" and e.approval is not None:
        return ApprovalRequested(e.step, e.approval)
    if e.kind == "approval_decided" and e.approval is not None:
        return ApprovalDecided(e.approval)
    if e.kind == "reading":
        return ReadingJudged(e.step, tuple(e.verdicts), e.parent)
    if e.kind == "pattern":
        return PatternFired(e.step, e.name, e.content or None)
    if e.kind == "handoff":
        return HandedOff(e.step, e.reason, e.content)
    if e.kind == "migrated" and e.migration is not None:
        return SessionMigrated(e.migration)
    return TextChunk(e.step, e.content, e.parent)


_EVENTS: TypeAdapter[list[EncodedEvent]] = TypeAdapter(list[EncodedEvent])


def encode_events(events: list[EncodedEvent]) -> str:
    return _EVENTS.dump_json(events).decode()


def decode_events(data: str) -> list[TurnEvent]:
    return [decode_event(e) for e in _EVENTS.validate_json(data)]


# --- the live timeline ------------------------------------------------------------------------------


class EncodedUpdate(BaseModel):
    """A ``TimelineUpdate``: one entry of a running job's timeline, cleaned, as recorded."""

    session_id: str | None
    turn: int
    index: int
    entry: str


class TimelineTail(BaseModel):
    """What a job's result carries of its timeline: the last updates recorded (from the
    ``first``-th on), and the turn it was stored as (None: not stored)."""

    first: int = 0
    updates: list[EncodedUpdate] = Field(default_factory=list)
    stored_as: int | None = None


_UPDATES: TypeAdapter[list[EncodedUpdate]] = TypeAdapter(list[EncodedUpdate])


def encode_update(update: TimelineUpdate) -> EncodedUpdate:
    return EncodedUpdate(
        session_id=update.session_id, turn=update.turn, index=update.index, entry=update.entry
    )


def decode_update(encoded: EncodedUpdate) -> TimelineUpdate:
    return TimelineUpdate(encoded.session_id, encoded.turn, encoded.index, encoded.entry)


def encode_updates(updates: list[EncodedUpdate]) -> str:
    return _UPDATES.dump_json(updates).decode()


def decode_updates(data: str) -> list[TimelineUpdate]:
    return [decode_update(u) for u in _UPDATES.validate_json(data)]


def bounded(updates: list[EncodedUpdate], limit: int, *, last: bool = False) -> list[EncodedUpdate]:
    """The first (``last``: the last) of ``updates`` whose entries hold ``limit`` characters
    together, one at least: a payload Temporal carries whatever a turn records."""
    taken = 0
    size = 0
    order = reversed(updates) if last else iter(updates)
    for update in order:
        size += len(update.entry)
        if taken and size > limit:
            break
        taken += 1
    return updates[len(updates) - taken :] if last else updates[:taken]


# --- the result -------------------------------------------------------------------------------------


class _Result(BaseModel):
    message: str
    session_id: str | None
    completed: bool
    content_type: str
    step: str | None
    usage: Usage
    error: EncodedError | None = None
    reference: str | None = None
    field: str | None = None
    warnings: list[str] = Field(default_factory=list)
    flow: str | None = None
    pending: list[Approval] = Field(default_factory=list)
    """The approvals the turn ends waiting for."""
    awaiting_human: bool = False
    events: list[EncodedEvent] = Field(default_factory=list)
    """Every event of the turn, in order (when the client asked for them)."""
    timeline: TimelineTail | None = None
    """What the turn's timeline left the client to see (when it records timelines)."""


def encode_result(
    result: TurnResult, events: list[EncodedEvent] | None = None, timeline: TimelineTail | None = None
) -> str:
    error = result.error
    return _Result(
        message=result.message,
        session_id=result.session_id,
        completed=result.completed,
        content_type=result.content_type,
        step=result.step,
        usage=result.usage,
        error=None
        if error is None
        else EncodedError(
            error_class=error.error_class.__name__, message=error.message, retry_after=error.retry_after
        ),
        reference=None if error is None else error.reference,
        field=None if error is None else error.field,
        warnings=list(result.warnings),
        flow=result.flow,
        pending=list(result.pending),
        awaiting_human=result.awaiting_human,
        events=events or [],
        timeline=timeline,
    ).model_dump_json()


def decode_result(data: str) -> TurnResult:
    return decode_output(data)[0]


def decode_output(data: str) -> tuple[TurnResult, list[TurnEvent]]:
    """The turn's result and the events it carries."""
    result, events, _ = decode_job_output(data)
    return result, events


def decode_job_output(data: str) -> tuple[TurnResult, list[TurnEvent], TimelineTail | None]:
    """The job's result, the events it carries and what it carries of its timeline."""
    r = _Result.model_validate_json(data)
    error = None
    if r.error is not None:
        cls = error_class(r.error.error_class)
        error = TurnError(cls, r.error.message, r.error.retry_after, r.reference, r.field)
    result = TurnResult(
        r.message,
        r.session_id,
        r.completed,
        r.content_type,
        r.step,
        r.usage,
        error,
        tuple(r.warnings),
        r.flow,
        tuple(r.pending),
        r.awaiting_human,
    )
    return result, [decode_event(e) for e in r.events], r.timeline


# --- a tool handler's run -------------------------------------------------------------------------


class EncodedOutcome(BaseModel):
    """An outcome with its target as a step name."""

    kind: Literal["go", "stay", "direct", "repair"]
    target: str | None = None
    content: str | None = None
    remember: str | None = None
    feedback: str | None = None
    state: dict[str, Any] | None = None
    prompt: str | None = None
    content_type: str | None = None
    message: str | None = None
    options: list[str] | None = None
    """A repair's options (its pattern is in ``target``, its detail in ``content``)."""


def encode_outcome(outcome: Outcome) -> EncodedOutcome:
    common: dict[str, Any] = {
        "feedback": outcome.feedback,
        "state": None if outcome.state is None else to_jsonable_python(dict(outcome.state)),
        "prompt": outcome.prompt,
        "content_type": outcome.content_type,
        "message": outcome.message,
    }
    if isinstance(outcome, Go):
        return EncodedOutcome(kind="go", target=outcome.target_name, **common)
    if isinstance(outcome, Stay):
        return EncodedOutcome(kind="stay", **common)
    if isinstance(outcome, Direct):
        target = None if outcome.target is None else outcome.target_name
        return EncodedOutcome(
            kind="direct",
            content=outcome.content,
            target=target,
            remember=outcome.remember,
            **common,
        )
    if isinstance(outcome, Repair):
        return EncodedOutcome(
            kind="repair",
            target=outcome.pattern,
            content=outcome.detail,
            options=list(outcome.options),
            **common,
        )
    raise TypeError(f"not an outcome picoflow knows: {type(outcome).__name__}")


def decode_outcome(encoded: EncodedOutcome) -> Outcome:
    common: dict[str, Any] = {
        "feedback": encoded.feedback,
        "state": encoded.state,
        "prompt": encoded.prompt,
        "content_type": encoded.content_type,
        "message": encoded.message,
    }
    if encoded.kind == "go":
        assert encoded.target is not None
        return Go(target=encoded.target, **common)
    if encoded.kind == "stay":
        return Stay(**common)
    if encoded.kind == "repair":
        pattern = next(name for name in PATTERNS if name == encoded.target)
        return Repair(pattern=pattern, detail=encoded.content, options=tuple(encoded.options or ()), **common)
    return Direct(
        content=encoded.content or "",
        target=encoded.target,
        remember=encoded.remember,
        **common,
    )


class ToolCallIn(CallerInput):
    """What the tool activity needs to run a handler as the workflow would have."""

    flow: str
    step: str
    calls: list[dict[str, Any]]
    """The call (or, for a ``@tools`` group, all calls of the response): name, args, id."""
    group: bool
    key: str | None = None
    """The idempotency key of a call that runs because it was approved (the approval's id)."""
    session: str
    """``session_to_json`` of the workspace's session when the handler is called."""
    usage: Usage


class ToolValue(BaseModel):
    """The handler's value as dispatch treats it."""

    kind: Literal["outcome", "refusal", "text", "none", "step", "json"]
    outcome: EncodedOutcome | None = None
    text: str | None = None
    """A refusal's or a text result's words, a step's name, or another value as JSON."""


class ToolCallOut(BaseModel):
    """What running the handler did: its value, and the workspace after it."""

    value: ToolValue | None = None
    error: EncodedError | None = None
    session: str = ""
    appended: list[tuple[str, Message]] = Field(default_factory=list)
    warnings: list[LogRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    events: list[EncodedEvent] = Field(default_factory=list)
    """The events of the sub-step runs the handler started (when the turn records events)."""
    timeline: list[dict[str, Any]] = Field(default_factory=list)
    """The timeline entries of those runs, as recorded, uncleaned (when the turn records its
    timeline); ``at_ms`` counts from the activity's start."""


def encode_usage(usage: Usage) -> Any:
    return _USAGE.dump_python(usage)


class ErrorIn(BaseModel):
    session_id: str
    record: LogRecord


class FilesIn(BaseModel):
    session_id: str
    hashes: list[str]
