"""A2A 1.0 over JSON-RPC (``a2a-sdk``): picoflow as an agent that other agents call.

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

The SDK speaks the protocol: the JSON-RPC envelope, parsing into its types, errors, version
negotiation and event streams (``create_jsonrpc_routes``). picoflow answers each method
(``RequestHandler``): the principal comes from the API key and travels in the
``ServerCallContext``; tasks are stored per principal (another principal's task id is not found);
a turn the engine refuses is a JSON-RPC error with nothing stored anywhere. The SDK's
``DefaultRequestHandler`` (its executor, event queues and task manager) is not used: it costs
several times a whole turn. Tasks live in memory, the last ``MAX_TASKS`` of each principal;
sessions live in the engine's store, as on every surface.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError
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
from picoflow.server.state import Access, ServerState, access_of, authenticate

# The SDK traces each of its calls when OpenTelemetry is installed, at a cost comparable to a turn's;
# picoflow traces the turn itself. ``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=true`` brings them back.
os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")

try:
    from a2a.auth.user import User
    from a2a.server.context import ServerCallContext
    from a2a.server.events import Event
    from a2a.server.request_handlers import RequestHandler
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict
    from a2a.server.routes import ServerCallContextBuilder, add_a2a_routes_to_fastapi, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskStore
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        APIKeySecurityScheme,
        Artifact,
        CancelTaskRequest,
        ContentTypeNotSupportedError,
        DeleteTaskPushNotificationConfigRequest,
        GetExtendedAgentCardRequest,
        GetTaskPushNotificationConfigRequest,
        GetTaskRequest,
        HTTPAuthSecurityScheme,
        InternalError,
        InvalidParamsError,
        ListTaskPushNotificationConfigsRequest,
        ListTaskPushNotificationConfigsResponse,
        ListTasksRequest,
        ListTasksResponse,
        Message,
        Part,
        PushNotificationNotSupportedError,
        Role,
        SecurityRequirement,
        SecurityScheme,
        SendMessageRequest,
        StringList,
        SubscribeToTaskRequest,
        Task,
        TaskArtifactUpdateEvent,
        TaskNotCancelableError,
        TaskNotFoundError,
        TaskPushNotificationConfig,
        TaskState,
        TaskStatus,
        TaskStatusUpdateEvent,
        UnsupportedOperationError,
    )
    from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0, VERSION_HEADER
    from a2a.utils.errors import A2AError
    from a2a.utils.task import apply_history_length, validate_history_length, validate_page_size
    from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
    from google.protobuf.struct_pb2 import Value
except ImportError as exc:  # pragma: no cover - the extra is installed wherever this module is served
    raise ImportError("A2A needs the a2a-sdk: pip install 'picoflow[a2a]'") from exc

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

_ACCESS: Final = "picoflow.access"
_TERMINAL: Final = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)
_LOST: Final = "The assistant could not complete this turn."


# --- who calls ----------------------------------------------------------------------------------------------


class _Principal(User):
    """The principal an API key authenticated, as the SDK's stores see a user (by name)."""

    __slots__ = ("_name",)

    def __init__(self, principal: str | None) -> None:
        self._name = principal or ""

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


class _Calls(ServerCallContextBuilder):
    """The call context of an authenticated request: its principal and the protocol version it
    asks for. No other header reaches the SDK (the key stays with the request)."""

    def build(self, request: Request) -> ServerCallContext:
        access = access_of(request)
        version = request.headers.get(VERSION_HEADER)
        state: dict[str, Any] = {"headers": {VERSION_HEADER: version} if version else {}, _ACCESS: access}
        return ServerCallContext(user=_Principal(access.caller.principal), state=state)


# --- what a message says ------------------------------------------------------------------------------------


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


def _check(message: Message) -> None:
    """What the protocol requires of a client's message (the SDK's own check costs a turn's tenth)."""
    if not message.message_id:
        raise _invalid("message.messageId is required", "message.messageId", "required")
    if message.role != Role.ROLE_USER:
        raise _invalid("a client's message has the role ROLE_USER", "message.role", "must be ROLE_USER")
    if not message.parts:
        raise _invalid("message.parts must hold at least one part", "message.parts", "required")


