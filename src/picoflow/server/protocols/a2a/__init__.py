"""A2A 1.0 over JSON-RPC: picoflow as an agent that other agents call (``a2a-sdk`` 1.3's wire format).

What it serves:

* ``GET /.well-known/agent-card.json``, the agent card (public, as cards are): picoflow is the
  agent, each registered flow a skill (its id the flow's name, its description the flow's
  docstring), the JSON-RPC interface at ``/a2a``, and the API keys as security schemes
  (``Authorization: Bearer <key>`` or ``X-API-Key: <key>``). It names no session and no task.
* ``POST /a2a``, the JSON-RPC binding: ``SendMessage``, ``SendStreamingMessage``, ``GetTask``,
  ``ListTasks``, ``CancelTask`` and ``SubscribeToTask``, for clients that send ``A2A-Version: 1.0``.
  The caller is authenticated before the body is read: without a valid key the answer is a 401.

How picoflow maps onto it:

* **context <-> session.** ``contextId`` names the caller's session of that conversation
  (``_threads.thread_session_id``): the same principal finds it again with the same id; another
  principal using that id reaches a session of its own. A message without ``contextId`` starts a
  new context, whose id comes back in the task.
* **task <-> turn.** Each message is one turn and one task. ``SendMessage`` answers with the task
  once the turn is over: ``completed`` with the reply as the artifact ``reply``, or ``failed``
  with the engine's public error text. ``SendStreamingMessage`` streams the task (``working``),
  a ``working`` update per step entered, tool called, tool result, decided approval or model load
  status (a status message holding one data part), then the final state. The reply comes whole:
  the flow's code decides what is shown, so the model's text is not streamed.
* **skill <-> flow.** ``metadata.skill`` of the message (or of the request) picks the flow; without
  one, a new task runs the server's default flow (``ServerSettings.default_flow``, else the first)
  and a task that goes on keeps its own. A context keeps the flow of its first turn.
* **approval <-> input-required.** A turn that ends waiting for approvals leaves its task
  ``input-required``: the status message holds the model's words and a data part per approval
  (``approval_id``, ``tool``, ``args``, ``summary``, ``approvers``, ``expires_at``). A message whose
  one part is a data part ``{"approval_id": ..., "decision": "approve" | "deny", "reason": ...}``
  is a decision, taken by ``engine.decide`` for the caller; sent with the task's id, it continues
  that task. Free text is never a decision: it is a new message, which withdraws the approval.
* **cancel.** Cancelling a running task stops its turn before the turn commits, so the session
  stays as it was before it; a task waiting for input is closed (its approval stays pending until a
  decision or a new message); a finished task is not cancelable.

The wire is written here, not by the SDK's server: the JSON-RPC envelope, method routing and
version check, a message read by light models (``_requests``), and tasks and events kept and
written as plain JSON values, with the field names and enum strings of A2A 1.0's JSON mapping
(the tests hold everything written to the SDK's own protobuf types, and play the SDK's client).
Parsing each request into protobuf and writing each answer back costs more than the rest of a
turn (measured with ``bench/http.py``). The SDK still gives the card (built once), the errors (their
codes and ``ErrorInfo`` details), the rarely called methods' parameters, and the task listing's
page tokens. The principal comes from the API key; tasks are kept per principal (another
principal's task id is not found), the last ``MAX_TASKS`` of each, in memory; sessions live in the
engine's store, as on every surface. A turn the engine refuses is a JSON-RPC error with nothing
stored anywhere.

Here are the card and the routes; what a request says is read in ``_requests``, a refusal written
in ``_refusals``, a task and its events in ``_tasks``, a turn running for a task in ``_runs``, the
methods answered in ``_agent``, the JSON-RPC envelope in ``_jsonrpc``, and the wire's shared names
in ``_wire``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.routing import Route

import picoflow
from picoflow.server.errors import TurnErrors
from picoflow.server.state import ServerState

try:
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict
    from a2a.server.routes import add_a2a_routes_to_fastapi
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        APIKeySecurityScheme,
        HTTPAuthSecurityScheme,
        SecurityRequirement,
        SecurityScheme,
        StringList,
    )
    from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0

    from picoflow.server.protocols.a2a._agent import _Agent
    from picoflow.server.protocols.a2a._jsonrpc import _rpc_route
    from picoflow.server.protocols.a2a._requests import SKILL_KEY
    from picoflow.server.protocols.a2a._tasks import MAX_TASKS, REPLY
except ImportError as exc:  # pragma: no cover - the extra is installed wherever this package is served
    raise ImportError("A2A needs the a2a-sdk: pip install 'picoflow-ai[a2a]'") from exc

__all__ = ["CARD_PATH", "MAX_TASKS", "REPLY", "RPC_PATH", "SKILL_KEY", "agent_card", "install"]

CARD_PATH: Final = AGENT_CARD_WELL_KNOWN_PATH
RPC_PATH: Final = "/a2a"


def agent_card(state: ServerState, rpc_url: str) -> AgentCard:
    """The card of ``state``'s engine, its JSON-RPC interface at ``rpc_url``."""
    skills = [
        AgentSkill(
            id=spec.name,
            name=spec.name,
            description=spec.description or f"The {spec.name} flow.",
            tags=["flow"],
        )
        for spec in state.engine.flows
    ]
    card = AgentCard(
        name=state.settings.title,
        description=(
            "Conversational flows served by picoflow. Each skill is a flow: name it in the message's "
            f"metadata.{SKILL_KEY} (default: {_default_flow(state)}). contextId is the conversation."
        ),
        version=picoflow.__version__,
        supported_interfaces=[
            AgentInterface(url=rpc_url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "text/markdown", "application/json"],
        skills=skills,
    )
    auth = state.auth
    if auth.has_keys:
        bearer = HTTPAuthSecurityScheme(
            scheme="Bearer", description="An API key of this server, as a bearer token."
        )
        header = APIKeySecurityScheme(
            location="header", name="X-API-Key", description="An API key of this server."
        )
        card.security_schemes["bearer"].CopyFrom(SecurityScheme(http_auth_security_scheme=bearer))
        card.security_schemes["apiKey"].CopyFrom(SecurityScheme(api_key_security_scheme=header))
        if not auth.open_mode:  # either scheme will do
            card.security_requirements.extend(
                [
                    SecurityRequirement(schemes={"bearer": StringList()}),
                    SecurityRequirement(schemes={"apiKey": StringList()}),
                ]
            )
    return card


def _default_flow(state: ServerState) -> str:
    flows = [spec.name for spec in state.engine.flows]
    wanted = state.settings.default_flow
    return wanted if wanted in flows else (flows[0] if flows else "")


def _card_route(state: ServerState) -> Callable[[Request], Awaitable[Response]]:
    @lru_cache(maxsize=8)
    def card_for(base_url: str) -> dict[str, Any]:
        return agent_card_to_dict(agent_card(state, base_url.rstrip("/") + RPC_PATH))

    async def card(request: Request) -> Response:
        # The interface's URL is where this request came: behind a proxy, let uvicorn read its headers.
        return JSONResponse(card_for(str(request.base_url)))

    return card


def install(app: FastAPI) -> list[str]:
    """Serve the agent card and the JSON-RPC binding; returns the routes as ``METHOD path``."""
    state: ServerState = app.state.picoflow
    agent = _Agent(state, _default_flow(state))
    before = len(app.router.routes)
    # The SDK's helper documents both routes in the app's OpenAPI (the A2A-Version header, the envelope).
    add_a2a_routes_to_fastapi(
        app,
        agent_card_routes=[Route(CARD_PATH, _card_route(state), methods=["GET"])],
        jsonrpc_routes=[Route(RPC_PATH, _rpc_route(agent.methods()), methods=["POST"])],
    )
    # First in line: a request is matched against the routes in order, and a turn's is the busiest.
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[:0] = added
    _close_with(app, agent)
    state.document_edits.append(_version_header)
    state.turn_routes.append(
        TurnErrors(
            RPC_PATH,
            statuses="none",
            told="A turn refused before it started is a JSON-RPC error (its `data.kind` the refusal's); "
            "one that fails once started leaves its task `TASK_STATE_FAILED`, the status message holding "
            'the words for users and a data part `{"event": "error", "status", "kind", "retryable"}`',
        )
    )
    return [f"GET {CARD_PATH}", f"POST {RPC_PATH}"]


def _version_header(document: dict[str, Any]) -> None:
    """The SDK documents ``A2A-Version`` as required; a call without it is a call of version 0.3,
    answered (as every refusal of the binding) with a JSON-RPC error at HTTP 200."""
    for parameter in document.get("paths", {}).get(RPC_PATH, {}).get("post", {}).get("parameters", []):
        if parameter.get("in") == "header" and parameter.get("name") == "A2A-Version":
            parameter["required"] = False
            parameter["description"] = (
                "The protocol version, 1.0. Without it a call is of version 0.3, refused with a "
                "JSON-RPC error (VERSION_NOT_SUPPORTED)."
            )


def _close_with(app: FastAPI, agent: _Agent) -> None:
    """Stop the agent's runs when the application stops."""
    serve = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        async with serve(served) as value:
            try:
                yield value
            finally:
                await agent.aclose()

    app.router.lifespan_context = lifespan
