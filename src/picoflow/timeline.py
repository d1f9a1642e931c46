"""A turn's timeline: what happened inside it, kept with the session for its author to inspect.

The engine records it from the events the turn emits (``FlowEngine(timeline=TimelineSettings())``;
``picoflow serve`` and the command line record by default) and stores one ``TurnTimeline`` per
turn beside the session, failed turns included. ``FlowEngine.timeline`` reads them back, the HTTP
route ``GET /v1/sessions/{id}/timeline`` serves them to callers allowed to inspect, and
``picoflow sessions show ID --trace`` renders them (``--json`` exports a ``SessionTimeline``,
valid against ``timeline_schema()``). While a turn runs, ``FlowEngine.run(on_timeline=...)`` hands
its entries over as they are recorded (``TimelineUpdate``): the chat page's developer view draws
them live. ``FlowEngine.follow_timeline(id)`` does the same for every turn of a session that this
process runs (or hands to a durable executor, whose worker relays the entries), whoever started
it (a ``TimelineFollower``: the entries, then ``TurnRecorded`` once the turn is stored).

Entries come in the order they happened; each has a ``kind``:

* ``entered`` / ``left``: the conversation moved between steps;
* ``model``: one model request (system prompt, messages, tool names, output schema) and its
  answer (text, tool calls, tokens, latency), or the error it raised;
* ``rejected``: an answer refused and asked again (the acceptance gate ``check_response``, an
  empty or unusable answer, one that did not match the output schema), with the reason;
* ``field_set`` / ``field_dropped``: a reading's verdicts (action, rule, evidence in the words);
* ``tool``: a call with its validated arguments and what the model was told (``ok`` false: a
  refusal or an error);
* ``approval_requested`` / ``approval_decided``, ``pattern`` (a repair pattern), ``handoff``;
* ``migrated``: the session was stored under another version of the flow and was brought to this
  one before the turn ran (``picoflow.versions``): each change with its action, step and detail;
* ``erased``: a namespace's memory was erased;
* ``state``: a step's state as the turn changed it, key by key (before and after);
* ``omitted``: entries left out because the turn outgrew ``TimelineSettings.max_bytes``.

What is kept is bounded and safe: long texts are cut with a mark (``… [N more characters]``), the
caller's config values and provider keys are replaced by ``[secret]``, attachments appear as name,
type and size, and fields the application's ``redact`` hook names read ``[redacted]``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "REDACTED",
    "SECRET",
    "TIMELINE_VERSION",
    "ApprovalDecidedEntry",
    "ApprovalRequestedEntry",
    "CallShown",
    "Entered",
    "Erased",
    "FieldDropped",
    "FieldSet",
    "FileShown",
    "HandoffEntry",
    "Left",
    "MessageShown",
    "MigratedEntry",
    "MigrationChangeShown",
    "ModelEntry",
    "Omitted",
    "PatternEntry",
    "Rejected",
    "SessionTimeline",
    "StateChange",
    "StateEntry",
    "TimelineEntry",
    "TimelineFollower",
    "TimelineSettings",
    "TimelineUpdate",
    "ToolEntry",
    "TurnFailure",
    "TurnRecorded",
    "TurnTimeline",
    "TurnUsage",
    "timeline_schema",
]

TIMELINE_VERSION = 1
"""The version of the stored shape; a reader refuses none it knows, and ignores keys it does not."""
REDACTED = "[redacted]"
"""What a field the application's ``redact`` hook hides reads."""
SECRET = "[secret]"
"""What a caller's config value or a provider key reads wherever it appeared."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineSettings:
    """How a turn's timeline is recorded (``FlowEngine(timeline=...)``)."""

    max_text_chars: int = 2_000
    """Longest text kept whole (a prompt, a message, a tool result); a longer one is cut and ends
    with ``… [N more characters]``."""
    max_bytes: int = 256_000
    """Most bytes of JSON one turn's timeline keeps; the entries past it are replaced by one
    ``omitted`` entry counting them (the turn's error, usage and state changes are always kept)."""
    keep_turns: int | None = 50
    """Retention: the timelines of a session's last N turns are kept, older ones deleted as new
    ones are stored (None keeps every one). Counted in turns, so a long-lived session's inspector
    shows its recent past, whatever the time between turns."""
    redact: Callable[[str, Any], bool] | None = None
    """The application's hook: called with a field's name and value wherever a mapping is recorded
    (tool arguments, state, a reading's fields, structured answers); True hides the value
    (``[redacted]``). Keys that name a secret (``password``, ``api_key``, ``token``...) are hidden
    whatever it says."""
    secrets: tuple[str, ...] = ()
    """Strings never to appear (keys given in code); each is replaced by ``[secret]``, as are the
    caller's config values and the values of environment variables that hold keys
    (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``)."""

    def __post_init__(self) -> None:
        if self.max_text_chars < 40:
            raise ValueError("max_text_chars must be at least 40")
        if self.max_bytes < 4_096:
            raise ValueError("max_bytes must be at least 4096")
        if self.keep_turns is not None and self.keep_turns < 1:
            raise ValueError("keep_turns must be 1 or more, or None to keep every turn's timeline")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    parent: str | None = None
    """In a sub-step run: the tool call (or step) it ran under."""
    at_ms: float | None = None
    """When it happened, in milliseconds since the turn began (a state change: at the turn's end)."""


