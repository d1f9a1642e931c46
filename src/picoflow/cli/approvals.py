"""``picoflow approvals list|approve|deny``: a supervisor's queue of the calls waiting for a decision,
and deciding them from the terminal.

Every command acts as one caller, built from ``--as PRINCIPAL`` and ``--role ROLE``: the engine
shows and admits exactly what it would to that caller over HTTP or MCP, so the command line is no
back door. ``--as`` defaults to ``local``, the principal ``picoflow chat`` and ``picoflow serve
--open`` talk as, so a developer decides their own chat's calls from another terminal without
options; a supervisor names themself and their roles (``--as sup-9 --role staff``), and the audit
trail records that principal as the one who decided.

Exit codes: 0 decided (or listed); 1 nothing was decided (a refusal: unknown, not allowed, decided
already, expired, stale, a conflict; or bad input); 3 the decision was taken but the turn that
followed it failed (the decision stands; ``picoflow sessions show`` has the rest)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from picoflow.approvals import Approval
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
    store_engine,
)
from picoflow.cli.sessions import SHORT_ID, WIDE
from picoflow.cli.views import approval_card, expiry, match_approval, print_reply, unique_prefixes, when
from picoflow.context import Caller
from picoflow.engine import FlowEngine
from picoflow.exceptions import ApprovalRefused, FlowNotFound, InvalidInput, PicoflowError
from picoflow.results import TurnResult

T = TypeVar("T")

approvals_app = typer.Typer(
    help="Decide the calls waiting for approval: a supervisor's queue.", no_args_is_help=True
)

AsOpt = Annotated[
    str,
    typer.Option(
        "--as",
        metavar="PRINCIPAL",
        help="The principal you decide as (recorded as who decided); local, as picoflow chat, by default.",
    ),
]
RoleOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--role", metavar="ROLE", help="A role you hold (e.g. staff): admits approvals naming it; repeatable."
    ),
]
ReasonOpt = Annotated[
    str | None,
    typer.Option(metavar="TEXT", help="Why, kept with the decision (and told to the model on a denial)."),
]
SessionArg = Annotated[str, typer.Argument(metavar="SESSION", help="The session id (or a unique prefix).")]
ApprovalArg = Annotated[str, typer.Argument(metavar="APPROVAL", help="The approval id (or a unique prefix).")]

DECIDED_BUT_FAILED = 3
"""The exit code when the decision was taken and the turn after it failed."""


def caller_of(principal: str, roles: list[str] | None) -> Caller:
    """The caller the options name; ``CliError`` for an empty principal or role."""
    if not principal.strip():
        raise CliError("--as must name a principal")
    labels = [role.strip() for role in roles or ()]
    if not all(labels):
        raise CliError("--role must not be empty")
    return Caller(principal=principal.strip(), visibilities=frozenset(labels))


def describe_caller(caller: Caller) -> str:
    roles = ", ".join(sorted(caller.visibilities))
    return f"{caller.principal} ({roles})" if roles else str(caller.principal)


@approvals_app.command("list")
def approvals_list(
    session: Annotated[
        str | None,
        typer.Option(
            help="Show this session's whole trail (its id or a unique prefix) instead of the queue."
        ),
    ] = None,
    flow: Annotated[str | None, typer.Option(help="Only approvals of this flow's sessions.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=500, metavar="<n>", help="How many, most recent sessions first.")
    ] = 50,
    as_: AsOpt = "local",
    role: RoleOpt = None,
    store: StoreOpt = None,
) -> None:
    """List the pending approvals you may decide (or, with --session, every approval of one session
    you may see, decided or not)."""
    try:
        caller = caller_of(as_, role)
    except CliError as exc:
        raise fail(str(exc)) from None
    who = describe_caller(caller)

    async def work(engine: FlowEngine) -> None:
        now = engine.clock()
        if session is not None:
            session_id = await resolve_session_id(engine, session)
            trail = await engine.approvals(session_id, caller=caller)
            if not trail:
                console.print(f"no approvals in session {escape(session_id)} for {escape(who)}")
                return
            table = Table()
            table.add_column("id", no_wrap=True)
            for name in ("tool", "summary", "status", "who", "expires", "decided by", "reason"):
                table.add_column(name)
            for approval in trail:
                table.add_row(
                    approval.id, escape(approval.tool), escape(approval.summary), approval.status,
                    escape(approval.approvers.describe()),
                    expiry(approval, now) if approval.pending else when(approval.expires_at),
                    escape(approval.decided_by or "-"), escape(approval.reason or "-"),
                )  # fmt: skip
            console.print(table)
            return
        queue = await engine.pending_approvals(caller=caller, flow=flow, limit=limit)
        if not queue:
            console.print(f"no approvals wait for {escape(who)}")
            return
        # Ids are what approve and deny take: never cut. Below 120 columns each is shown by its
        # shortest prefix unique among those listed (the commands take one), and the table has no
        # vertical rules, so 80 columns hold every column; a long summary wraps.
        wide = console.width >= WIDE
        approvals = [approval.id for _, approval in queue]
        sessions = [session_id for session_id, _ in queue]
        if not wide:
            approvals = unique_prefixes(approvals, len("apr_") + SHORT_ID)
            sessions = unique_prefixes(sessions, SHORT_ID)
        table = Table(
            box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True
        )
        table.add_column("id", no_wrap=True)
        table.add_column("session", no_wrap=True)
        table.add_column("tool", overflow="fold")
        table.add_column("summary", overflow="fold", ratio=1)
        table.add_column("who", overflow="fold")
        table.add_column("expires", no_wrap=True)
        for shown, session_shown, (_, approval) in zip(approvals, sessions, queue, strict=True):
            table.add_row(
                shown, session_shown, escape(approval.tool), escape(approval.summary),
                escape(approval.approvers.describe()), expiry(approval, now),
            )  # fmt: skip
        console.print(table)

    run(lambda: _with(store_engine(store), work))


@approvals_app.command("approve")
def approvals_approve(
    session: SessionArg,
    approval: ApprovalArg,
    reason: ReasonOpt = None,
    as_: AsOpt = "local",
    role: RoleOpt = None,
    store: StoreOpt = None,
    model: ModelOpt = None,
    flows: FlowsOpt = None,
) -> None:
    """Approve a waiting call: it runs (once), the conversation goes on, and its reply is printed.
    Needs the flows the session runs (--flows) and their model, as the server has them."""
    _decide(session, approval, "approve", reason, as_, role, store, model, flows)


@approvals_app.command("deny")
def approvals_deny(
    session: SessionArg,
    approval: ApprovalArg,
    reason: ReasonOpt = None,
    as_: AsOpt = "local",
    role: RoleOpt = None,
    store: StoreOpt = None,
    model: ModelOpt = None,
    flows: FlowsOpt = None,
) -> None:
    """Deny a waiting call: it does not run, the model is told (with the reason), and the
    conversation's reply is printed."""
    _decide(session, approval, "deny", reason, as_, role, store, model, flows)


