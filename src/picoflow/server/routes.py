"""The ``/v1`` flows and sessions, and the table of every route the application serves.

Routes translate requests into ``FlowEngine`` calls and results into responses, nothing more: the
engine checks input, owns sessions and runs turns. Turns are in ``picoflow.server.turns``,
approvals in ``picoflow.server.approvals``, the PicoFlow-compatible routes in
``picoflow.server.compat``.
"""

from __future__ import annotations

from enum import Enum
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from picoflow.approvals import visible_to
from picoflow.diagram import flow_mermaid, flow_svg
from picoflow.engine import MAX_OFFSET
from picoflow.exceptions import FlowNotFound
from picoflow.flow import FlowSpec
from picoflow.server import approvals, compat, handoffs
from picoflow.server.errors import ApiError, engine_call, not_found
from picoflow.server.readiness import ReadyResponse
from picoflow.server.schemas import (
    CallerOut,
    CancelOut,
    ErrorBody,
    FlowOut,
    RunResponse,
    SessionOut,
    SessionSummary,
    TurnResponse,
)
from picoflow.server.state import ERRORS, Access, AccessDep, ApiRoute, may_inspect
from picoflow.server.streams import follow_stream
from picoflow.server.turns import RENDER_DOC, TurnRoute, add_turn, create_session, turn_parameters
from picoflow.server.uploads import get_attachment, list_attachments
from picoflow.session import Session, SessionStatus
from picoflow.timeline import SessionTimeline

__all__ = ["install"]


def _flow(access: Access, name: str) -> FlowSpec:
    try:
        return access.engine.flow(name)
    except FlowNotFound:
        raise ApiError(404, "flow_not_found", "No such flow.") from None


async def _session(access: Access, session_id: str) -> Session:
    """The caller's session; 404 for one that is unknown or another principal's (never saying which)."""
    async with engine_call(session_id):
        session = await access.engine.get_session(session_id, principal=access.caller.principal)
    if session is None:
        raise not_found(session_id)
    return session


def _svg(body: str) -> Response:
    return Response(body, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})


# --- the caller ----------------------------------------------------------------------------------------


async def get_caller(request: Request, access: AccessDep) -> CallerOut:
    """Who the server takes the caller for, and what it may do beyond its own conversations: read
    timelines (``inspect``, as ``GET /v1/sessions/{id}/timeline`` and the turn streams' ``timeline``
    events allow) and serve as staff (``staff``, the handoff routes). A page shows its developer
    view and its staff queue from this, and offers a decision on an approval only to a caller the
    approval admits (its own customer, or one of ``roles``); the decision route still refuses any
    other."""
    caller = access.caller
    return CallerOut(
        principal=caller.principal,
        inspect=may_inspect(access, request),
        staff=access.engine.staff_visibility in caller.visibilities,
        roles=sorted(caller.visibilities),
    )


# --- flows ---------------------------------------------------------------------------------------------


async def list_flows(access: AccessDep) -> list[FlowOut]:
    """Every registered flow with its steps and transitions."""
    return [FlowOut.from_spec(spec) for spec in access.engine.flows]


async def get_flow(flow: str, access: AccessDep) -> FlowOut:
    return FlowOut.from_spec(_flow(access, flow))


async def flow_diagram(flow: str, access: AccessDep, step: str | None = None) -> Response:
    """The flow drawn as SVG; ``step`` is highlighted when given."""
    return _svg(flow_svg(_flow(access, flow), current=step))


async def flow_diagram_mermaid(flow: str, access: AccessDep) -> PlainTextResponse:
    """The flow as a Mermaid flowchart."""
    return PlainTextResponse(flow_mermaid(_flow(access, flow)))


# --- sessions ------------------------------------------------------------------------------------------


