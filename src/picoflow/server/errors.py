"""Errors over HTTP: ``ApiError``, how a failed turn or engine call becomes one, and how every
error is rendered.

Errors never leak internals: request validation problems name the field and the rule (not the
value), turn failures carry the engine's public text, and the status comes from the error class
(``RunError.status``), never from matching a kind string.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from picoflow.exceptions import InvalidInput, RunError
from picoflow.results import TurnError

__all__ = [
    "BODY_FIELDS",
    "DECISION_FIELDS",
    "DEFAULT_RETRY_AFTER",
    "ApiError",
    "ErrorShape",
    "TurnErrors",
    "decision_error",
    "engine_call",
    "not_found",
    "run_error",
    "turn_error",
    "v1_error",
]

logger = logging.getLogger("picoflow.server")

DEFAULT_RETRY_AFTER = 5.0
"""Retry hint (seconds) for a 503 when the provider gave none."""
SESSION_HEADER = "CHAT_SESSION_ID"
"""The header PicoFlow clients carry the session id in, both ways."""


@dataclass(frozen=True, slots=True)
class TurnErrors:
    """How a route that runs a turn answers the turn's failures, for the OpenAPI document
    (``ServerState.turn_routes``; ``picoflow.server.contract`` writes each status a turn can end in)."""

    path: str
    statuses: Literal["every", "refusals", "none"] = "every"
    """Which failures the route answers with their HTTP status: every one; only a refusal before the
    turn started (a stream is not open yet); or none (the protocol's answer tells each)."""
    told: str = ""
    """Where a failure without its own HTTP status is told: a stream's error event, a failed task."""
    files: bool = False
    """Whether the route takes files, and so refuses some (415)."""
    input_status: int | None = None
    """The status of refused input on this surface when it is not its error class's (OpenAI's 400)."""


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """How the errors of the paths under ``prefix`` are written (a protocol's own shape), and
    their schema in the OpenAPI document (``ServerState.error_shapes``)."""

    prefix: str
    schema: Mapping[str, Any]
    write: Callable[[ApiError], Response]


class ApiError(Exception):
    """A failure with its HTTP status; rendered by the app's exception handler."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        session_id: str | None = None,
        fields: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        self.session_id = session_id
        self.fields = list(fields)

    def detail(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "retryable": self.retryable,
            "retry_after": self.retry_after,
            "fields": [{"field": where, "problem": problem} for where, problem in self.fields],
            "session_id": self.session_id,
        }

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="picoflow"'
        return headers


# --- failures of the engine -----------------------------------------------------------------------------

BODY_FIELDS: Mapping[str, str] = {"message": "body.message", "attachments": "body.attachments"}
"""Where each input the engine checks travels in a request, for the ``fields`` of a refusal."""


def turn_error(
    error: TurnError, session_id: str | None, *, fields: Mapping[str, str] = BODY_FIELDS
) -> ApiError:
    """The HTTP error of a failed turn. Refused input names the request field it came in
    (``fields``) and no session: the request, not a session, was at fault."""
    if error.field is not None:
        where = fields.get(error.field, error.field)
        return ApiError(error.status, error.kind, error.message, fields=[(where, error.message)])
    return _failure(error.status, error.kind, error.message, error.retryable, error.retry_after, session_id)


def run_error(error: RunError, session_id: str | None) -> ApiError:
    """The HTTP error of a typed failure an engine call raised (a store outage, ...)."""
    return _failure(
        error.status, error.kind, error.public_text, error.retryable, error.retry_after, session_id
    )


def _failure(
    status: int, kind: str, message: str, retryable: bool, retry_after: float | None, session_id: str | None
) -> ApiError:
    if status == 503 and retry_after is None:
        retry_after = DEFAULT_RETRY_AFTER
    # ``message`` is the engine's public text: never internals, never submitted values.
    return ApiError(
        status, kind, message, retryable=retryable, retry_after=retry_after, session_id=session_id
    )


def not_found(session_id: str | None) -> ApiError:
    """The one answer for a session that is unknown, another principal's, or could not exist."""
    return ApiError(404, "session_not_found", "No such session.", session_id=session_id)


def v1_error(error: TurnError, session_id: str | None) -> ApiError:
    """A failed turn of the ``/v1`` API, where the session id is part of the URL."""
    if error.field == "session_id":
        return not_found(session_id)  # a path no session can have names no resource
    return turn_error(error, session_id)


DECISION_FIELDS: Mapping[str, str] = {"decision": "body.decision", "reason": "body.reason"}
"""Where each input of a decision travels in its request."""


def decision_error(error: TurnError, session_id: str | None) -> ApiError:
    """A refused or failed decision (``POST /v1/sessions/{id}/approvals/{approval_id}``): a
    malformed id in the URL names no resource (404, as an unknown one), a refused body field is
    named, and a refusal has the status of its class (404, 403, 409)."""
    if error.field == "approval_id":
        return ApiError(404, "approval_not_found", "No such approval.", session_id=session_id)
    if error.field == "session_id":
        return not_found(session_id)
    return turn_error(error, session_id, fields=DECISION_FIELDS)


@asynccontextmanager
async def engine_call(session_id: str | None = None) -> AsyncIterator[None]:
    """Translate what an engine call other than a turn raises: a malformed session id is no such
    session, refused query input names its parameter, and a typed failure keeps its status (a store
    outage is a 503 the client may retry). Anything else is a bug: the app's handler answers 500."""
    try:
        yield
    except ApiError:
        raise
    except InvalidInput as error:
        if error.field == "session_id":
            raise not_found(session_id) from None
        fields = [(f"query.{error.field}", error.message)] if error.field else []
        raise ApiError(error.status, error.kind, error.message, fields=fields) from None
    except RunError as error:
        raise run_error(error, session_id) from None


# --- rendering -------------------------------------------------------------------------------------------


def error_response(request: Request, error: ApiError) -> Response:
    """``error`` in the shape of the surface of ``request``'s path: a protocol's own where one is
    registered (``ServerState.error_shapes``), the PicoFlow envelope on ``/ai/``, else picoflow's."""
    state = getattr(request.app.state, "picoflow", None)
    for shape in getattr(state, "error_shapes", ()):
        if request.url.path.startswith(shape.prefix):
            written: Response = shape.write(error)
            return written
    headers = error.headers()
    body: dict[str, Any]
    if request.url.path.startswith("/ai/"):
        # PicoFlow clients show ``message`` of a failed call; keep their envelope.
        body = {
            "success": False,
            "completed": False,
            "message": error.message,
            "session": error.session_id,
            "contentType": "text/plain",
            "error": error.detail(),
        }
        if error.session_id:
            headers[SESSION_HEADER] = error.session_id
    else:
        body = {"error": error.detail()}
    return JSONResponse(body, status_code=error.status, headers=headers)


async def api_error(request: Request, exc: ApiError) -> Response:
    return error_response(request, exc)


async def validation_error(request: Request, exc: RequestValidationError) -> Response:
    problems = []
    for item in exc.errors():
        where = ".".join(str(part) for part in item.get("loc", ())) or "body"
        rule = (
            "is not valid JSON" if item.get("type") == "json_invalid" else str(item.get("msg", "is invalid"))
        )
        problems.append((where, rule))
    summary = "; ".join(f"{where}: {rule}" for where, rule in problems)
    return error_response(
        request, ApiError(422, "invalid_input", f"invalid request: {summary}", fields=problems)
    )


_KIND_BY_STATUS = {
    408: "request_timeout",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    401: "unauthorized",
}


async def http_error(request: Request, exc: HTTPException) -> Response:
    status = exc.status_code
    if status == 400:
        # FastAPI answers 400 when it cannot decode a body at all (invalid UTF-8, nesting too deep
        # for the JSON parser); to the client that is a malformed body like any other: 422.
        problem = "is not valid JSON (UTF-8 text, nested at most a few hundred levels)"
        return error_response(
            request,
            ApiError(422, "invalid_input", f"invalid request: body {problem}", fields=[("body", problem)]),
        )
    kind = _KIND_BY_STATUS.get(status, "http_error")
    message = exc.detail if isinstance(exc.detail, str) and status < 500 else HTTPStatus(status).phrase
    response = error_response(request, ApiError(status, kind, message))
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response
