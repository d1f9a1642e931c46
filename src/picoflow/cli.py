"""The ``picoflow`` command: serve flows, chat in the terminal, inspect flows and sessions.

Flows default to the bundled demos (``picoflow_demos.FLOWS``); ``--flows module:Class,...`` or
``PICOFLOW_FLOWS`` serves your own. The store comes from ``--store``/``PICOFLOW_STORE`` (a SQLite
file in the working folder by default) and the model from ``--model``/``PICOFLOW_MODEL`` (by
default each flow's own, else an API key's provider, else the embedded local model).
``--model scripted:replies.json`` plays a fixed script, for demos and tests without a model.
"""

from __future__ import annotations

import asyncio
import enum
import importlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard, TypeVar

import typer
from rich.console import Console
from rich.json import JSON
from rich.markdown import Markdown
from rich.markup import escape
from rich.table import Table

import picoflow
from picoflow.context import Caller
from picoflow.engine import SESSION_ID, FlowEngine, TurnResult
from picoflow.evals import SCRIPTED, EvalResult, ScenarioError, load_scenarios, run_eval
from picoflow.evals.report import ProgressPrinter, print_result, write_report
from picoflow.events import StepEntered, ToolCalled, TurnEvent
from picoflow.exceptions import PicoflowError
from picoflow.flow import Flow
from picoflow.messages import Message, ToolCall
from picoflow.models import Model, ScriptedModel
from picoflow.models.catalog import as_selection, create_model, default_selection
from picoflow.session import SessionStatus
from picoflow.sessions.base import SessionStore
from picoflow.sessions.factory import open_store

if TYPE_CHECKING:  # the server's modules need its extra; only `serve` imports them
    from picoflow.models._readiness import LoadStatus, Preparable, Warm
    from picoflow.server.readiness import Readiness

__all__ = ["app", "main"]

T = TypeVar("T")

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


class LogLevel(enum.StrEnum):
    """uvicorn's log levels, so a wrong one is refused before the server starts."""

    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"
    trace = "trace"