async def list_sessions(
    access: AccessDep,
    flow: Annotated[str | None, Query(description="Only this flow's sessions.")] = None,
    status: Annotated[
        SessionStatus | None,
        Query(
            description="Only sessions in this status: `awaiting_approval` waits for a decision on "
            "an approval, `awaiting_human` for a person (a handoff)."
        ),
    ] = None,
    errors: Annotated[
        bool | None,
        Query(
            description="`true`: only sessions with an error on record (a turn that failed); "
            "`false`: only those without."
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    # Bounded so a huge offset is a 422, not an overflow inside the store's 64-bit integers.
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> list[SessionSummary]:
    """The caller's own sessions, most recent first, filtered by each parameter given."""
    async with engine_call():
        infos = await access.engine.list_sessions(
            principal=access.caller.principal,
            flow=flow,
            status=status,
            limit=limit,
            offset=offset,
            errors=errors,
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


async def get_session(
    session_id: str,
    access: AccessDep,
    transcript: bool = True,
    render: Annotated[Literal["html"] | None, Query(description=RENDER_DOC)] = None,
) -> SessionOut:
    """Status, current step, steps visited, usage, warnings and (by default) the transcript."""
    session = await _session(access, session_id)
    messages = files = None
    if transcript:
        async with engine_call(session_id):
            messages = await access.engine.transcript(session_id, principal=access.caller.principal)
            if session.files_sent:
                files = await access.engine.session_files(session_id, principal=access.caller.principal)
            else:
                files = []
        if messages is None or files is None:  # deleted in between
            raise not_found(session_id)
    caller = access.caller
    shown = visible_to(
        session.approvals, caller.principal, caller.visibilities, session.principal, access.engine.clock()
    )
    return SessionOut.from_session(session, messages, render, files, shown)


async def get_timeline(
    session_id: str,
    request: Request,
    access: AccessDep,
    turn: Annotated[int | None, Query(ge=1, le=MAX_OFFSET, description="Only this turn's.")] = None,
) -> SessionTimeline:
    """The inspector's view: the recorded timeline of each turn of the session (failed turns
    included), oldest first. Answered only to callers with the inspect visibility, or in the local
    open mode; anyone else, like another principal, gets the 404 of an unknown session."""
    caller = access.caller
    if not may_inspect(access, request):
        raise not_found(session_id)
    async with engine_call(session_id):
        found = await access.engine.timeline(session_id, principal=caller.principal, turn=turn)
    if found is None:
        raise not_found(session_id)
    return found


async def follow_timeline(session_id: str, request: Request, access: AccessDep) -> StreamingResponse:
    """The inspector's live view: the session's turns as they run in this server process, whoever
    started them (the page, a protocol, another client), as Server-Sent Events. First `following`
    (`{"session_id", "turn"}`: the last turn stored so far), then each running turn's `timeline`
    events (as the turn streams carry them with `?inspect=true`; an entry sent again with the same
    index replaces the earlier) and `turn` (`{"session_id", "turn", "outcome"}`) once it is stored:
    read it whole from `GET /v1/sessions/{id}/timeline?turn=N`. The stream ends after
    `ServerSettings.follow_idle` seconds without a turn; open it again to go on watching. Turns run
    by another process show once stored. Answered only to callers who may inspect; anyone else,
    like another principal, gets the 404 of an unknown session."""
    if not may_inspect(access, request) or access.engine.timeline_settings is None:
        raise not_found(session_id)
    async with engine_call(session_id):
        follower = await access.engine.follow_timeline(session_id, principal=access.caller.principal)
    if follower is None:
        raise not_found(session_id)
    settings = access.state.settings
    return follow_stream(follower, settings.follow_idle, settings.sse_heartbeat)


async def delete_session(session_id: str, access: AccessDep) -> Response:
    async with engine_call(session_id):
        deleted = await access.engine.delete_session(session_id, principal=access.caller.principal)
    if not deleted:
        raise not_found(session_id)
    return Response(status_code=204)


async def cancel_turn(session_id: str, access: AccessDep) -> CancelOut:
    """Cancel the turn running in the session (or the decision on an approval, with the turn it
    resumed). Answered 202 once the job was asked to stop: it stops before its commit, so the
    session keeps its last committed state, and no tool starts after the cancel. The job's own
    request answers `409 turn_cancelled`, or its stream ends with a `cancelled` event (each
    protocol's own way, on theirs). It reaches the job wherever it runs: in this server process;
    on a PostgreSQL store, in any server process sharing the database and schema (this one asks
    them and waits up to the store's `cancel_wait`, 2 s by default, for the one running it to
    answer; a session's first turn only from the process running it, its session not being stored
    yet); with the Temporal executor, on any worker. With SQLite or memory storage, only in this
    process. 409 `turn_not_running` when no job of the session runs where the cancel reaches:
    none, or it ended or began its final commit first."""
    async with engine_call(session_id):
        cancelled = await access.engine.cancel(session_id, caller=access.caller)
    return CancelOut(session_id=cancelled.session_id, cancelled=cancelled.job)


async def session_diagram(session_id: str, access: AccessDep) -> Response:
    """The session's flow with its current step highlighted and the steps it visited shaded."""
    session = await _session(access, session_id)
    return _svg(flow_svg(_flow(access, session.flow), current=session.current_step, visited=session.sequence))


# --- the table -----------------------------------------------------------------------------------------

COMPAT: list[str | Enum] = ["PicoFlow compatible"]
FLOWS: list[str | Enum] = ["flows"]
SESSIONS: list[str | Enum] = ["sessions"]
TURN_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {
        "content": {"text/event-stream": {}},
        "description": "The turn's result, or its events when streamed",
    },
}
DECISION_RESPONSES: dict[int | str, dict[str, Any]] = {
    **TURN_RESPONSES,
    403: {"model": ErrorBody, "description": "The caller may see the approval but not decide it"},
    404: {"model": ErrorBody, "description": "No such approval or session (or one of another principal)"},
    409: {
        "model": ErrorBody,
        "description": "The approval was decided already, expired, or is stale (its call changed), "
        "or another decision or turn came first",
    },
}
CANCEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    202: {"description": "The running turn (or decision) was asked to stop"},
    404: {"model": ErrorBody, "description": "No such session (or one of another principal)"},
    409: {
        "model": ErrorBody,
        "description": "No turn of the session runs where the cancel reaches (this server process; "
        "with PostgreSQL storage, every process sharing it; with Temporal, every worker): none "
        "was, or it ended or began its final commit first (`turn_not_running`)",
    },
}
FOLLOW_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {"content": {"text/event-stream": {}}, "description": "The session's turns as they run, as events"},
    404: {
        "model": ErrorBody,
        "description": "No such session (or one of another principal), or the caller may not inspect",
    },
}
HANDOFFS: list[str | Enum] = ["handoffs"]
HANDOFF_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    403: {"model": ErrorBody, "description": "The caller lacks the staff visibility"},
    404: {"model": ErrorBody, "description": "No such session"},
    409: {
        "model": ErrorBody,
        "description": "The session is not awaiting a human, another member of staff took it, nobody "
        "took it yet, or another request changed it at the same moment",
    },
}
READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        "model": ReadyResponse,
        "description": "A model is still loading or failed to load, or the session store is down",
    }
}


