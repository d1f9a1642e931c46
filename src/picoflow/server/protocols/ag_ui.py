"""AG-UI: ``POST /ag-ui/{flow}`` runs a turn for CopilotKit and any other AG-UI client, and answers
with the protocol's events as Server-Sent Events (``ag-ui-protocol`` 1.0: ``picoflow-ai[ag-ui]``).

How picoflow maps onto it:

* **session <-> thread.** ``threadId`` names the caller's session of the flow
  (``picoflow.server.protocols._threads``): the same principal finds its conversation again with
  the same id, another principal using it reaches a session of its own. The thread belongs to the
  flow of its first run.
* **turn <-> run.** ``runId`` is echoed; the turn's message is the **last user message** of
  ``messages``. The rest of ``messages`` is the client's copy of the conversation, never read as
  history: the store is the history. ``state``, ``context`` and ``tools`` are not read either, and
  ``forwardedProps`` (an object) is the turn's ``RunContext.config``, identity names stripped: the
  principal comes from the API key alone.
* **step <-> step.** A turn entering a step finishes the step it entered before (if any) and
  starts this one (``STEP_FINISHED``, ``STEP_STARTED``); the last is finished before the run ends.
  A turn that stays where it was enters none.
* **events.** ``RUN_STARTED``; ``TOOL_CALL_START``/``ARGS``/``END`` and ``TOOL_CALL_RESULT`` for
  each call; ``TEXT_MESSAGE_START``/``CONTENT``/``END`` for the reply (streamed as the model
  writes it when the step's text is the reply, not a value it reads; else the whole reply at once);
  a ``STATE_SNAPSHOT`` of the session's public state; ``RUN_FINISHED``, or ``RUN_ERROR`` for a turn
  that failed once started. ``CUSTOM`` events: ``picoflow.load_status`` while the models load,
  ``picoflow.approval_decided`` for each decision, ``picoflow.handoff`` (step, reason) when the
  conversation is handed to a person.
* **approval <-> interrupt.** A turn that ends with calls waiting for approval ends the run with
  the interrupt outcome, one interrupt per approval (its id is the approval's; what will run is in
  its ``metadata``). The next run's ``resume`` entries decide them through ``engine.decide``
  (``payload: {"decision": "approve" | "deny", "reason": ...}``; a ``cancelled`` entry denies) and
  the run streams the turn that goes on. A proposed call is streamed as a tool call when it runs
  (or, denied, with the result that says it did not).

A request refused before anything ran (no key, a malformed body, an unknown flow, a thread of
another flow, a busy session, a refused decision) is a plain HTTP error with picoflow's JSON error
body, and nothing is stored.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_json

from picoflow.approvals import Approval
from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
)
from picoflow.exceptions import FlowNotFound
from picoflow.flow import FlowSpec
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnError, TurnResult
from picoflow.server.errors import ApiError, TurnErrors, turn_error
from picoflow.server.protocols._requests import FLOW_PARAMETER, Decision, invalid
from picoflow.server.protocols._threads import Thread, check_thread_id
from picoflow.server.protocols._writer import LOST, Run, StreamWriter, alone, speaks
from picoflow.server.state import ERRORS, SESSION_HEADER, ApiRoute, ServerState, access_of
from picoflow.server.streams import SSE_HEADERS

try:
    from ag_ui.core import (
        PROTOCOL_VERSION,
        AssistantMessage,
        EventType,
        Interrupt,
        RunAgentInput,
        RunFinishedInterruptOutcome,
        TextPart,
        UserMessage,
    )
    from ag_ui.encoder import EventEncoder
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("serving AG-UI needs the AG-UI SDK: pip install 'picoflow-ai[ag-ui]'") from exc

__all__ = ["PATH", "RESPONSE_SCHEMA", "SURFACE", "install"]

PATH: Final = "/ag-ui/{flow}"
SURFACE: Final = "ag-ui"
"""The surface a thread id is scoped to (``thread_session_id``)."""
MAX_RESUME = 20
"""Most resume entries one run may carry (a response rarely proposes more than a few calls)."""
APPROVAL_REASON: Final = "tool_approval"
"""The ``reason`` of an interrupt that is a call waiting for approval."""

RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "deny"]},
        "reason": {"type": "string", "description": "Why; kept with the decision, told to the flow."},
    },
    "required": ["decision"],
    "additionalProperties": False,
}
"""What a ``resolved`` resume entry's ``payload`` holds (each interrupt's ``responseSchema``)."""

MEDIA_TYPE: Final = EventEncoder().get_content_type()


# --- the request -----------------------------------------------------------------------------------------


class _Answer(BaseModel):
    """A resume entry's payload: the decision on the approval the interrupt names."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class _Run:
    """What a ``RunAgentInput`` asks picoflow for: a turn (``message``) or decisions."""

    thread_id: str
    run_id: str
    message: str
    message_field: str
    """Where the message came from, for a refusal to name."""
    decisions: tuple[Decision, ...]
    """The approvals ``resume`` decides, each where its entry is (``body.resume.<index>``)."""
    config: Mapping[str, Any] | None
    known_calls: frozenset[str]
    """Tool call ids the client already holds (its ``messages``): a call of this run never reuses one."""


