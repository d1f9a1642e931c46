"""The HTTP routes: PicoFlow-compatible ``/ai/*``, the ``/v1`` resource API and its event streams.

Every turn goes through ``FlowEngine.run``, which never raises for run-time failures; a failed
``TurnResult`` is turned into an ``ApiError`` with the status a client can act on, and the stored
session is exactly as it was before the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from picoflow.context import INJECTED_NAMES, Caller
from picoflow.diagram import flow_mermaid, flow_svg
from picoflow.engine import SESSION_ID, FlowEngine, TurnResult, check_text
from picoflow.exceptions import FlowMismatch, FlowNotFound, InvalidInput, SessionCompleted
from picoflow.flow import FlowSpec
from picoflow.models._readiness import Phase
from picoflow.server.auth import Authenticator, AuthError
from picoflow.server.readiness import Readiness, ReadyResponse, unavailable
from picoflow.server.schemas import (
    DEFAULT_RETRY_AFTER,
    ApiError,
    EndResponse,
    ErrorBody,
    FlowOut,
    HealthResponse,
    RunRequest,
    RunResponse,
    ServerSettings,
    SessionOut,
    SessionSummary,
    TurnRequest,
    TurnResponse,
    turn_error,
)
from picoflow.server.streams import event_stream
from picoflow.session import Session, SessionStatus
from picoflow.sessions.health import store_check

logger = logging.getLogger("picoflow.server")

SESSION_HEADER = "CHAT_SESSION_ID"


@dataclass(slots=True)
class ServerState:
    """What the routes share, kept on ``app.state.picoflow``."""

    engine: FlowEngine
    settings: ServerSettings
    auth: Authenticator
    max_message_chars: int
    readiness: Readiness
    """The models the served flows need loaded, and how far they are."""
    streams: set[asyncio.Task[TurnResult]] = field(default_factory=set)
    """Turns still running for an event stream (kept referenced so a disconnect cannot drop them)."""


async def state_of(request: Request) -> ServerState:
    state: ServerState = request.app.state.picoflow
    return state


StateDep = Annotated[ServerState, Depends(state_of)]


async def caller_of(request: Request, state: StateDep) -> Caller:
    try:
        return state.auth.caller(request)
    except AuthError as exc:
        raise ApiError(401, "unauthorized", str(exc)) from None


CallerDep = Annotated[Caller, Depends(caller_of)]
Render = Annotated[Literal["html"] | None, Query(description="'html' adds safe HTML renderings of replies.")]

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        401: "Missing or invalid API key",
        404: "Unknown flow or session (or a session of another principal)",
        409: "Concurrent turn on the session, or the session has ended",
        413: "Message or request body too large",
        422: "Malformed request",
        503: "Model provider unavailable (see Retry-After)",
    }.items()
}

router = APIRouter()


MAX_OFFSET = 1_000_000_000
"""Largest ``offset`` a listing accepts: far beyond any real listing, well inside a 64-bit integer."""

# --- helpers -------------------------------------------------------------------------------------------


def _with_config(caller: Caller, config: Mapping[str, Any] | None) -> Caller:
    # The identity comes from authentication only, not even through the free-form config.
    clean = {key: value for key, value in (config or {}).items() if key not in INJECTED_NAMES}
    return replace(caller, config=clean)


def _check_message(state: ServerState, message: str | None) -> str:
    if message is None or not message.strip():
        raise ApiError(
            422, "invalid_input", "message is empty", fields=[("body.message", "must not be empty")]
        )
    if len(message.strip()) > state.max_message_chars:
        raise ApiError(
            413,
            "message_too_long",
            f"message is longer than {state.max_message_chars} characters",
            fields=[("body.message", f"at most {state.max_message_chars} characters")],
        )
    try:
        # The engine's own rule, so HTTP, CLI and library callers are refused alike.
        check_text(message, "message")
    except InvalidInput as error:
        raise ApiError(422, error.kind, error.message, fields=[("body.message", error.message)]) from None
    return message


def _flow(state: ServerState, name: str) -> FlowSpec:
    try:
        return state.engine.flow(name)
    except FlowNotFound:
        raise ApiError(404, "flow_not_found", "No such flow.") from None


@asynccontextmanager
async def _store_errors() -> AsyncIterator[None]:
    """A failing store is a 503 the client may retry, not an anonymous 500; the cause is only logged."""
    try:
        yield
    except ApiError:
        raise
    except Exception:
        logger.exception("picoflow.server: the session store failed")
        raise ApiError(
            503,
            "store_error",
            "The conversation store is unavailable. Please try again.",
            retryable=True,
            retry_after=DEFAULT_RETRY_AFTER,
        ) from None


async def _owned_session(state: ServerState, caller: Caller, session_id: str) -> Session:
    """The session if it exists and belongs to the caller; 404 otherwise (never revealing which)."""
    session = None
    if SESSION_ID.match(session_id):
        async with _store_errors():
            session = await state.engine.get_session(session_id, principal=caller.principal)
    if session is None:
        raise ApiError(404, "session_not_found", "No such session.", session_id=session_id)
    return session


def _svg(body: str) -> Response:
    return Response(body, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})


# --- PicoFlow-compatible routes ----------------------------------------------------------------------

COMPAT: list[str | Enum] = ["PicoFlow compatible"]


@router.get("/healthcheck", tags=COMPAT, response_model=HealthResponse)
async def healthcheck() -> HealthResponse:
    return HealthResponse(timestamp=datetime.now(UTC).isoformat())


@router.get(
    "/readyz",
    tags=COMPAT,
    response_model=ReadyResponse,
    responses={
        503: {
            "model": ReadyResponse,
            "description": "A model is still loading or failed to load, or the session store is down",
        }
    },
)
async def readyz(state: StateDep) -> JSONResponse:
    """Whether the server can answer turns now: 200 once every model the served flows need is
    loaded (at once for hosted models), else 503 with the progress (``downloading`` with bytes
    done and total, ``checking``, ``loading``, ``warming``) or the reason it ``failed``; also 503
    while the session store does not answer its ping (``store``: ``unavailable``)."""
    status = state.readiness.status()
    check = store_check(state.engine.store)
    store = None if check is None else await check.health()
    body = ReadyResponse.model_validate({**status.as_dict(), "store": store}).model_dump(
        mode="json", exclude_none=True
    )
    code = 200 if status.phase is Phase.READY and store != "unavailable" else 503
    return JSONResponse(body, status_code=code, headers={"Cache-Control": "no-store"})


async def _ready(state: ServerState, flow: str, session_id: str | None) -> None:
    """Hold a turn until the models of its flow are loaded; a failed load fails it clearly."""
    status = await state.readiness.wait(flow)
    if status.phase is Phase.FAILED:
        raise unavailable(session_id)


@router.get("/ai/flows", tags=COMPAT, response_model=list[str], responses=ERRORS)
async def ai_flows(state: StateDep, caller: CallerDep) -> list[str]:
    return [spec.name for spec in state.engine.flows]


@router.post("/ai/run", tags=COMPAT, response_model=RunResponse, responses=ERRORS)
async def ai_run(body: RunRequest, request: Request, state: StateDep, caller: CallerDep) -> Response:
    """One turn. The session id travels in the ``CHAT_SESSION_ID`` header both ways; a reply whose
    content type is not ``text/plain`` is sent as that raw body instead of the JSON envelope.

    A session that has ended (or belongs to another flow) is replaced by a new one, as PicoFlow
    clients expect: they keep sending the last id they saw.
    """
    session_id = request.headers.get(SESSION_HEADER) or None
    message = _check_message(state, body.message)
    caller = _with_config(caller, body.config)
    await _ready(state, body.flowName, session_id)
    result = await state.engine.run(body.flowName, message, session_id, caller=caller)
    if result.error is not None and session_id and result.error.is_a(SessionCompleted, FlowMismatch):
        result = await state.engine.run(body.flowName, message, None, caller=caller)
    if result.error is not None:
        raise turn_error(result.error, result.session_id)
    headers = {SESSION_HEADER: result.session_id or ""}
    if result.content_type.split(";", 1)[0].strip().lower() != "text/plain":
        return Response(result.message, media_type=result.content_type, headers=headers)
    envelope = RunResponse(
        success=True,
        completed=result.completed,
        message=result.message,
        session=result.session_id,
        contentType=result.content_type,
    )
    return JSONResponse(envelope.model_dump(), headers=headers)


@router.post("/ai/end", tags=COMPAT, response_model=EndResponse, responses=ERRORS)
async def ai_end(request: Request, state: StateDep, caller: CallerDep) -> EndResponse:
    """End a conversation: the session named by ``CHAT_SESSION_ID`` is deleted."""
    session_id = request.headers.get(SESSION_HEADER)
    if not session_id:
        raise ApiError(
            422,
            "invalid_input",
            f"send the session id in the {SESSION_HEADER} header",
            fields=[(f"header.{SESSION_HEADER}", "required")],
        )
    await _owned_session(state, caller, session_id)
    async with _store_errors():
        deleted = await state.engine.delete_session(session_id, principal=caller.principal)
    if not deleted:
        raise ApiError(404, "session_not_found", "No such session.", session_id=session_id)
    return EndResponse(success=True, session=session_id)


# --- /v1 resource API ------------------------------------------------------------------------------

FLOWS: list[str | Enum] = ["flows"]
SESSIONS: list[str | Enum] = ["sessions"]
TURN_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {
        "content": {"text/event-stream": {}},
        "description": "The turn's result, or its events when streamed",
    },
}


@router.get("/v1/flows", tags=FLOWS, response_model=list[FlowOut], responses=ERRORS)
async def list_flows(state: StateDep, caller: CallerDep) -> list[FlowOut]:
    """Every registered flow with its steps and transitions."""
    return [FlowOut.from_spec(spec) for spec in state.engine.flows]


@router.get("/v1/flows/{flow}", tags=FLOWS, response_model=FlowOut, responses=ERRORS)
async def get_flow(flow: str, state: StateDep, caller: CallerDep) -> FlowOut:
    return FlowOut.from_spec(_flow(state, flow))


@router.get("/v1/flows/{flow}/diagram.svg", tags=FLOWS, response_class=Response, responses=ERRORS)
async def flow_diagram(flow: str, state: StateDep, caller: CallerDep, step: str | None = None) -> Response:
    """The flow drawn as SVG; ``step`` is highlighted when given."""
    return _svg(flow_svg(_flow(state, flow), current=step))


@router.get("/v1/flows/{flow}/diagram.mmd", tags=FLOWS, response_class=PlainTextResponse, responses=ERRORS)
async def flow_diagram_mermaid(flow: str, state: StateDep, caller: CallerDep) -> PlainTextResponse:
    """The flow as a Mermaid flowchart."""
    return PlainTextResponse(flow_mermaid(_flow(state, flow)))


@router.post(
    "/v1/flows/{flow}/sessions",
    tags=SESSIONS,
    status_code=201,
    response_model=TurnResponse,
    responses=TURN_RESPONSES,
)
async def create_session(
    flow: str, body: TurnRequest, request: Request, state: StateDep, caller: CallerDep, render: Render = None
) -> Response:
    """Start a conversation with its first message; the reply carries the new session id."""
    _flow(state, flow)
    return await _turn(request, state, caller, flow, None, body, render)


@router.get("/v1/sessions", tags=SESSIONS, response_model=list[SessionSummary], responses=ERRORS)
async def list_sessions(
    state: StateDep,
    caller: CallerDep,
    flow: str | None = None,
    status: SessionStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    # Bounded so a huge offset is a 422, not an overflow inside the store's 64-bit integers.
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> list[SessionSummary]:
    """The caller's own sessions, most recent first."""
    async with _store_errors():
        infos = await state.engine.store.list_sessions(
            flow=flow, status=status, principal=caller.principal, limit=limit, offset=offset
        )
    return [
        SessionSummary(
            id=info.id,
            flow=info.flow,
            status=info.status,
            step=info.current_step,
            turns=info.turns,
            created_at=info.created_at,
            updated_at=info.updated_at,
        )
        for info in infos
    ]


