"""A2A 1.0 over JSON-RPC: picoflow as an agent that other agents call (``a2a-sdk`` 1.3's wire format).

What it serves:

* ``GET /.well-known/agent-card.json``, the agent card (public, as cards are): picoflow is the
  agent, each registered flow a skill (its id the flow's name, its description the flow's
  docstring), the JSON-RPC interface at ``/a2a``, and the API keys as security schemes
  (``Authorization: Bearer <key>`` or ``X-API-Key: <key>``). It names no session and no task.
* ``POST /a2a``, the JSON-RPC binding: ``SendMessage``, ``SendStreamingMessage``, ``GetTask``,
  ``ListTasks``, ``CancelTask`` and ``SubscribeToTask``, for clients that send ``A2A-Version: 1.0``.
  The caller is authenticated before the body is read: without a valid key the answer is a 401.

How picoflow maps onto it:

* **context <-> session.** ``contextId`` names the caller's session of that conversation
  (``_threads.thread_session_id``): the same principal finds it again with the same id; another
  principal using that id reaches a session of its own. A message without ``contextId`` starts a
  new context, whose id comes back in the task.
* **task <-> turn.** Each message is one turn and one task. ``SendMessage`` answers with the task
  once the turn is over: ``completed`` with the reply as the artifact ``reply``, or ``failed``
  with the engine's public error text. ``SendStreamingMessage`` streams the task (``working``),
  a ``working`` update per step entered, tool called, tool result, decided approval or model load
  status (a status message holding one data part), then the final state. The reply comes whole:
  the flow's code decides what is shown, so the model's text is not streamed.
* **skill <-> flow.** ``metadata.skill`` of the message (or of the request) picks the flow; without
  one, a new task runs the server's default flow (``ServerSettings.default_flow``, else the first)
  and a task that goes on keeps its own. A context keeps the flow of its first turn.
* **approval <-> input-required.** A turn that ends waiting for approvals leaves its task
  ``input-required``: the status message holds the model's words and a data part per approval
  (``approval_id``, ``tool``, ``args``, ``summary``, ``approvers``, ``expires_at``). A message whose
  one part is a data part ``{"approval_id": ..., "decision": "approve" | "deny", "reason": ...}``
  is a decision, taken by ``engine.decide`` for the caller; sent with the task's id, it continues
  that task. Free text is never a decision: it is a new message, which withdraws the approval.
* **cancel.** Cancelling a running task stops its turn before the turn commits, so the session
  stays as it was before it; a task waiting for input is closed (its approval stays pending until a
  decision or a new message); a finished task is not cancelable.

The wire is written here, not by the SDK's server: the JSON-RPC envelope, method routing and
version check, a message read by light models of this module, and tasks and events kept and
written as plain JSON values, with the field names and enum strings of A2A 1.0's JSON mapping
(the tests hold everything written to the SDK's own protobuf types, and play the SDK's client).
Parsing each request into protobuf and writing each answer back costs more than the rest of a
turn (measured with ``bench/http.py``). The SDK still gives the card (built once), the errors (their
codes and ``ErrorInfo`` details), the rarely called methods' parameters, and the task listing's
page tokens. The principal comes from the API key; tasks are kept per principal (another
principal's task id is not found), the last ``MAX_TASKS`` of each, in memory; sessions live in the
engine's store, as on every surface. A turn the engine refuses is a JSON-RPC error with nothing
stored anywhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, ClassVar, Final, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import to_json
from starlette.exceptions import HTTPException
from starlette.routing import Route

import picoflow
from picoflow.approvals import Approval
from picoflow.context import Caller
from picoflow.events import ApprovalDecided, StepEntered, ToolCalled, ToolReturned, TurnEvent
from picoflow.exceptions import FlowMismatch, FlowNotFound, RunError, SessionNotFound
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnError, TurnResult
from picoflow.server.errors import ApiError, engine_call
from picoflow.server.protocols._threads import check_thread_id, thread_session_id
from picoflow.server.readiness import TurnWatch
from picoflow.server.state import Access, ServerState, authenticate
from picoflow.server.streams import SSE_HEADERS

try:
    from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError, MethodNotFoundError
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
    from a2a.server.routes import add_a2a_routes_to_fastapi
    from a2a.server.routes.common import serialize_list_tasks_response
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        APIKeySecurityScheme,
        CancelTaskRequest,
        GetTaskRequest,
        HTTPAuthSecurityScheme,
        ListTasksRequest,
        ListTasksResponse,
        SecurityRequirement,
        SecurityScheme,
        StringList,
        SubscribeToTaskRequest,
        Task,
        TaskState,
    )
    from a2a.utils.constants import (
        AGENT_CARD_WELL_KNOWN_PATH,
        DEFAULT_LIST_TASKS_PAGE_SIZE,
        PROTOCOL_VERSION_0_3,
        PROTOCOL_VERSION_1_0,
        VERSION_HEADER,
    )
    from a2a.utils.errors import (
        A2AError,
        ContentTypeNotSupportedError,
        InternalError,
        InvalidParamsError,
        InvalidRequestError,
        PushNotificationNotSupportedError,
        TaskNotCancelableError,
        TaskNotFoundError,
        UnsupportedOperationError,
        VersionNotSupportedError,
    )
    from a2a.utils.task import (
        ListTasksCursor,
        decode_list_tasks_cursor,
        decode_page_token,
        encode_list_tasks_cursor,
        validate_history_length,
        validate_page_size,
    )
    from google.protobuf.json_format import ParseDict
    from google.protobuf.message import Message as ProtoMessage
    from packaging.version import InvalidVersion, Version
except ImportError as exc:  # pragma: no cover - the extra is installed wherever this module is served
    raise ImportError("A2A needs the a2a-sdk: pip install 'picoflow-ai[a2a]'") from exc

__all__ = ["CARD_PATH", "MAX_TASKS", "REPLY", "RPC_PATH", "SKILL_KEY", "agent_card", "install"]

SURFACE: Final = "a2a"
CARD_PATH: Final = AGENT_CARD_WELL_KNOWN_PATH
RPC_PATH: Final = "/a2a"
SKILL_KEY: Final = "skill"
"""The metadata key (of the message, or of the request) naming the skill, that is the flow."""
REPLY: Final = "reply"
"""The id and name of the artifact holding a turn's reply."""
MAX_TASKS: Final = 1000
"""Tasks kept per principal, the most recent: an older task's id is not found any more."""