class Entered(_Entry):
    """The conversation moved into ``step``."""

    kind: Literal["entered"] = "entered"
    step: str
    from_: str | None = Field(None, alias="from")


class Left(_Entry):
    """The conversation left ``step`` for ``to``."""

    kind: Literal["left"] = "left"
    step: str
    to: str


class FileShown(BaseModel):
    """A file sent with a message: what it is, never its bytes."""

    name: str
    media_type: str
    size: int


class CallShown(BaseModel):
    """A tool call a model proposed."""

    id: str = ""
    name: str
    args: Any = None


class MessageShown(BaseModel):
    """One message of a model request."""

    role: str
    content: str = ""
    kind: str | None = None
    name: str | None = None
    """A tool message's tool."""
    is_error: bool = False
    tool_calls: list[CallShown] = Field(default_factory=list)
    files: list[FileShown] = Field(default_factory=list)


class TurnUsage(BaseModel):
    """Tokens and calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0


class ModelEntry(_Entry):
    """One model request and its answer."""

    kind: Literal["model"] = "model"
    step: str
    model: str
    attempt: int
    """Which attempt of the step's budget (1 first; a rejected answer is asked again)."""
    system: str | None = None
    """The system prompt; None when it is the same as the previous request's of this step."""
    history: int = 0
    """Messages this request shares with the previous one of this step, not repeated here."""
    messages: list[MessageShown]
    """The messages sent (after the ``history`` shared ones)."""
    tools: list[str] = Field(default_factory=list)
    output: str | None = None
    """The name of the output schema asked for, if any."""
    latency_ms: float | None = None
    text: str = ""
    """The answer's text as the model wrote it."""
    tool_calls: list[CallShown] = Field(default_factory=list)
    """The tool calls read from the answer (once it was accepted: as the turn read them, calls
    written as text included, each with its id)."""
    parsed: Any = None
    """An accepted structured answer, as the step's ``output`` model read it."""
    usage: TurnUsage | None = None
    finish_reason: str | None = None
    answered_by: str | None = None
    error: str | None = None
    """What the call raised, when it did."""


class Rejected(_Entry):
    """An answer refused and asked again."""

    kind: Literal["rejected"] = "rejected"
    step: str
    check: str
    """``check_response`` (the acceptance gate), ``empty``, ``unusable`` or ``output``."""
    reason: str


