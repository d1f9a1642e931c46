"""``picoflow chat``: talk to a flow in the terminal, after its model is loaded with a progress bar."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn
from rich.status import Status

from picoflow.approvals import Approval
from picoflow.attachments import Attachment, AttachmentLimits, check_attachments
from picoflow.cli.approvals import was_decided
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
    said_here,
)
from picoflow.cli.views import approval_card, match_approval, print_reply
from picoflow.context import Caller
from picoflow.engine import FlowEngine, TurnResult
from picoflow.events import StepEntered, ToolCalled, TurnEvent
from picoflow.exceptions import PicoflowError
from picoflow.models import Model
from picoflow.models.readiness import LoadStatus, Phase, Preparable, Warm, preparable_models
from picoflow.sessions.memory import MemoryStore


def where_kept(session_id: str, store: object) -> str:
    """Where the session just had can be read again: a command that works, or, in memory, that it
    is gone."""
    if isinstance(store, MemoryStore):
        return f"session {session_id} was kept in memory only: it ended with this chat"
    return f"session {session_id} (picoflow sessions show {session_id})"


def chat(
    flow: Annotated[str, typer.Argument(help="Name of the flow to talk to.")],
    session: Annotated[
        str | None,
        typer.Option(help="Continue this session (its id or a unique prefix) instead of starting one."),
    ] = None,
    principal: Annotated[str, typer.Option(help="Who you are to the flow (RunContext.principal).")] = "local",
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            metavar="ROLE",
            help="A role you hold (e.g. staff: approves calls that need it); repeatable.",
        ),
    ] = None,
    attach: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="<file>", help="A file to send with the first message (PDF, image or text); repeatable."
        ),
    ] = None,
    store: StoreOpt = None,
    model: ModelOpt = None,
    flows: FlowsOpt = None,
) -> None:
    """Chat with a flow in the terminal (/attach FILE sends a file with the next message, /approve and
    /deny decide a call waiting for approval, /new starts over, /help lists the commands, /quit or
    Ctrl-D leaves)."""
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
            console.print(
                "[dim]/attach FILE sends a file, /new starts over, /help lists the commands, /quit or Ctrl-D "
                "leaves[/dim]"
            )
            pending.show()
            await _prepare_models(engine, spec.name)
            session_id = await _converse(
                engine,
                spec.name,
                session_id,
                Caller(principal=principal, visibilities=frozenset(role or ())),
                pending,
            )
        finally:
            await engine.aclose()
        if session_id:
            console.print(f"[dim]{escape(where_kept(session_id, engine.store))}[/dim]")

    run(talk)


async def _converse(
    engine: FlowEngine, flow: str, session_id: str | None, caller: Caller, pending: Pending
) -> str | None:
    """Turn after turn until the user leaves or the conversation completes; the last session's id."""
    waiting: tuple[Approval, ...] = ()
    if session_id is not None:
        waiting = await _waiting(engine, session_id, caller)
        _show_cards(engine, waiting)
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
        if text == "/help":
            console.print(HELP, markup=False)
            continue
        if text == "/new":
            session_id, waiting = None, ()
            console.print("[dim]new conversation[/dim]")
            continue
        if pending.command(text):
            continue
        word, _, rest = text.partition(" ")
        if word in ("/approve", "/deny"):
            if session_id is None or not waiting:
                console.print("[yellow]nothing waits for a decision[/yellow]")
                continue
            decision = "approve" if word == "/approve" else "deny"
            result = await _decide(engine, session_id, caller, waiting, decision, rest)
            if result is None:
                continue
            if result.error is not None:
                waiting = await _waiting(engine, session_id, caller)
                continue
        else:
            result = await _turn(engine, flow, text, session_id, caller, pending.files)
            if result.error is not None:
                console.print(f"[red]{escape(result.message)}[/red]")
                if result.session_id is not None:  # a failed first turn keeps its session: go on in it
                    session_id = result.session_id
                    trace = " --trace" if engine.timeline_settings is not None else ""
                    if not isinstance(engine.store, MemoryStore):  # another process could not read it
                        console.print(
                            f"[dim]what happened: picoflow sessions show {escape(session_id)}{trace}[/dim]",
                            soft_wrap=True,
                        )
                if pending.files:
                    console.print("[dim]the files wait for your next message (/detach drops them)[/dim]")
                continue
            pending.files = []
            for withdrawn in waiting:
                console.print(f"[dim]withdrawn: {escape(withdrawn.summary)} (your message came first)[/dim]")
        session_id = result.session_id
        waiting = result.pending
        if waiting:
            console.print(_speaker(flow, result))
            _show_cards(engine, waiting)
        else:
            print_reply(flow, result)
        if result.completed:
            console.print("[green]The conversation is complete.[/green]")
            return session_id


HELP = """\
/attach FILE              send a file with your next message (/detach drops them)
/approve [reason]         approve the call waiting for your decision: it runs, and the flow goes on
/deny [reason]            deny it: it does not run, and the flow is told why
/approve ID [reason]      with several waiting, name one (its id or a prefix); /deny ID too
/new                      start a new conversation
/quit                     leave (Ctrl-D too)
Anything else is a message; sent while a call waits, it withdraws that call."""