logger = logging.getLogger("picoflow.server")

_LOST: Final = "The assistant could not complete this turn."

# A2A 1.0's JSON names of the enum values this agent writes (``TaskState.Name``, ``Role.Name``).
WORKING: Final = "TASK_STATE_WORKING"
COMPLETED: Final = "TASK_STATE_COMPLETED"
FAILED: Final = "TASK_STATE_FAILED"
CANCELED: Final = "TASK_STATE_CANCELED"
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
_TERMINAL: Final = frozenset({COMPLETED, CANCELED, FAILED, "TASK_STATE_REJECTED"})
_USER: Final = "ROLE_USER"
_AGENT: Final = "ROLE_AGENT"
_USER_NUMBER: Final = 1
"""``ROLE_USER``'s number: protobuf's JSON mapping takes an enum by name or by number."""

Wire = dict[str, Any]
"""A protocol value as its JSON object (A2A 1.0's field names)."""

_dump: Final = partial(to_json, fallback=str, inf_nan_mode="null")
"""JSON bytes of a wire value: what JSON has no type for (a date in a tool's arguments) as text."""


# --- what a request says ----------------------------------------------------------------------------------

# Protobuf's JSON mapping, as the SDK's server applied it: a field by its JSON name or its proto name,
# unknown fields ignored, ``null`` as an unset field.
_WIRE_MODEL = ConfigDict(
    extra="ignore", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True
)


class _PartIn(BaseModel):
    model_config = _WIRE_MODEL

    text: StrictStr | None = None
    raw: StrictStr | None = None
    url: StrictStr | None = None
    data: Any = None
    """Any JSON value, ``null`` too: set when the part has the field (``model_fields_set``)."""
    metadata: dict[str, Any] | None = None
    filename: StrictStr | None = None
    media_type: StrictStr | None = None

    def wire(self) -> Wire:
        """The part as kept in the task's history (a text or data part: others are refused)."""
        part: Wire = {"text": self.text} if self.text is not None else {"data": self.data}
        if self.metadata is not None:
            part["metadata"] = self.metadata
        if self.filename:
            part["filename"] = self.filename
        if self.media_type:
            part["mediaType"] = self.media_type
        return part


class _MessageIn(BaseModel):
    model_config = _WIRE_MODEL

    message_id: StrictStr | None = None
    context_id: StrictStr | None = None
    task_id: StrictStr | None = None
    role: StrictStr | StrictInt | None = None
    parts: list[_PartIn] | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[StrictStr] | None = None
    reference_task_ids: list[StrictStr] | None = None

    def wire(self, task_id: str, context_id: str) -> Wire:
        """The message as kept in the history of task ``task_id``."""
        message: Wire = {
            "messageId": self.message_id,
            "contextId": context_id,
            "taskId": task_id,
            "role": _USER,
            "parts": [part.wire() for part in self.parts or ()],
        }
        if self.metadata is not None:
            message["metadata"] = self.metadata
        if self.extensions:
            message["extensions"] = self.extensions
        if self.reference_task_ids:
            message["referenceTaskIds"] = self.reference_task_ids
        return message


class _ConfigurationIn(BaseModel):
    model_config = _WIRE_MODEL

    accepted_output_modes: list[StrictStr] | None = None
    task_push_notification_config: dict[str, Any] | None = None
    history_length: StrictInt | None = None
    return_immediately: StrictBool | None = None


class _SendIn(BaseModel):
    """The parameters of ``SendMessage`` and ``SendStreamingMessage``."""

    model_config = _WIRE_MODEL

    tenant: StrictStr | None = None
    message: _MessageIn | None = None
    configuration: _ConfigurationIn | None = None
    metadata: dict[str, Any] | None = None

    @property
    def history_length(self) -> int | None:
        return None if self.configuration is None else self.configuration.history_length

    @property
    def immediately(self) -> bool:
        return self.configuration is not None and bool(self.configuration.return_immediately)


def _send_params(params: dict[str, Any] | None) -> tuple[_SendIn, _MessageIn]:
    """The request's parameters read, and its message checked as the protocol requires it."""
    try:
        request = _SendIn.model_validate(params or {})
    except ValidationError as error:
        problems = [
            (_where(item["loc"]), item["msg"])
            for item in error.errors(include_input=False, include_url=False)
        ]
        raise InvalidParamsError(
            "invalid params: " + "; ".join(f"{where}: {rule}" for where, rule in problems),
            data={"errors": [{"field": where, "message": rule} for where, rule in problems]},
        ) from None
    message = request.message or _MessageIn()
    if not message.message_id:
        raise _invalid("message.messageId is required", "message.messageId", "required")
    if message.role not in (_USER, _USER_NUMBER):
        raise _invalid("a client's message has the role ROLE_USER", "message.role", "must be ROLE_USER")
    if not message.parts:
        raise _invalid("message.parts must hold at least one part", "message.parts", "required")
    history = request.history_length
    if history is not None and history < 0:
        raise InvalidParamsError("history length must be non-negative")
    return request, message


def _where(location: tuple[int | str, ...]) -> str:
    where = ""
    for step in location:
        where += f"[{step}]" if isinstance(step, int) else (f".{step}" if where else step)
    return where