def _read(body: bytes) -> _Run:
    """The run a request body asks for; 422 (naming the field) for one that is not a valid
    ``RunAgentInput`` or asks for nothing picoflow can do."""
    try:
        run = RunAgentInput.model_validate_json(body)
    except ValidationError as exc:
        raise _invalid_body(exc) from None
    thread_id = check_thread_id(run.thread_id, "body.threadId")
    run_id = check_thread_id(run.run_id, "body.runId")
    config = run.forwarded_props if isinstance(run.forwarded_props, dict) else None
    known = frozenset(
        call.id
        for message in run.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls or ()
    )
    if run.resume:
        decisions = _decisions(run)
        return _Run(thread_id, run_id, "", "", decisions, config, known)
    for index in range(len(run.messages) - 1, -1, -1):
        message = run.messages[index]
        if isinstance(message, UserMessage):
            text = _text_of(message, f"body.messages.{index}.content")
            return _Run(thread_id, run_id, text, f"body.messages.{index}.content", (), config, known)
    raise invalid("body.messages", "has no user message (and there is no resume)")


def _invalid_body(exc: ValidationError, *at: str | int) -> RequestValidationError:
    """The problems pydantic found in the body's part at ``at``, as FastAPI names a body's."""
    problems = exc.errors(include_url=False, include_input=False)
    return RequestValidationError([{**error, "loc": ("body", *at, *error["loc"])} for error in problems])


def _text_of(message: UserMessage, where: str) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, TextPart):
            raise invalid(f"{where}.{index}", f"a {part.type} part: only text parts are read")
        texts.append(part.text)
    return "\n".join(texts)


def _decisions(run: RunAgentInput) -> tuple[Decision, ...]:
    entries = run.resume or []
    if len(entries) > MAX_RESUME:
        raise invalid("body.resume", f"has more than {MAX_RESUME} entries")
    decisions: list[Decision] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"body.resume.{index}"
        if entry.interrupt_id in seen:
            raise invalid(f"{where}.interruptId", "answers an interrupt another entry answers")
        seen.add(entry.interrupt_id)
        if entry.status == "cancelled":
            decisions.append(Decision(entry.interrupt_id, "deny", None, where))
            continue
        try:
            answer = _Answer.model_validate(entry.payload)
        except ValidationError as exc:
            raise _invalid_body(exc, "resume", index, "payload") from None
        decisions.append(Decision(entry.interrupt_id, answer.decision, answer.reason, where))
    return tuple(decisions)


