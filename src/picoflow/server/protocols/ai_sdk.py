"""The Vercel AI SDK UI message stream (``POST /ai-sdk/{flow}``), for ``useChat`` and every other
client of the ``ai`` package.

The request is the body ``useChat``'s ``DefaultChatTransport`` sends: ``{id, messages, trigger,
messageId}`` and the fields of its ``body`` option (``config`` among them is the turn's
``RunContext.config``; every other field is ignored). The answer is the UI message stream:
Server-Sent Events ``data: {chunk}``, the header ``x-vercel-ai-ui-message-stream: v1``, and
``data: [DONE]`` last.

How picoflow maps onto it:

* chat ``id`` <-> session: the caller's session of that chat id (``_threads``), created with the
  chat's first turn. Another principal using the same chat id reaches a session of its own.
* request <-> turn: the last message is what the caller says now: the user's text (its ``file``
  parts, as ``data:`` URLs, are the turn's attachments). The earlier messages are the client's copy
  of the conversation and are not read: the store is the history.
* response <-> one assistant UI message: ``start``; an AI SDK step (``start-step`` ...
  ``finish-step``) for each picoflow step the turn works in; a tool part per tool call
  (``tool-input-available``, then ``tool-output-available`` or ``tool-output-error``); the reply
  as a text part, streamed as the model writes it when the step answers in free text (a step with
  a structured output, whose text is not the reply, sends its reply whole); a ``data-table`` part
  for each Markdown table in the reply, ``data-content`` for a reply of another content type, and
  ``data-diagram`` (the flow in Mermaid, its current step marked) when the conversation moved
  to a step; ``message-metadata`` (``sessionId``, ``flow``, ``step``, ``completed``, the pending
  ``approvals``); ``finish``. A failed turn is an ``error`` chunk, its text the engine's words for
  users, before ``finish``.
* approval <-> AI SDK tool approval: a call waiting for a decision is a tool part in the state
  ``approval-requested`` (``tool-approval-request``, whose ``approvalId`` is the approval's id).
  ``addToolApprovalResponse`` sends it back as that part in the state ``approval-responded`` in
  the last (assistant) message: each such answer is decided through ``engine.decide`` for the
  caller the key authenticated, and the turn it resumes streams into the same message. No text
  decides anything: a user message while a call waits withdraws it, as on every surface.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

from picoflow.approvals import Approval
from picoflow.attachments import Attachment
from picoflow.diagram import flow_mermaid
from picoflow.engine import FlowEngine
from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
)
from picoflow.exceptions import RunError, TurnCancelled
from picoflow.flow import FlowSpec
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnError, TurnResult
from picoflow.server.errors import ApiError, TurnErrors, turn_error
from picoflow.server.protocols._requests import FLOW_PARAMETER, Decision, invalid
from picoflow.server.protocols._threads import Thread, check_thread_id
from picoflow.server.protocols._writer import LOST, StreamWriter, alone, speaks
from picoflow.server.schemas import ErrorBody
from picoflow.server.state import ERRORS, ApiRoute, ServerState, access_of
from picoflow.server.streams import SSE_HEADERS

__all__ = [
    "MAX_MESSAGES",
    "MAX_PARTS",
    "SURFACE",
    "ChatRequest",
    "install",
    "markdown_tables",
]

SURFACE = "ai-sdk"
"""The surface a chat id is scoped to (``thread_session_id``)."""
MAX_MESSAGES = 1000
"""Most messages a request may carry (``useChat`` sends the whole chat every time)."""
MAX_PARTS = 200
"""Most parts one message may carry."""
STREAM_HEADERS: Final = {**SSE_HEADERS, "x-vercel-ai-ui-message-stream": "v1"}
DONE: Final = b"data: [DONE]\n\n"


# --- the request -----------------------------------------------------------------------------------------


class _In(BaseModel):
    # Unknown fields are ignored: a client sends what its UI keeps (metadata, provider data, a
    # ``user`` or ``principal`` of its own), and none of it names who is calling.
    model_config = ConfigDict(extra="ignore")


class ApprovalIn(_In):
    """The ``approval`` of a tool part: its id and, once answered, the decision."""

    id: str = Field(max_length=200)
    approved: bool | None = None
    reason: str | None = None


class PartIn(_In):
    """A part of a UI message, as far as a turn reads one: text, a file, a tool part's approval."""

    type: str = Field(max_length=200)
    text: str | None = None
    state: str | None = Field(None, max_length=64)
    toolCallId: str | None = Field(None, max_length=200)
    approval: ApprovalIn | None = None
    url: str | None = None
    mediaType: str | None = Field(None, max_length=127)
    filename: str | None = Field(None, max_length=255)


