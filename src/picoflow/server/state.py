"""What every route shares: the server's state, who is calling, and the errors routes document."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.requests import HTTPConnection

from picoflow.context import INJECTED_NAMES, Caller
from picoflow.engine import FlowEngine
from picoflow.server.auth import Authenticator, AuthError
from picoflow.server.errors import SESSION_HEADER as SESSION_HEADER
from picoflow.server.errors import ApiError, ErrorShape, TurnErrors
from picoflow.server.readiness import Readiness
from picoflow.server.schemas import ErrorBody, ServerSettings

if TYPE_CHECKING:
    from picoflow.server.protocols import Served

__all__ = [
    "ERRORS",
    "SESSION_HEADER",
    "Access",
    "AccessDep",
    "ApiRoute",
    "ServerState",
    "access_of",
    "authenticate",
    "may_inspect",
    "state_of",
    "with_config",
]


@dataclass(slots=True)
class ServerState:
    """What the routes share, kept on ``app.state.picoflow``."""

    engine: FlowEngine
    settings: ServerSettings
    auth: Authenticator
    readiness: Readiness
    """The models the served flows need loaded, and how far they are."""
    streams: set[asyncio.Task[None]] = field(default_factory=set)
    """Event streams still running (kept referenced so a disconnect cannot drop their turn)."""
    protocols: list[Served] = field(default_factory=list)
    """The protocols served beside the native API (``picoflow.server.protocols``)."""
    components: dict[str, Any] = field(default_factory=dict)
    """Schemas a protocol's routes refer to (``#/components/schemas/NAME``), added to the OpenAPI
    document (``picoflow.server.contract``)."""
    document_edits: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)
    """What a protocol corrects in the OpenAPI document its SDK's helpers wrote (run once, in order)."""
    error_shapes: list[ErrorShape] = field(default_factory=list)
    """How the errors of a protocol's paths are written (``picoflow.server.contract``); the others
    in picoflow's shape, or the ``/ai/*`` envelope."""
    turn_routes: list[TurnErrors] = field(default_factory=list)
    """A protocol's routes that run turns, and how each answers a turn's failures
    (``picoflow.server.contract`` documents them with the native ones)."""


def state_of(request: Request) -> ServerState:
    """The state of the application that received ``request``."""
    state: ServerState = request.app.state.picoflow
    return state


@dataclass(frozen=True, slots=True)
class Access:
    """An authenticated request: the server it reached and who is calling."""

    state: ServerState
    caller: Caller

    @property
    def engine(self) -> FlowEngine:
        return self.state.engine


def may_inspect(access: Access, connection: HTTPConnection) -> bool:
    """Whether the caller may read its sessions' timelines, whole or live: it has the inspect
    visibility (``ServerSettings.inspect_visibility``), or it is served by the local open mode."""
    state = access.state
    return state.settings.inspect_visibility in access.caller.visibilities or state.auth.is_open(connection)


ACCESS = "picoflow.access"
"""Where ``ApiRoute`` leaves the ``Access`` of a request, in its ASGI scope."""


class ApiRoute(APIRoute):
    """A route of the API: the caller is authenticated before anything else of the request is read
    (body, parameters), so a request without valid credentials gets a 401 whatever else it holds.

    Not a FastAPI dependency: resolving one costs more per request than authenticating."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def authenticated(request: Request) -> Response:
            authenticate(request)
            return await handle(request)

        return authenticated


def authenticate(request: Request) -> Access:
    """Who is calling (a 401 ``ApiError`` without valid credentials), kept in the request's scope."""
    state = state_of(request)
    try:
        access = request.scope[ACCESS] = Access(state, state.auth.caller(request))
    except AuthError as exc:
        raise ApiError(401, "unauthorized", str(exc)) from None
    return access


def access_of(request: Request) -> Access:
    """The ``Access`` of a request to an ``ApiRoute``."""
    access: Access = request.scope[ACCESS]
    return access


async def _access(request: Request) -> Access:
    return access_of(request)


AccessDep = Annotated[Access, Depends(_access)]


def with_config(caller: Caller, config: Mapping[str, Any] | None) -> Caller:
    """The caller with a request's free-form config; the identity comes from authentication only,
    not even through the config."""
    if not config and not caller.config:
        return caller  # most requests send none: nothing to copy
    clean = {key: value for key, value in (config or {}).items() if key not in INJECTED_NAMES}
    return replace(caller, config=clean)


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
"""Error statuses every authenticated route documents."""