class _Verdict(_Entry):
    step: str
    field: str
    value: Any = None
    action: Literal["kept", "dropped", "repaired"]
    rule: str | None = None
    evidence: dict[str, Any] | None = None
    """The words that bore the item out: ``source`` (user or assistant), ``start``, ``end``, ``text``."""
    read_as: dict[str, Any] | None = None
    why: str | None = None


class FieldSet(_Verdict):
    """A reading's item kept (or repaired: ``repaired`` names the rule)."""

    kind: Literal["field_set"] = "field_set"
    repaired: str | None = None


class FieldDropped(_Verdict):
    """A reading's item dropped by ``rule``."""

    kind: Literal["field_dropped"] = "field_dropped"


class ToolEntry(_Entry):
    """A tool call: its validated arguments (absent when it was refused before it ran) and what
    the model was told."""

    kind: Literal["tool"] = "tool"
    step: str
    id: str = ""
    name: str
    args: Any = None
    ok: bool | None = None
    """False: refused, or an error; None: the turn failed before it answered."""
    result: str | None = None


class ApprovalRequestedEntry(_Entry):
    kind: Literal["approval_requested"] = "approval_requested"
    step: str
    tool: str
    args: Any = None
    approval: str


class ApprovalDecidedEntry(_Entry):
    kind: Literal["approval_decided"] = "approval_decided"
    step: str
    tool: str
    args: Any = None
    decision: str
    by: str | None = None


class PatternEntry(_Entry):
    """A repair pattern took over."""

    kind: Literal["pattern"] = "pattern"
    step: str
    name: str
    detail: str | None = None


class HandoffEntry(_Entry):
    kind: Literal["handoff"] = "handoff"
    step: str
    reason: str | None = None


class MigrationChangeShown(BaseModel):
    """One thing a migration did (``picoflow.session.MigrationChange``)."""

    action: str
    step: str
    detail: str = ""
    approval: str | None = None


class MigratedEntry(_Entry):
    """The session was brought from another version of its flow to this one before the turn ran."""

    kind: Literal["migrated"] = "migrated"
    from_version: str
    """"" for a session stored before versions were recorded."""
    to_version: str
    changes: list[MigrationChangeShown] = Field(default_factory=list)


class Erased(_Entry):
    kind: Literal["erased"] = "erased"
    namespace: str


class StateChange(BaseModel):
    """One key of a step's state: absent before (added) or after (removed), or changed."""

    key: str
    before: Any = None
    after: Any = None
    added: bool = False
    removed: bool = False


class StateEntry(_Entry):
    """A step's state as the turn changed it."""

    kind: Literal["state"] = "state"
    step: str
    changes: list[StateChange]


class Omitted(_Entry):
    kind: Literal["omitted"] = "omitted"
    entries: int
    bytes: int


TimelineEntry = Annotated[
    Entered
    | Left
    | ModelEntry
    | Rejected
    | FieldSet
    | FieldDropped
    | ToolEntry
    | ApprovalRequestedEntry
    | ApprovalDecidedEntry
    | PatternEntry
    | HandoffEntry
    | MigratedEntry
    | Erased
    | StateEntry
    | Omitted,
    Field(discriminator="kind"),
]
"""One entry of a turn's timeline, told apart by its ``kind``."""


class TurnFailure(BaseModel):
    """Why the turn failed: its error's kind, the text for the developer, and the step."""

    kind: str
    message: str
    step: str | None = None


class TurnTimeline(BaseModel):
    """One turn, as it was recorded."""

    model_config = ConfigDict(extra="allow")

    version: int = TIMELINE_VERSION
    session_id: str
    turn: int
    """The turn's number in the session (a failed turn has the number the next one will have)."""
    flow: str
    flow_version: str = ""
    """The version of the flow the turn ran on ("" in a timeline recorded before versions were)."""
    trigger: Literal["message", "decision"] = "message"
    message: str
    """The user's message (or the decision taken)."""
    started_at: float
    """Unix time."""
    duration_ms: float
    outcome: Literal["replied", "paused", "failed"]
    reply: str = ""
    step: str | None = None
    """The step the turn ended in."""
    error: TurnFailure | None = None
    usage: TurnUsage = Field(default_factory=TurnUsage)
    entries: list[TimelineEntry] = Field(default_factory=list)
    size: int = 0
    """Bytes of JSON the entries took when stored."""

    @classmethod
    def from_json(cls, text: str) -> TurnTimeline:
        return cls.model_validate(json.loads(text))