class MessageIn(_In):
    """A UI message (``{id, role, parts}``)."""

    id: str = Field("", max_length=200)
    role: Literal["system", "user", "assistant"]
    parts: list[PartIn] = Field(default_factory=list, max_length=MAX_PARTS)


def _served_trigger(schema: dict[str, Any]) -> None:
    schema.pop("enum", None)
    schema["const"] = "submit-message"


class ChatRequest(_In):
    """What ``DefaultChatTransport`` posts: the chat id, the chat's messages, why it sends them."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "examples": [
                {
                    "id": "chat-1",
                    "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
                    "trigger": "submit-message",
                }
            ]
        },
    )

    id: str = Field(description="The chat id: the caller's session of this chat.")
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    # Validated as the SDK sends it, so that a regenerate is refused in words; documented as the
    # one trigger served.
    trigger: Literal["submit-message", "regenerate-message"] = Field(
        "submit-message",
        json_schema_extra=_served_trigger,
        description="submit-message; regenerate-message is refused (the conversation is stored).",
    )
    messageId: str | None = Field(None, max_length=200)
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Per-request settings for the flow (RunContext.config; never stored).",
    )


@dataclass(frozen=True, slots=True)
class _Say:
    """The request says something: a turn."""

    text: str
    files: list[Attachment]
    where: str
    """The request field the message came in, for a refusal."""


def _asked(body: ChatRequest) -> _Say | list[Decision]:
    """What the last message asks for: a turn on the user's words, or the decisions of the
    approval answers ``addToolApprovalResponse`` left in the assistant's message."""
    if body.trigger == "regenerate-message":
        problem = "regenerate-message is not served: the conversation is stored, send a new message"
        raise invalid("body.trigger", problem)
    index = len(body.messages) - 1
    last = body.messages[index]
    where = f"body.messages.{index}"
    if last.role == "assistant":
        answers = [
            Decision(
                part.approval.id,
                "approve" if part.approval.approved else "deny",
                part.approval.reason,
                f"{where}.parts.{n}.approval",
            )
            for n, part in enumerate(last.parts)
            if part.state == "approval-responded"
            and part.approval is not None
            and part.approval.approved is not None
        ]
        if not answers:
            raise invalid(where, "the last message must be the user's, or answer a tool approval")
        return answers
    if last.role != "user":
        raise invalid(f"{where}.role", "the last message must be the user's")
    texts: list[str] = []
    files: list[Attachment] = []
    for n, part in enumerate(last.parts):
        if part.type == "text":
            texts.append(part.text or "")
        elif part.type == "file":
            files.append(_file(part, f"{where}.parts.{n}"))
    return _Say("\n\n".join(texts), files, f"{where}.parts")


def _file(part: PartIn, where: str) -> Attachment:
    """A file part's bytes, from its ``data:`` URL (no other URL is fetched)."""
    url = part.url or ""
    header, comma, data = url.partition(",")
    if not (header.startswith("data:") and header.endswith(";base64") and comma):
        raise invalid(f"{where}.url", "a file must come as a base64 data: URL")
    try:
        content = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"{where}.url", "the file's data is not valid base64") from None
    media_type = part.mediaType or header[5:-7] or "application/octet-stream"
    return Attachment.from_bytes(content, media_type, part.filename or "attachment")


# --- the stream ------------------------------------------------------------------------------------------


def _chunk(chunk: Mapping[str, Any]) -> bytes:
    return b"data: " + to_json(chunk, fallback=str) + b"\n\n"


_RULE_CELL = re.compile(r":?-+:?")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(inner)]


def _align(cell: str) -> str | None:
    left, right = cell.startswith(":"), cell.endswith(":")
    return "center" if left and right else "right" if right else "left" if left else None


def markdown_tables(text: str) -> list[dict[str, Any]]:
    """The GitHub-style Markdown tables in ``text``: for each, its ``columns``, ``align`` (per
    column: left, right, center or None), ``rows`` (lists of cell texts, as long as the columns)
    and its ``markdown``."""
    lines = text.splitlines()
    tables: list[dict[str, Any]] = []
    i = 0
    while i + 1 < len(lines):
        head, rule = lines[i], lines[i + 1]
        rules = _cells(rule) if "|" in head and "|" in rule else []
        if rules and all(_RULE_CELL.fullmatch(cell) for cell in rules):
            columns = _cells(head)
            aligns = [_align(cell) for cell in rules]
            if len(aligns) == len(columns):
                end = i + 2
                rows = []
                while end < len(lines) and "|" in lines[end] and lines[end].strip():
                    cells = _cells(lines[end])[: len(columns)]
                    rows.append(cells + [""] * (len(columns) - len(cells)))
                    end += 1
                markdown = "\n".join(lines[i:end])
                tables.append({"columns": columns, "align": aligns, "rows": rows, "markdown": markdown})
                i = end
                continue
        i += 1
    return tables