app = typer.Typer(
    name="picoflow",
    help="Serve picoflow flows over HTTP, chat with them in the terminal, inspect flows and sessions.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    # A crash report must never print local variables: they can hold API keys.
    pretty_exceptions_show_locals=False,
)
sessions_app = typer.Typer(help="Inspect stored sessions.", no_args_is_help=True)
db_app = typer.Typer(help="Manage the session store's schema.", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")
app.add_typer(db_app, name="db")

FlowsOpt = Annotated[
    str | None,
    typer.Option("--flows", envvar="PICOFLOW_FLOWS", help="Flows to load: module:Class[,module:Class]."),
]
_STORE_HELP = "Session store URL (default sqlite:///picoflow.sqlite3)."
StoreOpt = Annotated[str | None, typer.Option("--store", envvar="PICOFLOW_STORE", help=_STORE_HELP)]
_MODEL_HELP = "Model for every step: provider:name, local, scripted:FILE.json or python:module:attr."
ModelOpt = Annotated[str | None, typer.Option("--model", envvar="PICOFLOW_MODEL", help=_MODEL_HELP)]


class CliError(Exception):
    """A problem the user can fix; printed without a traceback."""


def _fail(message: str, code: int = 1) -> typer.Exit:
    errors.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def _run(work: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except (CliError, PicoflowError, ValueError) as exc:
        raise _fail(str(exc)) from None


# --- building blocks ---------------------------------------------------------------------------------


def load_flows(spec: str | None) -> list[type[Flow]]:
    """Flow classes from ``module:Class,...`` (an attribute may also be a list of flows)."""
    # Like uvicorn: modules of the folder the command runs in are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    items = [item.strip() for item in spec.split(",") if item.strip()] if spec else ["picoflow_demos:FLOWS"]
    flows: list[type[Flow]] = []
    for item in items:
        module_name, sep, attribute = item.partition(":")
        if not sep or not module_name or not attribute:
            raise CliError(f"{item!r}: name flows as module:Class (e.g. myapp.flows:SupportFlow)")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            hint = " (the demo flows; pass --flows module:Class to serve your own)" if not spec else ""
            raise CliError(f"cannot import {module_name}{hint}: {exc}") from None
        value = getattr(module, attribute, None)
        found = [f for f in (value if isinstance(value, list | tuple) else [value]) if _is_flow(f)]
        if not found or (isinstance(value, list | tuple) and len(found) != len(value)):
            raise CliError(f"{item} is not a Flow subclass (or a list of them)")
        flows.extend(found)
    return flows


def _is_flow(value: object) -> TypeGuard[type[Flow]]:
    return isinstance(value, type) and issubclass(value, Flow)


def load_script(path: str) -> list[Any]:
    """A script of replies: ``"text"``, ``{"tool": name, "args": {...}}``, or a list of such calls."""
    try:
        items = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read the model script {path}: {exc}") from None
    if not isinstance(items, list):
        raise CliError(f"{path}: a model script is a JSON list of replies")

    def call(item: Any) -> ToolCall:
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str):
            raise CliError(f'{path}: a tool call is written {{"tool": "name", "args": {{...}}}}')
        return ToolCall(item["tool"], item.get("args") or {})

    return [
        item if isinstance(item, str) else [call(c) for c in item] if isinstance(item, list) else call(item)
        for item in items
    ]


def build_model(choice: str | None) -> Model | str | None:
    if not choice or not choice.strip():
        return None
    if choice.startswith("scripted:"):
        return ScriptedModel(load_script(choice.removeprefix("scripted:")), name="scripted:cli")
    if choice.startswith("python:"):
        return _python_model(choice.removeprefix("python:"))
    return choice.strip()


def _python_model(target: str) -> Model:
    """``module:attr``: a ``Model`` instance, or a function returning one (e.g. a FunctionModel)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise CliError(f"python:{target}: name the model as python:module:attribute")
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"cannot load the model python:{target}: {exc}") from None
    model = value() if callable(value) and not isinstance(value, Model) else value
    if not isinstance(model, Model):
        raise CliError(f"python:{target} is not a picoflow Model (or a function returning one)")
    return model


def build_engine(flows: str | None, store: str | None, model: str | None) -> FlowEngine:
    return FlowEngine(load_flows(flows), store=open_store(store), model=build_model(model))


def describe_model(choice: str | None) -> str:
    return choice or f"each flow's own, else {default_selection()}"


# --- commands -------------------------------------------------------------------------------------------


def _version(value: bool) -> None:
    if value:
        console.print(f"picoflow {picoflow.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """picoflow: conversational LLM applications as a flow of steps."""


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind; 127.0.0.1 keeps it on this machine.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8000,
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
) -> None:
    """Serve the flows: chat page at /, HTTP API under /ai and /v1, OpenAPI docs at /docs."""
    import uvicorn

    from picoflow.server import ServerSettings, UnsafeBind, create_app, load_api_keys
    from picoflow.server.protocol import uvicorn_options

    try:
        keys = load_api_keys()
        engine = build_engine(flows, store, model)
        names = [spec.name for spec in engine.flows]
        first = default_flow or ("hotel" if "hotel" in names else None)
        settings = ServerSettings(
            host=host,
            api_keys=keys,
            open_mode=open_mode,
            default_flow=first,
            close_engine=True,
            prepare_models=warm,
        )
        server_app = create_app(engine, settings=settings)
    except UnsafeBind as exc:
        raise _fail(str(exc), code=2) from None
    except (CliError, PicoflowError, ValueError) as exc:
        raise _fail(str(exc)) from None
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    console.print(f"[bold]picoflow[/bold] {picoflow.__version__} serving {escape(', '.join(names))}")
    console.print(f"  chat page  [link={url}]{url}[/link]")
    console.print(f"  API docs   {url}docs")
    console.print(f"  model      {escape(describe_model(model))}")
    console.print(f"  store      {escape(repr(engine.store))}")
    console.print(f"  auth       {f'{len(keys)} API key(s)' if keys else 'open (no API key needed)'}")
    _warm_local_model(server_app.state.picoflow.readiness, warm)
    uvicorn.run(server_app, host=host, port=port, log_level=log_level.value, **uvicorn_options())


def _warm_local_model(readiness: Readiness, warm: bool) -> None:
    """Say how loading the embedded model goes; the server's lifespan loads it and reads the default
    flow's first prompt, so the first message does not wait for it (``/readyz`` and the page show it too)."""
    if not readiness.needed:
        return
    if not warm:
        console.print("  [dim]the local model loads with the first message (--no-warm)[/dim]")
        return
    console.print("  [dim]loading the local model in the background; /readyz says when it is ready[/dim]")
    from picoflow.models._readiness import Phase

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


@app.command()
def chat(
    flow: Annotated[str, typer.Argument(help="Name of the flow to talk to.")],
    session: Annotated[
        str | None,
        typer.Option(help="Continue this session (its id or a unique prefix) instead of starting one."),
    ] = None,
    principal: Annotated[str, typer.Option(help="Who you are to the flow (RunContext.principal).")] = "local",
    store: StoreOpt = None,
    model: ModelOpt = None,
    flows: FlowsOpt = None,
) -> None:
    """Chat with a flow in the terminal (/new starts over, /quit or Ctrl-D leaves)."""
    try:
        engine = build_engine(flows, store, model)
        spec = engine.flow(flow)
    except (CliError, PicoflowError, ValueError) as exc:
        raise _fail(str(exc)) from None

    async def talk() -> None:
        session_id = None if session is None else await resolve_session_id(engine.store, session)
        console.rule(f"[bold]{escape(spec.name)}[/bold]")
        if spec.description:
            console.print(f"[dim]{escape(spec.description)}[/dim]")
        console.print("[dim]/new starts over, /quit or Ctrl-D leaves[/dim]")
        try:
            await _prepare_models(engine, spec.name)
            while True:
                try:
                    text = console.input("[bold cyan]you ›[/bold cyan] ").strip()
                except (EOFError, KeyboardInterrupt):
                    console.print()
                    break
                if not text:
                    continue
                if text in ("/quit", "/exit"):
                    break
                if text == "/new":
                    session_id = None
                    console.print("[dim]new conversation[/dim]")
                    continue
                result = await _turn(engine, spec.name, text, session_id, principal)
                if result.error is not None:
                    console.print(f"[red]{escape(result.message)}[/red]")
                    continue
                session_id = result.session_id
                _print_reply(spec.name, result)
                if result.completed:
                    console.print("[green]The conversation is complete.[/green]")
                    break
        finally:
            await engine.aclose()
        if session_id:
            console.print(f"[dim]session {session_id} (picoflow sessions show {session_id})[/dim]")

    _run(talk)


async def _prepare_models(engine: FlowEngine, flow: str) -> None:
    """Load the models of ``flow`` that need it (the embedded one) before the first prompt, showing how
    far it is, and read the flow's first prompt; a model that cannot be loaded ends the chat."""
    from picoflow.models._readiness import Phase, Preparable, preparable_models

    spec = engine.flow(flow)
    start = spec.steps[spec.start]
    steps = [start, *(step for step in spec.steps.values() if step is not start and not step.is_logic)]
    models: list[Model] = []
    for step in steps:
        try:
            models.append(engine.model_for(spec, step))
        except PicoflowError:
            continue  # the turn reports it
    first = models[0] if models and not start.is_logic else None
    start_load = first.load_status if isinstance(first, Preparable) else None

    async def warm() -> None:
        await engine.warm(flow)

    for model in preparable_models(models):
        warmed = model.load_status is start_load
        final = await _show_preparing(model, warm if warmed else None, flow if warmed else None)
        if final.phase is Phase.FAILED:
            raise CliError(final.message)
        console.print("[dim]model ready[/dim]")


async def _show_preparing(model: Preparable, warm: Warm | None, cache_name: str | None) -> LoadStatus:
    """``model.prepare()`` with a progress bar on a terminal, else one line per phase."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

    from picoflow.models._readiness import Phase

    tracker = model.load_status
    if console.is_terminal:
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("Preparing the model…", total=None)

            def update(status: LoadStatus) -> None:
                measured = status.phase in (Phase.DOWNLOADING, Phase.CHECKING) and status.total
                progress.update(
                    task,
                    description=escape(status.message),
                    total=status.total if measured else None,
                    completed=status.done or 0,
                )

            leave = tracker.subscribe(update)
            update(tracker.status)
            try:
                return await model.prepare(warm, cache_name=cache_name)
            finally:
                leave()
    shown: list[LoadStatus] = []

    def line(status: LoadStatus) -> None:
        # One line per phase (and per downloaded part), not one per megabyte.
        if status.settled:  # said once prepare() returns
            return
        if not shown or (shown[-1].phase, shown[-1].part) != (status.phase, status.part):
            shown.append(status)
            console.print(f"[dim]{escape(status.message)}[/dim]")

    leave = tracker.subscribe(line)
    try:
        return await model.prepare(warm, cache_name=cache_name)
    finally:
        leave()


async def _turn(
    engine: FlowEngine, flow: str, text: str, session_id: str | None, principal: str
) -> TurnResult:
    with console.status(f"[dim]{escape(flow)} is thinking…[/dim]", spinner="dots") as status:

        def progress(event: TurnEvent) -> None:
            if isinstance(event, StepEntered):
                status.update(f"[dim]moving to {escape(event.step)}…[/dim]")
            elif isinstance(event, ToolCalled):
                status.update(f"[dim]running {escape(event.name)}…[/dim]")

        return await engine.run(flow, text, session_id, caller=Caller(principal=principal), on_event=progress)


def _print_reply(flow: str, result: TurnResult) -> None:
    console.print(f"[bold magenta]{escape(flow)} ›[/bold magenta] [dim]({escape(result.step or '')})[/dim]")
    media = result.content_type.split(";", 1)[0].strip().lower()
    if media.endswith("json"):
        try:
            console.print(JSON(result.message))
            return
        except ValueError:
            pass
    if media in ("text/plain", "text/markdown"):
        console.print(Markdown(result.message))
    else:
        console.print(result.message, markup=False)


@app.command("flows")
def list_flows(flows: FlowsOpt = None) -> None:
    """List the flows with their steps."""
    try:
        specs = [flow.spec() for flow in load_flows(flows)]
    except (CliError, PicoflowError) as exc:
        raise _fail(str(exc)) from None
    table = Table("flow", "start", "steps", "description", title="flows")
    for spec in specs:
        summary = spec.description.splitlines()[0] if spec.description else ""
        table.add_row(spec.name, spec.start, escape(", ".join(spec.steps)), escape(summary))
    console.print(table)


@app.command()
def graph(
    flow: Annotated[str, typer.Argument(help="Name of the flow to draw.")],
    step: Annotated[str | None, typer.Option(help="Highlight this step.")] = None,
    flows: FlowsOpt = None,
) -> None:
    """Print the flow's steps and transitions as a Mermaid flowchart (derived from the code)."""
    from picoflow.diagram import flow_mermaid

    try:
        specs = {spec.name: spec for spec in (f.spec() for f in load_flows(flows))}
    except (CliError, PicoflowError) as exc:
        raise _fail(str(exc)) from None
    if flow not in specs:
        raise _fail(f"no flow named {flow!r}; known: {', '.join(specs)}")
    typer.echo(flow_mermaid(specs[flow], current=step), nl=False)


@app.command("eval")
def eval_scenarios(
    scenarios: Annotated[Path, typer.Argument(help="A scenario file (YAML) or a folder of them.")],
    flow: Annotated[str | None, typer.Option(help="Flow of the scenarios whose file names none.")] = None,
    model: ModelOpt = None,
    runs: Annotated[int, typer.Option(min=1, help="Plays of each scenario, each in a fresh session.")] = 1,
    min_pass: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of runs that must pass; exit status 1 below it.")
    ] = 1.0,
    report: Annotated[Path | None, typer.Option(help="Write the whole result to this JSON file.")] = None,
    judge: Annotated[
        str | None, typer.Option(help="Model that scores judge: criteria (a --model selection).")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(help="Session store URL (default: in memory, so your sessions stay untouched)."),
    ] = None,
    flows: FlowsOpt = None,
) -> None:
    """Play scenario files against a model, run after run, and measure how often the flow behaves.

    --model scripted plays each turn's scripted: responses from the scenario files.
    """
    try:
        loaded = load_scenarios(scenarios)
        flow_classes = load_flows(flows)
        chosen = SCRIPTED if (model or "").strip() == SCRIPTED else build_model(model)
        referee = build_model(judge)
        if isinstance(referee, str):
            referee = create_model(as_selection(referee))
        opened = open_store(store) if store else None
    except (ScenarioError, CliError, PicoflowError, ValueError) as exc:
        raise _fail(str(exc), code=2) from None

    async def work() -> EvalResult:
        try:
            return await run_eval(
                loaded, flow_classes, model=chosen, runs=runs, judge=referee, default_flow=flow,
                store=opened, on_turn=ProgressPrinter(console, runs),
            )  # fmt: skip
        finally:
            if opened is not None:
                await opened.close()

    try:
        result = asyncio.run(work())
    except (ScenarioError, PicoflowError, ValueError) as exc:
        raise _fail(str(exc), code=2) from None
    print_result(console, result, min_pass)
    if report is not None:
        write_report(result, report)
        console.print(f"[dim]report written to {escape(str(report))}[/dim]")
    if result.pass_rate < min_pass:
        raise typer.Exit(1)