def _decide(
    session: str,
    given: str,
    decision: str,
    reason: str | None,
    principal: str,
    roles: list[str] | None,
    store: str | None,
    model: str | None,
    flows: str | None,
) -> None:
    try:
        caller = caller_of(principal, roles)
        engine = build_engine(flows, store, model)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None

    async def work(engine: FlowEngine) -> tuple[str, Approval | None, TurnResult, bool]:
        session_id = await resolve_session_id(engine, session)
        asked = await find_approval(engine, session_id, given, caller)
        approval_id = given if asked is None else asked.id
        with said_here():
            result = await engine.decide(session_id, approval_id, decision, reason, caller=caller)
        taken = await was_decided(engine, session_id, asked, result, caller)
        return session_id, asked, result, taken

    session_id, asked, result, taken = run(lambda: _with(engine, work))
    if not taken:
        raise fail(f"not {'approved' if decision == 'approve' else 'denied'}: {refusal_text(result)}")
    done = "approved" if decision == "approve" else "denied"
    named = f"{asked.id}: {asked.summary}" if asked is not None else given
    console.print(f"{done} {escape(named)} (session {escape(session_id)})", soft_wrap=True)
    if result.error is not None:
        failed = f"the decision stands, but the turn after it failed: {result.message}"
        raise fail(failed, DECIDED_BUT_FAILED)
    print_reply(result.flow or "", result)
    for waiting in result.pending:
        command = f"picoflow approvals approve|deny {session_id} {waiting.id} [--reason TEXT]"
        console.print(approval_card(waiting, engine.clock(), command))


async def was_decided(
    engine: FlowEngine, session_id: str, asked: Approval | None, result: TurnResult, caller: Caller
) -> bool:
    """Whether the decision on ``asked`` (as it stood before) was taken: always when the result is
    a reply, never for a refusal; after another failure the session's trail says (a model failing
    after the decision was recorded leaves it decided; a flow not loaded, or a store failing
    before, leaves it pending)."""
    error = result.error
    if error is None:
        return True
    if error.is_a(ApprovalRefused, InvalidInput) or asked is None or not asked.pending:
        return False
    try:
        shown = await engine.approvals(session_id, caller=caller) or []
    except PicoflowError:
        return False  # the store still fails: nothing says the decision was recorded
    now = next((approval for approval in shown if approval.id == asked.id), None)
    return now is not None and now.status in ("approved", "denied")


def refusal_text(result: TurnResult) -> str:
    """Why nothing was decided, with what to do when the command line can help."""
    if result.error is not None and result.error.is_a(FlowNotFound):
        return f"{result.message} (load the flows the session runs with --flows module:Class)"
    return result.message


async def find_approval(engine: FlowEngine, session_id: str, given: str, caller: Caller) -> Approval | None:
    """The approval of ``session_id`` that ``given`` names (its id or a unique prefix) among those
    the caller may see; None for a whole id the caller cannot see (the engine's refusal says
    what it may), ``CliError`` for a prefix that names none or several."""
    if not given.strip():
        raise CliError("name the approval: its id or a unique prefix")
    shown = await engine.approvals(session_id, caller=caller) or []
    found = match_approval(given.strip(), shown)
    if len(found) == 1:
        return found[0]
    if not found:
        if re.fullmatch(r"apr_[0-9a-f]{24}", given):
            return None
        raise CliError(f"no approval {given} in session {session_id} for {describe_caller(caller)}")
    names = ", ".join(a.id for a in found[:5]) + (", ..." if len(found) > 5 else "")
    raise CliError(f"{given} is ambiguous: it starts {names}; give more characters")


async def _with(engine: FlowEngine, work: Callable[[FlowEngine], Awaitable[T]]) -> T:
    try:
        return await work(engine)
    finally:
        await engine.aclose()
