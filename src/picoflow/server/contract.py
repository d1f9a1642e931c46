"""The HTTP contract: what the OpenAPI document states of each route, made exact, and the answer to
a method a resource does not serve.

FastAPI writes most of the document from the routes. What it cannot know is added here, once,
when the document is first asked for:

* every error status answers JSON in the shape of its surface: picoflow's ``{"error": ...}``, the
  ``/ai/*`` envelope PicoFlow clients read, or a protocol's own (OpenAI's on ``/v1/chat/`` and
  ``/v1/models``), whatever content type the route's success has (a diagram's 404 is JSON too);
* a route that reads a body can also answer 413 (too large) and 408 (too slow to arrive), and a
  route that takes files 415 (bytes that are not their declared type);
* a route that runs a turn states every status the turn can end in (``TURN_FAILURES``: each error
  class knows its status), as its surface answers it: an HTTP status in the surface's error shape,
  or, once a stream is open or for a protocol that answers in its own terms, where the answer
  tells it (``TurnErrors``);
* the limits the engine enforces are in the schema: a message's length, the number of files, the
  flows a path or a ``model`` may name;
* the success content of the routes answering bytes (SVG, Mermaid, a stored file), the session
  header of ``/ai/*``, and links from a created session to the routes that take its id.

``allow`` answers ``OPTIONS`` with 204 and a method the resource does not serve with 405, both
with an ``Allow`` header listing every method of that resource (Starlette's own lists only those
of the first route it matched).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route

from picoflow.engine import SESSION_ID
from picoflow.exceptions import (
    ApprovalPending,
    AttachmentRefused,
    AttachmentTooLarge,
    AttemptsExhausted,
    ContextWindowExceeded,
    FlowMismatch,
    FlowNotFound,
    InvalidInput,
    MessageTooLong,
    ModelError,
    ModelMisbehaved,
    RunError,
    SessionCompleted,
    SessionConflict,
    SessionNotFound,
    StoreError,
    ToolSourceUnavailable,
    TurnCancelled,
    UsageLimitExceeded,
)
from picoflow.server import errors
from picoflow.server.errors import SESSION_HEADER, ApiError, TurnErrors
from picoflow.server.state import ERRORS, ServerState

__all__ = ["TURN_FAILURES", "TurnFailure", "allow", "exact", "install", "turn_statuses"]


COMPAT_ERROR: dict[str, Any] = {
    "type": "object",
    "description": "A failed PicoFlow call: clients show `message`.",
    "required": ["success", "completed", "message", "session", "contentType", "error"],
    "properties": {
        "success": {"const": False},
        "completed": {"const": False},
        "message": {"type": "string"},
        "session": {"type": ["string", "null"]},
        "contentType": {"const": "text/plain"},
        "error": {"$ref": "#/components/schemas/ErrorDetail"},
    },
}
COMPAT_ERROR_REF = {"$ref": "#/components/schemas/CompatError"}
_NATIVE = {"$ref": "#/components/schemas/ErrorBody"}

BODY_STATUSES: dict[str, str] = {
    "408": "The request body did not arrive in time",
    "413": "Message or request body too large",
}
FILE_STATUS = ("415", "A file whose bytes are not its declared type, or of a type the flow does not take")
FILE_ROUTES = frozenset({"/v1/sessions/{session_id}/turns", "/v1/flows/{flow}/sessions"})

BYTES: dict[str, dict[str, Any]] = {
    "/v1/flows/{flow}/diagram.svg": {"image/svg+xml": {"schema": {"type": "string"}}},
    "/v1/sessions/{session_id}/diagram.svg": {"image/svg+xml": {"schema": {"type": "string"}}},
    "/v1/flows/{flow}/diagram.mmd": {"text/plain": {"schema": {"type": "string"}}},
    "/v1/sessions/{session_id}/attachments/{sha256}": {
        "*/*": {
            "schema": {"type": "string", "format": "binary", "description": "The file's bytes, as its type."}
        }
    },
}
"""The success content of the routes that answer bytes rather than JSON."""

SESSION_LINKS: dict[str, tuple[str, str]] = {
    "GetSession": ("get", "/v1/sessions/{session_id}"),
    "DeleteSession": ("delete", "/v1/sessions/{session_id}"),
    "CancelTurn": ("delete", "/v1/sessions/{session_id}/turn"),
    "AddTurn": ("post", "/v1/sessions/{session_id}/turns"),
    "ListAttachments": ("get", "/v1/sessions/{session_id}/attachments"),
    "ListApprovals": ("get", "/v1/sessions/{session_id}/approvals"),
    "SessionMessages": ("get", "/v1/sessions/{session_id}/messages"),
    "SessionDiagram": ("get", "/v1/sessions/{session_id}/diagram.svg"),
}
"""The routes a created session's id leads to (OpenAPI links of ``POST /v1/flows/{flow}/sessions``)."""


