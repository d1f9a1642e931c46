"""Flows as MCP tools: each flow of a ``FlowEngine`` becomes a tool ``<flow>(message, session_id?)``
that runs one turn and answers the reply, the session id and whether the conversation completed.
An MCP client holds a conversation by sending the session id it got back with its next message.

A turn that ends with a call waiting for approval says so in its result (``pending``: each
approval's id, what it will do, who must approve, until when). When a flow has such calls, the
server also offers ``decide_approval(session_id, approval_id, decision, reason?)``: it decides
through ``engine.decide`` as the same caller as the turns, so a client decides only what its
principal or roles are among the approvers of, and hears the conversation's next reply.

    server = create_mcp_server(engine, principal="desktop")      # the SDK's low-level Server
    await serve_stdio(engine)                                    # or: await serve_http(engine, port=8765)

``picoflow mcp serve`` runs it from the command line. This is an edge, like ``server/``: it turns
tool calls into ``engine.run`` and results into tool results, nothing more. The principal of every
turn comes from this server's configuration, never from a tool argument; sessions are bound to it,
so one server's callers share its sessions and nobody else's.

The ``mcp`` SDK is imported only here (``pip install 'picoflow-ai[mcp]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from picoflow.approvals import Approval
from picoflow.context import Caller
from picoflow.engine import FlowEngine
from picoflow.exceptions import PicoflowError
from picoflow.flow import FlowSpec
from picoflow.models.readiness import LoadStatus, Phase, Preparable, preparable_models
from picoflow.results import TurnResult
from picoflow.server.auth import Authenticator, AuthError, Identity

try:
    from mcp import types
    from mcp.server import Server, ServerRequestContext
    from mcp.shared.exceptions import MCPError
    from starlette.requests import HTTPConnection
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("serving flows over MCP needs the mcp SDK: pip install 'picoflow-ai[mcp]'") from exc

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "DECIDE_TOOL",
    "DEFAULT_PRINCIPAL",
    "create_mcp_server",
    "mcp_http_app",
    "serve_http",
    "serve_stdio",
]

logger = logging.getLogger("picoflow")

DEFAULT_PRINCIPAL = "mcp"
"""Who MCP callers are to the flows (``RunContext.principal``) unless the server is told otherwise."""

_INVALID_PARAMS = -32602  # JSON-RPC: what the spec answers for a tool the server does not have

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What the user says this turn."},
        "session_id": {
            "type": "string",
            "description": "The session_id an earlier call returned, to continue that conversation; "
            "leave it out to start a new one.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}

PENDING_SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "Calls waiting for a person's decision (decide_approval); empty when none waits.",
    "items": {
        "type": "object",
        "properties": {
            "approval_id": {"type": "string", "description": "What decide_approval takes."},
            "tool": {"type": "string"},
            "summary": {
                "type": "string",
                "description": "What the call will do, in the flow's words.",
            },
            "args": {"type": "object", "description": "The arguments it will run with."},
            "approvers": {"type": "string", "description": "Who must approve, in words."},
            "roles": {"type": "array", "items": {"type": "string"}, "description": "Roles that may approve."},
            "expires_at": {"type": "number", "description": "Unix time after which it can only be refused."},
        },
        "required": ["approval_id", "tool", "summary", "args", "approvers", "roles", "expires_at"],
    },
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reply": {"type": "string", "description": "What the flow answers, to show the user."},
        "session_id": {"type": "string", "description": "Send it with the next message to continue."},
        "completed": {"type": "boolean", "description": "The conversation is over; start a new one."},
        "step": {"type": ["string", "null"], "description": "The step the conversation is in."},
        "content_type": {
            "type": "string",
            "description": "The reply's format (text/plain, text/markdown, ...).",
        },
        "pending": PENDING_SCHEMA,
    },
    "required": ["reply", "session_id", "completed", "step", "content_type", "pending"],
}

DECIDE_TOOL = "decide_approval"
"""The tool deciding a call that waits for approval (offered when a flow has such calls)."""

DECIDE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string", "description": "The session_id of the result that was pending."},
        "approval_id": {"type": "string", "description": "The approval_id of the pending call."},
        "decision": {"type": "string", "enum": ["approve", "deny"]},
        "reason": {
            "type": "string",
            "description": "Why; kept with the decision, told to the flow.",
        },
    },
    "required": ["session_id", "approval_id", "decision"],
    "additionalProperties": False,
}


def create_mcp_server(
    engine: FlowEngine,
    *,
    principal: str = DEFAULT_PRINCIPAL,
    roles: Iterable[str] = (),
    name: str = "picoflow",
) -> Server:
    """An MCP server (the SDK's low-level ``Server``) with one tool per flow registered in ``engine``,
    and ``decide_approval`` when a flow has calls that wait for approval.

    Every turn and decision runs as ``Caller(principal=principal, visibilities=roles)``. A tool
    whose flow cannot be found answers an MCP error; a turn that fails, or a decision refused,
    answers a tool result with ``isError`` and the engine's public message and kind (never a
    stack trace).
    """
    import picoflow

    tools = {spec.name: _tool(spec) for spec in engine.flows}
    gated = any(step.gated for spec in engine.flows for step in spec.steps.values())
    if gated and DECIDE_TOOL in tools:
        raise ValueError(f"a flow named {DECIDE_TOOL} would hide the tool deciding approvals; rename it")
    if gated:
        tools[DECIDE_TOOL] = DECIDE
    schemas = {tool: DECIDE_SCHEMA if tool == DECIDE_TOOL else INPUT_SCHEMA for tool in tools}
    configured = Caller(principal=principal, visibilities=frozenset(roles))

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(tools.values()))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in tools:
            raise MCPError(code=_INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        # Over HTTP with API keys, the key's identity (found by the gate in front of the transport);
        # else the server's configured principal. Never anything the arguments say.
        request = ctx.request
        scope = getattr(request, "scope", None)
        caller = scope.get(CALLER_SCOPE_KEY, configured) if isinstance(scope, dict) else configured
        if params.name == DECIDE_TOOL:
            return await _decide(engine, params.arguments, caller)
        problem, message, session_id = _read_arguments(params.arguments)
        if problem:
            return _error_result(problem, kind="invalid_input")
        try:
            result = await engine.run(params.name, message, session_id, caller=caller)
        except Exception:
            # The engine reports run-time failures in the result; anything raised is a bug, logged
            # for the operator and never shown to the client.
            logger.exception("picoflow: the MCP tool %s failed", params.name)
            return _error_result("The turn failed unexpectedly.", kind="internal_error")
        return _tool_result(result)

    return Server(
        name,
        version=picoflow.__version__,
        instructions="Each tool is a conversation: send the user's message, and the session_id of the "
        "previous result to continue; a result with completed=true ends that conversation."
        + (
            f" A result with pending approvals waits for a person's decision: ask the user, then call "
            f"{DECIDE_TOOL} with what they decided."
            if gated
            else ""
        ),
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _tool(spec: FlowSpec) -> types.Tool:
    description = spec.description.strip() or f"Talk to the {spec.name} flow."
    return types.Tool(
        name=spec.name,
        description=f"{description}\n\nOne turn of the conversation: send the user's message (and the "
        "session_id of the previous reply to continue); answers the reply, the session_id and whether "
        "the conversation completed.",
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
    )


DECIDE = types.Tool(
    name=DECIDE_TOOL,
    description="Approve or deny a call a conversation is waiting for (a result's pending list), with "
    "the user's explicit decision: never decide on your own. Only someone among its approvers may "
    "decide; answers the conversation's next reply, as the flow's tool does.",
    input_schema=DECIDE_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
)


async def _decide(
    engine: FlowEngine, arguments: Mapping[str, Any] | None, caller: Caller
) -> types.CallToolResult:
    """A decision through ``engine.decide`` as ``caller``: the next reply, or the refusal."""
    args = dict(arguments or {})
    unexpected = sorted(set(args) - set(DECIDE_SCHEMA["properties"]))
    if unexpected:
        return _error_result(f"unexpected argument(s): {', '.join(unexpected)}", kind="invalid_input")
    for required in DECIDE_SCHEMA["required"]:
        if not isinstance(args.get(required), str):
            return _error_result(f"{required} is required and must be a string", kind="invalid_input")
    reason = args.get("reason")
    if reason is not None and not isinstance(reason, str):
        return _error_result("reason must be a string", kind="invalid_input")
    try:
        result = await engine.decide(
            args["session_id"], args["approval_id"], args["decision"], reason, caller=caller
        )
    except Exception:
        logger.exception("picoflow: the MCP tool %s failed", DECIDE_TOOL)
        return _error_result("The decision failed unexpectedly.", kind="internal_error")
    return _tool_result(result)


def _read_arguments(arguments: Mapping[str, Any] | None) -> tuple[str | None, str, str | None]:
    """``(problem, message, session_id)``: what is wrong with the arguments (naming the rule, never
    the value), or None."""
    args = dict(arguments or {})
    unexpected = sorted(set(args) - {"message", "session_id"})
    if unexpected:
        return f"unexpected argument(s): {', '.join(unexpected)}", "", None
    message, session_id = args.get("message"), args.get("session_id")
    if not isinstance(message, str):
        return "message is required and must be a string", "", None
    if session_id is not None and not isinstance(session_id, str):
        return "session_id must be a string", "", None
    return None, message, session_id


def _tool_result(result: TurnResult) -> types.CallToolResult:
    if result.error is not None:
        return _error_result(
            result.error.message,
            kind=result.error.kind,
            retryable=result.error.retryable,
            session_id=result.session_id,
        )
    structured = {
        "reply": result.message,
        "session_id": result.session_id,
        "completed": result.completed,
        "step": result.step,
        "content_type": result.content_type,
        "pending": [_pending(approval) for approval in result.pending],
    }
    text = "\n".join(
        [
            result.message,
            *(
                f"approval_id {approval.id}: decide it with {DECIDE_TOOL} (session_id {result.session_id})"
                for approval in result.pending
            ),
        ]
    )
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured)


def _pending(approval: Approval) -> dict[str, Any]:
    return {
        "approval_id": approval.id,
        "tool": approval.tool,
        "summary": approval.summary,
        "args": dict(approval.args),
        "approvers": approval.approvers.describe(),
        "roles": list(approval.approvers.roles),
        "expires_at": approval.expires_at,
    }


def _error_result(
    message: str, *, kind: str, retryable: bool = False, session_id: str | None = None
) -> types.CallToolResult:
    error = {"kind": kind, "message": message, "retryable": retryable, "session_id": session_id}
    return types.CallToolResult(
        content=[types.TextContent(text=f"{message} ({kind})")],
        structured_content={"error": error},
        is_error=True,
    )


# --- running it ----------------------------------------------------------------------------------


async def prepare_models(engine: FlowEngine, report: Callable[[str], None]) -> None:
    """Load the models that need it (the embedded one) before the first call, saying each phase
    through ``report`` (one line per phase; a failed load is reported, and its turns fail then)."""
    models = []
    for spec in engine.flows:
        for step in spec.steps.values():
            if not step.is_logic:
                try:
                    models.append(engine.model_for(spec, step))
                except PicoflowError:
                    continue  # the turn reports it
    for model in preparable_models(models):
        await _prepare(model, report)


async def _prepare(model: Preparable, report: Callable[[str], None]) -> None:
    shown: list[LoadStatus] = []

    def line(status: LoadStatus) -> None:
        if not shown or (shown[-1].phase, shown[-1].part) != (status.phase, status.part):
            shown.append(status)
            report(status.message)

    leave = model.load_status.subscribe(line)
    try:
        final = await model.prepare()
    finally:
        leave()
    if final.phase is Phase.FAILED and (not shown or shown[-1].phase is not Phase.FAILED):
        report(final.message)


async def serve_stdio(
    engine: FlowEngine,
    *,
    principal: str = DEFAULT_PRINCIPAL,
    roles: Iterable[str] = (),
    report: Callable[[str], None] | None = None,
) -> None:
    """Serve the flows over stdin/stdout until the client closes stdin, then close the engine.

    Only protocol goes to stdout: while serving, the SDK points file descriptor 1 at stderr, so
    what anything else prints (a model load's progress included) lands there.
    """
    from mcp.server.stdio import stdio_server

    server = create_mcp_server(engine, principal=principal, roles=roles)
    try:
        async with stdio_server() as (read_stream, write_stream), _preparing(engine, report):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await engine.aclose()


@contextlib.asynccontextmanager
async def _preparing(engine: FlowEngine, report: Callable[[str], None] | None) -> AsyncIterator[None]:
    """Load the models in the background while the server answers (a client's ``initialize`` must
    not wait minutes for the embedded model; a turn that needs it waits for the same load)."""
    if report is None:
        yield
        return
    task = asyncio.create_task(prepare_models(engine, report))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def mcp_http_app(
    engine: FlowEngine,
    *,
    principal: str = DEFAULT_PRINCIPAL,
    roles: Iterable[str] = (),
    host: str = "127.0.0.1",
    path: str = "/mcp",
    api_keys: Mapping[str, Identity | str] | None = None,
) -> ASGIApp:
    """The flows over MCP's streamable HTTP transport at ``path``, as an ASGI app (the SDK's).

    With ``api_keys`` (key -> principal or ``Identity``, as ``picoflow serve`` takes them) every
    request must present one (``Authorization: Bearer <key>`` or ``X-API-Key``; 401 otherwise) and
    its turns run as the key's principal, so each client has its own sessions; without, every turn
    runs as ``principal`` with ``roles``. On a loopback ``host`` the SDK refuses requests whose ``Host`` or
    ``Origin`` is not a loopback name (DNS rebinding)."""
    app: ASGIApp = create_mcp_server(engine, principal=principal, roles=roles).streamable_http_app(
        streamable_http_path=path, host=host
    )
    if api_keys:
        app = _KeyGate(app, Authenticator(api_keys, open_mode=False))
    return app


CALLER_SCOPE_KEY = "picoflow.caller"
"""Where ``_KeyGate`` leaves the authenticated ``Caller`` in a request's ASGI scope."""


