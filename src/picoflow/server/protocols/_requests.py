"""What a request asks of the engine, read the same way whatever protocol it comes in: a person's
decision on a pending approval, the answer to a request that asks for nothing picoflow can do, and
the flow a route's path names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from picoflow.context import Caller
from picoflow.engine import FlowEngine
from picoflow.events import TurnEvent
from picoflow.results import TurnResult
from picoflow.server.errors import ApiError
from picoflow.server.state import ServerState
from picoflow.server.streams import Feed, open_decision

__all__ = ["FLOW_PARAMETER", "Decision", "invalid"]

FLOW_PARAMETER: Final[dict[str, Any]] = {
    "name": "flow",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "title": "Flow"},
}
"""The ``{flow}`` of a protocol's path, as its operation documents it (the route reads it from the
request's path, so FastAPI does not document it on its own)."""


def invalid(where: str, problem: str) -> ApiError:
    """The 422 of a request whose field ``where`` breaks a rule of its protocol (never its value)."""
    return ApiError(422, "invalid_input", f"invalid request: {where}: {problem}", fields=[(where, problem)])


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's decision on a pending approval of the request's session, as AG-UI's resume, an
    AI SDK tool approval, Chat Completions' metadata or an A2A data part carry it: taken by
    ``FlowEngine.decide`` for the caller the API key authenticated, who must be allowed to."""

    approval_id: str
    decision: str
    """``approve`` or ``deny``; the engine refuses anything else, naming the ``decision`` field."""
    reason: str | None = None
    """Kept with the decision and told to the flow (the engine bounds it)."""
    where: str = ""
    """The request field the decision came in, for a refusal to name."""

    async def take(
        self,
        engine: FlowEngine,
        session_id: str,
        caller: Caller,
        on_event: Callable[[TurnEvent], None] | None = None,
    ) -> TurnResult:
        """Take the decision in ``session_id`` and run the turn it resumes, to its result."""
        return await engine.decide(
            session_id, self.approval_id, self.decision, self.reason, caller=caller, on_event=on_event
        )

    async def open(self, state: ServerState, session_id: str, caller: Caller) -> Feed:
        """Take the decision in ``session_id`` and start the turn it resumes, in a task the server
        holds: its feed (``streams.open_decision``)."""
        return await open_decision(state, session_id, self.approval_id, self.decision, self.reason, caller)