@dataclass(frozen=True, slots=True)
class TurnFailure:
    """A way a turn can end: the error class (which knows the HTTP status), what it means, and when
    it comes: ``before`` the turn started (a refusal: nothing ran, no stream is open yet) and/or
    ``after`` (the turn was running)."""

    error: type[RunError]
    meaning: str
    before: bool
    after: bool


TURN_FAILURES: tuple[TurnFailure, ...] = (
    TurnFailure(FlowNotFound, "no such flow", before=True, after=False),
    TurnFailure(SessionNotFound, "no such session (or one of another principal)", before=True, after=False),
    TurnFailure(SessionConflict, "another turn on the session came first", before=True, after=True),
    TurnFailure(
        TurnCancelled,
        "the turn was cancelled (`DELETE /v1/sessions/{session_id}/turn`, or the protocol's own cancel)",
        before=True,
        after=True,
    ),
    TurnFailure(SessionCompleted, "the session has ended", before=True, after=False),
    TurnFailure(FlowMismatch, "the session belongs to another flow", before=True, after=False),
    TurnFailure(ApprovalPending, "an approved action is being carried out", before=True, after=False),
    TurnFailure(MessageTooLong, "the message is too long", before=True, after=False),
    TurnFailure(AttachmentTooLarge, "the files are too large or too many", before=True, after=False),
    TurnFailure(
        ContextWindowExceeded,
        "the conversation no longer fits the model's context window",
        before=False,
        after=True,
    ),
    TurnFailure(
        AttachmentRefused,
        "a file of a type the flow does not take, or whose bytes are not its declared type",
        before=True,
        after=False,
    ),
    TurnFailure(InvalidInput, "the input was refused (it names the field)", before=True, after=False),
    TurnFailure(
        UsageLimitExceeded,
        "the turn needed more model calls, tool calls or tokens than its budget",
        before=False,
        after=True,
    ),
    TurnFailure(RunError, "the turn failed on a bug (a tool or a step hook raised)", before=True, after=True),
    TurnFailure(
        AttemptsExhausted,
        "the model gave no acceptable answer in the step's attempts",
        before=False,
        after=True,
    ),
    TurnFailure(ModelMisbehaved, "the model's answer could not be used", before=False, after=True),
    TurnFailure(ModelError, "the model provider is unavailable", before=False, after=True),
    TurnFailure(StoreError, "the session store is unavailable", before=True, after=True),
    TurnFailure(
        ToolSourceUnavailable, "a tool source (an MCP server) is unavailable", before=True, after=False
    ),
)
"""Every way a turn can end in failure, whatever route runs it (the approval refusals of a decision
are its route's own). A turn's HTTP status is its error class's ``status``."""

RETRY_AFTER: dict[str, Any] = {
    "Retry-After": {
        "required": True,
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
        "description": "Seconds to wait before trying again.",
    }
}
STREAMED = (
    "Streamed (`stream: true`, or `Accept: text/event-stream`), a turn that fails once the stream is "
    "open ends with an `error` event `{status, error}` (a cancelled one with a `cancelled` event, "
    "the same body)"
)
NATIVE_TURNS: tuple[TurnErrors, ...] = (
    TurnErrors("/v1/flows/{flow}/sessions", told=STREAMED, files=True),
    TurnErrors("/v1/sessions/{session_id}/turns", told=STREAMED, files=True),
    TurnErrors("/v1/sessions/{session_id}/approvals/{approval_id}", told=STREAMED),
    TurnErrors("/ai/run"),
)
"""The routes of the native and PicoFlow APIs that run a turn (a decision resumes one); the
protocols add theirs to ``ServerState.turn_routes``."""


def install(app: FastAPI, state: ServerState) -> None:
    """Make ``app``'s OpenAPI document exact (see the module), and its 405 and OPTIONS answers."""
    written = app.openapi
    made: dict[str, Any] | None = None

    def document() -> dict[str, Any]:
        nonlocal made
        if made is None:
            # A copy: FastAPI's document shares the dictionaries routes gave it (openapi_extra).
            made = copy.deepcopy(written())
            exact(made, state)
            app.openapi_schema = made
        return made

    app.openapi = document  # type: ignore[method-assign]
    app.add_exception_handler(HTTPException, allow)  # type: ignore[arg-type]


