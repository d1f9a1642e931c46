"""The service: ``FlowEngine`` runs turns of registered flows against a session store.

Executors decide where a checked turn runs (``LocalExecutor``, in this process, by default);
the edges (HTTP, CLI, MCP, evals) translate requests into the engine's calls and nothing more.
"""

from picoflow.context import ANY_PRINCIPAL
from picoflow.engine._engine import FlowEngine, check_text
from picoflow.engine._sessions import MAX_OFFSET, check_session_id
from picoflow.results import TurnError, TurnFinished, TurnResult

__all__ = [
    "ANY_PRINCIPAL",
    "MAX_OFFSET",
    "FlowEngine",
    "TurnError",
    "TurnFinished",
    "TurnResult",
    "check_session_id",
    "check_text",
]