async def _waiting(engine: FlowEngine, session_id: str, caller: Caller) -> tuple[Approval, ...]:
    """The session's approvals that still wait for a decision, as the caller sees them."""
    shown = await engine.approvals(session_id, caller=caller) or []
    return tuple(approval for approval in shown if approval.pending)


ONE_WAITS = "/approve [reason] runs it, /deny [reason] refuses it; typing a message instead withdraws it"


def _show_cards(engine: FlowEngine, waiting: tuple[Approval, ...]) -> None:
    now = engine.clock()
    several = len(waiting) > 1
    for approval in waiting:
        if several:
            commands = (
                f"/approve {approval.id} [reason] runs it, /deny {approval.id} [reason] refuses it; "
                "typing a message instead withdraws them all"
            )
        else:
            commands = ONE_WAITS
        console.print(approval_card(approval, now, commands))


async def _decide(
    engine: FlowEngine,
    session_id: str,
    caller: Caller,
    waiting: tuple[Approval, ...],
    decision: str,
    rest: str,
) -> TurnResult | None:
    """Decide the approval ``rest`` names (or the one waiting) with the rest as the reason; the
    turn's result, or None when the command named none (said why)."""
    command = "/approve" if decision == "approve" else "/deny"
    first, _, after = rest.strip().partition(" ")
    if len(waiting) > 1 or first.startswith("apr_"):
        found = match_approval(first, waiting) if first else []
        if len(found) != 1:
            ids = ", ".join(approval.id for approval in waiting)
            problem = f"{command} needs an approval id"
            if first:
                problem = f"{first} is ambiguous" if found else f"no waiting approval {first}"
            console.print(f"[red]{escape(f'{problem}: {command} ID [reason] (waiting: {ids})')}[/red]")
            return None
        approval, reason = found[0], after.strip() or None
    else:
        approval, reason = waiting[0], rest.strip() or None
    with console.status("[dim]deciding…[/dim]", spinner="dots") as status, said_here(), keys_held():
        result = await engine.decide(
            session_id, approval.id, decision, reason, caller=caller, on_event=_progress(status)
        )
    if not await was_decided(engine, session_id, approval, result, caller):
        done = "approved" if decision == "approve" else "denied"
        console.print(f"[red]not {done}: {escape(result.message)}[/red]")
        return result
    done = "[green]approved[/green]" if decision == "approve" else "[yellow]denied[/yellow]"
    said = f" ({escape(reason)})" if reason else ""
    console.print(f"{done} {escape(approval.summary)}{said}")
    if result.error is not None:
        failed = f"the decision stands, but the turn after it failed: {result.message}"
        console.print(f"[red]{escape(failed)}[/red]")
    return result


@contextlib.contextmanager
def keys_held(stream: IO[Any] | None = None) -> Iterator[None]:
    """While a spinner or a progress bar is on screen, what is typed is neither echoed (it would be
    written into the spinner's line) nor kept (it was typed before the prompt asked): on a terminal,
    echo is off and the keys typed meanwhile are dropped when the block ends. Elsewhere (a pipe, a
    file, Windows) nothing changes."""
    source = sys.stdin if stream is None else stream
    try:
        import termios  # POSIX only

        fd = source.fileno()
        if not source.isatty():
            raise OSError("not a terminal")
        saved = termios.tcgetattr(fd)
    except (ImportError, AttributeError, OSError, ValueError):
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ICANON)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcflush(fd, termios.TCIFLUSH)
        termios.tcsetattr(fd, termios.TCSANOW, saved)


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
        with Progress(*columns, console=console, transient=True) as progress, keys_held():
            task = progress.add_task("Preparing the model…", total=None)

            def update(status: LoadStatus) -> None:
                progress.update(
                    task,
                    description=escape(status.message),
                    total=status.total if status.measured else None,
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
    with console.status(f"[dim]{escape(flow)} is thinking…[/dim]", spinner="dots") as status, keys_held():
        return await engine.run(
            flow, text, session_id, caller=caller, on_event=_progress(status), attachments=files
        )


def _progress(status: Status) -> Callable[[TurnEvent], None]:
    """What the spinner says while a turn runs."""

    def progress(event: TurnEvent) -> None:
        if isinstance(event, StepEntered) and event.parent is not None:
            status.update(f"[dim]asking {escape(event.step)}…[/dim]")
        elif isinstance(event, StepEntered):
            status.update(f"[dim]moving to {escape(event.step)}…[/dim]")
        elif isinstance(event, ToolCalled):
            status.update(f"[dim]running {escape(event.name)}…[/dim]")

    return progress


def _speaker(flow: str, result: TurnResult) -> str:
    return f"[bold magenta]{escape(flow)} ›[/bold magenta] [dim]({escape(result.step or '')})[/dim]"


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