def exact(document: dict[str, Any], state: ServerState) -> None:
    """Complete ``document`` (FastAPI's) in place with what the routes cannot tell it."""
    components = document.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("CompatError", COMPAT_ERROR)
    for name, schema in state.components.items():
        components.setdefault(name, copy.deepcopy(schema))
    flows = [spec.name for spec in state.engine.flows]
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            _errors(path, operation, state)
            if "requestBody" in operation:
                _add_statuses(path, operation, BODY_STATUSES, state)
            if path in FILE_ROUTES:
                _add_statuses(path, operation, dict([FILE_STATUS]), state)
            if path in BYTES and method == "get":
                operation["responses"].setdefault("200", {"description": "OK"})["content"] = BYTES[path]
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter.get("name") in ("flow", "model") and flows:
                    parameter["schema"] = {**parameter.get("schema", {}), "enum": flows}
    for route in (*NATIVE_TURNS, *state.turn_routes):
        operation = document.get("paths", {}).get(route.path, {}).get("post")
        if operation is not None:
            _turn_statuses(route, operation, state)
    _limits(document, state, flows)
    _compat_header(document)
    _links(document)
    for edit in state.document_edits:
        edit(document)


def _shape(path: str, state: ServerState) -> Mapping[str, Any]:
    for shape in state.error_shapes:
        if path.startswith(shape.prefix):
            return shape.schema
    return COMPAT_ERROR_REF if path.startswith("/ai/") else _NATIVE


def _errors(path: str, operation: dict[str, Any], state: ServerState) -> None:
    """Every error status of ``operation`` answers JSON in its surface's shape."""
    schema = _shape(path, state)
    for status, response in operation.get("responses", {}).items():
        if not (status.isdigit() and int(status) >= 400):
            continue
        given = response.get("content", {}).get("application/json", {}).get("schema")
        if given is None or given == _NATIVE:  # none, or FastAPI's default: the surface's own
            response["content"] = {"application/json": {"schema": dict(schema)}}
        else:  # a route's own error body (readiness's progress), as JSON only
            response["content"] = {"application/json": {"schema": given}}


def _add_statuses(
    path: str, operation: dict[str, Any], statuses: Mapping[str, str], state: ServerState
) -> None:
    schema = _shape(path, state)
    responses = operation.setdefault("responses", {})
    for status, text in statuses.items():
        responses.setdefault(
            status, {"description": text, "content": {"application/json": {"schema": dict(schema)}}}
        )


def turn_statuses(route: TurnErrors, *, before: bool = True, after: bool = True) -> dict[str, str]:
    """Each status a turn run by ``route`` can end in (those that come ``before`` it started and/or
    ``after``), with what it means on that route, in a phrase (not capitalised)."""
    meanings: dict[int, list[str]] = {}
    for failure in TURN_FAILURES:
        if failure.error in (AttachmentRefused, AttachmentTooLarge) and not route.files:
            continue
        if not ((before and failure.before) or (after and failure.after)):
            continue
        status = failure.error.status
        if failure.error is InvalidInput and route.input_status is not None:
            status = route.input_status
        meanings.setdefault(status, []).append(failure.meaning)
    return {
        str(status): _either(said) + (" (see Retry-After)" if status == 503 else "")
        for status, said in sorted(meanings.items())
    }


def _either(phrases: list[str]) -> str:
    """``a``, ``a, or b``, ``a, b, or c``."""
    return phrases[0] if len(phrases) == 1 else f"{', '.join(phrases[:-1])}, or {phrases[-1]}"


_GENERIC = {str(status): response["description"] for status, response in ERRORS.items()}
"""The descriptions every authenticated route gives its error statuses: a turn route says more."""


def _turn_statuses(route: TurnErrors, operation: dict[str, Any], state: ServerState) -> None:
    """The statuses a turn of ``route`` can end in, as its surface answers them."""
    responses = operation.setdefault("responses", {})
    schema = _shape(route.path, state)
    answered = {} if route.statuses == "none" else turn_statuses(route, after=route.statuses == "every")
    for status, meaning in answered.items():
        response = responses.get(status)
        if response is None or response.get("description") == _GENERIC.get(status):
            response = responses[status] = {
                **(response or {}),
                "description": meaning[0].upper() + meaning[1:],
                "content": {"application/json": {"schema": dict(schema)}},
            }
        if status == "503":
            response["headers"] = {**response.get("headers", {}), **RETRY_AFTER}
    if route.told:
        told = "; ".join(
            f"{status} {meaning}" for status, meaning in turn_statuses(route, before=False).items()
        )
        success = responses.setdefault("200", {"description": "OK"})
        success["description"] = f"{success.get('description', 'OK').rstrip('.')}. {route.told}: {told}."