# --- sessions and the database -----------------------------------------------------------------------


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


async def _with_store(url: str | None, work: Callable[[SessionStore], Awaitable[T]]) -> T:
    store = open_store(url)
    try:
        return await work(store)
    finally:
        await store.close()


@sessions_app.command("list")
def sessions_list(
    store: StoreOpt = None,
    flow: Annotated[str | None, typer.Option(help="Only this flow.")] = None,
    status: Annotated[SessionStatus | None, typer.Option(help="running, completed or aborted.")] = None,
    principal: Annotated[str | None, typer.Option(help="Only sessions of this principal.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, most recent first.")] = 20,
) -> None:
    """List stored sessions, most recent first."""

    async def work(opened: SessionStore) -> None:
        infos = await opened.list_sessions(flow=flow, status=status, principal=principal, limit=limit)
        if not infos:
            console.print("no sessions")
            return
        table = Table()
        # The id is never cut: it is what the other commands take, so a narrow terminal narrows the
        # other columns instead.
        table.add_column("id", no_wrap=True, min_width=max(len(info.id) for info in infos))
        for name in ("flow", "status", "step", "turns", "principal", "updated"):
            table.add_column(name)
        for info in infos:
            table.add_row(
                info.id, info.flow, info.status, info.current_step, str(info.turns),
                escape(info.principal or "-"), _when(info.updated_at),
            )  # fmt: skip
        console.print(table)

    _run(lambda: _with_store(store, work))


