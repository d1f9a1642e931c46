"""``picoflow handoffs list|take|reply|return``: the staff queue of conversations handed to a person
(a ``Handoff`` step), taken, answered and handed back from the terminal.

Every command acts as one caller, built from ``--as PRINCIPAL`` and ``--role ROLE`` as for
``picoflow approvals``: the engine admits exactly what it would over HTTP (only callers with the
staff visibility, ``staff`` unless the application names another), so the command line is no back
door. The commands need only the store: the flows are read from it (``return --flows`` checks the
step against the flow's code rather than the steps the conversation was in).

Exit codes: 0 done (or listed); 1 refused, nothing changed (not staff, unknown session, not awaiting
a human, taken by another, a conflict, bad input)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from picoflow.cli.approvals import AsOpt, RoleOpt, SessionArg, caller_of, describe_caller
from picoflow.cli.loading import (
    USER_ERRORS,
    FlowsOpt,
    StoreOpt,
    console,
    fail,
    load_flows,
    resolve_session_id,
    run,
    store_engine,
)
from picoflow.cli.views import when
from picoflow.engine import FlowEngine
from picoflow.sessions import open_store

handoffs_app = typer.Typer(
    help="Take over conversations handed to a person: the staff queue, take, reply, return.",
    no_args_is_help=True,
)


@handoffs_app.command("list")
def handoffs_list(
    flow: Annotated[str | None, typer.Option(help="Only this flow's sessions.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=500, metavar="<n>", help="How many, oldest handoff first.")
    ] = 50,
    summaries: Annotated[bool, typer.Option("--summaries", help="Print each summary in full.")] = False,
    as_: AsOpt = "local",
    role: RoleOpt = None,
    store: StoreOpt = None,
) -> None:
    """List the sessions awaiting a human, oldest first: why, since when, who took each."""

    async def work(engine: FlowEngine) -> None:
        caller = caller_of(as_, role)
        queue = await engine.handoffs(caller=caller, flow=flow, limit=limit)
        if not queue:
            console.print(f"no conversations wait for a person ({escape(describe_caller(caller))})")
            return
        table = Table()
        table.add_column("session", no_wrap=True)  # what take, reply and return name: never cut
        for name in ("flow", "from step", "reason", "since", "taken by"):
            table.add_column(name)
        for item in queue:
            table.add_row(
                item.session_id, escape(item.flow), escape(item.step), escape(item.reason or "-"),
                when(item.since), escape(item.taken_by or "-"),
            )  # fmt: skip
        console.print(table)
        if summaries:
            for item in queue:
                console.print(
                    f"\n[bold]{escape(item.session_id)}[/bold]\n{escape(item.summary)}", soft_wrap=True
                )

    _run(store, None, work)


@handoffs_app.command("take")
def handoffs_take(
    session: SessionArg,
    force: Annotated[bool, typer.Option("--force", help="Take it over from whoever took it.")] = False,
    as_: AsOpt = "local",
    role: RoleOpt = None,
    store: StoreOpt = None,
) -> None:
    """Take a conversation awaiting a person: it is yours to reply in and hand back. Prints its summary."""

    async def work(engine: FlowEngine) -> None:
        caller = caller_of(as_, role)
        session_id = await resolve_session_id(engine, session)
        taken = await engine.take(session_id, caller=caller, force=force)
        console.print(
            f"taken by {escape(taken.taken_by or '-')}: session {escape(session_id)}", soft_wrap=True
        )
        console.print(escape(taken.summary), soft_wrap=True)

    _run(store, None, work)


@handoffs_app.command("reply")
def handoffs_reply(
    session: SessionArg,
    text: Annotated[str, typer.Argument(metavar="TEXT", help="What the user reads.")],
    as_: AsOpt = "local",
    role: RoleOpt = None,
    store: StoreOpt = None,
) -> None:
    """Write to the user of a conversation you took (shown to them as from staff)."""

    async def work(engine: FlowEngine) -> None:
        caller = caller_of(as_, role)
        session_id = await resolve_session_id(engine, session)
        message = await engine.reply_as_staff(session_id, text, caller=caller)
        console.print(f"sent as {escape(message.author or '-')} (seq {message.seq})", soft_wrap=True)

    _run(store, None, work)


@handoffs_app.command("return")
def handoffs_return(
    session: SessionArg,
    step: Annotated[
        str | None, typer.Option(help="The step it goes on in (by default the one it was handed off from).")
    ] = None,
    note: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Told to that step's model, never shown to the user.")
    ] = None,
    as_: AsOpt = "local",
    role: RoleOpt = None,
    store: StoreOpt = None,
    flows: FlowsOpt = None,
) -> None:
    """Hand a conversation you took back to the flow: the model answers the user's next message."""

    async def work(engine: FlowEngine) -> None:
        caller = caller_of(as_, role)
        session_id = await resolve_session_id(engine, session)
        info = await engine.hand_back(session_id, step, caller=caller, note=note)
        console.print(
            f"handed back: session {escape(session_id)} is {info.status} in {escape(info.current_step)}",
            soft_wrap=True,
        )

    _run(store, flows, work)


def _run(store: str | None, flows: str | None, work: Callable[[FlowEngine], Awaitable[None]]) -> None:
    try:
        engine = (
            store_engine(store) if flows is None else FlowEngine(load_flows(flows), store=open_store(store))
        )
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None

    async def with_engine() -> None:
        try:
            await work(engine)
        finally:
            await engine.aclose()

    run(with_engine)  # a refusal, as any typed failure, ends the command in one line