class _Decision(BaseModel):
    """A person's decision on a pending approval, sent as a data part; the engine checks its values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approval_id: str
    decision: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class _Said:
    """A message read: its text (a turn), or its one decision (at ``part``)."""

    text: str
    decision: _Decision | None = None
    part: int = 0


def _invalid(message: str, where: str, problem: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"errors": [{"field": where, "message": problem}]})


def _read(message: _MessageIn) -> _Said:
    """The text parts of the message joined, or its decision; anything else is refused."""
    texts: list[str] = []
    decisions: list[tuple[int, _Decision]] = []
    for index, part in enumerate(message.parts or ()):
        has_data = "data" in part.model_fields_set
        kinds = (part.text is not None) + (part.raw is not None) + (part.url is not None) + has_data
        if kinds == 0:
            raise _invalid(f"message.parts[{index}] is empty", f"message.parts[{index}]", "has no content")
        if kinds > 1:
            problem = "holds more than one of text, raw, url and data"
            raise _invalid(f"message.parts[{index}] {problem}", f"message.parts[{index}]", problem)
        if part.text is not None:
            texts.append(part.text)
        elif has_data:
            decisions.append((index, _decision(part.data, index)))
        else:
            raise ContentTypeNotSupportedError("this agent reads text and decisions; files are not accepted")
    if not decisions:
        return _Said("\n".join(texts))
    if texts or len(decisions) > 1:
        problem = "a decision travels alone: one data part, its reason inside it"
        raise _invalid(problem, "message.parts", problem)
    index, decision = decisions[0]
    return _Said("", decision, index)


def _decision(data: object, index: int) -> _Decision:
    where = f"message.parts[{index}].data"
    if not isinstance(data, dict):
        raise _invalid(f"{where} must be a decision object", where, "is not an object")
    try:
        return _Decision.model_validate(data)
    except ValidationError as error:
        problems = [
            (".".join([where, *(str(step) for step in item["loc"])]), item["msg"])
            for item in error.errors(include_input=False, include_url=False)
        ]
        summary = "; ".join(f"{name}: {rule}" for name, rule in problems)
        raise InvalidParamsError(
            f"a data part must be a decision {{approval_id, decision, reason}}: {summary}",
            data={"errors": [{"field": name, "message": rule} for name, rule in problems]},
        ) from None


def _skill(request: _SendIn, message: _MessageIn) -> str | None:
    """The skill the message (or else the request) names in its metadata."""
    for metadata in (message.metadata, request.metadata):
        if metadata and SKILL_KEY in metadata:
            value = metadata[SKILL_KEY]
            if not isinstance(value, str) or not value:
                raise _invalid("metadata.skill must name a skill", "metadata.skill", "is not a skill name")
            return value
    return None


_Proto = TypeVar("_Proto", bound=ProtoMessage)


def _proto(params: dict[str, Any] | None, kind: type[_Proto]) -> _Proto:
    """The parameters of a rarely called method, read into the SDK's type as its server read them."""
    try:
        return ParseDict(params or {}, kind(), ignore_unknown_fields=True)
    except Exception as error:  # the parser's errors are of several kinds: each is the caller's fault
        raise InvalidParamsError(data={"parseError": str(error)}) from None


# --- refusals -----------------------------------------------------------------------------------------------

_FIELDS: Final[Mapping[str, str]] = {
    "message": "message.parts",
    "attachments": "message.parts",
    "session_id": "message.contextId",
}


def _refusal(status: int, kind: str, message: str, *, retryable: bool, where: str | None) -> A2AError:
    """The JSON-RPC error of a turn refused before it started: what the caller sent is at fault
    (invalid params), or the state of the conversation is (a failed precondition: it ended, another
    turn is running, the approval was decided), or a dependency failed (internal, maybe retryable)."""
    data: dict[str, Any] = {"kind": kind, "retryable": "true" if retryable else "false"}
    if status >= 500:
        return InternalError(message, data=data)
    if status in (403, 409):
        return UnsupportedOperationError(message, data=data)
    if where is not None:
        data["errors"] = [{"field": where, "message": message}]
    return InvalidParamsError(message, data=data)


def _no_skill(skill: str) -> A2AError:
    message = f"no skill {skill!r}: the agent card lists them"
    return _refusal(404, FlowNotFound.kind, message, retryable=False, where="metadata.skill")


def _turn_refusal(error: TurnError, said: _Said, skill: str) -> A2AError:
    if error.is_a(FlowNotFound):
        return _no_skill(skill)
    if error.is_a(FlowMismatch):  # the context belongs to another skill: the message named the wrong one
        return _refusal(422, error.kind, error.message, retryable=False, where="metadata.skill")
    if error.field is None:
        where = None
    elif said.decision is not None:
        where = f"message.parts[{said.part}].data.{error.field}"
    else:
        where = _FIELDS.get(error.field, error.field)
    return _refusal(error.status, error.kind, error.message, retryable=error.retryable, where=where)


def _run_refusal(error: RunError, skill: str) -> A2AError:
    if isinstance(error, FlowNotFound):
        return _no_skill(skill)
    field = getattr(error, "field", None)
    where = None if field is None else _FIELDS.get(field, field)
    return _refusal(error.status, error.kind, error.public_text, retryable=error.retryable, where=where)


def _api_refusal(error: ApiError) -> A2AError:
    where = error.fields[0][0] if error.fields else None
    return _refusal(error.status, error.kind, error.message, retryable=error.retryable, where=where)


# --- tasks and their events, as JSON ------------------------------------------------------------------------


def _now() -> tuple[int, str]:
    """Now in nanoseconds (to the microsecond) and as protobuf writes a ``Timestamp``."""
    micros = time.time_ns() // 1000
    seconds, fraction = divmod(micros, 1_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if fraction == 0:
        stamp += "Z"
    elif fraction % 1000 == 0:
        stamp += f".{fraction // 1000:03d}Z"
    else:
        stamp += f".{fraction:06d}Z"
    return micros * 1000, stamp


def _text(text: str, media_type: str = "") -> Wire:
    return {"text": text, "mediaType": media_type} if media_type else {"text": text}


def _data(data: object) -> Wire:
    return {"data": data, "mediaType": "application/json"}


def _agent(task_id: str, context_id: str, parts: list[Wire]) -> Wire:
    return {
        "messageId": str(uuid.uuid4()),
        "contextId": context_id,
        "taskId": task_id,
        "role": _AGENT,
        "parts": parts,
    }


@dataclass(slots=True, eq=False)
class _Task:
    """A task as this agent keeps it: its parts already as JSON values, none changed once written
    (a new status, history entry or artifact replaces or joins them), so a snapshot copies lists only."""

    id: str
    context_id: str
    owner: str
    """The principal whose task it is."""
    status: Wire
    stamp: int
    """The status's timestamp in nanoseconds, for ``ListTasks``."""
    history: list[Wire] = field(default_factory=list)
    artifacts: list[Wire] = field(default_factory=list)
    metadata: Wire = field(default_factory=dict)

    @property
    def state(self) -> str:
        state: str = self.status["state"]
        return state

    def wire(self, history_length: int | None = None) -> Wire:
        """The task as JSON, its history cut to its last ``history_length`` messages when given."""
        task: Wire = {"id": self.id, "contextId": self.context_id, "status": self.status}
        if self.artifacts:
            task["artifacts"] = list(self.artifacts)
        history = self.history
        if history_length is not None:
            history = history[-history_length:] if history_length else []
        if history:
            task["history"] = list(history)
        task["metadata"] = dict(self.metadata)
        return task


def _status(task: _Task, state: str, parts: list[Wire] | None = None) -> Wire:
    """Move ``task`` to ``state`` (its last status message joins the history) and tell it."""
    message = task.status.get("message")
    if message is not None:
        task.history.append(message)
    status: Wire = {"state": state}
    if parts:
        status["message"] = _agent(task.id, task.context_id, parts)
    task.stamp, status["timestamp"] = _now()
    task.status = status
    return {"statusUpdate": {"taskId": task.id, "contextId": task.context_id, "status": status}}


def _working(task_id: str, context_id: str, data: Wire) -> Wire:
    """A ``working`` update telling one thing the turn did (the task's own status stays)."""
    status = {"state": WORKING, "message": _agent(task_id, context_id, [_data(data)]), "timestamp": _now()[1]}
    return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status}}