def install(app: FastAPI) -> None:
    """Add every route to ``app`` itself, turns first: FastAPI tries routes one after another, and
    an included router would be searched as a second table on every request. A route's response
    model is its endpoint's return type unless the endpoint answers with a ``Response`` itself.
    Every route but liveness and readiness (asked by load balancers, which hold no key) is an
    ``ApiRoute``: its caller is authenticated first."""
    api = partial(app.router.add_api_route, route_class_override=ApiRoute)
    turns: dict[str, Any] = {"tags": SESSIONS, "response_model": TurnResponse, "responses": TURN_RESPONSES}
    ai: dict[str, Any] = {"tags": COMPAT, "responses": ERRORS}
    flows: dict[str, Any] = {"tags": FLOWS, "responses": ERRORS, "methods": ["GET"]}
    sessions: dict[str, Any] = {"tags": SESSIONS, "responses": ERRORS}
    turn_api = partial(app.router.add_api_route, route_class_override=TurnRoute)
    turn_api(
        "/v1/sessions/{session_id}/turns",
        add_turn,
        methods=["POST"],
        openapi_extra=turn_parameters("session_id"),
        **turns,
    )
    turn_api(
        "/v1/flows/{flow}/sessions",
        create_session,
        methods=["POST"],
        status_code=201,
        openapi_extra=turn_parameters("flow"),
        **turns,
    )
    api("/ai/run", compat.ai_run, methods=["POST"], response_model=RunResponse, **ai)
    app.add_api_route("/healthcheck", compat.healthcheck, methods=["GET"], tags=COMPAT)
    app.add_api_route(
        "/readyz",
        compat.readyz,
        methods=["GET"],
        tags=COMPAT,
        response_model=ReadyResponse,
        responses=READY_RESPONSES,
    )
    api("/ai/flows", compat.ai_flows, methods=["GET"], **ai)
    api("/ai/end", compat.ai_end, methods=["POST"], **ai)
    api("/v1/me", get_caller, methods=["GET"], tags=SESSIONS, responses=ERRORS)
    api("/v1/flows", list_flows, **flows)
    api("/v1/flows/{flow}", get_flow, **flows)
    api("/v1/flows/{flow}/diagram.svg", flow_diagram, response_class=Response, **flows)
    api("/v1/flows/{flow}/diagram.mmd", flow_diagram_mermaid, response_class=PlainTextResponse, **flows)
    api("/v1/sessions", list_sessions, methods=["GET"], **sessions)
    api("/v1/sessions/{session_id}", get_session, methods=["GET"], **sessions)
    api("/v1/sessions/{session_id}", delete_session, methods=["DELETE"], status_code=204, **sessions)
    api(
        "/v1/sessions/{session_id}/turn",
        cancel_turn,
        methods=["DELETE"],
        status_code=202,
        tags=SESSIONS,
        responses=CANCEL_RESPONSES,
    )
    api("/v1/sessions/{session_id}/attachments", list_attachments, methods=["GET"], **sessions)
    api(
        "/v1/sessions/{session_id}/timeline",
        get_timeline,
        methods=["GET"],
        response_model_exclude_none=True,
        **sessions,
    )
    api(
        "/v1/sessions/{session_id}/timeline/live",
        follow_timeline,
        methods=["GET"],
        response_class=StreamingResponse,
        tags=SESSIONS,
        responses=FOLLOW_RESPONSES,
    )
    api(
        "/v1/sessions/{session_id}/attachments/{sha256}",
        get_attachment,
        methods=["GET"],
        response_class=Response,
        **sessions,
    )
    api("/v1/approvals", approvals.pending_approvals, methods=["GET"], **sessions)
    api("/v1/sessions/{session_id}/approvals", approvals.list_approvals, methods=["GET"], **sessions)
    api(
        "/v1/sessions/{session_id}/approvals/{approval_id}",
        approvals.decide,
        methods=["POST"],
        tags=SESSIONS,
        response_model=TurnResponse,
        responses=DECISION_RESPONSES,
    )
    api("/v1/sessions/{session_id}/messages", handoffs.session_messages, methods=["GET"], **sessions)
    staff: dict[str, Any] = {"tags": HANDOFFS, "responses": HANDOFF_RESPONSES}
    api("/v1/handoffs", handoffs.list_handoffs, methods=["GET"], **staff)
    api("/v1/handoffs/{session_id}/take", handoffs.take, methods=["POST"], **staff)
    api("/v1/handoffs/{session_id}/messages", handoffs.reply, methods=["POST"], status_code=201, **staff)
    api("/v1/handoffs/{session_id}/return", handoffs.hand_back, methods=["POST"], **staff)
    api(
        "/v1/sessions/{session_id}/diagram.svg",
        session_diagram,
        methods=["GET"],
        response_class=Response,
        **sessions,
    )