def _limits(document: dict[str, Any], state: ServerState, flows: list[str]) -> None:
    """The engine's limits as schema constraints: the longest message, the most files, the flows."""
    schemas = document["components"]["schemas"]
    longest = state.engine.max_message_chars
    files = state.engine.attachment_limits.max_files
    rules: dict[str, Any] = {"pattern": MESSAGE_PATTERN}
    if longest is not None:
        rules["maxLength"] = longest
    for name in ("TurnRequest", "RunRequest"):
        model = schemas.get(name, {})
        properties = model.get("properties", {})
        if "message" in properties:
            # Required and text, though /ai/run reads a missing one: as empty, which is refused.
            described = {
                key: properties["message"][key]
                for key in ("title", "description")
                if key in properties["message"]
            }
            properties["message"] = {**described, "type": "string", **rules}
            model["required"] = sorted({*model.get("required", []), "message"})
    staff_text = schemas.get("StaffMessageRequest", {}).get("properties", {}).get("text")
    if staff_text is not None:
        staff_text.update(rules)
    attachments = schemas.get("TurnRequest", {}).get("properties", {}).get("attachments")
    if attachments is not None:
        attachments["maxItems"] = files
    flow_name = schemas.get("RunRequest", {}).get("properties", {}).get("flowName")
    if flow_name is not None and flows:
        flow_name["enum"] = flows
    for path in FILE_ROUTES:
        for operation in document["paths"].get(path, {}).values():
            form = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data", {})
            properties = form.get("schema", {}).get("properties", {})
            if "message" in properties:
                properties["message"] = {**properties["message"], **rules}
            if "attachments" in properties:
                properties["attachments"] = {**properties["attachments"], "maxItems": files}


SESSION_ID_PATTERN = SESSION_ID.pattern
"""A session id as the engine takes one."""
MESSAGE_PATTERN = r"^[^\x00]*[^\s\x00][^\x00]*$"
"""What the engine takes as a message: text with something besides spaces, and no NUL
(``picoflow._run.text.check_message``)."""


def _compat_header(document: dict[str, Any]) -> None:
    """``/ai/run`` takes the session id in ``CHAT_SESSION_ID`` (none: a new session); ``/ai/end``
    needs it; both answer with it."""
    paths = document["paths"]
    for path, required in (("/ai/run", False), ("/ai/end", True)):
        operation = paths.get(path, {}).get("post")
        if operation is None:
            continue
        parameter = {
            "name": SESSION_HEADER,
            "in": "header",
            "required": required,
            # For /ai/run an empty header is no session, as PicoFlow clients send it at first.
            "schema": {
                "type": "string",
                "pattern": SESSION_ID_PATTERN if required else f"^$|{SESSION_ID_PATTERN}",
            },
            "description": "The session: "
            + ("the one to end." if required else "the one to continue, if any."),
        }
        operation["parameters"] = [
            *(item for item in operation.get("parameters", []) if item.get("name") != SESSION_HEADER),
            parameter,
        ]
        success = operation.get("responses", {}).get("200")
        if success is not None:
            success["headers"] = {
                SESSION_HEADER: {"schema": {"type": "string"}, "description": "The session."}
            }
    run = paths.get("/ai/run", {}).get("post")
    end = paths.get("/ai/end", {}).get("post")
    if run and end and end.get("operationId"):
        run["responses"]["200"].setdefault("links", {})["EndSession"] = {
            "operationId": end["operationId"],
            "parameters": {f"header.{SESSION_HEADER}": f"$response.header.{SESSION_HEADER}"},
        }


def _links(document: dict[str, Any]) -> None:
    """Links from a created session to every route that takes its id (the stateful tests follow them)."""
    paths = document["paths"]
    created = paths.get("/v1/flows/{flow}/sessions", {}).get("post", {}).get("responses", {}).get("201")
    if created is None:
        return
    links = created.setdefault("links", {})
    for name, (method, path) in SESSION_LINKS.items():
        operation_id = paths.get(path, {}).get(method, {}).get("operationId")
        if operation_id:
            links[name] = {
                "operationId": operation_id,
                "parameters": {"path.session_id": "$response.body#/session_id"},
            }


# --- methods a resource does not serve -------------------------------------------------------------------


def methods_of(request: Request) -> list[str]:
    """Every method the resource at ``request``'s path serves, across all the routes of that path."""
    scope = {**request.scope, "method": "GET"}
    found: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods and route.matches(scope)[0] is not Match.NONE:
            found |= route.methods
    found.discard("HEAD")
    return sorted(found)


async def allow(request: Request, exc: HTTPException) -> Response:
    """405 (and OPTIONS) with an ``Allow`` of every method the resource serves; other HTTP errors
    as ``errors.http_error`` renders them."""
    if exc.status_code != 405:
        return await errors.http_error(request, exc)
    methods = methods_of(request)
    allowed = ", ".join(methods)
    if request.method == "OPTIONS":
        return Response(status_code=204, headers={"Allow": allowed})
    response = errors.error_response(
        request, ApiError(405, "method_not_allowed", f"{request.method} is not served here; use {allowed}.")
    )
    response.headers["Allow"] = allowed
    return response
