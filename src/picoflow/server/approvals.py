"""Approvals over HTTP: the approvals of a session the caller may see, and a decision on one,
which answers as a turn (``POST /v1/sessions/{id}/approvals/{approval_id}``).

Who may see and who may decide is the engine's to say, from the caller the request authenticated:
nothing in a body names a decider. A refusal has the status of its class: an unknown approval or
one the caller may not see is a 404, a caller the approval does not admit a 403, an approval
decided, expired or stale (or decided elsewhere at the same moment) a 409.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query, Request
from fastapi.responses import Response

from picoflow.server.errors import decision_error, engine_call, not_found
from picoflow.server.readiness import TurnWatch
from picoflow.server.schemas import ApprovalOut, DecisionRequest, PendingApprovalOut, TurnResponse
from picoflow.server.state import AccessDep, may_inspect
from picoflow.server.streams import stream_decision
from picoflow.server.turns import INSPECT_DOC, RENDER_DOC

__all__ = ["decide", "list_approvals", "pending_approvals"]


async def list_approvals(session_id: str, access: AccessDep) -> list[ApprovalOut]:
    """The session's approvals the caller may see, oldest first: every one in its own session, in
    another's those its roles may decide (a supervisor's view). Each as it stands now: a pending
    one past its time reads ``expired``."""
    async with engine_call(session_id):
        approvals = await access.engine.approvals(session_id, caller=access.caller)
    if approvals is None:
        raise not_found(session_id)
    return [ApprovalOut.from_approval(approval) for approval in approvals]


async def pending_approvals(
    access: AccessDep,
    flow: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[PendingApprovalOut]:
    """Every pending approval the caller may decide, in any session waiting for one, most recent
    first: a supervisor's queue (a caller without roles finds those of its own sessions)."""
    async with engine_call():
        found = await access.engine.pending_approvals(caller=access.caller, flow=flow, limit=limit)
    return [
        PendingApprovalOut(session_id=session_id, approval=ApprovalOut.from_approval(approval))
        for session_id, approval in found
    ]


async def decide(
    session_id: str,
    approval_id: str,
    body: DecisionRequest,
    request: Request,
    access: AccessDep,
    render: Annotated[Literal["html"] | None, Query(description=RENDER_DOC)] = None,
    inspect: Annotated[bool, Query(description=INSPECT_DOC)] = False,
) -> Response:
    """Approve or deny a pending call. Answers as a turn: once the last approval its response
    waits for is decided, the calls run (each approved one exactly once) and the result is the
    model's next reply, or the calls it waits for next. ``stream: true`` (or ``Accept:
    text/event-stream``) streams it. Refused with nothing run: an unknown approval or one the
    caller may not see (404), a caller the approval does not admit (403), one decided, expired or
    stale, or decided elsewhere at the same moment (409)."""
    caller = access.caller
    if body.stream or "text/event-stream" in request.headers.get("accept", ""):
        return await stream_decision(
            access.state,
            session_id,
            approval_id,
            body.decision,
            body.reason,
            caller,
            render,
            inspect=inspect and may_inspect(access, request),
        )
    with TurnWatch(access.state.readiness):
        result = await access.engine.decide(
            session_id, approval_id, body.decision, body.reason, caller=caller
        )
    if result.error is not None:
        raise decision_error(result.error, session_id)
    content = TurnResponse.from_result(result, result.flow or "", render).model_dump_json()
    return Response(content, media_type="application/json")