def _approval(approval: Approval) -> Wire:
    return {
        "event": "approval_requested",
        "approval_id": approval.id,
        "tool": approval.tool,
        "args": dict(approval.args),
        "summary": approval.summary,
        "approvers": approval.approvers.describe(),
        "expires_at": approval.expires_at,
    }


def _progress(item: TurnEvent | LoadStatus) -> Wire | None:
    """What a ``working`` update tells of an event, or None for what none tells."""
    if isinstance(item, LoadStatus):
        return {"event": "loading", **item.as_dict()}
    data: Wire
    if isinstance(item, StepEntered):
        data = {"event": "step", "step": item.step, "previous": item.previous}
    elif isinstance(item, ToolCalled):
        data = {
            "event": "tool_call",
            "step": item.step,
            "id": item.id,
            "name": item.name,
            "args": dict(item.args),
        }
    elif isinstance(item, ToolReturned):
        data = {
            "event": "tool_result",
            "step": item.step,
            "id": item.id,
            "name": item.name,
            "content": item.content,
            "is_error": item.is_error,
        }
    elif isinstance(item, ApprovalDecided):
        approval = item.approval
        data = {
            "event": "approval_decided",
            "approval_id": approval.id,
            "tool": approval.tool,
            "status": approval.status,
            "decided_by": approval.decided_by,
        }
    else:  # the model's text (its reply comes whole) and approval requests (the final status shows them)
        return None
    if item.parent is not None:
        data["parent"] = item.parent
    return data


def _reply(result: TurnResult) -> Wire:
    if result.content_type == "application/json":
        try:
            return _data(json.loads(result.message))
        except ValueError:
            pass
    return _text(result.message, result.content_type)


def _conclude(task: _Task, result: TurnResult | None) -> list[Wire]:
    """Apply a run's result to its task: the events that end it (or leave it waiting for input)."""
    if result is None:
        return [_status(task, FAILED, [_text(_LOST)])]
    error = result.error
    if error is not None:
        details: Wire = {"event": "error", "kind": error.kind, "retryable": error.retryable}
        if error.retry_after is not None:
            details["retry_after"] = error.retry_after
        return [_status(task, FAILED, [_text(error.message), _data(details)])]
    if result.pending:
        parts = [_text(result.message, result.content_type), *(_data(_approval(a)) for a in result.pending)]
        return [_status(task, INPUT_REQUIRED, parts)]
    artifact: Wire = {"artifactId": REPLY, "name": REPLY, "parts": [_reply(result)]}
    task.artifacts = [*(kept for kept in task.artifacts if kept["artifactId"] != REPLY), artifact]
    done = _status(task, COMPLETED)
    ended: Wire = {"step": result.step or "", "ended": result.completed}
    task.metadata.update(ended)
    done["statusUpdate"]["metadata"] = ended
    update = {
        "artifactUpdate": {
            "taskId": task.id,
            "contextId": task.context_id,
            "artifact": artifact,
            "lastChunk": True,
        }
    }
    return [update, done]


# --- a turn running for a task ------------------------------------------------------------------------------


class _Ping:
    """Nothing to tell for ``ServerSettings.sse_heartbeat`` seconds: a stream writes a comment."""


PING: Final = _Ping()
Outbox = asyncio.Queue[Wire | _Ping | None]
"""What a stream writes: events (the wire objects of ``StreamResponse``), pings, then None (the end)."""


class _Pulse:
    """Puts ``PING`` in a stream's outbox every ``every`` seconds until stopped: one timer per
    stream, not one per event."""

    __slots__ = ("_every", "_handle", "_outbox")

    def __init__(self, outbox: Outbox, every: float) -> None:
        self._outbox = outbox
        self._every = every
        self._handle = asyncio.get_running_loop().call_later(every, self._beat) if every > 0 else None

    def _beat(self) -> None:
        self._outbox.put_nowait(PING)
        self._handle = asyncio.get_running_loop().call_later(self._every, self._beat)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


class _Run:
    """A turn (or a decision) running in a task the server holds: a client that goes away cannot
    leave it half done, and ``cancel`` stops it before it commits (nothing is stored then).

    ``accepted`` resolves True once the engine accepted the run (its input, session and flow, or
    the decision), False when it ended refused. What the run does is written at once as ``working``
    updates of task ``task_id``, into ``outbox`` (a streamed run's) and every listener's."""

    __slots__ = ("accepted", "context_id", "listeners", "outbox", "task", "task_id")

    _held: ClassVar[set[asyncio.Task[TurnResult]]] = set()
    """Every run still going, referenced (the loop keeps tasks weakly)."""

    def __init__(self, task_id: str, context_id: str, streamed: bool) -> None:
        self.accepted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.task_id = task_id
        self.context_id = context_id
        self.outbox: Outbox | None = asyncio.Queue() if streamed else None
        self.listeners: list[Outbox] = []
        """The outboxes of ``SubscribeToTask`` streams: the run's updates, then the task's end and None."""
        self.task: asyncio.Task[TurnResult]

    def begin(self, work: Coroutine[Any, Any, TurnResult]) -> None:
        self.task = asyncio.ensure_future(work)
        self._held.add(self.task)
        self.task.add_done_callback(self._ended)

    def accept(self) -> None:
        if not self.accepted.done():
            self.accepted.set_result(True)

    def seen(self, item: TurnEvent | LoadStatus) -> None:
        if self.outbox is None and not self.listeners:
            return
        data = _progress(item)
        if data is None:
            return
        update = _working(self.task_id, self.context_id, data)
        if self.outbox is not None:
            self.outbox.put_nowait(update)
        for listener in self.listeners:
            listener.put_nowait(update)

    def _ended(self, task: asyncio.Task[TurnResult]) -> None:
        self._held.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("picoflow.server: an A2A turn failed", exc_info=error)
        if not self.accepted.done():
            self.accepted.set_result(False)
        if self.outbox is not None:
            self.outbox.put_nowait(None)

    async def outcome(self) -> TurnResult | None:
        """The run's result, or None when it ended without one (cancelled, or a bug)."""
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if self.task.cancelled():
                return None
            raise  # the caller itself is being cancelled: the run goes on
        except Exception:
            return None


