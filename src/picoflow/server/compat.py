"""PicoFlow-compatible routes (``/ai/*``), liveness and readiness.

The session id travels in the ``CHAT_SESSION_ID`` header both ways, failures keep PicoFlow's
envelope (rendered by the app's error handler for every ``/ai/`` path), and a session that has
ended is replaced by a new one, as PicoFlow clients expect.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from picoflow.exceptions import FlowMismatch, SessionCompleted
from picoflow.models.readiness import Phase
from picoflow.server.errors import ApiError, engine_call, not_found, turn_error
from picoflow.server.readiness import ReadyResponse, TurnWatch
from picoflow.server.schemas import EndResponse, HealthResponse, RunRequest, RunResponse
from picoflow.server.state import SESSION_HEADER, AccessDep, access_of, state_of, with_config

__all__ = ["ai_end", "ai_flows", "ai_run", "healthcheck", "readyz"]

HEADER_FIELDS = {"message": "body.message", "session_id": f"header.{SESSION_HEADER}"}
"""Where ``/ai/run`` takes each input the engine checks."""


async def healthcheck() -> HealthResponse:
    return HealthResponse(timestamp=datetime.now(UTC).isoformat())


async def readyz(request: Request) -> JSONResponse:
    """Whether the server can answer turns now: 200 once every model the served flows need is
    loaded (at once for hosted models), else 503 with the progress (``downloading`` with bytes
    done and total, ``checking``, ``loading``, ``warming``) or the reason it ``failed``; also 503
    while the session store does not answer its ping (``store``: ``unavailable``)."""
    state = state_of(request)
    status = state.readiness.status()
    store = await state.engine.store_health()
    body = ReadyResponse.model_validate({**status.as_dict(), "store": store}).model_dump(
        mode="json", exclude_none=True
    )
    code = 200 if status.phase is Phase.READY and store != "unavailable" else 503
    return JSONResponse(body, status_code=code, headers={"Cache-Control": "no-store"})


async def ai_flows(access: AccessDep) -> list[str]:
    return [spec.name for spec in access.engine.flows]


async def ai_run(body: RunRequest, request: Request) -> Response:
    """One turn. The session id travels in the ``CHAT_SESSION_ID`` header both ways; a reply whose
    content type is not ``text/plain`` is sent as that raw body instead of the JSON envelope.

    A session that has ended (or belongs to another flow) is replaced by a new one, as PicoFlow
    clients expect: they keep sending the last id they saw.
    """
    access = access_of(request)  # not a dependency: a busy route (see ``picoflow.server.turns``)
    session_id = request.headers.get(SESSION_HEADER) or None
    caller = with_config(access.caller, body.config)
    message = body.message or ""  # PicoFlow clients may leave it out: the engine calls that empty
    with TurnWatch(access.state.readiness):
        result = await access.engine.run(body.flowName, message, session_id, caller=caller)
        if result.error is not None and session_id and result.error.is_a(SessionCompleted, FlowMismatch):
            result = await access.engine.run(body.flowName, message, None, caller=caller)
    if result.error is not None:
        raise turn_error(result.error, result.session_id, fields=HEADER_FIELDS)
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
    return Response(envelope.model_dump_json(), media_type="application/json", headers=headers)


async def ai_end(request: Request, access: AccessDep) -> EndResponse:
    """End a conversation: the session named by ``CHAT_SESSION_ID`` is deleted."""
    session_id = request.headers.get(SESSION_HEADER)
    if not session_id:
        raise ApiError(
            422,
            "invalid_input",
            f"send the session id in the {SESSION_HEADER} header",
            fields=[(f"header.{SESSION_HEADER}", "required")],
        )
    async with engine_call(session_id):
        deleted = await access.engine.delete_session(session_id, principal=access.caller.principal)
    if not deleted:
        raise not_found(session_id)
    return EndResponse(success=True, session=session_id)
