"""``picoflow chat``: talk to a flow in the terminal, after its model is loaded with a progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.json import JSON
from rich.markdown import Markdown
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

from picoflow.attachments import Attachment, AttachmentLimits, check_attachments
from picoflow.cli.loading import (
    USER_ERRORS,
    CliError,
    FlowsOpt,
    ModelOpt,
    StoreOpt,
    build_engine,
    console,
    fail,
    resolve_session_id,
    run,
)
from picoflow.context import Caller
from picoflow.engine import FlowEngine, TurnResult
from picoflow.events import StepEntered, ToolCalled, TurnEvent
from picoflow.exceptions import PicoflowError
from picoflow.models import Model
from picoflow.models.readiness import LoadStatus, Phase, Preparable, Warm, preparable_models


def chat(
    flow: Annotated[str, typer.Argument(help="Name of the flow to talk to.")],
    session: Annotated[
        str | None,
        typer.Option(help="Continue this session (its id or a unique prefix) instead of starting one."),
    ] = None,
    principal: Annotated[str, typer.Option(help="Who you are to the flow (RunContext.principal).")] = "local",
    attach: Annotated[
        list[Path] | None,
        typer.Option(help="A file to send with the first message (PDF, image or text); repeatable."),
    ] = None,
    store: StoreOpt = None,
    model: ModelOpt = None,
    flows: FlowsOpt = None,
) -> None:
    """Chat with a flow in the terminal (/attach FILE sends a file with the next message, /new starts
    over, /quit or Ctrl-D leaves)."""
    try:
        engine = build_engine(flows, store, model)
        spec = engine.flow(flow)
        pending = Pending(engine.attachment_limits)
        for path in attach or ():
            pending.add(path)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None

    async def talk() -> None:
        try:
            session_id = None if session is None else await resolve_session_id(engine, session)
            console.rule(f"[bold]{escape(spec.name)}[/bold]")
            if spec.description:
                console.print(f"[dim]{escape(spec.description)}[/dim]")
            console.print("[dim]/attach FILE sends a file, /new starts over, /quit or Ctrl-D leaves[/dim]")
            pending.show()
            await _prepare_models(engine, spec.name)
            session_id = await _converse(engine, spec.name, session_id, Caller(principal=principal), pending)
        finally:
            await engine.aclose()
        if session_id:
            console.print(f"[dim]session {session_id} (picoflow sessions show {session_id})[/dim]")

    run(talk)


async def _converse(
    engine: FlowEngine, flow: str, session_id: str | None, caller: Caller, pending: Pending
) -> str | None:
    """Turn after turn until the user leaves or the conversation completes; the last session's id."""
    while True:
        try:
            text = console.input("[bold cyan]you ›[/bold cyan] ").strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return session_id
        if not text:
            continue
        if text in ("/quit", "/exit"):
            return session_id
        if text == "/new":
            session_id = None
            console.print("[dim]new conversation[/dim]")
            continue
        if pending.command(text):
            continue
        result = await _turn(engine, flow, text, session_id, caller, pending.files)
        if result.error is not None:
            console.print(f"[red]{escape(result.message)}[/red]")
            if pending.files:
                console.print("[dim]the files wait for your next message (/detach drops them)[/dim]")
            continue
        pending.files = []
        session_id = result.session_id
        _print_reply(flow, result)
        if result.completed:
            console.print("[green]The conversation is complete.[/green]")
            return session_id


async def _prepare_models(engine: FlowEngine, flow: str) -> None:
    """Load the models of ``flow`` that need it (the embedded one) before the first prompt, showing how
    far it is, and read the flow's first prompt; a model that cannot be loaded ends the chat."""
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
    engine: FlowEngine,
    flow: str,
    text: str,
    session_id: str | None,
    caller: Caller,
    files: list[Attachment],
) -> TurnResult:
    with console.status(f"[dim]{escape(flow)} is thinking…[/dim]", spinner="dots") as status:

        def progress(event: TurnEvent) -> None:
            if isinstance(event, StepEntered) and event.parent is not None:
                status.update(f"[dim]asking {escape(event.step)}…[/dim]")
            elif isinstance(event, StepEntered):
                status.update(f"[dim]moving to {escape(event.step)}…[/dim]")
            elif isinstance(event, ToolCalled):
                status.update(f"[dim]running {escape(event.name)}…[/dim]")

        return await engine.run(flow, text, session_id, caller=caller, on_event=progress, attachments=files)


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


class Pending:
    """The files waiting to go with the next message: each checked when it is added (type against
    its bytes, sizes against the engine's limits), so a mistake shows before anything is sent."""

    def __init__(self, limits: AttachmentLimits) -> None:
        self.limits = limits
        self.files: list[Attachment] = []

    def add(self, path: Path) -> None:
        """Attach ``path``; ``CliError`` naming the file and the rule when it cannot be sent."""
        try:
            file = Attachment.from_path(path)
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            check_attachments([*self.files, file], self.limits)
        except PicoflowError as exc:
            raise CliError(str(exc)) from None
        self.files.append(file)

    def command(self, text: str) -> bool:
        """Handle ``/attach FILE`` and ``/detach``; False for anything else (a message)."""
        if text == "/detach":
            self.files = []
            console.print("[dim]no files attached[/dim]")
            return True
        if text != "/attach" and not text.startswith("/attach "):
            return False
        name = text[len("/attach") :].strip()
        if not name:
            console.print("[red]/attach needs a file: /attach invoice.pdf[/red]")
            return True
        try:
            self.add(Path(name).expanduser())
        except CliError as exc:
            console.print(f"[red]{escape(str(exc))}[/red]")
            return True
        self.show()
        return True

    def show(self) -> None:
        if self.files:
            names = ", ".join(f"{file.name} ({file.media_type}, {file.size:,} bytes)" for file in self.files)
            console.print(f"[dim]attached to your next message: {escape(names)}[/dim]")
