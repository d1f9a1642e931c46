"""OpenAI Chat Completions: ``GET /v1/models`` lists the flows, ``POST /v1/chat/completions`` with
``model`` = a flow runs a turn, so any OpenAI client (the SDKs, Open WebUI, LibreChat, curl) talks
to a flow.

How picoflow maps onto it:

* model <-> flow: ``GET /v1/models`` lists every registered flow, ``GET /v1/models/{model}`` one.
* conversation <-> session, named explicitly: the ``X-Picoflow-Session`` header or
  ``metadata.session_id`` resumes a session; without either a new one starts. Its id comes back in
  that header and in the response's ``picoflow.session_id`` (and inside ``id``,
  ``chatcmpl-<session id>-<random>``, unique per completion: read the field, don't parse the id).
* completion <-> turn: the turn runs on the *last* user message of ``messages`` (its text, or its
  text parts joined). Chat Completions clients resend the whole conversation every time; those
  earlier messages are never trusted as history: the store is the history, so a client cannot
  put words in the assistant's mouth or rewrite a system prompt.
* approval <-> a structured decision: a turn that ends with calls waiting answers the reply that
  says what waits and lists the approvals in ``picoflow.pending``; ``metadata.approval_id`` with
  ``metadata.decision`` (``approve``/``deny``, and ``metadata.reason``) on a request to the same
  session decides one through ``FlowEngine.decide`` and answers with the resumed turn's reply. A
  user message, whatever it says ("approve"), is a new message: it withdraws what waits.
* identity: the principal comes from the API key only; ``user`` and ``metadata`` never name one.

Streaming (``stream: true``) answers ``chat.completion.chunk`` events: the assistant role, the
reply's text (as the model writes it when its step answers in free text; at the end otherwise),
``finish_reason: "stop"`` with ``picoflow``, the usage with ``stream_options.include_usage``, then
``[DONE]``. The flow's own tool calls are picoflow's, not the client's: no ``tool_calls`` deltas.

Every error, authentication's included, has OpenAI's shape ``{"error": {"message", "type",
"param", "code"}}`` (``code``: picoflow's error kind) with ``x-should-retry`` set, so the SDKs
retry only what may be retried; a failure once the stream is open is a ``data: {"error": ...}``
event, as OpenAI sends it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Final, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StringConstraints,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticCustomError, to_json
from starlette.exceptions import HTTPException

from picoflow.approvals import Approval
from picoflow.events import TextChunk, TurnEvent
from picoflow.exceptions import (
    ApprovalNotFound,
    FlowMismatch,
    FlowNotFound,
    InvalidInput,
    MessageTooLong,
    RunError,
    SessionNotFound,
)
from picoflow.flow import FlowSpec
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnError, TurnFinished, TurnResult
from picoflow.server.errors import DEFAULT_RETRY_AFTER, ApiError, ErrorShape, TurnErrors
from picoflow.server.protocols._requests import Decision
from picoflow.server.protocols._writer import LOST, StreamWriter, alone, speaks
from picoflow.server.readiness import TurnWatch
from picoflow.server.state import Access, ServerState, access_of, authenticate
from picoflow.server.streams import SSE_HEADERS, Feed, open_turn
from picoflow.session import new_session_id
from picoflow.usage import Usage

__all__ = ["SESSION_HEADER", "ChatCompletionRequest", "ChatError", "install"]

logger = logging.getLogger("picoflow.server")

SESSION_HEADER: Final = "X-Picoflow-Session"
"""The header a session id travels in, both ways. Not ``CHAT_SESSION_ID``: that is the PicoFlow
clients' contract (an ended session silently replaced), and a name with underscores is dropped by
common proxies (nginx by default), which would fork a conversation without a word."""

OWNER: Final = "picoflow"
SERVED_SINCE: Final = int(time.time())
"""The ``created`` of every model (flow): when this server's code was loaded."""

# --- the request --------------------------------------------------------------------------------------