def _read(message: Message) -> _Said:
    """The text parts of the message joined, or its decision; anything else is refused."""
    texts: list[str] = []
    decisions: list[tuple[int, _Decision]] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            decisions.append((index, _decision(part, index)))
        elif kind is None:
            raise _invalid(f"message.parts[{index}] is empty", f"message.parts[{index}]", "has no content")
        else:
            raise ContentTypeNotSupportedError("this agent reads text and decisions; files are not accepted")
    if not decisions:
        return _Said("\n".join(texts))
    if texts or len(decisions) > 1:
        problem = "a decision travels alone: one data part, its reason inside it"
        raise _invalid(problem, "message.parts", problem)
    index, decision = decisions[0]
    return _Said("", decision, index)


def _decision(part: Part, index: int) -> _Decision:
    where = f"message.parts[{index}].data"
    data = MessageToDict(part.data)
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


def _skill(params: SendMessageRequest) -> str | None:
    """The skill the message (or else the request) names in its metadata."""
    for metadata in (params.message.metadata, params.metadata):
        if SKILL_KEY in metadata.fields:
            value = metadata.fields[SKILL_KEY]
            if value.WhichOneof("kind") != "string_value" or not value.string_value:
                raise _invalid("metadata.skill must name a skill", "metadata.skill", "is not a skill name")
            return value.string_value
    return None


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


# --- a turn running for a task ------------------------------------------------------------------------------


class _Run:
    """A turn (or a decision) running in a task the server holds: a client that goes away cannot
    leave it half done, and ``cancel`` stops it before it commits (nothing is stored then).

    ``accepted`` resolves True once the engine accepted the run (its input, session and flow, or
    the decision), False when it ended refused. A streamed run queues its events, then None."""

    __slots__ = ("accepted", "events", "task")

    _held: ClassVar[set[asyncio.Task[TurnResult]]] = set()
    """Every run still going, referenced (the loop keeps tasks weakly)."""

    def __init__(self, streamed: bool) -> None:
        self.accepted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.events: asyncio.Queue[TurnEvent | LoadStatus | None] | None = (
            asyncio.Queue() if streamed else None
        )
        self.task: asyncio.Task[TurnResult]

    @classmethod
    def turn(
        cls, state: ServerState, flow: str, text: str, session_id: str, caller: Caller, streamed: bool
    ) -> _Run:
        run = cls(streamed)
        queue = run.events
        on_event = None if queue is None else queue.put_nowait

        async def take() -> TurnResult:
            # The watch holds the turn until its flow's models are loaded, and tells when it began.
            with TurnWatch(state.readiness, on_start=run._accept, on_status=on_event):
                return await state.engine.run(flow, text, session_id, caller=caller, on_event=on_event)

        return run._begin(take())

    @classmethod
    def decision(
        cls, state: ServerState, session_id: str, decision: _Decision, caller: Caller, streamed: bool
    ) -> _Run:
        run = cls(streamed)
        queue = run.events

        def seen(event: TurnEvent) -> None:
            if isinstance(event, ApprovalDecided):
                run._accept()  # the engine's first event of a decision it took
            if queue is not None:
                queue.put_nowait(event)

        async def take() -> TurnResult:
            with TurnWatch(state.readiness, on_status=None if queue is None else queue.put_nowait):
                return await state.engine.decide(
                    session_id,
                    decision.approval_id,
                    decision.decision,
                    decision.reason,
                    caller=caller,
                    on_event=seen,
                )

        return run._begin(take())

    def _begin(self, work: Awaitable[TurnResult]) -> _Run:
        self.task = asyncio.ensure_future(work)
        self._held.add(self.task)
        self.task.add_done_callback(self._ended)
        return self

    def _accept(self) -> None:
        if not self.accepted.done():
            self.accepted.set_result(True)

    def _ended(self, task: asyncio.Task[TurnResult]) -> None:
        self._held.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("picoflow.server: an A2A turn failed", exc_info=error)
        if not self.accepted.done():
            self.accepted.set_result(False)
        if self.events is not None:
            self.events.put_nowait(None)

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