@router.get("/v1/sessions/{session_id}", tags=SESSIONS, response_model=SessionOut, responses=ERRORS)
async def get_session(
    session_id: str, state: StateDep, caller: CallerDep, transcript: bool = True, render: Render = None
) -> SessionOut:
    """Status, current step, steps visited, usage, warnings and (by default) the transcript."""
    session = await _owned_session(state, caller, session_id)
    async with _store_errors():
        messages = await state.engine.store.transcript(session_id) if transcript else None
    return SessionOut.from_session(session, messages, render)


@router.delete("/v1/sessions/{session_id}", tags=SESSIONS, status_code=204, responses=ERRORS)
async def delete_session(session_id: str, state: StateDep, caller: CallerDep) -> Response:
    await _owned_session(state, caller, session_id)
    async with _store_errors():
        deleted = await state.engine.delete_session(session_id, principal=caller.principal)
    if not deleted:
        raise ApiError(404, "session_not_found", "No such session.", session_id=session_id)
    return Response(status_code=204)


@router.post(
    "/v1/sessions/{session_id}/turns", tags=SESSIONS, response_model=TurnResponse, responses=TURN_RESPONSES
)
async def add_turn(
    session_id: str,
    body: TurnRequest,
    request: Request,
    state: StateDep,
    caller: CallerDep,
    render: Render = None,
) -> Response:
    """Continue a conversation. ``stream: true`` (or ``Accept: text/event-stream``) streams the turn."""
    session = await _owned_session(state, caller, session_id)
    return await _turn(request, state, caller, session.flow, session_id, body, render)