async def resolve_session_id(store: SessionStore, given: str) -> str:
    """The id of the one stored session ``given`` starts (an exact id, or a unique prefix as git
    takes); ``CliError`` when none or several match, listing a few of those."""
    if not SESSION_ID.match(given):
        raise CliError("a session id is 1-128 letters, digits, '-' or '_'")
    if await store.load(given) is not None:
        return given
    matches = await store.find_ids(given, limit=6)
    if not matches:
        raise CliError(f"no session {given}")
    if len(matches) > 1:
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise CliError(f"{given} is ambiguous: it starts {shown}; give more characters")
    return matches[0]


@sessions_app.command("show")
def sessions_show(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session id.")],
    store: StoreOpt = None,
) -> None:
    """Show a session: transcript, steps visited, usage, warnings and errors."""

    async def work(opened: SessionStore) -> None:
        found = await resolve_session_id(opened, session_id)
        session = await opened.load(found)
        if session is None:
            raise CliError(f"no session {session_id}")
        transcript = await opened.transcript(found)
        failures = await opened.errors(found)
        console.rule(f"session {escape(session.id)}")
        facts = Table.grid(padding=(0, 2))
        for name, value in (
            ("flow", session.flow),
            ("status", session.status),
            ("current step", session.current_step),
            ("steps visited", " → ".join(session.sequence) or "-"),
            ("principal", session.principal or "-"),
            ("turns", f"{session.turns} (revision {session.revision})"),
            ("created", _when(session.created_at)),
            ("updated", _when(session.updated_at)),
            ("models", ", ".join(f"{step}: {name}" for step, name in session.models.items()) or "-"),
        ):
            facts.add_row(f"[dim]{name}[/dim]", escape(value))
        console.print(facts)
        usage = session.usage
        console.print(
            f"[dim]usage[/dim]  {usage.input_tokens} in + {usage.output_tokens} out = "
            f"{usage.total_tokens} tokens, {usage.model_calls} model calls, {usage.tool_calls} tool calls"
        )
        console.rule("transcript", style="dim")
        for message in transcript:
            console.print(_transcript_line(message))
        if session.warnings:
            console.rule("warnings", style="yellow")
            for record in session.warnings:
                console.print(f"[yellow]{escape(record.code)}[/yellow] {escape(record.message)}")
        if failures:
            console.rule("errors", style="red")
            for record in failures:
                where = f" in {record.step}" if record.step else ""
                console.print(f"[red]{escape(record.code)}[/red]{escape(where)}: {escape(record.message)}")

    _run(lambda: _with_store(store, work))


