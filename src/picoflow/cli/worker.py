"""``picoflow worker --temporal HOST:PORT``: run the turns a ``TemporalExecutor`` submits.

Temporal's SDK (``picoflow-ai[temporal]``) is imported only when the command runs."""

from __future__ import annotations

from typing import Annotated

import typer

from picoflow.cli.loading import FlowsOpt, ModelOpt, StoreOpt, build_engine, console, fail, needs_extra, run


def worker(
    temporal: Annotated[
        str, typer.Option("--temporal", envvar="PICOFLOW_TEMPORAL", help="Temporal server, HOST:PORT.")
    ],
    task_queue: Annotated[
        str, typer.Option("--task-queue", envvar="PICOFLOW_TASK_QUEUE", help="Task queue to take turns from.")
    ] = "picoflow",
    namespace: Annotated[str, typer.Option(help="Temporal namespace.")] = "default",
    flows: FlowsOpt = None,
    store: StoreOpt = None,
    model: ModelOpt = None,
) -> None:
    """Run turns on Temporal: model calls, tools and the store run here, as activities."""
    with needs_extra("temporal", "picoflow worker needs Temporal's SDK"):
        from temporalio.client import Client

        from picoflow.temporal import build_worker

    async def work() -> None:
        engine = build_engine(flows, store, model)
        try:
            client = await Client.connect(temporal, namespace=namespace)
        except RuntimeError as exc:  # the SDK's connection failure
            raise fail(
                f"cannot reach Temporal at {temporal}: {exc}. Start one (`temporal server start-dev`) or "
                "point --temporal at yours"
            ) from None
        names = ", ".join(spec.name for spec in engine.flows)
        where = f"on task queue {task_queue} at {temporal}"
        console.print(f"picoflow worker: flows {names} {where}", soft_wrap=True)
        try:
            await build_worker(client, task_queue, engine).run()
        finally:
            await engine.aclose()

    run(work)
