"""``picoflow sessions …`` reads stored sessions through a ``FlowEngine`` without flows, as an
operator's tool: every read names ``ANY_PRINCIPAL``. ``picoflow db upgrade`` is the storage
administrator's command and opens the store itself."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from picoflow.cli.loading import CliError, StoreOpt, console, resolve_session_id, run, store_engine
from picoflow.cli.timeline import render_timeline
from picoflow.cli.views import decisions_table, unique_prefixes, when
from picoflow.engine import ANY_PRINCIPAL, FlowEngine
from picoflow.messages import Message
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions import open_store
from picoflow.timeline import SessionTimeline, timeline_schema

T = TypeVar("T")
_Record = tuple[Session, list[Message], list[LogRecord]]

sessions_app = typer.Typer(help="Inspect stored sessions.", no_args_is_help=True)
db_app = typer.Typer(help="Manage the session store's schema.", no_args_is_help=True)

_PAGE = 500
"""The most sessions the engine lists at once; a longer listing is read page after page."""


@sessions_app.command("list")
def sessions_list(
    store: StoreOpt = None,
    flow: Annotated[str | None, typer.Option(help="Only this flow.")] = None,
    status: Annotated[
        SessionStatus | None,
        typer.Option(help="running, awaiting_approval, awaiting_human, completed or aborted."),
    ] = None,
    principal: Annotated[str | None, typer.Option(help="Only sessions of this principal.")] = None,
    limit: Annotated[int, typer.Option(min=1, metavar="<n>", help="How many, most recent first.")] = 20,
    wide: Annotated[
        bool, typer.Option("--wide", help="Whole ids and times to the second, whatever the terminal's width.")
    ] = False,
) -> None:
    """List stored sessions, most recent first. On a terminal narrower than 120 columns, ids are
    shown by a prefix unique among those listed, which ``sessions show`` takes as well."""

    async def work(engine: FlowEngine) -> list[SessionInfo]:
        infos: list[SessionInfo] = []
        while len(infos) < limit:
            wanted = min(_PAGE, limit - len(infos))
            page = await engine.list_sessions(
                principal=ANY_PRINCIPAL if principal is None else principal,
                flow=flow,
                status=status,
                limit=wanted,
                offset=len(infos),
            )
            infos.extend(page)
            if len(page) < wanted:
                break
        return infos

    infos = run(lambda: _with_engine(store, work))
    if not infos:
        console.print("no sessions")
        return
    console.print(_listing(infos, WIDE if wide else console.width))


WIDE = 120
"""From this many columns, ``sessions list`` shows whole ids and times to the second."""
SHORT_ID = 8
"""The shortest id prefix a narrow listing shows (``sessions show`` takes a unique prefix)."""


def _listing(infos: list[SessionInfo], width: int) -> Table:
    """The sessions as a table that fits ``width`` columns without cutting a value: on a narrow
    terminal ids are shown by a prefix unique among those listed (as short git hashes are), times
    to the minute, and a long step or status wraps rather than being cut."""
    wide = width >= WIDE
    ids = [info.id for info in infos] if wide else unique_prefixes([info.id for info in infos], SHORT_ID)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("id", no_wrap=True)
    table.add_column("flow", no_wrap=True)
    table.add_column("status", overflow="fold")
    table.add_column("step", overflow="fold")
    table.add_column("turns", justify="right", no_wrap=True)
    table.add_column("principal", overflow="fold")
    table.add_column("updated", no_wrap=True)
    for shown, info in zip(ids, infos, strict=True):
        updated = when(info.updated_at) if wide else when(info.updated_at)[5:16]
        table.add_row(
            escape(shown), escape(info.flow), info.status.replace("_", " "), escape(info.current_step),
            str(info.turns), escape(info.principal or "-"), updated,
        )  # fmt: skip
    return table


@sessions_app.command("show")
def sessions_show(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session id (or a unique prefix).")],
    store: StoreOpt = None,
    trace: Annotated[
        bool, typer.Option("--trace", help="Show each turn's recorded timeline instead of the transcript.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the timeline as JSON (valid against `picoflow sessions timeline-schema`)."
        ),
    ] = False,
) -> None:
    """Show a session: transcript, steps visited, usage, the decisions on its approvals, warnings and
    errors; with --trace, what happened inside each turn (the inspector's timeline)."""

    async def work(engine: FlowEngine) -> tuple[_Record, SessionTimeline | None, float]:
        found = await resolve_session_id(engine, session_id)
        record = await _read_session(engine, found)
        timeline = await engine.timeline(found, principal=ANY_PRINCIPAL) if trace or as_json else None
        return record, timeline, engine.clock()

    (session, transcript, failures), timeline, now = run(lambda: _with_engine(store, work))
    if as_json:
        assert timeline is not None
        exported = timeline.model_dump(mode="json", by_alias=True, exclude_none=True)
        typer.echo(json.dumps(exported, ensure_ascii=False, indent=2))
        return
    console.rule(f"session {escape(session.id)}")
    facts = Table.grid(padding=(0, 2))
    for name, value in (
        ("flow", session.flow),
        ("status", session.status),
        ("current step", session.current_step),
        ("steps visited", " → ".join(session.sequence) or "-"),
        ("principal", session.principal or "-"),
        ("turns", f"{session.turns} (revision {session.revision})"),
        ("created", when(session.created_at)),
        ("updated", when(session.updated_at)),
        ("models", ", ".join(f"{step}: {name}" for step, name in session.models.items()) or "-"),
    ):
        facts.add_row(f"[dim]{name}[/dim]", escape(value))
    console.print(facts)
    usage = session.usage
    console.print(
        f"[dim]usage[/dim]  {usage.input_tokens} in + {usage.output_tokens} out = "
        f"{usage.total_tokens} tokens, {usage.model_calls} model calls, {usage.tool_calls} tool calls"
    )
    if timeline is not None:
        console.rule("timeline", style="dim")
        console.print(render_timeline(timeline))
    else:
        console.rule("transcript", style="dim")
        for message in transcript:
            console.print(_transcript_line(message))
    if session.approvals:
        console.rule("decisions", style="dim")
        console.print(decisions_table(session.approvals, now))
    if session.warnings:
        console.rule("warnings", style="yellow")
        for record in session.warnings:
            console.print(f"[yellow]{escape(record.code)}[/yellow] {escape(record.message)}")
    if failures:
        console.rule("errors", style="red")
        for record in failures:
            where = f" in {record.step}" if record.step else ""
            console.print(f"[red]{escape(record.code)}[/red]{escape(where)}: {escape(record.message)}")


@sessions_app.command("timeline-schema")
def timeline_schema_command(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write it to this file (default: print it).")
    ] = None,
) -> None:
    """Print the JSON schema of the timeline `sessions show --json` exports."""
    text = json.dumps(timeline_schema(), indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None
    console.print(f"[dim]schema written to {escape(str(output))}[/dim]")


async def _read_session(engine: FlowEngine, session_id: str) -> _Record:
    """The session whoever it belongs to, its transcript and its error records."""
    session = await engine.get_session(session_id, principal=ANY_PRINCIPAL)
    transcript = await engine.transcript(session_id, principal=ANY_PRINCIPAL)
    failures = await engine.session_errors(session_id, principal=ANY_PRINCIPAL)
    if session is None or transcript is None or failures is None:  # unknown, or deleted meanwhile
        raise CliError(f"no session {session_id} in this store: `picoflow sessions list` shows them")
    return session, transcript, failures


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
    files = ""
    if message.attachments:
        refs = message.attachments
        listed = ", ".join(f"{ref.name} ({ref.media_type}, {ref.size:,} bytes)" for ref in refs)
        files = f" [dim]{escape(f'[files: {listed}]')}[/dim]"
    return f"{where}[{color}]{message.role}[/{color}]{kind}: {escape(message.content)}{files}"


async def _with_engine(store: str | None, work: Callable[[FlowEngine], Awaitable[T]]) -> T:
    engine = store_engine(store)
    try:
        return await work(engine)
    finally:
        await engine.aclose()


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

    run(work)