def _transcript_line(message: Message) -> str:
    where = f"[dim]{escape(message.step or '')}[/dim] "
    kind = f" [dim]({message.kind})[/dim]" if message.kind else ""
    if message.role == "tool":
        mark = "[red]✗[/red]" if message.is_error else "[green]✓[/green]"
        return f"{where}{mark} [cyan]{escape(message.name or '')}[/cyan] → {escape(message.content)}"
    if message.role == "assistant" and message.tool_calls:
        calls = ", ".join(f"{call.name}({call.args_json()})" for call in message.tool_calls)
        said = f"{escape(message.content)} " if message.content else ""
        return f"{where}[magenta]assistant[/magenta]{kind}: {said}[cyan]→ {escape(calls)}[/cyan]"
    color = "bold cyan" if message.role == "user" else "magenta"
    return f"{where}[{color}]{message.role}[/{color}]{kind}: {escape(message.content)}"


@db_app.command("upgrade")
def db_upgrade(store: StoreOpt = None) -> None:
    """Apply the session store's missing schema migrations."""

    async def work() -> None:
        opened = open_store(store, auto_upgrade=False)
        try:
            upgrade = getattr(opened, "upgrade", None)
            if upgrade is None:
                console.print(f"{opened!r} has no schema; nothing to upgrade")
                return
            applied: list[int] = await upgrade()
            if applied:
                console.print(f"{opened!r}: applied migration(s) {', '.join(map(str, applied))}")
            else:
                console.print(f"{opened!r}: already up to date")
        finally:
            await opened.close()

    _run(work)


def main() -> None:
    app()