def _content(value: Any) -> str | tuple[str | None, ...] | None:
    """A message's content: its text, or its parts as their texts (None for a part of another
    kind: an image, audio, a file). Checked here rather than as a union of models, so a refusal
    names ``messages[i].content`` and the rule, not pydantic's union branches."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise PydanticCustomError("content_type", "must be a string or an array of content parts")
    texts: list[str | None] = []
    for index, part in enumerate(value):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise PydanticCustomError(
                "content_part", "part {index} must be an object with a string 'type'", {"index": index}
            )
        if part["type"] != "text":
            texts.append(None)
            continue
        text = part.get("text")
        if not isinstance(text, str):
            raise PydanticCustomError(
                "content_part", "part {index} is a text part without a string 'text'", {"index": index}
            )
        texts.append(text)
    return tuple(texts)


Content = Annotated[str | tuple[str | None, ...] | None, PlainValidator(_content)]


class ChatMessage(BaseModel):
    """One message of ``messages``. Only the last user message is read; the others are checked
    for their shape (a client that sends a malformed one hears so) and otherwise ignored."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Content = None

    def text(self) -> str | None:
        """The text the message carries (its text parts joined by newlines), or None for none."""
        content = self.content
        if content is None or isinstance(content, str):
            return content
        texts = [text for text in content if text is not None]
        return "\n".join(texts) if texts else None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: StrictBool | None = None
    """Send a last chunk with the turn's usage (and ``usage: null`` on the others)."""


MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions``. Parameters picoflow has no use for (temperature,
    tools, user, ...) are accepted and ignored: the flow decides how its models are called."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    """The flow."""
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    metadata: dict[MetadataKey, MetadataValue] | None = Field(None, max_length=16)
    """OpenAI's limits: 16 keys, keys of 64 characters, values of 512. picoflow reads
    ``session_id``, ``approval_id``, ``decision`` and ``reason``; never an identity."""
    n: int | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n != 1:
            raise PydanticCustomError("one_choice", "picoflow answers with one choice: n must be 1")
        return n


@dataclass(frozen=True, slots=True)
class Ask:
    """What a request asks for, read and checked before the engine is called."""

    flow: str
    session_id: str | None
    session_param: str | None
    """Where the session id came from (``metadata.session_id``; None for the header)."""
    message: str
    message_index: int
    decision: Decision | None
    """A decision ``metadata`` carries, on a pending approval of the session."""
    stream: bool
    include_usage: bool

    @classmethod
    def of(cls, body: ChatCompletionRequest, request: Request) -> Ask:
        metadata = body.metadata or {}
        session_id, session_param = _session_of(request.headers.get(SESSION_HEADER), metadata)
        decision = _decision_of(metadata, session_id)
        message, index = ("", -1) if decision is not None else _last_user_text(body.messages)
        options = body.stream_options
        return cls(
            flow=body.model,
            session_id=session_id,
            session_param=session_param,
            message=message,
            message_index=index,
            decision=decision,
            stream=bool(body.stream),
            include_usage=bool(options and options.include_usage),
        )


def _session_of(header: str | None, metadata: Mapping[str, str]) -> tuple[str | None, str | None]:
    named = metadata.get("session_id") or None
    header = header or None
    if header is not None and named is not None and header != named:
        raise ChatError(
            400,
            f"The {SESSION_HEADER} header and metadata.session_id name different sessions.",
            param="metadata.session_id",
            code="invalid_value",
        )
    if header is not None:
        return header, None
    return named, None if named is None else "metadata.session_id"


def _decision_of(metadata: Mapping[str, str], session_id: str | None) -> Decision | None:
    approval_id, decision = metadata.get("approval_id"), metadata.get("decision")
    if approval_id is None and decision is None:
        if "reason" in metadata:
            raise ChatError(
                400,
                "metadata.reason goes with a decision (metadata.approval_id and metadata.decision).",
                param="metadata.reason",
                code="invalid_value",
            )
        return None
    if approval_id is None:
        raise _missing("metadata.approval_id", "a decision names the approval it decides")
    if decision not in ("approve", "deny"):
        raise ChatError(
            400,
            "Invalid 'metadata.decision': it must be 'approve' or 'deny'.",
            param="metadata.decision",
            code="invalid_value",
        )
    if session_id is None:
        raise _missing("metadata.session_id", f"a decision is taken in a session ({SESSION_HEADER} header)")
    return Decision(approval_id, decision, metadata.get("reason"))


def _last_user_text(messages: list[ChatMessage]) -> tuple[str, int]:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "user":
            continue
        text = message.text()
        if text is None:
            raise ChatError(
                400,
                "The last user message has no text: picoflow reads text (images, audio and files "
                "are not taken here).",
                param=f"messages[{index}].content",
                code="invalid_value",
            )
        return text, index
    raise ChatError(400, "messages holds no user message.", param="messages", code="invalid_value")


def _missing(param: str, why: str) -> ChatError:
    return ChatError(
        400, f"Missing required parameter: '{param}' ({why}).", param=param, code="missing_required_parameter"
    )


# --- errors -------------------------------------------------------------------------------------------


class ChatError(Exception):
    """A refusal or failure in OpenAI's error shape, with its status and retry hints."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retryable = retryable
        if status == 503 and retry_after is None:
            retry_after = DEFAULT_RETRY_AFTER
        self.retry_after = retry_after

    @property
    def type(self) -> str:
        return "server_error" if self.status >= 500 else "invalid_request_error"

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        # The SDKs retry 408, 409, 429 and 5xx unless told: a session that ended is not worth a retry.
        headers = {"x-should-retry": "true" if self.retryable else "false"}
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="picoflow"'
        return Response(to_json(self.body()), self.status, headers, media_type="application/json")

    def event(self) -> bytes:
        return b"data: " + to_json(self.body()) + b"\n\n"

    @classmethod
    def of(cls, error: ApiError) -> ChatError:
        """An error the server's own code raised (authentication, an engine call)."""
        code = "invalid_api_key" if error.status == 401 else error.kind
        return cls(
            error.status, error.message, code=code, retryable=error.retryable, retry_after=error.retry_after
        )


