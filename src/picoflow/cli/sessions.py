"""``picoflow sessions …`` reads stored sessions through a ``FlowEngine`` without flows, as an
operator's tool: every read names ``ANY_PRINCIPAL``; ``sessions check`` loads the flows given and
checks every live session against them, changing nothing. ``picoflow db upgrade`` is the storage
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

from picoflow.cli.loading import (
    USER_ERRORS,
    CliError,
    FlowsOpt,
    StoreOpt,
    console,
    fail,
    load_flows,
    resolve_session_id,
    run,
    store_engine,
)
from picoflow.cli.timeline import render_timeline, short_version
from picoflow.cli.views import decisions_table, unique_prefixes, when
from picoflow.engine import ANY_PRINCIPAL, FlowEngine
from picoflow.messages import Message
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions import open_store
from picoflow.timeline import SessionTimeline, timeline_schema
from picoflow.versions import CheckGroup, FlowCheck

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


WOULD_FAIL = 1
"""The exit code of ``sessions check`` when a session would fail under the flows given."""
EXAMPLES = 3
"""Session ids ``sessions check`` shows per line (``--json`` has the first five)."""


@sessions_app.command("check")
def sessions_check(
    flows: FlowsOpt = None,
    store: StoreOpt = None,
    page: Annotated[
        int, typer.Option(min=1, max=100_000, metavar="<n>", help="Sessions read at a time.")
    ] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Before a deploy: load every live session of the given flows against them (the new code) and
    say what would happen to each — nothing, migrate, fall back to Flow.fallback, or fail, and why.
    Changes nothing. Exits with 1 when a session would fail."""
    try:
        loaded = load_flows(flows)
        engine = store_engine(store)
        for flow in loaded:
            engine.register(flow)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None

    async def work(engine: FlowEngine) -> tuple[list[FlowCheck], dict[str, int]]:
        reports = [await engine.check_sessions(spec.name, page=page) for spec in engine.flows]
        counted = await engine.live_versions()
        checked = {spec.name for spec in engine.flows}
        others: dict[str, int] = {}
        for (flow, _), count in counted.items():
            if flow not in checked:
                others[flow] = others.get(flow, 0) + count
        return reports, others

    reports, others = run(lambda: _with_engine_of(engine, work))
    failed = sum(report.failed for report in reports)
    if as_json:
        typer.echo(json.dumps(_check_json(reports, others), ensure_ascii=False, indent=2))
    else:
        for report in reports:
            _print_check(report)
        if others:
            listed = ", ".join(f"{escape(flow)} ({count:,})" for flow, count in sorted(others.items()))
            console.print(f"[dim]not checked (their flows were not given): {listed}[/dim]")
        if failed:
            console.print(
                f"[red]{failed:,} session(s) would fail[/red]: see each reason (a step they stand in "
                "needs Flow.renamed or Flow.fallback) before deploying",
                soft_wrap=True,
            )
        else:
            console.print("[green]no session would fail[/green]")
    if failed:
        raise typer.Exit(WOULD_FAIL)


def _print_check(report: FlowCheck) -> None:
    checked = report.checked
    console.rule(
        f"flow {escape(report.flow)} · checked against version {short_version(report.version)}",
        style="dim",
        align="left",
    )
    stored = ", ".join(f"{short_version(version)}: {count:,}" for version, count in report.stored.items())
    console.print(
        f"{checked:,} live session(s)" + (f"; stored under {stored}" if stored else ""), soft_wrap=True
    )
    verdicts = report.verdicts
    console.print(
        f"  current {verdicts['current']:,} · migrate {verdicts['migrate']:,} · "
        f"fall back {verdicts['fall_back']:,} · [{'red' if verdicts['fail'] else 'green'}]fail "
        f"{verdicts['fail']:,}[/]"
    )
    for title, groups in (("would change", report.changes), ("would fail", report.failures)):
        if groups:
            console.print()
            console.print(_groups_table(title, list(groups.values()), wide=console.width >= WIDE))
    console.print()


def _groups_table(title: str, groups: list[CheckGroup], *, wide: bool) -> Table:
    """One line per group: what it is, how many sessions, and a few of them (on a narrow terminal
    by the shortest prefix of their ids unique among those shown, as ``sessions list`` does)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column(title, overflow="fold", style="red" if title == "would fail" else None)
    table.add_column("sessions", justify="right", no_wrap=True)
    table.add_column("for example", overflow="fold")
    for group in sorted(groups, key=lambda g: (-g.sessions, g.what)):
        examples = group.examples[:EXAMPLES]
        ids = examples if wide else unique_prefixes(examples, SHORT_ID)
        shown = ", ".join(ids) + (", …" if group.sessions > EXAMPLES else "")
        table.add_row(escape(group.what), f"{group.sessions:,}", escape(shown))
    return table


def _check_json(reports: list[FlowCheck], others: dict[str, int]) -> dict[str, object]:
    def groups(found: dict[str, CheckGroup]) -> list[dict[str, object]]:
        ordered = sorted(found.values(), key=lambda g: (-g.sessions, g.what))
        return [{"what": g.what, "sessions": g.sessions, "examples": g.examples} for g in ordered]

    return {
        "flows": [
            {
                "flow": report.flow,
                "version": report.version,
                "stored": report.stored,
                "checked": report.checked,
                "verdicts": report.verdicts,
                "changes": groups(report.changes),
                "failures": groups(report.failures),
                "seconds": round(report.seconds, 3),
            }
            for report in reports
        ],
        "not_checked": others,
        "failed": sum(report.failed for report in reports),
    }


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
    return await _with_engine_of(store_engine(store), work)


async def _with_engine_of(engine: FlowEngine, work: Callable[[FlowEngine], Awaitable[T]]) -> T:
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