@dataclass(frozen=True, slots=True)
class TimelineUpdate:
    """One entry of a running turn's timeline, as recorded so far (``FlowEngine.run(on_timeline=)``).

    An entry is handed over when it is recorded and again each time it grows: a model request
    once its answer is in (and once the answer is accepted), a tool call once it returned. Its
    ``index`` stays the same, so the later one replaces the earlier. Each is cleaned as a stored
    entry is (secrets, redacted fields, long texts cut), though the turn's byte budget applies only
    to the stored document, which the turn's end completes (state changes are added then)."""

    session_id: str | None
    """The turn's session (None until a new session is created)."""
    turn: int
    """The turn's number in the session, as ``TurnTimeline.turn``."""
    index: int
    """The entry's place in the turn, from 0, in the order entries were first recorded."""
    entry: str
    """The entry as JSON text, one ``TimelineEntry``."""


@dataclass(frozen=True, slots=True)
class TurnRecorded:
    """A followed session's turn (or decision) ended and its timeline is stored: read it whole with
    ``FlowEngine.timeline(session_id, turn=turn)``."""

    session_id: str
    turn: int
    outcome: Literal["replied", "paused", "failed"]


class TimelineFollower:
    """A session's turns as this process runs them (or hands them to a durable executor), whoever
    started them
    (``FlowEngine.follow_timeline``): each entry as it is recorded (``TimelineUpdate``, an entry
    sent again with the same index replacing the earlier), and ``TurnRecorded`` once a turn is
    stored. A turn already running when following began shows only its ``TurnRecorded``.

    Iterate it (``async for``), or await ``next(within)``; ``close()`` (or leaving ``async with``)
    stops following. Updates wait in memory until read: read them, or close it."""

    __slots__ = ("_queue", "_stop", "session_id", "turn")

    def __init__(self, session_id: str, turn: int, stop: Callable[[TimelineFollower], None]) -> None:
        self.session_id = session_id
        self.turn = turn
        """The session's last turn when following began (0: none yet)."""
        self._queue: asyncio.Queue[TimelineUpdate | TurnRecorded] = asyncio.Queue()
        self._stop = stop

    def put(self, item: TimelineUpdate | TurnRecorded) -> None:
        """Hand over one update (the engine's side)."""
        self._queue.put_nowait(item)

    async def next(self, within: float | None = None) -> TimelineUpdate | TurnRecorded | None:
        """The next update, or None when none came within ``within`` seconds (0: only one that is
        already there)."""
        if not self._queue.empty():
            return self._queue.get_nowait()
        if within is None:
            return await self._queue.get()
        try:
            return await asyncio.wait_for(self._queue.get(), within)
        except TimeoutError:
            return None

    def __aiter__(self) -> TimelineFollower:
        return self

    async def __anext__(self) -> TimelineUpdate | TurnRecorded:
        return await self._queue.get()

    def close(self) -> None:
        """Stop following (again: nothing)."""
        self._stop(self)

    async def __aenter__(self) -> TimelineFollower:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class SessionTimeline(BaseModel):
    """A session's recorded turns, oldest first: what ``--json`` exports."""

    session_id: str
    flow: str
    turns: list[TurnTimeline]


def timeline_schema() -> dict[str, Any]:
    """The JSON schema of a ``SessionTimeline`` as exported (``picoflow sessions timeline-schema``)."""
    schema = SessionTimeline.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = f"https://picoflow.dev/schemas/timeline-v{TIMELINE_VERSION}.json"
    return schema
