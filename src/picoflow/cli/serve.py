"""``picoflow serve``: the flows over HTTP under uvicorn, and how loading the local model goes.

The server's modules need its extra (``picoflow-ai[server]``), so they are imported only when the
command runs."""

from __future__ import annotations

import enum
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

import picoflow
from picoflow.cli.loading import (
    USER_ERRORS,
    FlowsOpt,
    ModelOpt,
    StoreOpt,
    TimelineOpt,
    build_model,
    console,
    describe_model,
    fail,
    load_flows,
    needs_extra,
    timeline_setting,
)
from picoflow.engine import FlowEngine
from picoflow.models.readiness import Phase
from picoflow.sessions import open_store

if TYPE_CHECKING:
    from picoflow.models.readiness import LoadStatus
    from picoflow.server.readiness import Readiness


class LogLevel(enum.StrEnum):
    """uvicorn's log levels, so a wrong one is refused before the server starts."""

    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"
    trace = "trace"


def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind; 127.0.0.1 keeps it on this machine.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535, metavar="<port>")] = 8000,
    store: StoreOpt = None,
    model: ModelOpt = None,
    flows: FlowsOpt = None,
    open_mode: Annotated[
        bool | None,
        typer.Option(
            "--open/--no-open", help="Serve without API keys (default: only on 127.0.0.1 without keys)."
        ),
    ] = None,
    default_flow: Annotated[str | None, typer.Option(help="Flow the chat page opens first.")] = None,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm/--no-warm",
            help="Load the local model when the server starts (/readyz tells when it is ready), "
            "not with the first message.",
        ),
    ] = True,
    log_level: Annotated[LogLevel, typer.Option(help="uvicorn log level.")] = LogLevel.info,
    temporal: Annotated[
        str | None,
        typer.Option(
            "--temporal",
            envvar="PICOFLOW_TEMPORAL",
            help="Run turns on Temporal at HOST:PORT (durable turns; `picoflow worker` runs them).",
        ),
    ] = None,
    task_queue: Annotated[
        str, typer.Option("--task-queue", envvar="PICOFLOW_TASK_QUEUE", help="Temporal task queue.")
    ] = "picoflow",
    timeline: TimelineOpt = None,
) -> None:
    """Serve the flows: chat page at /, HTTP API under /ai and /v1, OpenAPI docs at /docs, and the
    protocols other clients speak (AG-UI, the AI SDK stream, A2A, OpenAI Chat Completions)."""
    with needs_extra("server", "picoflow serve needs the HTTP server"):
        import uvicorn

        from picoflow.server import ServerSettings, UnsafeBind, create_app, load_api_keys
        from picoflow.server.protocol import uvicorn_options

    try:
        keys = load_api_keys()
        flow_classes = load_flows(flows)
        opened = open_store(store)  # kept to say which store is served
        engine = FlowEngine(
            flow_classes,
            store=opened,
            model=build_model(model),
            executor=_executor(temporal, task_queue),
            timeline=timeline_setting(timeline),
        )
        names = [spec.name for spec in engine.flows]
        first = default_flow or ("hotel" if "hotel" in names else None)
        settings = ServerSettings(
            host=host,
            api_keys=keys,
            open_mode=open_mode,
            default_flow=first,
            close_engine=True,
            prepare_models=warm and temporal is None,  # workers load the models of durable turns
        )
        server_app = create_app(engine, settings=settings)
    except UnsafeBind as exc:
        raise fail(str(exc), code=2) from None
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    console.print(f"[bold]picoflow-ai[/bold] {picoflow.__version__} serving {escape(', '.join(names))}")
    console.print(f"  chat page  [link={url}]{url}[/link]")
    console.print(f"  API docs   {url}docs")
    console.print(f"  model      {escape(describe_model(model))}")
    console.print(f"  store      {escape(repr(opened))}")
    console.print(f"  auth       {f'{len(keys)} API key(s)' if keys else 'open (no API key needed)'}")
    if temporal is not None:
        console.print(f"  turns      on Temporal at {escape(temporal)}, task queue {escape(task_queue)}")
    for served in server_app.state.picoflow.protocols:
        console.print(f"  protocol   {escape(served.describe())}")
    _say_how_loading_goes(server_app.state.picoflow.readiness, warm)
    uvicorn.run(server_app, host=host, port=port, log_level=log_level.value, **uvicorn_options())


def _executor(temporal: str | None, task_queue: str) -> Any:
    """The engine's executor: None (turns run in this process), or Temporal's."""
    if temporal is None:
        return None
    with needs_extra("temporal", "--temporal needs Temporal's SDK"):
        from picoflow.temporal import TemporalExecutor
    return TemporalExecutor.at(temporal, task_queue)


def _say_how_loading_goes(readiness: Readiness, warm: bool) -> None:
    """Say how loading the embedded model goes; the server's lifespan loads it and reads the default
    flow's first prompt, so the first message does not wait for it (``/readyz`` and the page show it too)."""
    if not readiness.needed:
        return
    if not warm:
        console.print("  [dim]the local model loads with the first message (--no-warm)[/dim]")
        return
    console.print("  [dim]loading the local model in the background; /readyz says when it is ready[/dim]")
    started = time.monotonic()
    shown: list[LoadStatus] = []

    def show(status: LoadStatus) -> None:
        # One line per phase (and per downloaded part), not one per megabyte.
        if shown and (shown[-1].phase, shown[-1].part) == (status.phase, status.part):
            return
        shown.append(status)
        if status.phase is Phase.READY:
            console.print(f"  [green]model ready[/green] [dim]after {time.monotonic() - started:.1f} s[/dim]")
        elif status.phase is Phase.FAILED:
            console.print(f"  [red]model: {escape(status.message)}[/red]")
        else:
            console.print(f"  [dim]model: {escape(status.message)}[/dim]")

    readiness.subscribe(show)
