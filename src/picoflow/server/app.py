"""``create_app``: the FastAPI application serving a ``FlowEngine`` over HTTP, with the chat page.

Errors never leak internals: request validation problems name the field and the rule (not the
value), turn failures carry the engine's public text, and anything unexpected becomes a bare 500
while the details go to the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import picoflow
from picoflow.engine import FlowEngine
from picoflow.server import routes
from picoflow.server.auth import Authenticator, check_bind, is_loopback
from picoflow.server.readiness import Readiness
from picoflow.server.routes import SESSION_HEADER, ServerState
from picoflow.server.schemas import ApiError, ServerSettings

__all__ = ["ServerSettings", "create_app"]

logger = logging.getLogger("picoflow.server")

LOOPBACK_ORIGINS = r"^(https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?|null)$"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")

_PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def create_app(engine: FlowEngine, *, settings: ServerSettings | None = None) -> FastAPI:
    """The HTTP API (``/ai/*``, ``/v1/*``, OpenAPI docs at ``/docs``) and the chat page at ``/``.

    Raises ``UnsafeBind`` when ``settings`` would serve without authentication on an address
    other machines can reach.
    """
    settings = settings or ServerSettings()
    open_mode = check_bind(settings.host, has_keys=bool(settings.api_keys), open_flag=settings.open_mode)
    auth = Authenticator(settings.api_keys, open_mode=open_mode, open_principal=settings.open_principal)
    flows = [spec.name for spec in engine.flows]
    first_flow = settings.default_flow if settings.default_flow in flows else (flows[0] if flows else None)
    readiness = Readiness.of(engine, warm_flow=first_flow)
    state = ServerState(
        engine, settings, auth, settings.max_message_chars or engine.max_message_chars, readiness
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # In the background: /healthcheck answers while the model downloads or loads.
        if settings.prepare_models:
            readiness.start()
        try:
            yield
        finally:
            await readiness.stop()
            if settings.close_engine:
                await engine.aclose()

    app = FastAPI(
        title=settings.title,
        version=picoflow.__version__,
        description=(
            "Conversational flows over HTTP: PicoFlow-compatible `/ai/*` routes and the `/v1` API. "
            "`/healthcheck` answers as soon as the server runs; `/readyz` once its models are loaded."
        ),
        lifespan=lifespan,
    )
    app.state.picoflow = state
    app.include_router(routes.router)
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    if settings.ui:
        _add_page(app, state, open_mode)

    # Added innermost first: hosts, then CORS, then the 500 guard, then the body limit.
    app.add_middleware(_BodyLimit, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout)
    app.add_middleware(_Guard)
    origins = settings.cors_origins
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins) if origins is not None else ([] if open_mode else ["*"]),
        allow_origin_regex=LOOPBACK_ORIGINS if origins is None and open_mode else None,
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=[SESSION_HEADER, "Location", "Retry-After"],
    )
    hosts = settings.allowed_hosts
    if hosts is None and open_mode and is_loopback(settings.host):
        hosts = LOOPBACK_HOSTS
    if hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))
    return app


# --- error rendering --------------------------------------------------------------------------------


def _error_response(request: Request, error: ApiError) -> JSONResponse:
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


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return _error_response(request, exc)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = []
    for item in exc.errors():
        where = ".".join(str(part) for part in item.get("loc", ())) or "body"
        rule = (
            "is not valid JSON" if item.get("type") == "json_invalid" else str(item.get("msg", "is invalid"))
        )
        problems.append((where, rule))
    summary = "; ".join(f"{where}: {rule}" for where, rule in problems)
    return _error_response(
        request, ApiError(422, "invalid_input", f"invalid request: {summary}", fields=problems)
    )


_KIND_BY_STATUS = {
    408: "request_timeout",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    401: "unauthorized",
}


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    status = exc.status_code
    if status == 400:
        # FastAPI answers 400 when it cannot decode a body at all (invalid UTF-8, nesting too deep
        # for the JSON parser); to the client that is a malformed body like any other: 422.
        problem = "is not valid JSON (UTF-8 text, nested at most a few hundred levels)"
        return _error_response(
            request,
            ApiError(422, "invalid_input", f"invalid request: body {problem}", fields=[("body", problem)]),
        )
    kind = _KIND_BY_STATUS.get(status, "http_error")
    message = exc.detail if isinstance(exc.detail, str) and status < 500 else HTTPStatus(status).phrase
    response = _error_response(request, ApiError(status, kind, message))
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


# --- middleware ----------------------------------------------------------------------------------------


class _BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


def _json_message(status: int, kind: str, message: str) -> bytes:
    return json.dumps(
        {"error": {"kind": kind, "message": message, "retryable": False, "fields": []}}
    ).encode()


async def _send_json(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _BodyTimeout(HTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"the request body did not arrive within {seconds:g} seconds")


class _BodyLimit:
    """413 for bodies over the limit, whether announced by Content-Length or streamed in chunks;
    408 for a body still incomplete ``timeout`` seconds after the request began. uvicorn has no
    body-read timeout of its own, so a client sending half a body would hold a worker forever."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                message = f"request body is larger than {self.max_bytes} bytes"
                await _send_json(send, 413, _json_message(413, "body_too_large", message))
                return
        received = 0
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        body_done = False

        async def limited() -> Message:
            nonlocal received, body_done
            if body_done or deadline is None:
                # After the body, receive() only waits for a disconnect (streams): no deadline.
                message = await receive()
            else:
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    # An HTTPException, so FastAPI's body parsing re-raises it to our handler.
                    raise _BodyTimeout(self.timeout or 0) from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # An HTTPException, so FastAPI's body parsing re-raises it to our handler.
                    raise _BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)


class _Guard:
    """Last line of defence: an unexpected exception becomes a plain 500, its details only logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the request itself is being cancelled (shutdown, client gone)
            # Raised by code, not by a cancellation: still a JSON error, never uvicorn's text 500.
            logger.exception(
                "picoflow.server: stray CancelledError on %s %s", scope.get("method"), scope.get("path")
            )
            if not started:
                await _send_json(send, 500, _json_message(500, "internal", "Internal server error."))
        except Exception:
            logger.exception(
                "picoflow.server: unhandled error on %s %s", scope.get("method"), scope.get("path")
            )
            if not started:
                await _send_json(send, 500, _json_message(500, "internal", "Internal server error."))


# --- the chat page -------------------------------------------------------------------------------------


def _add_page(app: FastAPI, state: ServerState, open_mode: bool) -> None:
    static = files("picoflow.server") / "static"
    page = (static / "index.html").read_text(encoding="utf-8")
    flows = [spec.name for spec in state.engine.flows]
    default = (
        state.settings.default_flow if state.settings.default_flow in flows else (flows[0] if flows else None)
    )
    config = json.dumps(
        {"defaultFlow": default, "authRequired": not open_mode, "maxMessageChars": state.max_message_chars}
    )
    # JSON inside <script> must not be able to close the element.
    page = page.replace("{{PICOFLOW_CONFIG}}", re.sub(r"[<>&]", lambda m: f"\\u{ord(m.group()):04x}", config))
    headers = {
        "Content-Security-Policy": _PAGE_CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }

    @app.get("/", include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