@dataclass(frozen=True, slots=True)
class _Ran:
    """A run taken in the request itself (a ``SendMessage`` no one else can know of): its result,
    or None when it ended without one (a bug, logged)."""

    result: TurnResult | None


@dataclass(slots=True, eq=False)
class _Turn:
    """A task whose turn runs: the task as it stands and its run."""

    task: _Task
    run: _Run
    final: list[Wire] | None = None
    """The events that ended the task, once it ended."""


# --- where tasks are kept -----------------------------------------------------------------------------------


class _Tasks:
    """Tasks in memory by principal, the last ``limit`` of each saved."""

    def __init__(self, limit: int = MAX_TASKS) -> None:
        self._limit = limit
        self._owners: dict[str, OrderedDict[str, _Task]] = {}

    def save(self, task: _Task) -> None:
        kept = self._owners.get(task.owner)
        if kept is None:
            kept = self._owners[task.owner] = OrderedDict()
        kept[task.id] = task
        kept.move_to_end(task.id)
        while len(kept) > self._limit:
            kept.popitem(last=False)

    def get(self, owner: str, task_id: str) -> _Task | None:
        kept = self._owners.get(owner)
        return None if kept is None else kept.get(task_id)

    def of(self, owner: str) -> list[_Task]:
        return list(self._owners.get(owner, {}).values())


# --- the methods --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Start:
    """A message checked: what it says, the skill and context it runs in, the task it makes or goes on."""

    message: _MessageIn
    said: _Said
    skill: str
    context_id: str
    generated: bool
    """The context is new: the server chose its id."""
    task_id: str
    previous: _Task | None
    owner: str


def _owner(access: Access) -> str:
    return access.caller.principal or ""


def _sort_key(task: _Task) -> tuple[bool, int, str]:
    """``ListTasks``' order (descending): by the status's time, then id."""
    return (True, task.stamp, task.id)