@dataclass(slots=True)
class _Turn:
    """A task whose turn runs: the task as it stands, its run, and who else listens."""

    task: Task
    run: _Run
    context: ServerCallContext
    listeners: list[asyncio.Queue[Event | None]] = field(default_factory=list)
    final: list[Event] | None = None
    """The events that ended the task, once it ended."""


# --- how a turn reads as task updates -----------------------------------------------------------------------


def _value(data: Any) -> Value:
    try:
        return ParseDict(data, Value())
    except (ParseError, TypeError, ValueError):
        # A tool's arguments may hold what JSON has no type for (a date, a Decimal): sent as text.
        return ParseDict(json.loads(json.dumps(data, default=str)), Value())


def _data(data: Mapping[str, Any]) -> Part:
    return Part(data=_value(dict(data)), media_type="application/json")


def _approval_part(approval: Approval) -> Part:
    return _data(
        {
            "event": "approval_requested",
            "approval_id": approval.id,
            "tool": approval.tool,
            "args": dict(approval.args),
            "summary": approval.summary,
            "approvers": approval.approvers.describe(),
            "expires_at": approval.expires_at,
        }
    )


def _progress(item: TurnEvent | LoadStatus) -> dict[str, Any] | None:
    """What a ``working`` update tells of an event, or None for what none tells."""
    if isinstance(item, LoadStatus):
        return {"event": "loading", **item.as_dict()}
    data: dict[str, Any]
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


def _agent(task: Task, parts: list[Part]) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        task_id=task.id,
        context_id=task.context_id,
        parts=parts,
    )


def _status(task: Task, state: TaskState, parts: list[Part] | None = None) -> TaskStatusUpdateEvent:
    """Move ``task`` to ``state`` (its last status message joins the history) and tell it."""
    if task.status.HasField("message"):
        task.history.append(task.status.message)
    status = TaskStatus(state=state)
    if parts:
        status.message.CopyFrom(_agent(task, parts))
    status.timestamp.GetCurrentTime()
    task.status.CopyFrom(status)
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)


def _reply(result: TurnResult) -> Part:
    if result.content_type == "application/json":
        try:
            return Part(data=_value(json.loads(result.message)), media_type="application/json")
        except ValueError:
            pass
    return Part(text=result.message, media_type=result.content_type)


def _conclude(task: Task, result: TurnResult | None) -> list[Event]:
    """Apply a run's result to its task: the events that end it (or leave it waiting for input)."""
    if result is None:
        return [_status(task, TaskState.TASK_STATE_FAILED, [Part(text=_LOST)])]
    error = result.error
    if error is not None:
        details: dict[str, Any] = {"event": "error", "kind": error.kind, "retryable": error.retryable}
        if error.retry_after is not None:
            details["retry_after"] = error.retry_after
        return [_status(task, TaskState.TASK_STATE_FAILED, [Part(text=error.message), _data(details)])]
    if result.pending:
        parts = [Part(text=result.message, media_type=result.content_type)]
        parts += [_approval_part(approval) for approval in result.pending]
        return [_status(task, TaskState.TASK_STATE_INPUT_REQUIRED, parts)]
    artifact = Artifact(artifact_id=REPLY, name=REPLY, parts=[_reply(result)])
    for index, existing in enumerate(task.artifacts):
        if existing.artifact_id == REPLY:
            del task.artifacts[index]
            break
    task.artifacts.append(artifact)
    done = _status(task, TaskState.TASK_STATE_COMPLETED)
    ended: dict[str, str | bool] = {"step": result.step or "", "ended": result.completed}
    task.metadata.update(ended)
    done.metadata.update(ended)
    update = TaskArtifactUpdateEvent(
        task_id=task.id, context_id=task.context_id, artifact=artifact, last_chunk=True
    )
    return [update, done]


# --- the methods --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Start:
    """A message checked: what it says, the skill and context it runs in, the task it goes on."""

    said: _Said
    skill: str
    context_id: str
    generated: bool
    """The context is new: the server chose its id."""
    previous: Task | None