def _decision_refused(error: TurnError, session_id: str, decision: Decision) -> ApiError:
    """The plain HTTP error of a decision the engine refused, naming its entry of ``resume``."""
    where = decision.where
    if error.field in ("approval_id", "session_id"):
        # A malformed id names no approval, as an unknown one: no interrupt of this thread.
        return ApiError(
            404, "approval_not_found", "No such interrupt.", fields=[(f"{where}.interruptId", "unknown")]
        )
    fields = {"decision": f"{where}.payload.decision", "reason": f"{where}.payload.reason"}
    return turn_error(error, session_id, fields=fields)


# --- the events ------------------------------------------------------------------------------------------

# Every event is written as the SDK's EventEncoder writes it, ``data: <the event's JSON>\n\n``, but
# from plain values: building and dumping the SDK's models costs a Python serializer call per model
# (several per event), together more than the rest of a turn's adapter (measured with bench/http.py).
# The names come from the SDK (``EventType``); an interrupt, rare, is built with its models, and the
# tests hold every event written to the SDK's ``Event`` schema.
RUN_STARTED: Final = EventType.RUN_STARTED.value
RUN_FINISHED: Final = EventType.RUN_FINISHED.value
RUN_ERROR: Final = EventType.RUN_ERROR.value
STEP_STARTED: Final = EventType.STEP_STARTED.value
STEP_FINISHED: Final = EventType.STEP_FINISHED.value
TEXT_START: Final = EventType.TEXT_MESSAGE_START.value
TEXT_CONTENT: Final = EventType.TEXT_MESSAGE_CONTENT.value
TEXT_END: Final = EventType.TEXT_MESSAGE_END.value
CALL_START: Final = EventType.TOOL_CALL_START.value
CALL_ARGS: Final = EventType.TOOL_CALL_ARGS.value
CALL_END: Final = EventType.TOOL_CALL_END.value
CALL_RESULT: Final = EventType.TOOL_CALL_RESULT.value
STATE_SNAPSHOT: Final = EventType.STATE_SNAPSHOT.value
CUSTOM: Final = EventType.CUSTOM.value


def _frame(kind: str, **fields: Any) -> bytes:
    event = {"type": kind, "timestamp": int(time.time() * 1000), **fields}
    return b"data: " + to_json(event) + b"\n\n"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _pending(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.id,
        "tool": approval.tool,
        "summary": approval.summary,
        "args": dict(approval.args),
        "approvers": approval.approvers.describe(),
        "expiresAt": _iso(approval.expires_at),
    }


