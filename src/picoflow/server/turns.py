"""One turn over HTTP: the request's message goes to the engine as it came, and the engine's
``TurnResult`` comes back as the response or as an ``ApiError``.

The engine checks the message, loads the session (once) and refuses what it must; the server only
translates: an unknown or malformed session id in the URL is a 404, refused input names the body
field it came in, and any other failure has the status of its error class.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Literal

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import TypeAdapter, ValidationError

from picoflow.attachments import Attachment
from picoflow.server.errors import v1_error
from picoflow.server.readiness import TurnWatch
from picoflow.server.schemas import TurnRequest, TurnResponse
from picoflow.server.state import Access, ApiRoute, access_of, authenticate, may_inspect, with_config
from picoflow.server.streams import stream_turn
from picoflow.server.uploads import is_form, read_form

__all__ = [
    "INSPECT_DOC",
    "TurnRoute",
    "add_turn",
    "create_session",
    "inspect_of",
    "render_of",
    "run_turn",
    "turn_parameters",
]

# The turn routes, the busiest, read their path segment and ``render`` from the request themselves
# and declare them for the OpenAPI document only (``turn_parameters``): FastAPI resolves each
# declared parameter at a cost comparable to the rest of the route (measured with bench/http.py).
# Only the body goes through FastAPI; the caller is authenticated by the route (``ApiRoute``).

RENDER_DOC = "'html' adds safe HTML renderings of replies."
_RENDER: TypeAdapter[Literal["html"] | None] = TypeAdapter(Literal["html"] | None)
INSPECT_DOC = (
    "Streamed: add the turn's timeline entries as they are recorded (`timeline` events), for a "
    "caller who may inspect; ignored for anyone else."
)
_FLAG: TypeAdapter[bool] = TypeAdapter(bool)


class TurnRoute(ApiRoute):
    """A turn route: JSON bodies go through FastAPI; a ``multipart/form-data`` body (a message with
    files) is read here, streaming its files to disk, since FastAPI would read it whole first."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def turn(request: Request) -> Response:
            if not is_form(request):
                return await handle(request)
            access = authenticate(request)
            body, files = await read_form(request, access.engine.attachment_limits)
            path = request.path_params
            return await run_turn(
                access, request, path.get("flow"), path.get("session_id"), body, render_of(request), files
            )

        return turn


async def add_turn(body: TurnRequest, request: Request) -> Response:
    """Continue a conversation. ``stream: true`` (or ``Accept: text/event-stream``) streams the turn."""
    session_id: str = request.path_params["session_id"]
    return await run_turn(access_of(request), request, None, session_id, body, render_of(request))


async def create_session(body: TurnRequest, request: Request) -> Response:
    """Start a conversation with its first message; the reply carries the new session id."""
    flow: str = request.path_params["flow"]
    return await run_turn(access_of(request), request, flow, None, body, render_of(request))


def render_of(request: Request) -> Literal["html"] | None:
    """The ``render`` query parameter, refused (422) as FastAPI would refuse it."""
    if not request.scope["query_string"]:
        return None  # the usual case, without parsing anything
    value = request.query_params.get("render")
    if value is None:
        return None
    if value == "html":
        return "html"
    try:
        return _RENDER.validate_python(value)
    except ValidationError as exc:
        problems = [{**error, "loc": ("query", "render", *error["loc"])} for error in exc.errors()]
        raise RequestValidationError(problems) from None


def inspect_of(request: Request) -> bool:
    """The ``inspect`` query parameter (a boolean), refused (422) as FastAPI would refuse it."""
    if not request.scope["query_string"]:
        return False
    value = request.query_params.get("inspect")
    if value is None:
        return False
    try:
        return _FLAG.validate_python(value)
    except ValidationError as exc:
        problems = [{**error, "loc": ("query", "inspect", *error["loc"])} for error in exc.errors()]
        raise RequestValidationError(problems) from None


def turn_parameters(path_parameter: str) -> dict[str, Any]:
    """The OpenAPI ``parameters`` of a turn route, as FastAPI would have written them."""
    title = path_parameter.replace("_", " ").title()
    render = {**_RENDER.json_schema(), "description": RENDER_DOC, "title": "Render"}
    return {
        "parameters": [
            {
                "name": path_parameter,
                "in": "path",
                "required": True,
                "schema": {"type": "string", "title": title},
            },
            {"name": "render", "in": "query", "required": False, "schema": render, "description": RENDER_DOC},
            {
                "name": "inspect",
                "in": "query",
                "required": False,
                "schema": {"type": "boolean", "default": False, "title": "Inspect"},
                "description": INSPECT_DOC,
            },
        ],
        # Merged with the JSON body FastAPI documents: the same turn with files as parts.
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "schema": _FORM_SCHEMA,
                    "encoding": {"config": {"contentType": "application/json"}},
                }
            }
        },
    }


_FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["message"],
    "additionalProperties": False,
    "properties": {
        "message": {"type": "string", "description": "What the user said."},
        "config": {"type": "object", "description": "A JSON object: RunContext.config (never stored)."},
        "stream": {"type": "boolean", "description": "Answer with Server-Sent Events."},
        "attachments": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "description": "Files sent with the message (PNG, JPEG, WebP, GIF, PDF, plain text).",
        },
    },
}


async def run_turn(
    access: Access,
    request: Request,
    flow: str | None,
    session_id: str | None,
    body: TurnRequest,
    render: str | None,
    files: list[Attachment] | None = None,
) -> Response:
    """A turn of a new session of ``flow``, or of ``session_id``; streamed when the client asks."""
    wanted = inspect_of(request)  # checked on every turn, streamed or not, as FastAPI would
    caller = with_config(access.caller, body.config)
    if files is None:
        files = [file.attachment() for file in body.attachments] if body.attachments else []
    if body.stream or "text/event-stream" in request.headers.get("accept", ""):
        inspect = wanted and may_inspect(access, request)
        return await stream_turn(access.state, flow, body.message, session_id, caller, render, files, inspect)
    with TurnWatch(access.state.readiness):
        result = await access.engine.run(flow, body.message, session_id, caller=caller, attachments=files)
    if result.error is not None:  # a failed first turn still names its session (kept to inspect)
        raise v1_error(result.error, session_id or result.session_id)
    # Serialised by pydantic-core straight to JSON: no intermediate dict, no second encoder.
    content = TurnResponse.from_result(result, result.flow or "", render).model_dump_json()
    if session_id is None:
        headers = {"Location": f"/v1/sessions/{result.session_id}"}
        return Response(content, status_code=201, media_type="application/json", headers=headers)
    return Response(content, media_type="application/json")
