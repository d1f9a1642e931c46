"""The service: ``FlowEngine`` runs turns of registered flows against a session store.

Executors decide where a checked turn runs (``LocalExecutor``, in this process, by default;
``picoflow.temporal.TemporalExecutor`` on Temporal workers), and a ``ToolRunner`` where its
validated tool calls run (``LOCAL_TOOLS``, here, by default) and what each gives back (its
value, or a ``CallResult``: the tool message itself). The edges (HTTP, CLI, MCP, evals)
translate requests into the engine's calls and nothing more.
"""

from picoflow._run.dispatch import LOCAL_TOOLS, CallResult, LocalTools
from picoflow._run.jobs import TurnRequest
from picoflow._run.session_turn import SessionTurns
from picoflow._run.workspace import ToolJob, ToolRunner
from picoflow.context import ANY_PRINCIPAL
from picoflow.engine._checks import MAX_OFFSET, SESSION_ID, check_session_id, check_text
from picoflow.engine._engine import FlowEngine
from picoflow.engine.executors import LocalExecutor, TurnExecutor
from picoflow.results import Cancelled, TurnError, TurnFinished, TurnResult

__all__ = [
    "ANY_PRINCIPAL",
    "LOCAL_TOOLS",
    "MAX_OFFSET",
    "SESSION_ID",
    "CallResult",
    "Cancelled",
    "FlowEngine",
    "LocalExecutor",
    "LocalTools",
    "SessionTurns",
    "ToolJob",
    "ToolRunner",
    "TurnError",
    "TurnExecutor",
    "TurnFinished",
    "TurnRequest",
    "TurnResult",
    "check_session_id",
    "check_text",
]