class _Agent:
    """picoflow's answers to A2A's methods, each for the principal of the request's API key."""

    def __init__(self, state: ServerState, default_flow: str) -> None:
        self._state = state
        self._tasks = _Tasks()
        self._default = default_flow
        self._heartbeat = state.settings.sse_heartbeat
        self._running: dict[str, _Turn | None] = {}
        """Tasks whose turn runs (None while one starts), by id; ids are random, owners checked."""

    # --- sending --------------------------------------------------------------------------------------------

    async def send(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        request, message = _send_params(params)
        start = self._prepare(request, message, access)
        history = request.history_length
        if start.previous is None and not request.immediately:
            # The usual send: no one knows the task's id before the answer, so the turn runs in this
            # request and the task is written once, whole, when the turn is over.
            ran = await self._open(start, access, held=False, streamed=False)
            assert isinstance(ran, _Ran)
            task = self._new_task(start)
            _conclude(task, ran.result)
            self._tasks.save(task)
            return _answer(request_id, {"task": task.wire(history)})
        # A task others may know of (it goes on, or its id is answered at once): kept while it runs.
        run = await self._launch(start, access, streamed=False)
        turn = self._register(start, run)
        if not request.immediately:
            await asyncio.wait({run.task})  # if this request is cancelled, the run goes on
            self._end(turn)
        return _answer(request_id, {"task": turn.task.wire(history)})

    async def send_stream(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        request, message = _send_params(params)
        start = self._prepare(request, message, access)
        run = await self._launch(start, access, streamed=True)
        turn = self._register(start, run)
        outbox = run.outbox
        assert outbox is not None
        first = _frame(request_id, {"task": turn.task.wire(request.history_length)})

        async def events() -> AsyncGenerator[Wire | _Ping, None]:
            # The client may go away at any point: the turn goes on, and ends its task itself.
            while (event := await outbox.get()) is not None:
                yield event
            for event in self._end(turn):
                yield event

        return self._stream(request_id, first, events(), outbox)

    def _prepare(self, request: _SendIn, message: _MessageIn, access: Access) -> _Start:
        said = _read(message)
        named = _skill(request, message)
        owner = _owner(access)
        previous: _Task | None = None
        if message.task_id:
            previous = self._tasks.get(owner, message.task_id)
            if previous is None:
                raise TaskNotFoundError
            if message.context_id and message.context_id != previous.context_id:
                problem = "is not the context of the task"
                raise _invalid(f"message.contextId {problem}", "message.contextId", problem)
            if previous.state in _TERMINAL:
                raise UnsupportedOperationError(
                    f"the task is {previous.state}: send a new message in its context"
                )
            if previous.id in self._running:
                raise UnsupportedOperationError("the task is still working: wait for it, or cancel it")
            context_id, generated, task_id = previous.context_id, False, previous.id
            skill = named or previous.metadata.get(SKILL_KEY) or self._default
        else:
            if said.decision is not None and not message.context_id:
                problem = "required with a decision"
                raise _invalid("a decision names the context of its approval", "message.contextId", problem)
            context_id, generated = message.context_id or str(uuid.uuid4()), not message.context_id
            skill, task_id = named or self._default, str(uuid.uuid4())
        try:
            check_thread_id(context_id, "message.contextId")
        except ApiError as error:
            raise _api_refusal(error) from None
        if previous is not None:
            self._running[previous.id] = None  # claimed: one message at a time goes on a task
        return _Start(message, said, skill, context_id, generated, task_id, previous, owner)

    def _release(self, start: _Start) -> None:
        if start.previous is not None and self._running.get(start.previous.id, None) is None:
            self._running.pop(start.previous.id, None)

    async def _launch(self, start: _Start, access: Access, streamed: bool) -> _Run:
        """Start the message's run in a task the server holds, once accepted."""
        run = await self._open(start, access, held=True, streamed=streamed)
        assert isinstance(run, _Run)
        return run

    async def _open(self, start: _Start, access: Access, held: bool, streamed: bool) -> _Run | _Ran:
        """The message's run once the engine accepted it (``held``: in a task of its own, else taken
        in this request, to its end); raise the JSON-RPC error of a refusal."""
        try:
            caller, said = access.caller, start.said
            session_id = thread_session_id(caller.principal, SURFACE, start.context_id)
            if said.decision is None and start.generated:
                # A new context has no session to look for: it is created for the turn, once the
                # engine's own checks of the flow and the message pass (a refusal stores nothing).
                try:
                    access.engine.flow(start.skill)
                    access.engine.check_message(said.text)
                except RunError as error:
                    raise _run_refusal(error, start.skill) from None
                await self._create(access, start, session_id)
            run, refused = await self._attempt(start, session_id, caller, held, streamed)
            if refused is not None and refused.is_a(SessionNotFound) and said.decision is None:
                # The first turn of a context the client named: its session is created with it.
                await self._create(access, start, session_id)
                run, refused = await self._attempt(start, session_id, caller, held, streamed)
            if refused is not None:
                raise _turn_refusal(refused, said, start.skill)
            return run
        except BaseException:
            self._release(start)
            raise

    async def _attempt(
        self, start: _Start, session_id: str, caller: Caller, held: bool, streamed: bool
    ) -> tuple[_Run | _Ran, TurnError | None]:
        """Run the message once: the run, and the engine's refusal if it refused it."""
        if held:
            run = _Run(start.task_id, start.context_id, streamed)
            run.begin(self._call(start, session_id, caller, run.accept, run.seen))
            if await run.accepted:
                return run, None
            result = await run.outcome()
        else:
            accepted = False

            def accept() -> None:
                nonlocal accepted
                accepted = True

            try:
                result = await self._call(start, session_id, caller, accept, None)
            except Exception:
                logger.exception("picoflow.server: an A2A turn failed")
                result = None
            if accepted:
                return _Ran(result), None
        if result is None or result.error is None:
            raise InternalError(_LOST)
        return _Ran(result), result.error

    def _call(
        self,
        start: _Start,
        session_id: str,
        caller: Caller,
        accept: Callable[[], None],
        seen: Callable[[TurnEvent | LoadStatus], None] | None,
    ) -> Coroutine[Any, Any, TurnResult]:
        """The engine's call for the message: a turn (accepted as it begins) or a decision
        (accepted with its first event, the decision taken)."""
        state, decision = self._state, start.said.decision
        if decision is None:

            async def turn() -> TurnResult:
                # The watch holds the turn until its flow's models are loaded, and tells when it began.
                with TurnWatch(state.readiness, on_start=accept, on_status=seen):
                    return await state.engine.run(
                        start.skill, start.said.text, session_id, caller=caller, on_event=seen
                    )

            return turn()

        def decided(event: TurnEvent) -> None:
            if isinstance(event, ApprovalDecided):
                accept()  # the engine's first event of a decision it took
            if seen is not None:
                seen(event)

        async def decide() -> TurnResult:
            with TurnWatch(state.readiness, on_status=seen):
                return await state.engine.decide(
                    session_id,
                    decision.approval_id,
                    decision.decision,
                    decision.reason,
                    caller=caller,
                    on_event=decided,
                )

        return decide()

    @staticmethod
    async def _create(access: Access, start: _Start, session_id: str) -> None:
        try:
            async with engine_call(session_id):
                await access.engine.create_session(start.skill, caller=access.caller, session_id=session_id)
        except ApiError as error:
            if error.status != 409:  # 409: this context's other first turn created it
                raise _api_refusal(error) from None

    @staticmethod
    def _new_task(start: _Start) -> _Task:
        """The task of a message the engine accepted (a task that goes on moves to ``working``)."""
        task = start.previous
        if task is not None:
            _status(task, WORKING)
        else:
            stamp, written = _now()
            status = {"state": WORKING, "timestamp": written}
            task = _Task(
                start.task_id, start.context_id, start.owner, status, stamp, metadata={SKILL_KEY: start.skill}
            )
        task.history.append(start.message.wire(task.id, task.context_id))
        return task

    def _register(self, start: _Start, run: _Run) -> _Turn:
        """Keep a running task where ``GetTask``, ``CancelTask`` and ``SubscribeToTask`` find it;
        it ends when its run does, whoever follows it."""
        turn = _Turn(self._new_task(start), run)
        self._running[turn.task.id] = turn
        self._tasks.save(turn.task)
        run.task.add_done_callback(lambda _: self._end(turn))
        return turn

    def _end(self, turn: _Turn) -> list[Wire]:
        """End the task of a run that ended, once (its run's end, its stream and a cancel may all
        come here): store it, tell its listeners; the events that ended it."""
        if turn.final is not None:
            return turn.final
        task, run = turn.task, turn.run.task
        if run.cancelled():
            final = [_status(task, CANCELED)]
        else:
            final = _conclude(task, None if run.exception() is not None else run.result())
        turn.final = final
        self._running.pop(task.id, None)
        self._tasks.save(task)
        for listener in turn.run.listeners:
            for event in final:
                listener.put_nowait(event)
            listener.put_nowait(None)
        return final

    def _stream(
        self, request_id: Any, first: bytes, events: AsyncGenerator[Wire | _Ping, None], outbox: Outbox
    ) -> StreamingResponse:
        async def frames() -> AsyncIterator[bytes]:
            pulse = _Pulse(outbox, self._heartbeat)
            try:
                yield first
                async with aclosing(events):
                    async for event in events:
                        yield _PING if event is PING else _frame(request_id, event)
            except Exception:
                # An event that cannot be written (or a bug) must not end the stream silently.
                logger.exception("picoflow.server: an A2A event stream failed")
                yield _error_frame(request_id, InternalError(_LOST))
            finally:
                pulse.stop()

        return StreamingResponse(frames(), media_type="text/event-stream", headers=SSE_HEADERS)

    # --- tasks ----------------------------------------------------------------------------------------------

    async def get_task(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, GetTaskRequest)
        validate_history_length(query)
        task = self._tasks.get(_owner(access), query.id)
        if task is None:
            raise TaskNotFoundError
        history = query.history_length if query.HasField("history_length") else None
        return _answer(request_id, task.wire(history))

    async def list_tasks(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, ListTasksRequest)
        validate_history_length(query)
        if query.HasField("page_size"):
            validate_page_size(query.page_size)
        tasks = self._tasks.of(_owner(access))
        if query.context_id:
            tasks = [task for task in tasks if task.context_id == query.context_id]
        if query.status:
            state = TaskState.Name(query.status)
            tasks = [task for task in tasks if task.state == state]
        if query.HasField("status_timestamp_after"):
            after = query.status_timestamp_after.ToNanoseconds()
            tasks = [task for task in tasks if task.stamp >= after]
        tasks.sort(key=_sort_key, reverse=True)
        total, begin = len(tasks), 0
        if query.page_token:
            cursor = decode_list_tasks_cursor(query.page_token)
            if cursor is None:  # an older token: the id of the page's first task
                first = decode_page_token(query.page_token)
                begin = next((i for i, task in enumerate(tasks) if task.id == first), -1)
                if begin < 0:
                    raise InvalidParamsError(f"Invalid page token: {query.page_token}")
            else:
                after_key = cursor.sort_key()
                begin = next((i for i, task in enumerate(tasks) if _sort_key(task) < after_key), total)
        size = query.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        end = begin + size
        next_token = None
        if end < total:
            last = tasks[end - 1]
            next_token = encode_list_tasks_cursor(ListTasksCursor(timestamp_ns=last.stamp, task_id=last.id))
        history = query.history_length if query.HasField("history_length") else None
        page = ListTasksResponse(next_page_token=next_token, page_size=size, total_size=total)
        for task in tasks[begin:end]:
            listed = task.wire(history)
            if not query.include_artifacts:
                listed.pop("artifacts", None)
            # Rare, and written as the SDK writes a listing (every field, empty ones too).
            page.tasks.append(ParseDict(json.loads(_dump(listed)), Task()))
        return _answer(request_id, serialize_list_tasks_response(page, query.include_artifacts))

    async def cancel_task(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, CancelTaskRequest)
        stored = self._tasks.get(_owner(access), query.id)
        if stored is None:
            raise TaskNotFoundError
        if stored.state in _TERMINAL:
            raise TaskNotCancelableError
        turn = self._running.get(query.id)
        if turn is None:
            if query.id in self._running:  # a message is starting its turn right now
                raise TaskNotCancelableError("a message is starting this task's turn: try again")
            _status(stored, CANCELED)  # waiting for input: nothing runs
            self._tasks.save(stored)
            return _answer(request_id, stored.wire())
        if not turn.run.task.cancel():
            raise TaskNotCancelableError("the task's turn has ended")
        await asyncio.wait({turn.run.task})
        self._end(turn)
        if turn.task.state != CANCELED:  # it ended on its own meanwhile
            raise TaskNotCancelableError("the task's turn has ended")
        return _answer(request_id, turn.task.wire())

    async def subscribe(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, SubscribeToTaskRequest)
        stored = self._tasks.get(_owner(access), query.id)
        if stored is None:
            raise TaskNotFoundError
        if stored.state in _TERMINAL:
            raise UnsupportedOperationError(f"the task is {stored.state}: nothing more will happen to it")
        outbox: Outbox = asyncio.Queue()
        turn = self._running.get(query.id)
        if turn is None or turn.final is not None:
            outbox.put_nowait(None)  # waiting for input: its state is all there is
            return self._stream(
                request_id, _frame(request_id, {"task": stored.wire()}), _read_out(outbox), outbox
            )
        listeners = turn.run.listeners
        listeners.append(outbox)

        async def events() -> AsyncGenerator[Wire | _Ping, None]:
            try:
                async for event in _read_out(outbox):
                    yield event
            finally:
                listeners.remove(outbox)

        return self._stream(request_id, _frame(request_id, {"task": turn.task.wire()}), events(), outbox)

    # --- what this agent does not offer ---------------------------------------------------------------------

    async def no_push(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        raise PushNotificationNotSupportedError

    async def no_extended_card(
        self, access: Access, request_id: Any, params: dict[str, Any] | None
    ) -> Response:
        raise UnsupportedOperationError("the agent does not offer an extended card")

    async def aclose(self) -> None:
        """Stop what still runs when the application stops."""
        running = [turn.run.task for turn in self._running.values() if turn is not None]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def _read_out(outbox: Outbox) -> AsyncGenerator[Wire | _Ping, None]:
    while (event := await outbox.get()) is not None:
        yield event


# --- JSON-RPC -----------------------------------------------------------------------------------------------

_PING: Final = b": ping\n\n"
_ENVELOPE: Final = frozenset({"jsonrpc", "method", "params", "id"})

Method = Callable[[Access, Any, dict[str, Any] | None], Awaitable[Response]]


def _answer(request_id: Any, result: object) -> Response:
    body = _dump({"jsonrpc": "2.0", "id": request_id, "result": result})
    return Response(body, media_type="application/json")


def _frame(request_id: Any, event: object) -> bytes:
    return b"data: " + _dump({"jsonrpc": "2.0", "id": request_id, "result": event}) + b"\n\n"


def _error_body(request_id: Any, error: A2AError | JSONRPCError) -> bytes:
    return _dump(build_error_response(request_id, error))


def _error_frame(request_id: Any, error: A2AError) -> bytes:
    return b"event: error\ndata: " + _error_body(request_id, error) + b"\n\n"


def _failure(request_id: Any, error: A2AError | JSONRPCError) -> Response:
    return Response(_error_body(request_id, error), media_type="application/json")


def _check_version(request: Request) -> None:
    """The protocol version the client asks for (A2A reads none as 0.3): 1.x, else refused."""
    asked = request.headers.get(VERSION_HEADER)
    if asked == PROTOCOL_VERSION_1_0:
        return
    asked = asked or PROTOCOL_VERSION_0_3
    try:
        supported = Version(asked).major == Version(PROTOCOL_VERSION_1_0).major
    except InvalidVersion:
        supported = False
    if not supported:
        raise VersionNotSupportedError(
            f"A2A version '{asked}' is not supported by this handler. "
            f"Expected version '{PROTOCOL_VERSION_1_0}'."
        )


def _request_id(envelope: object) -> Any:
    """The id to answer with: the request's, when it is one JSON-RPC allows."""
    if not isinstance(envelope, dict):
        return None
    value = envelope.get("id")
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _method(envelope: object) -> tuple[str, dict[str, Any] | None]:
    """The method a JSON-RPC 2.0 request calls and its parameters; -32600 for what is no request."""
    if isinstance(envelope, list):
        raise InvalidRequestError("Batch requests are not supported")
    if not isinstance(envelope, dict):
        raise InvalidRequestError("Invalid request: a JSON-RPC request is an object")
    if not envelope.keys() <= _ENVELOPE:
        extra = ", ".join(sorted(str(key) for key in envelope.keys() - _ENVELOPE))
        raise InvalidRequestError(f"Invalid request: unknown members {extra}")
    if envelope.get("jsonrpc") != "2.0":
        raise InvalidRequestError("Invalid request: 'jsonrpc' must be exactly '2.0'")
    if "id" in envelope and _request_id(envelope) is None and envelope["id"] is not None:
        raise InvalidRequestError("Invalid request: id must be a string, integer, or null")
    method = envelope.get("method")
    if not isinstance(method, str):
        raise InvalidRequestError("Invalid request: method must be a string")
    if not method:
        raise InvalidRequestError("Method is required")
    params = envelope.get("params")
    if params is not None and not isinstance(params, dict):
        raise InvalidParamsError("params must be an object")
    return method, params


def _rpc_route(agent: _Agent) -> Callable[[Request], Awaitable[Response]]:
    methods: dict[str, Method] = {
        "SendMessage": agent.send,
        "SendStreamingMessage": agent.send_stream,
        "GetTask": agent.get_task,
        "ListTasks": agent.list_tasks,
        "CancelTask": agent.cancel_task,
        "SubscribeToTask": agent.subscribe,
        "CreateTaskPushNotificationConfig": agent.no_push,
        "GetTaskPushNotificationConfig": agent.no_push,
        "ListTaskPushNotificationConfigs": agent.no_push,
        "DeleteTaskPushNotificationConfig": agent.no_push,
        "GetExtendedAgentCard": agent.no_extended_card,
    }

    async def rpc(request: Request) -> Response:
        access = authenticate(request)  # before the body is read: a 401 whatever the body holds
        body = await request.body()
        try:
            envelope = json.loads(body)
        except ValueError as error:
            return _failure(None, JSONParseError(message=str(error)))
        request_id = _request_id(envelope)
        try:
            name, params = _method(envelope)
            method = methods.get(name)
            if method is None:
                return _failure(request_id, MethodNotFoundError())
            _check_version(request)
            return await method(access, request_id, params)
        except A2AError as error:
            return _failure(request_id, error)
        except HTTPException:
            raise
        except Exception:
            logger.exception("picoflow.server: an A2A request failed")
            return _failure(request_id, InternalError(_LOST))

    return rpc


# --- the card and the routes --------------------------------------------------------------------------------


def agent_card(state: ServerState, rpc_url: str) -> AgentCard:
    """The card of ``state``'s engine, its JSON-RPC interface at ``rpc_url``."""
    skills = [
        AgentSkill(
            id=spec.name,
            name=spec.name,
            description=spec.description or f"The {spec.name} flow.",
            tags=["flow"],
        )
        for spec in state.engine.flows
    ]
    card = AgentCard(
        name=state.settings.title,
        description=(
            "Conversational flows served by picoflow. Each skill is a flow: name it in the message's "
            f"metadata.{SKILL_KEY} (default: {_default_flow(state)}). contextId is the conversation."
        ),
        version=picoflow.__version__,
        supported_interfaces=[
            AgentInterface(url=rpc_url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "text/markdown", "application/json"],
        skills=skills,
    )
    auth = state.auth
    if auth.has_keys:
        bearer = HTTPAuthSecurityScheme(
            scheme="Bearer", description="An API key of this server, as a bearer token."
        )
        header = APIKeySecurityScheme(
            location="header", name="X-API-Key", description="An API key of this server."
        )
        card.security_schemes["bearer"].CopyFrom(SecurityScheme(http_auth_security_scheme=bearer))
        card.security_schemes["apiKey"].CopyFrom(SecurityScheme(api_key_security_scheme=header))
        if not auth.open_mode:  # either scheme will do
            card.security_requirements.extend(
                [
                    SecurityRequirement(schemes={"bearer": StringList()}),
                    SecurityRequirement(schemes={"apiKey": StringList()}),
                ]
            )
    return card


def _default_flow(state: ServerState) -> str:
    flows = [spec.name for spec in state.engine.flows]
    wanted = state.settings.default_flow
    return wanted if wanted in flows else (flows[0] if flows else "")


def _card_route(state: ServerState) -> Callable[[Request], Awaitable[Response]]:
    @lru_cache(maxsize=8)
    def card_for(base_url: str) -> dict[str, Any]:
        return agent_card_to_dict(agent_card(state, base_url.rstrip("/") + RPC_PATH))

    async def card(request: Request) -> Response:
        # The interface's URL is where this request came: behind a proxy, let uvicorn read its headers.
        return JSONResponse(card_for(str(request.base_url)))

    return card


def install(app: FastAPI) -> list[str]:
    """Serve the agent card and the JSON-RPC binding; returns the routes as ``METHOD path``."""
    state: ServerState = app.state.picoflow
    agent = _Agent(state, _default_flow(state))
    before = len(app.router.routes)
    # The SDK's helper documents both routes in the app's OpenAPI (the A2A-Version header, the envelope).
    add_a2a_routes_to_fastapi(
        app,
        agent_card_routes=[Route(CARD_PATH, _card_route(state), methods=["GET"])],
        jsonrpc_routes=[Route(RPC_PATH, _rpc_route(agent), methods=["POST"])],
    )
    # First in line: a request is matched against the routes in order, and a turn's is the busiest.
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[:0] = added
    _close_with(app, agent)
    state.document_edits.append(_version_header)
    return [f"GET {CARD_PATH}", f"POST {RPC_PATH}"]


def _version_header(document: dict[str, Any]) -> None:
    """The SDK documents ``A2A-Version`` as required; a call without it is a call of version 0.3,
    answered (as every refusal of the binding) with a JSON-RPC error at HTTP 200."""
    for parameter in document.get("paths", {}).get(RPC_PATH, {}).get("post", {}).get("parameters", []):
        if parameter.get("in") == "header" and parameter.get("name") == "A2A-Version":
            parameter["required"] = False
            parameter["description"] = (
                "The protocol version, 1.0. Without it a call is of version 0.3, refused with a "
                "JSON-RPC error (VERSION_NOT_SUPPORTED)."
            )


def _close_with(app: FastAPI, agent: _Agent) -> None:
    """Stop the agent's runs when the application stops."""
    serve = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        async with serve(served) as value:
            try:
                yield value
            finally:
                await agent.aclose()

    app.router.lifespan_context = lifespan