@router.get("/v1/sessions/{session_id}/diagram.svg", tags=SESSIONS, response_class=Response, responses=ERRORS)
async def session_diagram(session_id: str, state: StateDep, caller: CallerDep) -> Response:
    """The session's flow with its current step highlighted and the steps it visited shaded."""
    session = await _owned_session(state, caller, session_id)
    spec = _flow(state, session.flow)
    return _svg(flow_svg(spec, current=session.current_step, visited=session.sequence))


async def _turn(
    request: Request,
    state: ServerState,
    caller: Caller,
    flow: str,
    session_id: str | None,
    body: TurnRequest,
    render: str | None,
) -> Response:
    message = _check_message(state, body.message)
    caller = _with_config(caller, body.config)
    if body.stream or "text/event-stream" in request.headers.get("accept", ""):
        return event_stream(state, flow, message, session_id, caller, render)
    await _ready(state, flow, session_id)
    result = await state.engine.run(flow, message, session_id, caller=caller)
    if result.error is not None:
        raise turn_error(result.error, session_id)
    payload = TurnResponse.from_result(result, flow, render).model_dump(mode="json")
    if session_id is None:
        return JSONResponse(
            payload, status_code=201, headers={"Location": f"/v1/sessions/{result.session_id}"}
        )
    return JSONResponse(payload)