class _KeyGate:
    """401 for an HTTP request without a valid API key; the caller of one with it, in its scope."""

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                scope[CALLER_SCOPE_KEY] = self.auth.caller(HTTPConnection(scope))
            except AuthError as exc:
                body = json.dumps({"error": {"kind": "unauthorized", "message": str(exc)}}).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="picoflow"'),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def serve_http(
    engine: FlowEngine,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    principal: str = DEFAULT_PRINCIPAL,
    roles: Iterable[str] = (),
    path: str = "/mcp",
    report: Callable[[str], None] | None = None,
    log_level: str = "warning",
    api_keys: Mapping[str, Identity | str] | None = None,
) -> None:
    """Serve the flows over streamable HTTP under uvicorn until stopped, then close the engine.

    ``report`` (when given) hears ``serving on <url>`` once the socket listens (with the port the
    system chose when ``port`` is 0), then how the models load.
    """
    import uvicorn

    app = mcp_http_app(engine, principal=principal, roles=roles, host=host, path=path, api_keys=api_keys)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and report is not None:
                bound = self.servers[0].sockets[0].getsockname()[1] if self.servers else port
                shown = f"[{host}]" if ":" in host else host
                report(f"serving on http://{shown}:{bound}{path}")

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")
    try:
        async with _preparing(engine, report):
            await _Server(config).serve()
    finally:
        await engine.aclose()
