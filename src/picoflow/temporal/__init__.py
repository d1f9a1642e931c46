"""Durable turns on Temporal (``pip install picoflow-ai[temporal]``).

``FlowEngine(..., executor=TemporalExecutor(client, task_queue="picoflow"))`` runs each turn as a
workflow execution; ``picoflow worker --temporal HOST:PORT`` (or ``run_worker``) runs them. Model
requests, tool handlers and store calls are activities, so a turn whose worker dies goes on on
another worker without repeating a finished model call or tool.
"""

from __future__ import annotations

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("picoflow.temporal needs Temporal's SDK: install picoflow-ai[temporal]") from exc

from picoflow.temporal._executor import TemporalExecutor
from picoflow.temporal.worker import build_worker, run_worker

__all__ = ["TemporalExecutor", "build_worker", "run_worker"]
