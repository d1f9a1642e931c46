"""JSON-RPC 2.0 as A2A binds it: a request's envelope read (its id, method and parameters) and its
protocol version checked, an answer, a stream's frames and an error written, and the route that
calls a request's method."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError, MethodNotFoundError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, VERSION_HEADER
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    VersionNotSupportedError,
)
from fastapi import Request
from fastapi.responses import Response
from packaging.version import InvalidVersion, Version
from starlette.exceptions import HTTPException

from picoflow.server.protocols._writer import LOST
from picoflow.server.protocols.a2a._wire import _dump
from picoflow.server.state import Access, authenticate

logger = logging.getLogger("picoflow.server")

_ENVELOPE: Final = frozenset({"jsonrpc", "method", "params", "id"})

Method = Callable[[Access, Any, dict[str, Any] | None], Awaitable[Response]]


def _answer(request_id: Any, result: object) -> Response:
    body = _dump({"jsonrpc": "2.0", "id": request_id, "result": result})
    return Response(body, media_type="application/json")


def _frame(request_id: Any, event: object) -> bytes:
    return b"data: " + _dump({"jsonrpc": "2.0", "id": request_id, "result": event}) + b"\n\n"


def _error_body(request_id: Any, error: A2AError | JSONRPCError) -> bytes:
    return _dump(build_error_response(request_id, error))


def _error_frame(request_id: Any, error: A2AError) -> bytes:
    return b"event: error\ndata: " + _error_body(request_id, error) + b"\n\n"


def _failure(request_id: Any, error: A2AError | JSONRPCError) -> Response:
    return Response(_error_body(request_id, error), media_type="application/json")


def _check_version(request: Request) -> None:
    """The protocol version the client asks for (A2A reads none as 0.3): 1.x, else refused."""
    asked = request.headers.get(VERSION_HEADER)
    if asked == PROTOCOL_VERSION_1_0:
        return
    asked = asked or PROTOCOL_VERSION_0_3
    try:
        supported = Version(asked).major == Version(PROTOCOL_VERSION_1_0).major
    except InvalidVersion:
        supported = False
    if not supported:
        raise VersionNotSupportedError(
            f"A2A version '{asked}' is not supported by this handler. "
            f"Expected version '{PROTOCOL_VERSION_1_0}'."
        )


def _request_id(envelope: object) -> Any:
    """The id to answer with: the request's, when it is one JSON-RPC allows."""
    if not isinstance(envelope, dict):
        return None
    value = envelope.get("id")
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _method(envelope: object) -> tuple[str, dict[str, Any] | None]:
    """The method a JSON-RPC 2.0 request calls and its parameters; -32600 for what is no request."""
    if isinstance(envelope, list):
        raise InvalidRequestError("Batch requests are not supported")
    if not isinstance(envelope, dict):
        raise InvalidRequestError("Invalid request: a JSON-RPC request is an object")
    if not envelope.keys() <= _ENVELOPE:
        extra = ", ".join(sorted(str(key) for key in envelope.keys() - _ENVELOPE))
        raise InvalidRequestError(f"Invalid request: unknown members {extra}")
    if envelope.get("jsonrpc") != "2.0":
        raise InvalidRequestError("Invalid request: 'jsonrpc' must be exactly '2.0'")
    if "id" in envelope and _request_id(envelope) is None and envelope["id"] is not None:
        raise InvalidRequestError("Invalid request: id must be a string, integer, or null")
    method = envelope.get("method")
    if not isinstance(method, str):
        raise InvalidRequestError("Invalid request: method must be a string")
    if not method:
        raise InvalidRequestError("Method is required")
    params = envelope.get("params")
    if params is not None and not isinstance(params, dict):
        raise InvalidParamsError("params must be an object")
    return method, params


def _rpc_route(methods: Mapping[str, Method]) -> Callable[[Request], Awaitable[Response]]:
    """The route of the JSON-RPC binding, calling each request's method in ``methods`` (by name)."""

    async def rpc(request: Request) -> Response:
        access = authenticate(request)  # before the body is read: a 401 whatever the body holds
        body = await request.body()
        try:
            envelope = json.loads(body)
        except ValueError as error:
            return _failure(None, JSONParseError(message=str(error)))
        request_id = _request_id(envelope)
        try:
            name, params = _method(envelope)
            method = methods.get(name)
            if method is None:
                return _failure(request_id, MethodNotFoundError())
            _check_version(request)
            return await method(access, request_id, params)
        except A2AError as error:
            return _failure(request_id, error)
        except HTTPException:
            raise
        except Exception:
            logger.exception("picoflow.server: an A2A request failed")
            return _failure(request_id, InternalError(LOST))

    return rpc