def _model_not_found(flow: str) -> ChatError:
    return ChatError(
        404,
        f"The model '{flow}' does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


def _internal() -> ChatError:
    return ChatError(500, LOST, code="internal")


_DECISION_PARAMS: Final = {"decision": "metadata.decision", "reason": "metadata.reason"}


def _turn_failure(error: TurnError, ask: Ask) -> ChatError:
    """The OpenAI error of a refused or failed turn (or decision): its status comes from its error
    class, input refused is a 400 (413 when too long) naming the parameter it came in."""
    if error.is_a(FlowNotFound):
        return _model_not_found(ask.flow)
    if error.is_a(SessionNotFound) or error.field == "session_id":
        return ChatError(404, "No such session.", param=ask.session_param, code="session_not_found")
    if error.is_a(ApprovalNotFound) or error.field == "approval_id":
        return ChatError(404, "No such approval.", param="metadata.approval_id", code="approval_not_found")
    if error.is_a(InvalidInput):
        if error.field == "message":
            param: str | None = f"messages[{ask.message_index}].content"
        else:
            param = _DECISION_PARAMS.get(error.field or "")
        status = error.status if error.is_a(MessageTooLong) else 400
        return ChatError(status, error.message, param=param, code=error.kind)
    param = "model" if error.is_a(FlowMismatch) else None
    return ChatError(
        error.status,
        error.message,
        param=param,
        code=error.kind,
        retryable=error.retryable,
        retry_after=error.retry_after,
    )


def _invalid_body(exc: ValidationError) -> ChatError:
    """The first problem of a body pydantic refused, as OpenAI names one: the parameter and the
    rule, never the value; the others follow in the message."""
    problems = exc.errors(include_url=False, include_input=False, include_context=False)
    first = problems[0]
    if first["type"] == "json_invalid":
        return ChatError(400, "The request body is not valid JSON.", code="invalid_json")
    described = []
    for problem in problems:
        param = _param(problem["loc"])
        where = f"'{param}'" if param else "the body"
        if problem["type"] == "missing":
            described.append(f"Missing required parameter: {where}.")
        else:
            described.append(f"Invalid {where}: {problem['msg']}.")
    kind = first["type"]
    code = (
        "missing_required_parameter"
        if kind == "missing"
        else "invalid_type"
        if kind.endswith("_type")
        else "invalid_value"
    )
    return ChatError(400, " ".join(described), param=_param(first["loc"]), code=code)


def _param(loc: tuple[int | str, ...]) -> str | None:
    """``messages[0].content`` from pydantic's ``("messages", 0, "content")``; a metadata key too
    long is named by ``metadata`` alone."""
    param = ""
    for index, part in enumerate(loc):
        if isinstance(part, int):
            param += f"[{part}]"
        elif part == "[key]":
            return _param(loc[: index - 1])
        else:
            param = f"{param}.{part}" if param else part
    return param or None


# --- the routes ---------------------------------------------------------------------------------------


Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


class ChatRoute(APIRoute):
    """A route of this protocol: it authenticates, reads its request itself and answers every
    failure in OpenAI's shape (the app's handlers would answer in picoflow's). FastAPI only routes
    and documents it."""

    def get_route_handler(self) -> Endpoint:
        endpoint: Endpoint = self.endpoint

        async def answer(request: Request) -> Response:
            try:
                authenticate(request)
                return await endpoint(request)
            except ChatError as exc:
                return exc.response()
            except ApiError as exc:
                return ChatError.of(exc).response()
            except HTTPException as exc:
                # The body limits (413, 408), raised while the body is read.
                detail = exc.detail if isinstance(exc.detail, str) else "the request was refused"
                code = "body_too_large" if exc.status_code == 413 else "request_timeout"
                return ChatError(exc.status_code, detail, code=code).response()

        return answer


async def list_models(request: Request) -> Response:
    """Every flow, as OpenAI lists models."""
    access = access_of(request)
    data = [_model(spec.name) for spec in access.engine.flows]
    return Response(to_json({"object": "list", "data": data}), media_type="application/json")


async def get_model(request: Request) -> Response:
    """One flow, as OpenAI describes a model; 404 ``model_not_found`` for no such flow."""
    name: str = request.path_params["model"]
    try:
        access_of(request).engine.flow(name)
    except FlowNotFound:
        raise _model_not_found(name) from None
    return Response(to_json(_model(name)), media_type="application/json")


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": SERVED_SINCE, "owned_by": OWNER}


async def chat_completions(request: Request) -> Response:
    """A turn of the flow ``model`` on the last user message, or a decision (``metadata``); streamed
    with ``stream: true``."""
    access = access_of(request)
    try:
        body = ChatCompletionRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        raise _invalid_body(exc) from None
    ask = Ask.of(body, request)
    if ask.stream:
        return await _streamed(access, ask)
    with TurnWatch(access.state.readiness):
        if ask.decision is not None:
            assert ask.session_id is not None  # a decision names its session (``_decision_of``)
            result = await ask.decision.take(access.engine, ask.session_id, access.caller)
        else:
            result = await access.engine.run(ask.flow, ask.message, ask.session_id, caller=access.caller)
    if result.error is not None:
        raise _turn_failure(result.error, ask)
    session_id = result.session_id or ""
    completion = {
        "id": _completion_id(session_id),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": ask.flow,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.message, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(result.usage),
        "picoflow": _picoflow(result),
    }
    return Response(to_json(completion), media_type="application/json", headers={SESSION_HEADER: session_id})


def _completion_id(session_id: str) -> str:
    return f"chatcmpl-{session_id}-{secrets.token_hex(4)}"


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _picoflow(result: TurnResult) -> dict[str, Any]:
    """What picoflow adds to a completion: the session and where the conversation stands."""
    return {
        "session_id": result.session_id,
        "step": result.step,
        "completed": result.completed,
        "content_type": result.content_type,
        "pending": [_pending(approval) for approval in result.pending],
    }


def _pending(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.id,
        "tool": approval.tool,
        "summary": approval.summary,
        "approvers": approval.approvers.describe(),
        "expires_at": approval.expires_at,
    }


# --- streaming ----------------------------------------------------------------------------------------


async def _streamed(access: Access, ask: Ask) -> Response:
    """Start the turn (or decision) and answer its chunks once the engine accepted it; what it
    refuses before is a plain HTTP error, with nothing stored."""
    state, caller = access.state, access.caller
    created = False
    if ask.decision is not None:
        assert ask.session_id is not None
        session_id = ask.session_id
        feed = await ask.decision.open(state, session_id, caller)
    else:
        session_id = ask.session_id or await _new_session(access, ask.flow)
        created = ask.session_id is None
        feed = await open_turn(state, ask.flow, ask.message, session_id, caller)
    refused = feed.refused
    if refused is not None or feed.first is None:
        if created:
            await _discard(access, session_id)
        raise _internal() if refused is None else _turn_failure(refused, ask)
    writer = _Chunks(ask, session_id, _spec(access, ask.flow))
    feeds = alone(_Kept(access, feed, session_id) if created else feed)
    return writer.respond(feeds, "text/event-stream", {**SSE_HEADERS, SESSION_HEADER: session_id})


async def _new_session(access: Access, flow: str) -> str:
    """A new session of ``flow`` whose id is known before its first turn, so the stream's headers
    and every chunk carry it (the engine would name the session only with the turn's result)."""
    session_id = new_session_id()
    try:
        await access.engine.create_session(flow, caller=access.caller, session_id=session_id)
    except FlowNotFound:
        raise _model_not_found(flow) from None
    except RunError as exc:
        raise ChatError(
            exc.status, exc.public_text, code=exc.kind, retryable=exc.retryable, retry_after=exc.retry_after
        ) from None
    return session_id


async def _discard(access: Access, session_id: str) -> None:
    """Drop the session made for a first turn that did not happen (refused before it ran, or lost
    to an internal error)."""
    try:
        await access.engine.delete_session(session_id, principal=access.caller.principal)
    except RunError:
        logger.exception("picoflow.server: could not drop session %s of a failed first turn", session_id)


def _spec(access: Access, flow: str) -> FlowSpec | None:
    try:
        return access.engine.flow(flow)
    except FlowNotFound:
        return None


class _Chunks(StreamWriter):
    """A turn as ``chat.completion.chunk`` events.

    The text a model writes in a free-text step streams as it comes, a part of each chunk; the
    reply is the text the turn ends with, so text written before a tool call stays where it was
    and the reply follows it after a blank line. Whatever was not streamed (a reply written by
    code, a structured step's) is sent whole at the end."""

    name = "a chat completion"

    def __init__(self, ask: Ask, session_id: str, flow: FlowSpec | None) -> None:
        self.ask = ask
        self.flow = flow
        self.head: dict[str, Any] = {
            "id": _completion_id(session_id),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": ask.flow,
        }
        if ask.include_usage:
            self.head["usage"] = None
        self.streamed = False  # any text sent
        self.segment = ""  # the text sent since the last tool call or step change

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + to_json({**self.head, "choices": [choice], **extra}) + b"\n\n"

    def opening(self) -> bytes:
        return self.chunk({"role": "assistant", "content": ""})

    def broken(self) -> bytes:
        return _internal().event()

    def on_text(self, event: TextChunk) -> Iterator[bytes]:
        if event.parent is not None or not speaks(self.flow, event.step) or not event.text:
            return
        text = event.text
        if self.streamed and not self.segment:
            text = "\n\n" + text  # a new stretch of text after the model worked
        yield self.chunk({"content": text})
        self.streamed, self.segment = True, self.segment + event.text

    def on_other(self, event: TurnEvent) -> Iterable[bytes]:
        self.segment = ""  # a step, a tool call, an approval: text after it is a new stretch
        return ()

    def on_loading(self, status: LoadStatus) -> Iterator[bytes]:
        return self.on_beat()

    def on_finished(self, result: TurnResult) -> Iterator[bytes]:
        self.ended = True
        if result.error is not None:
            yield _turn_failure(result.error, self.ask).event()
            return
        # The end in one write: the rest of the reply, the stop, the usage and [DONE].
        reply, segment = result.message, self.segment
        if reply.startswith(segment) and (segment or not self.streamed):
            rest = reply[len(segment) :]
        else:
            rest = ("\n\n" if self.streamed else "") + reply
        if rest:
            yield self.chunk({"content": rest})
        yield self.chunk({}, "stop", picoflow=_picoflow(result))
        if self.ask.include_usage:
            yield b"data: " + to_json({**self.head, "choices": [], "usage": _usage(result.usage)}) + b"\n\n"
        yield b"data: [DONE]\n\n"

    def on_lost(self) -> Iterator[bytes]:
        self.ended = True
        yield _internal().event()


class _Kept:
    """The feed of a first turn, whose session is dropped before the turn's end is told when the
    turn does not keep it: lost, refused or cancelled (one that ran and failed keeps its session,
    as the engine keeps it: its error and timeline are filed with it)."""

    __slots__ = ("access", "feed", "session_id")

    def __init__(self, access: Access, feed: Feed, session_id: str) -> None:
        self.access = access
        self.feed = feed
        self.session_id = session_id

    async def __aiter__(self) -> AsyncIterator[object]:
        async for item in self.feed:
            error = item.result.error if isinstance(item, TurnFinished) else None
            failure = None if error is None else error.error_class
            if item is None or (failure is not None and not (failure.recorded and failure.keeps_session)):
                await _discard(self.access, self.session_id)
            yield item

    def abandon(self) -> None:
        self.feed.abandon()
        state = self.access.state
        dropping = asyncio.ensure_future(self._drop_unless_kept())
        state.streams.add(dropping)
        dropping.add_done_callback(state.streams.discard)

    async def _drop_unless_kept(self) -> None:
        """Once the abandoned first turn is over: its session is dropped unless the turn committed."""
        await asyncio.wait({self.feed.task})
        access = self.access
        try:
            session = await access.engine.get_session(self.session_id, principal=access.caller.principal)
        except RunError:
            return
        if session is not None and session.turns == 0:
            await _discard(access, self.session_id)


# --- the table ----------------------------------------------------------------------------------------

_ERROR_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"enum": ["invalid_request_error", "server_error"]},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    status: {"description": text, "content": {"application/json": {"schema": _ERROR_SCHEMA}}}
    for status, text in {
        400: "Invalid request (invalid_request_error; param names the parameter)",
        401: "Missing or invalid API key (invalid_api_key)",
        404: "Unknown model (flow), session or approval",
        409: "The session has ended, is busy or belongs to another flow, or the approval was decided",
        413: "Message or body too large, or the conversation no longer fits the model's context window",
        503: "Model provider unavailable (see Retry-After)",
    }.items()
}