def _reply_data(result: TurnResult) -> list[tuple[str, Any]]:
    """The data parts of a reply: its tables, or the reply in a content type other than text."""
    message, content_type = result.message, result.content_type
    parts: list[tuple[str, Any]] = []
    if content_type != "text/plain":
        data: dict[str, Any] = {"contentType": content_type, "content": message}
        if content_type == "application/json":
            with contextlib.suppress(ValueError):
                data["value"] = json.loads(message)
        parts.append(("content", data))
    if content_type.startswith("text/") and "|" in message:
        parts.extend(("table", table) for table in markdown_tables(message))
    return parts


def _approval_descriptor(approval: Approval) -> dict[str, Any]:
    return {
        "summary": approval.summary,
        "approvers": approval.approvers.describe(),
        "expiresAt": approval.expires_at,
    }


class _Writer(StreamWriter):
    """One assistant UI message, written from the items of a turn (or of a decision and the turn
    it resumes): which AI SDK step and text part are open, what the model's text turned out to be.

    The model's text is streamed as a text part only when it reads as the reply: the text of a
    step with a structured output is what the model filled in, not what the user is told, and a
    text that opens like JSON may be a call written as text. Such text is held back, and the
    reply comes whole at the end."""

    name = "an AI SDK"

    def __init__(
        self,
        engine: FlowEngine,
        session_id: str,
        message_id: str,
        flow: FlowSpec | None,
        answering: Iterable[str] = (),
    ) -> None:
        self.engine = engine
        self.message_id = message_id
        self.session_id = session_id
        self.flow = flow
        self.answering = frozenset(answering)
        """The approvals this request decides."""
        self.resumed: dict[str, Approval] = {}
        """Those approvals by call id: their parts are in the message the client holds."""
        self.step_open = False
        self.moved = False
        self.texts = 0
        self.text_id: str | None = None
        self.streamed: list[str] = []
        self.waiting: list[str] = []
        """Text of the model's answer not yet known to be prose."""
        self.held = False

    # -- parts ---------------------------------------------------------------------------------------

    def _open_step(self) -> Iterator[bytes]:
        if not self.step_open:
            self.step_open = True
            yield _chunk({"type": "start-step"})

    def _close_step(self) -> Iterator[bytes]:
        if self.step_open:
            self.step_open = False
            yield _chunk({"type": "finish-step"})

    def _text(self, text: str) -> Iterator[bytes]:
        self.texts += 1
        part = f"text-{self.texts}"
        yield from self._open_step()
        yield _chunk({"type": "text-start", "id": part})
        yield _chunk({"type": "text-delta", "id": part, "delta": text})
        yield _chunk({"type": "text-end", "id": part})

    def _end_text(self) -> Iterator[bytes]:
        """The model's answer ended (a call, a new step): its text part closes; text held back
        was not the reply and is dropped."""
        self.waiting = []
        self.held = False
        if self.text_id is not None:
            part, self.text_id, self.streamed = self.text_id, None, []
            yield _chunk({"type": "text-end", "id": part})

    def _tool_input(self, call_id: str, name: str, args: Mapping[str, Any], **more: Any) -> bytes:
        chunk = {"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": dict(args)}
        return _chunk({**chunk, **more})

    def metadata(self, **metadata: Any) -> bytes:
        return _chunk({"type": "message-metadata", "messageMetadata": metadata})

    # -- events --------------------------------------------------------------------------------------

    def write(self, item: object) -> Iterable[bytes]:
        if getattr(item, "parent", None) is not None:
            return ()  # a sub-step run's events stay inside the tool call that runs it
        return super().write(item)

    def opening(self) -> bytes:
        start = {"messageId": self.message_id, "messageMetadata": {"sessionId": self.session_id}}
        return _chunk({"type": "start", **start})

    def broken(self) -> bytes:
        # The client is told, and the stream still ends as the protocol says.
        failed = {"type": "error", "errorText": LOST}
        return b"".join([_chunk(failed), _chunk({"type": "finish", "finishReason": "error"}), DONE])

    def on_loading(self, status: LoadStatus) -> Iterator[bytes]:
        yield _chunk({"type": "data-status", "data": status.as_dict(), "transient": True})

    def on_text(self, event: TextChunk) -> Iterator[bytes]:
        if self.held:
            return
        if self.text_id is not None:
            self.streamed.append(event.text)
            yield _chunk({"type": "text-delta", "id": self.text_id, "delta": event.text})
            return
        if not speaks(self.flow, event.step):
            self.held = True
            return
        self.waiting.append(event.text)
        text = "".join(self.waiting).lstrip()
        if not text:
            return
        self.waiting = []
        if text[0] in "{[":
            self.held = True
            return
        self.texts += 1
        self.text_id = f"text-{self.texts}"
        self.streamed = [text]
        yield from self._open_step()
        yield _chunk({"type": "text-start", "id": self.text_id})
        yield _chunk({"type": "text-delta", "id": self.text_id, "delta": text})

    def on_tool_called(self, event: ToolCalled) -> Iterator[bytes]:
        approval = self.resumed.get(event.id)
        if approval is not None:  # the call as it was approved, in its part of the message
            yield self._tool_input(event.id, event.name, approval.args, title=approval.summary)
            return
        yield from self._end_text()
        yield from self._open_step()
        yield self._tool_input(event.id, event.name, event.args)

    def on_tool_returned(self, event: ToolReturned) -> Iterator[bytes]:
        resumed = self.resumed.get(event.id)
        if resumed is None:
            yield from self._open_step()
        elif resumed.status == "denied":
            return  # the model is told it did not run; the part says it was denied
        if event.is_error:
            yield _chunk({"type": "tool-output-error", "toolCallId": event.id, "errorText": event.content})
        else:
            yield _chunk({"type": "tool-output-available", "toolCallId": event.id, "output": event.content})

    def on_step_entered(self, event: StepEntered) -> Iterator[bytes]:
        self.moved = True
        yield from self._end_text()
        yield from self._close_step()
        yield self.metadata(step=event.step)

    def on_approval_requested(self, event: ApprovalRequested) -> Iterator[bytes]:
        approval = event.approval
        call_id = approval.call_id or approval.id
        yield from self._end_text()
        yield from self._open_step()
        yield self._tool_input(call_id, approval.tool, approval.args, title=approval.summary)
        descriptor = _approval_descriptor(approval)
        request = {"approvalId": approval.id, "toolCallId": call_id, "approvalDescriptor": descriptor}
        yield _chunk({"type": "tool-approval-request", **request})

    def on_approval_decided(self, event: ApprovalDecided) -> Iterator[bytes]:
        approval = event.approval
        if approval.id not in self.answering:
            return
        call_id = approval.call_id or approval.id
        self.resumed[call_id] = approval
        if approval.status == "denied":  # approved: the call's own events follow
            # Restated, so a client that no longer holds the part still has one to mark.
            yield self._tool_input(call_id, approval.tool, approval.args, title=approval.summary)
            yield _chunk({"type": "tool-output-denied", "toolCallId": call_id})

    # -- the end -------------------------------------------------------------------------------------

    def on_finished(self, result: TurnResult) -> Iterator[bytes]:
        """A failure, or the reply, its data parts and the message's metadata, then ``finish``
        (of a decision that another follows: nothing)."""
        if result.error is not None:
            yield from self.failed(result.error)
        elif self.last:
            yield from self._finished(result)

    def _finished(self, result: TurnResult) -> Iterator[bytes]:
        self.ended = True
        yield from self._reply(result.message)
        for name, data in _reply_data(result):
            yield from self._open_step()
            yield _chunk({"type": f"data-{name}", "data": data})
        diagram = self._diagram(result)
        if diagram is not None:
            yield from self._open_step()
            data = {"flow": result.flow, "step": result.step, "mermaid": diagram}
            yield _chunk({"type": "data-diagram", "id": "diagram", "data": data})
        yield from self._close_step()
        yield self.metadata(
            sessionId=self.session_id,
            flow=result.flow,
            step=result.step,
            completed=result.completed,
            contentType=result.content_type,
            approvals=[approval.id for approval in result.pending],
        )
        reason = "tool-calls" if result.pending else "stop"
        yield _chunk({"type": "finish", "finishReason": reason})
        yield DONE

    def _reply(self, message: str) -> Iterator[bytes]:
        if self.text_id is None:
            yield from self._end_text()
            if message:
                yield from self._text(message)
            return
        streamed = "".join(self.streamed)
        part = self.text_id
        shown = True
        if message.startswith(streamed):
            if len(message) > len(streamed):
                yield _chunk({"type": "text-delta", "id": part, "delta": message[len(streamed) :]})
        elif streamed.rstrip() != message.rstrip():
            shown = False  # what streamed was a draft (an answer asked again, a reply code rewrote)
        yield from self._end_text()
        if not shown and message:
            yield from self._text(message)

    def _diagram(self, result: TurnResult) -> str | None:
        """The flow's Mermaid diagram with the step the conversation moved to (None if it did not)."""
        if not self.moved or result.flow is None or result.step is None:
            return None
        spec = self.flow if self.flow is not None and self.flow.name == result.flow else None
        if spec is None:
            try:
                spec = self.engine.flow(result.flow)
            except RunError:
                return None
        return flow_mermaid(spec, current=result.step)

    def on_lost(self) -> Iterator[bytes]:
        return self.failed(None)

    def failed(self, error: TurnError | None) -> Iterator[bytes]:
        """A turn that failed: ``error``'s words for users (None: it ended without a result). A
        cancelled one ends as the AI SDK ends a stream its server aborted: ``abort``, no
        ``finish``."""
        self.ended = True
        yield from self._end_text()
        yield from self._close_step()
        if error is not None and error.is_a(TurnCancelled):
            problem = {"kind": error.kind, "status": error.status, "retryable": False, "retryAfter": None}
            yield self.metadata(sessionId=self.session_id, error=problem)
            yield _chunk({"type": "abort", "reason": error.message})
            yield DONE
            return
        if error is None:
            problem = {"kind": "internal", "status": 500, "retryable": False, "retryAfter": None}
            text = LOST
        else:
            problem = {
                "kind": error.kind,
                "status": error.status,
                "retryable": error.retryable,
                "retryAfter": error.retry_after,
            }
            text = error.message
        yield self.metadata(sessionId=self.session_id, error=problem)
        yield _chunk({"type": "error", "errorText": text})
        yield _chunk({"type": "finish", "finishReason": "error"})
        yield DONE