class _Handler(RequestHandler):
    """picoflow's answers to A2A's methods, each for the principal of the request's API key."""

    def __init__(self, state: ServerState, tasks: TaskStore, default_flow: str) -> None:
        self._state = state
        self._tasks = tasks
        self._default = default_flow
        self._running: dict[str, _Turn | None] = {}
        """Tasks whose turn runs (None while one starts), by id; ids are random, owners checked."""
        self._background: set[asyncio.Task[Any]] = set()

    # --- sending --------------------------------------------------------------------------------------------

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        start = await self._prepare(params, context)
        immediately = params.configuration.return_immediately
        if start.previous is None and not immediately:
            # The usual send: no one knows the task's id before the answer, so the task is written
            # once, whole, when the turn is over.
            run = await self._launch(start, context, False)
            result = await run.outcome()
            task = self._new_task(start, params.message)
            _conclude(task, result)
            await self._tasks.save(task, context)
            return apply_history_length(task, params.configuration)
        # A task others may know of (it goes on, or its id is answered at once): kept while it runs.
        run = await self._launch(start, context, True)
        turn = await self._register(start, run, params.message, context)
        if not immediately:
            try:
                await self._drain(turn)
            finally:
                if turn.final is None:
                    self._keep(self._drain(turn))
        else:
            self._keep(self._drain(turn))
        return apply_history_length(self._snapshot(turn.task), params.configuration)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        start = await self._prepare(params, context)
        run = await self._launch(start, context, True)
        turn = await self._register(start, run, params.message, context)
        try:
            yield apply_history_length(self._snapshot(turn.task), params.configuration)
            async for event in self._follow(turn):
                yield event
        finally:
            if turn.final is None:  # the client went away: the turn goes on, and its task is kept
                self._keep(self._drain(turn))

    async def _prepare(self, params: SendMessageRequest, context: ServerCallContext) -> _Start:
        message = params.message
        _check(message)
        validate_history_length(params.configuration)
        said = _read(message)
        named = _skill(params)
        previous: Task | None = None
        if message.task_id:
            previous = await self._tasks.get(message.task_id, context)
            if previous is None:
                raise TaskNotFoundError
            if message.context_id and message.context_id != previous.context_id:
                problem = "is not the context of the task"
                raise _invalid(f"message.contextId {problem}", "message.contextId", problem)
            if previous.status.state in _TERMINAL:
                name = TaskState.Name(previous.status.state)
                raise UnsupportedOperationError(f"the task is {name}: send a new message in its context")
            if previous.id in self._running:
                raise UnsupportedOperationError("the task is still working: wait for it, or cancel it")
            context_id, generated = previous.context_id, False
            kept = previous.metadata.fields.get(SKILL_KEY)
            skill = named or (kept.string_value if kept is not None else "") or self._default
        else:
            if said.decision is not None and not message.context_id:
                problem = "required with a decision"
                raise _invalid("a decision names the context of its approval", "message.contextId", problem)
            context_id, generated = message.context_id or str(uuid.uuid4()), not message.context_id
            skill = named or self._default
        try:
            check_thread_id(context_id, "message.contextId")
        except ApiError as error:
            raise _api_refusal(error) from None
        if previous is not None:
            self._running[previous.id] = None  # claimed: one message at a time goes on a task
        return _Start(said, skill, context_id, generated, previous)

    def _release(self, start: _Start) -> None:
        if start.previous is not None and self._running.get(start.previous.id, None) is None:
            self._running.pop(start.previous.id, None)

    async def _launch(self, start: _Start, context: ServerCallContext, streamed: bool) -> _Run:
        """Start the message's run, once accepted; raise the JSON-RPC error of a refusal."""
        try:
            run = await self._accepted(start, context.state[_ACCESS], streamed)
        except BaseException:
            self._release(start)
            raise
        return run

    async def _accepted(self, start: _Start, access: Access, streamed: bool) -> _Run:
        """The message's run, once the engine accepted it; the JSON-RPC error of a refusal."""
        caller, said = access.caller, start.said
        session_id = thread_session_id(caller.principal, SURFACE, start.context_id)
        if said.decision is not None:
            run = _Run.decision(self._state, session_id, said.decision, caller, streamed)
        else:
            if start.generated:
                # A new context has no session to look for: it is created for the turn, once the
                # engine's own checks of the flow and the message pass (a refusal stores nothing).
                try:
                    access.engine.flow(start.skill)
                    access.engine.check_message(said.text)
                except RunError as error:
                    raise _run_refusal(error, start.skill) from None
                await self._create(access, start, session_id)
            run = _Run.turn(self._state, start.skill, said.text, session_id, caller, streamed)
        refused = await self._refused(run)
        if refused is not None and refused.is_a(SessionNotFound) and said.decision is None:
            # The first turn of a context the client named: its session is created with it.
            await self._create(access, start, session_id)
            run = _Run.turn(self._state, start.skill, said.text, session_id, caller, streamed)
            refused = await self._refused(run)
        if refused is None:
            return run
        raise _turn_refusal(refused, said, start.skill)

    @staticmethod
    async def _refused(run: _Run) -> TurnError | None:
        if await run.accepted:
            return None
        result = await run.outcome()
        if result is None or result.error is None:
            raise InternalError(_LOST)
        return result.error

    @staticmethod
    async def _create(access: Access, start: _Start, session_id: str) -> None:
        try:
            async with engine_call(session_id):
                await access.engine.create_session(start.skill, caller=access.caller, session_id=session_id)
        except ApiError as error:
            if error.status != 409:  # 409: this context's other first turn created it
                raise _api_refusal(error) from None

    def _new_task(self, start: _Start, message: Message) -> Task:
        if start.previous is not None:
            task = start.previous
            _status(task, TaskState.TASK_STATE_WORKING)
        else:
            task = Task(id=str(uuid.uuid4()), context_id=start.context_id)
            task.status.state = TaskState.TASK_STATE_WORKING
            task.status.timestamp.GetCurrentTime()
            task.metadata.update({SKILL_KEY: start.skill})
        message.task_id, message.context_id = task.id, task.context_id
        task.history.append(message)
        return task

    async def _register(
        self, start: _Start, run: _Run, message: Message, context: ServerCallContext
    ) -> _Turn:
        """Keep a running task where ``GetTask``, ``CancelTask`` and ``SubscribeToTask`` find it."""
        turn = _Turn(self._new_task(start, message), run, context)
        self._running[turn.task.id] = turn
        await self._tasks.save(turn.task, context)
        return turn

    async def _follow(self, turn: _Turn) -> AsyncIterator[Event]:
        """The task's ``working`` updates while its turn runs, then the events that end it."""
        events = turn.run.events
        assert events is not None  # a registered run is streamed
        while (item := await events.get()) is not None:
            data = _progress(item)
            if data is None:
                continue
            task = turn.task
            update = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id)
            update.status.state = TaskState.TASK_STATE_WORKING
            update.status.message.CopyFrom(_agent(task, [_data(data)]))
            update.status.timestamp.GetCurrentTime()
            for listener in turn.listeners:
                listener.put_nowait(update)
            yield update
        for event in await self._end(turn):
            yield event

    async def _drain(self, turn: _Turn) -> None:
        async for _ in self._follow(turn):
            pass

    async def _end(self, turn: _Turn) -> list[Event]:
        """End the task of a run that ended, once (its cancel and its follower may both come here):
        store it, tell its listeners."""
        if turn.final is not None:
            return turn.final
        task, run = turn.task, turn.run.task
        if run.cancelled():
            turn.final = [_status(task, TaskState.TASK_STATE_CANCELED)]
        else:
            turn.final = _conclude(task, None if run.exception() is not None else run.result())
        self._running.pop(task.id, None)
        await self._tasks.save(task, turn.context)
        for listener in turn.listeners:
            for event in turn.final:
                listener.put_nowait(event)
            listener.put_nowait(None)
        return turn.final

    @staticmethod
    def _snapshot(task: Task) -> Task:
        copy = Task()
        copy.CopyFrom(task)
        return copy

    def _keep(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- tasks ----------------------------------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        validate_history_length(params)
        task = await self._tasks.get(params.id, context)
        if task is None:
            raise TaskNotFoundError
        return apply_history_length(task, params)

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        validate_history_length(params)
        if params.HasField("page_size"):
            validate_page_size(params.page_size)
        page = await self._tasks.list(params, context)
        for task in page.tasks:
            if not params.include_artifacts:
                task.ClearField("artifacts")
            limited = apply_history_length(task, params)
            if limited is not task:
                task.CopyFrom(limited)
        return page

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        stored = await self._tasks.get(params.id, context)
        if stored is None:
            raise TaskNotFoundError
        if stored.status.state in _TERMINAL:
            raise TaskNotCancelableError
        turn = self._running.get(params.id)
        if turn is None:
            if params.id in self._running:  # a message is starting its turn right now
                raise TaskNotCancelableError("a message is starting this task's turn: try again")
            _status(stored, TaskState.TASK_STATE_CANCELED)  # waiting for input: nothing runs
            await self._tasks.save(stored, context)
            return stored
        if not turn.run.task.cancel():
            raise TaskNotCancelableError("the task's turn has ended")
        await asyncio.wait({turn.run.task})
        await self._end(turn)
        if turn.task.status.state != TaskState.TASK_STATE_CANCELED:  # it ended on its own meanwhile
            raise TaskNotCancelableError("the task's turn has ended")
        return self._snapshot(turn.task)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        stored = await self._tasks.get(params.id, context)
        if stored is None:
            raise TaskNotFoundError
        if stored.status.state in _TERMINAL:
            name = TaskState.Name(stored.status.state)
            raise UnsupportedOperationError(f"the task is {name}: nothing more will happen to it")
        turn = self._running.get(params.id)
        if turn is None or turn.final is not None:
            yield stored  # waiting for input: its state is all there is
            return
        listener: asyncio.Queue[Event | None] = asyncio.Queue()
        turn.listeners.append(listener)
        try:
            yield self._snapshot(turn.task)
            while (event := await listener.get()) is not None:
                yield event
        finally:
            turn.listeners.remove(listener)

    # --- what this agent does not offer ---------------------------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise UnsupportedOperationError("the agent does not offer an extended card")

    async def aclose(self) -> None:
        """Stop what still runs when the application stops."""
        running = [*self._background, *(turn.run.task for turn in self._running.values() if turn is not None)]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


# --- where tasks are kept -----------------------------------------------------------------------------------


class _RecentTasks(TaskStore):
    """The SDK's in-memory task store (tasks by principal), keeping the last ``limit`` of each."""

    def __init__(self, limit: int = MAX_TASKS) -> None:
        self._store = InMemoryTaskStore()
        self._limit = limit
        self._order: dict[str, OrderedDict[str, None]] = {}

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._store.save(task, context)
        order = self._order.setdefault(context.user.user_name, OrderedDict())
        order[task.id] = None
        order.move_to_end(task.id)
        while len(order) > self._limit:
            oldest, _ = order.popitem(last=False)
            await self._store.delete(oldest, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._store.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._store.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._order.get(context.user.user_name, OrderedDict()).pop(task_id, None)
        await self._store.delete(task_id, context)


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
    handler = _Handler(state, _RecentTasks(), _default_flow(state))
    (sdk_route,) = create_jsonrpc_routes(handler, RPC_PATH, context_builder=_Calls())
    dispatch = sdk_route.endpoint

    async def rpc(request: Request) -> Response:
        authenticate(request)  # before the body is read: a 401 whatever the body holds
        response: Response = await dispatch(request)
        return response

    before = len(app.router.routes)
    add_a2a_routes_to_fastapi(
        app,
        agent_card_routes=[Route(CARD_PATH, _card_route(state), methods=["GET"])],
        jsonrpc_routes=[Route(RPC_PATH, rpc, methods=["POST"])],
    )
    # First in line: a request is matched against the routes in order, and a turn's is the busiest.
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[:0] = added
    _close_with(app, handler)
    return [f"GET {CARD_PATH}", f"POST {RPC_PATH}"]


def _close_with(app: FastAPI, handler: _Handler) -> None:
    """Stop the handler's runs when the application stops."""
    serve = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        async with serve(served) as value:
            try:
                yield value
            finally:
                await handler.aclose()

    app.router.lifespan_context = lifespan