class _Writer(StreamWriter):
    """The AG-UI events of one run, written as SSE as the turn's feed gives its items.

    It keeps what the protocol needs kept: the step open, the text message open and what it
    showed so far, and the tool calls announced (so every result follows its call). Every run
    ends with ``RUN_FINISHED`` or ``RUN_ERROR``."""

    name = "an AG-UI run's event"

    def __init__(self, run: _Run, session_id: str, flow: FlowSpec) -> None:
        self._thread_id = run.thread_id
        self._run_id = run.run_id
        self.session_id = session_id
        self._flow = flow
        self._calls: dict[str, str] = {}
        """Picoflow's call id -> its id on the wire, for the calls announced in this run."""
        self._shown: set[str] = set(run.known_calls)
        """Tool call ids the client holds: earlier runs' and this run's."""
        self._proposed: dict[str, Mapping[str, Any]] = {}
        """Arguments of the decided calls, for a denied one (whose result comes without a call)."""
        self._step: str | None = None
        self._visited: list[str] = []
        self._text: str | None = None
        self._chunks: list[str] = []
        self._refusal: ApiError | None = None
        """A later decision of the resume, refused: the run ends with it (``broken``)."""

    # -- run ----------------------------------------------------------------------------------------------

    def opening(self) -> bytes:
        return _frame(
            RUN_STARTED, threadId=self._thread_id, runId=self._run_id, protocolVersion=PROTOCOL_VERSION
        )

    def broken(self) -> bytes:
        return self.refused(self._refusal or ApiError(500, "internal", LOST))

    def end_with(self, refusal: ApiError) -> None:
        """A later decision of the resume was refused: the run ends with ``refusal``."""
        self._refusal = refusal

    def on_finished(self, result: TurnResult) -> Iterator[bytes]:
        # A decision that leaves none of the response's approvals pending resumed the turn: its
        # result is the run's, whatever entries follow (they answer nothing).
        if not (self.last or result.error is not None or not result.pending):
            return
        self.ended = True
        if result.error is not None:
            yield self.refused(turn_error(result.error, self.session_id))
            return
        if result.pending:
            yield from self._end_text()  # the interrupts say what waits
        else:
            yield from self._reply(result.message)
        if self._step is not None:
            yield _frame(STEP_FINISHED, stepName=self._step)
            self._step = None
        yield _frame(STATE_SNAPSHOT, snapshot=self._state(result))
        finished: dict[str, Any] = {"threadId": self._thread_id, "runId": self._run_id}
        if result.pending:
            interrupts = [self._interrupt(approval) for approval in result.pending]
            outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
            finished["outcome"] = outcome.model_dump(mode="json", by_alias=True)
        usage = result.usage
        if usage.model_calls:
            finished["usage"] = [
                {
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    "totalTokens": usage.total_tokens,
                    "reasoningTokens": usage.reasoning_tokens,
                    "cachedInputTokens": usage.cached_input_tokens,
                    "cacheWriteInputTokens": usage.cache_creation_tokens,
                }
            ]
        yield _frame(RUN_FINISHED, **finished)

    def on_lost(self) -> Iterator[bytes]:
        yield self.refused(ApiError(500, "internal", LOST))

    def refused(self, error: ApiError) -> bytes:
        """``RUN_ERROR`` for a run that failed once started."""
        self.ended = True
        metadata: dict[str, Any] = {"status": error.status, "retryable": error.retryable}
        if error.retry_after is not None:
            metadata["retryAfter"] = error.retry_after
        return _frame(RUN_ERROR, message=error.message, code=error.kind, metadata=metadata)

    def _state(self, result: TurnResult) -> dict[str, Any]:
        """The session's public state: where the conversation is, never what its steps keep."""
        status = (
            "completed"
            if result.completed
            else "awaiting_approval"
            if result.pending
            else "awaiting_human"
            if result.awaiting_human
            else "running"
        )
        return {
            "sessionId": self.session_id,
            "flow": result.flow,
            "step": result.step,
            "status": status,
            "completed": result.completed,
            "stepsVisited": self._visited or ([result.step] if result.step else []),
            "contentType": result.content_type,
            "pending": [_pending(approval) for approval in result.pending],
        }

    def _interrupt(self, approval: Approval) -> Interrupt:
        who = approval.approvers.describe()
        return Interrupt(
            id=approval.id,
            reason=APPROVAL_REASON,
            message=f"{approval.summary} ({who} must approve)",
            tool_call_id=self._wire_id(approval.call_id, announce=False) if approval.call_id else None,
            response_schema=RESPONSE_SCHEMA,
            expires_at=_iso(approval.expires_at),
            metadata={
                "tool": approval.tool,
                "args": dict(approval.args),
                "summary": approval.summary,
                "approvers": who,
                "roles": list(approval.approvers.roles),
                "step": approval.step,
            },
        )

    # -- what the run tells besides the protocol's own events ---------------------------------------------

    def on_loading(self, status: LoadStatus) -> Iterator[bytes]:
        yield _frame(CUSTOM, name="picoflow.load_status", value=status.as_dict())

    def on_handed_off(self, event: HandedOff) -> Iterator[bytes]:
        yield _frame(CUSTOM, name="picoflow.handoff", value={"step": event.step, "reason": event.reason})

    # -- steps --------------------------------------------------------------------------------------------

    def on_step_entered(self, event: StepEntered) -> Iterator[bytes]:
        """The conversation moved to a step: finish the step open (if any), start this one."""
        if event.parent is not None:
            return  # a sub-step runs inside the step that called it
        yield from self._end_text()
        if self._step is not None:
            yield _frame(STEP_FINISHED, stepName=self._step)
        yield _frame(STEP_STARTED, stepName=event.step)
        self._step = event.step
        if not self._visited and event.previous is not None:
            self._visited.append(event.previous)  # where the turn began
        self._visited.append(event.step)

    # -- text ---------------------------------------------------------------------------------------------

    def on_text(self, event: TextChunk) -> Iterator[bytes]:
        if not event.text or not speaks(self._flow, event.step):
            return  # a step reading the message into a value: its text is the reading, not the reply
        if self._text is None:
            self._text = uuid.uuid4().hex
            yield _frame(TEXT_START, messageId=self._text, role="assistant")
        self._chunks.append(event.text)
        yield _frame(TEXT_CONTENT, messageId=self._text, delta=event.text)

    def _end_text(self) -> Iterator[bytes]:
        if self._text is not None:
            yield _frame(TEXT_END, messageId=self._text)
            self._text = None
            self._chunks = []

    def _reply(self, reply: str) -> Iterator[bytes]:
        """The turn's reply: the end of the message streamed so far when it is the reply (or its
        beginning), else a message of its own (the streamed text stays, as what the model said)."""
        if self._text is not None:
            shown = "".join(self._chunks)
            if reply.startswith(shown):
                if len(reply) > len(shown):
                    yield _frame(TEXT_CONTENT, messageId=self._text, delta=reply[len(shown) :])
                yield from self._end_text()
                return
            yield from self._end_text()
        if reply:
            message_id = uuid.uuid4().hex
            yield _frame(TEXT_START, messageId=message_id, role="assistant")
            yield _frame(TEXT_CONTENT, messageId=message_id, delta=reply)
            yield _frame(TEXT_END, messageId=message_id)

    # -- tool calls -----------------------------------------------------------------------------------------

    def _wire_id(self, call_id: str, *, announce: bool = True) -> str:
        """The id a call has on the wire: its own, unless the client holds that id already (from
        an earlier run, or a call of this one), when it gets a suffix."""
        wire = self._calls.get(call_id)
        if wire is not None:
            return wire
        wire, n = call_id, 1
        while wire in self._shown:
            n += 1
            wire = f"{call_id}~{n}"
        if announce:
            self._calls[call_id] = wire
            self._shown.add(wire)
        return wire

    def on_tool_called(self, event: ToolCalled) -> Iterator[bytes]:
        return self._announce(event.id, event.name, event.args)

    def _announce(self, call_id: str, name: str, args: Mapping[str, Any]) -> Iterator[bytes]:
        yield from self._end_text()
        self._calls.pop(call_id, None)  # a new call with an id seen before: announced afresh
        wire = self._wire_id(call_id)
        yield _frame(CALL_START, toolCallId=wire, toolCallName=name)
        yield _frame(
            CALL_ARGS, toolCallId=wire, delta=json.dumps(dict(args), ensure_ascii=False, default=str)
        )
        yield _frame(CALL_END, toolCallId=wire)

    def on_tool_returned(self, event: ToolReturned) -> Iterator[bytes]:
        if event.id not in self._calls:
            # A result without its call: a denied call never ran, an invalid one never started.
            yield from self._announce(event.id, event.name, self._proposed.get(event.id, {}))
        fields: dict[str, Any] = {"content": event.content, "role": "tool"}
        if event.is_error:
            fields["metadata"] = {"isError": True}
        yield _frame(CALL_RESULT, messageId=uuid.uuid4().hex, toolCallId=self._calls[event.id], **fields)

    def on_approval_requested(self, event: ApprovalRequested) -> Iterator[bytes]:
        return self._end_text()

    def on_approval_decided(self, event: ApprovalDecided) -> Iterator[bytes]:
        approval = event.approval
        if approval.call_id:
            self._proposed[approval.call_id] = approval.args
        value = {
            "id": approval.id,
            "tool": approval.tool,
            "status": approval.status,
            "decidedBy": approval.decided_by,
            "reason": approval.reason,
        }
        yield _frame(CUSTOM, name="picoflow.approval_decided", value=value)


