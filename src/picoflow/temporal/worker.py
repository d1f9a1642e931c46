"""Workers: the processes that run turns (and decisions) submitted by a ``TemporalExecutor``.

A worker holds an ordinary ``FlowEngine`` (flows, models, store, deps). The turn's workflow runs
on it with the engine's flows and settings; the activities call its models, its store and the
flows' tool handlers. Run as many workers on a task queue as you like; they share the store.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from picoflow._run.timeline import Recording
from picoflow.temporal._activities import TurnActivities
from picoflow.temporal._checks import check_durable
from picoflow.temporal._workflow import ENGINES, RECORDINGS, PicoflowDecision, PicoflowTurn
from picoflow.timeline import TimelineSettings


def build_worker(client: Client, task_queue: str, engine: Any, **options: Any) -> Worker:
    """A Temporal ``Worker`` running picoflow turns of ``engine``'s flows from ``task_queue``
    (``options`` go to ``Worker``). Use it as ``async with build_worker(...)`` or ``await .run()``."""
    for spec in engine.flows:  # before any turn is taken: what cannot be replayed faithfully
        check_durable(spec)
    ENGINES[task_queue] = engine
    # The timelines of the turns a client engine that records them submits: recorded with this
    # worker's settings (its redact hook, its secrets), the defaults when it has none.
    recording = RECORDINGS[task_queue] = Recording(engine.timeline_settings or TimelineSettings())
    for spec in engine.flows:  # built now, not inside a workflow task (which must not be slow)
        for step in spec.steps.values():
            if not step.is_logic:
                engine.model_for(spec, step)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[PicoflowTurn, PicoflowDecision],
        activities=TurnActivities(engine, recording).all(),
        # The turn code is plain asyncio; the sandbox would re-import picoflow for every run.
        workflow_runner=UnsandboxedWorkflowRunner(),
        **options,
    )


async def run_worker(client: Client, task_queue: str, engine: Any, **options: Any) -> None:
    """Run a worker until cancelled (Ctrl-C)."""
    await build_worker(client, task_queue, engine, **options).run()