# --- the route -------------------------------------------------------------------------------------------


def _decision_refusal(error: TurnError, session_id: str, decision: Decision) -> ApiError:
    if error.field == "approval_id":
        return ApiError(404, "approval_not_found", "No such approval.", session_id=session_id)
    where = decision.where
    return turn_error(
        error, session_id, fields={"reason": f"{where}.reason", "decision": f"{where}.approved"}
    )


async def chat(body: ChatRequest, request: Request) -> Response:
    """One turn of the chat ``id`` (its first creates the session), or the decisions of the tool
    approvals the last message answers and the turn they resume, as a UI message stream.

    Refused with a plain HTTP status before the stream opens, nothing run or stored: a malformed
    body (422; 413 when too large), an unknown flow (404), a busy or ended session (409), an
    unknown approval or one of another principal's chat (404), one decided already (409)."""
    access = access_of(request)  # not a dependency: a busy route (see ``picoflow.server.turns``)
    flow: str = request.path_params["flow"]
    thread = Thread(access, SURFACE, check_thread_id(body.id, "body.id"), body.config)
    asked = _asked(body)
    try:
        spec: FlowSpec | None = access.engine.flow(flow)
    except RunError:
        spec = None
    if isinstance(asked, _Say):
        fields = {"message": asked.where, "attachments": asked.where}
        feed = await thread.turn(flow, asked.text, asked.files, fields=fields)
        writer = _Writer(access.engine, thread.session_id, f"msg-{secrets.token_hex(8)}", spec)
        feeds = alone(feed)
    else:
        # The decisions continue the message that asked for them.
        message_id = body.messages[-1].id or f"msg-{secrets.token_hex(8)}"
        answering = (decision.approval_id for decision in asked)
        writer = _Writer(access.engine, thread.session_id, message_id, spec, answering)
        feeds = await thread.decide(asked, writer, _decision_refusal)
    return writer.respond(feeds, "text/event-stream", STREAM_HEADERS)


def install(app: FastAPI) -> list[str]:
    """Add ``POST /ai-sdk/{flow}``; returns it."""
    state: ServerState = app.state.picoflow
    state.turn_routes.append(
        TurnErrors(
            "/ai-sdk/{flow}",
            statuses="refusals",
            files=True,
            told="A turn that fails once the stream is open ends it with `message-metadata` whose "
            "`error` holds the failure's `kind` and `status`, then an `error` chunk (the words for "
            "users) and `finish`",
        )
    )
    app.router.add_api_route(
        "/ai-sdk/{flow}",
        chat,
        methods=["POST"],
        route_class_override=ApiRoute,
        tags=["Vercel AI SDK"],
        responses={
            **ERRORS,
            200: {"content": {"text/event-stream": {}}, "description": "The UI message stream"},
            403: {"model": ErrorBody, "description": "The caller may not decide the approval"},
        },
        openapi_extra={"parameters": [FLOW_PARAMETER]},
    )
    return ["POST /ai-sdk/{flow}"]