# --- the route -------------------------------------------------------------------------------------------


async def run_agent(request: Request) -> Response:
    """Run a turn of ``flow`` in the caller's session of ``threadId`` (or decide the interrupts
    the input's ``resume`` answers) and stream it as AG-UI events."""
    access = access_of(request)
    flow: str = request.path_params["flow"]
    run = _read(await request.body())
    thread = Thread(access, SURFACE, run.thread_id, run.config)
    if not run.decisions:
        feed = await thread.turn(flow, run.message, fields={"message": run.message_field})
        return _respond(_Writer(run, thread.session_id, access.engine.flow(flow)), alone(feed))
    try:
        spec = access.engine.flow(flow)
    except FlowNotFound:
        raise ApiError(404, "flow_not_found", "No such flow.") from None
    writer = _Writer(run, thread.session_id, spec)
    return _respond(writer, await thread.decide(run.decisions, writer, _decision_refused, writer.end_with))


def _respond(writer: _Writer, feeds: AsyncIterator[Run]) -> StreamingResponse:
    return writer.respond(feeds, MEDIA_TYPE, {**SSE_HEADERS, SESSION_HEADER: writer.session_id})


SCHEMA_PREFIX = "AgUi"
"""The prefix of the AG-UI SDK's schemas among the OpenAPI document's components."""


