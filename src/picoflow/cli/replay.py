"""``picoflow replay``: stored sessions played again against the current code, as a per-turn diff
(``picoflow.replay``). It reads the store and writes nothing to it; exit code 0 when every turn
is as recorded, 1 when one differs or diverged, 2 for a mistake in the command."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.markup import escape

from picoflow.cli.loading import (
    USER_ERRORS,
    CliError,
    FlowsOpt,
    ModelOpt,
    StoreOpt,
    build_model,
    console,
    fail,
    load_flows,
    resolve_session_id,
    store_engine,
)
from picoflow.engine import ANY_PRINCIPAL, FlowEngine
from picoflow.models.base import Model
from picoflow.models.fallback import as_model
from picoflow.replay import Difference, ReplayReport, SessionReplay, TurnReplay, replay_sessions
from picoflow.session import SessionStatus

_PAGE = 500
SHOWN = 400
"""Characters of a value a difference shows (wrapped at the terminal's width); past them, an ellipsis."""


def replay(
    session_ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ID]...", help="Sessions to replay (ids or unique prefixes); none: by the filters."
        ),
    ] = None,
    flows: FlowsOpt = None,
    store: StoreOpt = None,
    flow: Annotated[str | None, typer.Option(help="Only sessions of this flow.")] = None,
    status: Annotated[
        SessionStatus | None,
        typer.Option(help="Only sessions in this status (running, completed, ...)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(metavar="<YYYY-MM-DD>", help="Only sessions updated on or after this day.")
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, metavar="<n>", help="Most sessions listed, most recent first.")
    ] = 50,
    sample: Annotated[
        int | None,
        typer.Option(min=1, metavar="<n>", help="Replay n of the sessions listed, drawn at random."),
    ] = None,
    seed: Annotated[int | None, typer.Option(metavar="<n>", help="Seed of --sample's draw.")] = None,
    model: ModelOpt = None,
    tools: Annotated[
        bool,
        typer.Option(
            "--tools/--no-tools",
            help="Run tools without approval against the current code (default), or answer them "
            "from the recording. Approval-gated tools never run.",
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON (ReplayReport).")] = False,
) -> None:
    """Replay stored sessions against the current code and print what each turn does differently.

    Each request the recording holds gets the recorded answer; any other goes to --model, or,
    without one, ends that session's replay as diverged. Exit code 0: every turn as recorded.
    """
    try:
        flow_classes = load_flows(flows)
        if flow is not None and flow not in {cls.spec().name for cls in flow_classes}:
            known = ", ".join(cls.spec().name for cls in flow_classes)
            raise CliError(f"no flow named {flow!r} among the flows given (known: {known})")
        day = _day(since)
        fallback = _fallback(model)
        engine = store_engine(store)
    except USER_ERRORS as exc:
        raise fail(str(exc), code=2) from None

    async def work() -> ReplayReport:
        try:
            if session_ids:
                chosen = [await resolve_session_id(engine, given) for given in session_ids]
            else:
                chosen = await _listed(engine, flow, status, day, limit)
                if sample is not None and sample < len(chosen):
                    chosen = sorted(random.Random(seed).sample(chosen, sample))
            if not chosen:
                raise CliError("no stored session matches: `picoflow sessions list` shows them")
            return await replay_sessions(engine, chosen, flow_classes, model=fallback, run_tools=tools)
        finally:
            await engine.aclose()
            if fallback is not None:
                await fallback.aclose()

    try:
        report = asyncio.run(work())
    except USER_ERRORS as exc:
        raise fail(str(exc), code=2) from None
    if as_json:
        print(json.dumps(report.model_dump(mode="json"), indent=1, ensure_ascii=False))
    else:
        _print(report)
    if not report.same:
        raise typer.Exit(1)


def _day(since: str | None) -> float | None:
    if since is None:
        return None
    try:
        return datetime.strptime(since, "%Y-%m-%d").timestamp()
    except ValueError:
        raise CliError(f"--since {since}: give a day as YYYY-MM-DD") from None


def _fallback(choice: str | None) -> Model | None:
    built = build_model(choice)
    return None if built is None else as_model(built)


async def _listed(
    engine: FlowEngine, flow: str | None, status: SessionStatus | None, since: float | None, limit: int
) -> list[str]:
    found: list[str] = []
    offset = 0
    while len(found) < limit:
        wanted = min(_PAGE, limit - len(found))
        page = await engine.list_sessions(
            principal=ANY_PRINCIPAL, flow=flow, status=status, limit=wanted, offset=offset
        )
        offset += len(page)
        found += [info.id for info in page if since is None or info.updated_at >= since]
        if len(page) < wanted:
            break
    return found


# --- the report, in words ------------------------------------------------------------------------


def _print(report: ReplayReport) -> None:
    answered = f"--model {report.fallback_model}" if report.fallback_model else "no fallback model"
    tools = "tools run" if report.tools_run else "tools answered from the recording"
    console.print(f"[dim]replay: {answered}; {tools}; approval-gated tools never run[/dim]")
    for session in report.sessions:
        _print_session(session)
    same = sum(session.status == "same" for session in report.sessions)
    verdict = "[green]SAME[/green]" if report.same else "[red]DIFFERS[/red]"
    console.print(f"{verdict} {same}/{len(report.sessions)} sessions replayed as recorded")


def _print_session(session: SessionReplay) -> None:
    counts: dict[str, int] = {}
    for turn in session.turns:
        counts[turn.status] = counts.get(turn.status, 0) + 1
    said = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts.items())
    colour = {"same": "green", "differs": "red", "diverged": "red"}[session.status]
    console.print(
        f"[{colour}]{session.status}[/{colour}] {escape(session.session_id)} ({escape(session.flow)}): "
        f"{len(session.turns)} turns, {said}",
        soft_wrap=True,
    )
    for turn in session.turns:
        if turn.status in ("same", "not_replayed") and not turn.fallback_answers:
            continue
        _print_turn(turn)


def _print_turn(turn: TurnReplay) -> None:
    heard = _short(turn.message if len(turn.message) <= 50 else turn.message[:49] + "…")
    console.print(f"  turn {turn.turn} {escape(heard)}: [bold]{turn.status}[/bold]", soft_wrap=True)
    if turn.diverged is not None:
        label = "diverged at" if turn.status == "diverged" else "not in the recording"
        console.print(f"    {label}: {escape(turn.diverged)}", soft_wrap=True)
    if turn.fallback_answers:
        console.print(f"    {turn.fallback_answers} request(s) answered by the fallback model")
    for difference in turn.differences:
        _print_difference(difference)


def _print_difference(difference: Difference) -> None:
    name = difference.part if difference.key is None else f"{difference.part} {difference.key}"
    console.print(f"    {escape(name)}", soft_wrap=True)
    for sign, colour, value in (("-", "red", difference.recorded), ("+", "green", difference.replayed)):
        for index, line in enumerate(_lines(value)):
            console.print(f"      [{colour}]{sign if index == 0 else ' '} {escape(line)}[/{colour}]")


def _lines(value: Any) -> list[str]:
    """A value of a difference as printed: a text as its lines (a reply keeps its shape), anything
    else as JSON; at most ``SHOWN`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > SHOWN:
        text = text[: SHOWN - 1] + "…"
    return text.splitlines() or [""]


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = json.dumps(text, ensure_ascii=False) if isinstance(value, str) else text
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"