_REQUEST_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "description": "The flow (GET /v1/models)."},
        "messages": {
            "type": "array",
            "minItems": 1,
            "description": "Only the last user message is read: the session is the history.",
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {
                    "role": {"enum": ["system", "developer", "user", "assistant", "tool", "function"]},
                    "content": {
                        "anyOf": [
                            {"type": "string"},
                            {"type": "array", "items": {"type": "object", "required": ["type"]}},
                            {"type": "null"},
                        ]
                    },
                },
            },
        },
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "metadata": {
            "type": "object",
            "maxProperties": 16,
            "additionalProperties": {"type": "string", "maxLength": 512},
            "description": (
                "session_id resumes a session (or the X-Picoflow-Session header); approval_id with "
                "decision ('approve' or 'deny') and an optional reason decides a pending approval."
            ),
        },
        "n": {"type": "integer", "enum": [1]},
    },
}


def _served_models(flows: list[str], document: dict[str, Any]) -> None:
    """The ``model`` a chat completion may name: one of the served flows."""
    chat = document.get("paths", {}).get("/v1/chat/completions", {}).get("post", {})
    body = chat.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if flows and "model" in body.get("properties", {}):
        body["properties"]["model"] = {**body["properties"]["model"], "enum": flows}


def install(app: FastAPI) -> list[str]:
    """Add this protocol's routes to ``app``; returns them as ``METHOD path`` strings."""
    add = partial(app.router.add_api_route, route_class_override=ChatRoute, tags=["OpenAI Chat Completions"])
    # What the app itself answers on these paths (an unknown path or method, a body over the
    # limit before any route runs) is in OpenAI's shape too.
    state: ServerState = app.state.picoflow
    for prefix in ("/v1/chat/", "/v1/models"):
        state.error_shapes.append(
            ErrorShape(prefix, _ERROR_SCHEMA, lambda error: ChatError.of(error).response())
        )
    state.document_edits.append(partial(_served_models, [spec.name for spec in state.engine.flows]))
    state.turn_routes.append(
        TurnErrors(
            "/v1/chat/completions",
            input_status=400,
            told='Streamed, a failure once the stream is open is a `data: {"error": ...}` event '
            "(`code`: the failure's kind)",
        )
    )
    add("/v1/models", list_models, methods=["GET"], summary="List the flows as models")
    add(
        "/v1/models/{model}",
        get_model,
        methods=["GET"],
        summary="A flow as a model",
        openapi_extra={
            "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}]
        },
        responses={404: _ERRORS[404]},
    )
    add(
        "/v1/chat/completions",
        chat_completions,
        methods=["POST"],
        summary="A turn of a flow, as a chat completion",
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": _REQUEST_SCHEMA}}},
            "parameters": [
                {
                    "name": SESSION_HEADER,
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "The session to continue (else metadata.session_id; else a new one).",
                }
            ],
        },
        responses={
            200: {
                "content": {"text/event-stream": {}},
                "headers": {
                    SESSION_HEADER: {
                        "schema": {"type": "string"},
                        "description": "The session the turn ran in: send it back to continue.",
                    }
                },
            },
            **_ERRORS,
        },
    )
    return ["GET /v1/models", "GET /v1/models/{model}", "POST /v1/chat/completions"]