_OPENAPI: dict[str, Any] = {
    "parameters": [FLOW_PARAMETER],
    "requestBody": {
        "required": True,
        "description": "An AG-UI RunAgentInput (https://docs.ag-ui.com/spec/1.0/schema); its last message "
        "is the user's turn, or the tool results that decide pending approvals.",
        "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{SCHEMA_PREFIX}RunAgentInput"}}
        },
    },
    "responses": {
        "200": {"description": "The run's AG-UI events", "content": {"text/event-stream": {}}},
    },
}


def input_schemas() -> dict[str, Any]:
    """The SDK's own JSON schema of ``RunAgentInput`` and the schemas it refers to, named for the
    OpenAPI document's components."""
    schema = RunAgentInput.model_json_schema(
        by_alias=True, ref_template=f"#/components/schemas/{SCHEMA_PREFIX}{{model}}"
    )
    defined = schema.pop("$defs", {})
    for name in ("threadId", "runId"):  # the SDK takes any string; a thread and a run need an id
        schema["properties"][name] = {**schema["properties"][name], "minLength": 1}
    return {f"{SCHEMA_PREFIX}{name}": item for name, item in {**defined, "RunAgentInput": schema}.items()}


def install(app: FastAPI) -> list[str]:
    """Add ``POST /ag-ui/{flow}`` to ``app``; returns it as ``METHOD path``.

    FastAPI tries routes one after another: a turn route is found among the first, right after
    the native turn routes (as they come first), rather than after every other route."""
    state: ServerState = app.state.picoflow
    state.components.update(input_schemas())
    state.turn_routes.append(
        TurnErrors(
            PATH,
            statuses="refusals",
            told="A turn that fails once the run started ends it with `RUN_ERROR`, its `code` the "
            "failure's kind and `metadata.status` its status",
        )
    )
    routes = app.router.routes
    app.router.add_api_route(
        PATH,
        run_agent,
        methods=["POST"],
        route_class_override=ApiRoute,
        tags=["AG-UI"],
        responses=ERRORS,
        openapi_extra=_OPENAPI,
        summary="Run a turn as AG-UI events",
    )
    route = routes.pop()
    turns = {"/v1/sessions/{session_id}/turns", "/v1/flows/{flow}/sessions"}
    at = next((i for i, known in enumerate(routes) if getattr(known, "path", None) not in turns), len(routes))
    routes.insert(at, route)
    return [f"POST {PATH}"]
