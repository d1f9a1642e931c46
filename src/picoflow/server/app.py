"""``create_app``: the FastAPI application serving a ``FlowEngine`` over HTTP, with the chat page."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware

import picoflow
from picoflow.engine import FlowEngine
from picoflow.server import contract, errors, protocols, routes
from picoflow.server.auth import Authenticator, check_bind, is_loopback
from picoflow.server.errors import ApiError
from picoflow.server.middleware import BodyLimit, Guard
from picoflow.server.readiness import Readiness, ReadinessGate
from picoflow.server.schemas import ServerSettings
from picoflow.server.state import SESSION_HEADER, ServerState
from picoflow.server.uploads import upload_limit

__all__ = ["ServerSettings", "create_app"]

LOOPBACK_ORIGINS = r"^(https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?|null)$"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
UPLOAD_PATHS = r"^/v1/(sessions/[^/]+/turns|flows/[^/]+/sessions)$"
"""The routes that take files, whose bodies may be as large as a turn's files allow."""

_PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def create_app(engine: FlowEngine, *, settings: ServerSettings | None = None) -> FastAPI:
    """The HTTP API (``/ai/*``, ``/v1/*``, OpenAPI docs at ``/docs``) and the chat page at ``/``.

    The engine is the one service behind every route. Serving it sets two things on it: the
    server's message limit (``settings.max_message_chars``, when given) and a ``before_turn`` gate
    that holds a turn the server started until its flow's models are loaded (in front of any hook
    the engine had). Raises ``UnsafeBind`` when ``settings`` would serve without authentication
    on an address other machines can reach.
    """
    settings = settings or ServerSettings()
    open_mode = check_bind(settings.host, has_keys=bool(settings.api_keys), open_flag=settings.open_mode)
    auth = Authenticator(settings.api_keys, open_mode=open_mode, open_principal=settings.open_principal)
    if settings.max_message_chars is not None:
        engine.max_message_chars = settings.max_message_chars
    ReadinessGate.install(engine)
    flows = [spec.name for spec in engine.flows]
    first_flow = settings.default_flow if settings.default_flow in flows else (flows[0] if flows else None)
    readiness = Readiness.of(engine, warm_flow=first_flow)
    state = ServerState(engine, settings, auth, readiness)

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
    routes.install(app)
    state.protocols = protocols.install(app)
    app.add_exception_handler(ApiError, errors.api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, errors.validation_error)  # type: ignore[arg-type]
    contract.install(app, state)  # the exact OpenAPI document, and 405 / OPTIONS with their Allow
    if settings.ui:
        _add_page(app, state, open_mode)

    # Added innermost first: hosts, then CORS, then the 500 guard, then the body limit.
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        timeout=settings.body_timeout,
        upload_bytes=upload_limit(engine.attachment_limits, settings.max_body_bytes),
        upload_paths=UPLOAD_PATHS,
    )
    app.add_middleware(Guard)
    origins = settings.cors_origins
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins) if origins is not None else ([] if open_mode else ["*"]),
        allow_origin_regex=LOOPBACK_ORIGINS if origins is None and open_mode else None,
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=[SESSION_HEADER, "X-Picoflow-Session", "Location", "Retry-After"],
    )
    hosts = settings.allowed_hosts
    if hosts is None and open_mode and is_loopback(settings.host):
        hosts = LOOPBACK_HOSTS
    if hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))
    return app


# --- the chat page -------------------------------------------------------------------------------------


def _add_page(app: FastAPI, state: ServerState, open_mode: bool) -> None:
    static = files("picoflow.server") / "static"
    page = (static / "index.html").read_text(encoding="utf-8")
    flows = [spec.name for spec in state.engine.flows]
    default = (
        state.settings.default_flow if state.settings.default_flow in flows else (flows[0] if flows else None)
    )
    limit = state.engine.max_message_chars
    file_limits = state.engine.attachment_limits
    config = json.dumps(
        {
            "defaultFlow": default,
            "authRequired": not open_mode,
            "maxMessageChars": limit,
            # The page checks files against the engine's own limits (the server still decides).
            "attachmentLimits": {
                "maxFileBytes": file_limits.max_file_bytes,
                "maxTurnBytes": file_limits.max_turn_bytes,
                "maxFiles": file_limits.max_files,
            },
        }
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
