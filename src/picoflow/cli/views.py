"""How turns and approvals read in the terminal: a reply, the card of a call waiting for approval,
and a session's decisions as an audit table. Shared by ``chat``, ``approvals`` and ``sessions``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.json import JSON
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from picoflow.approvals import Approval
from picoflow.cli.loading import console
from picoflow.results import TurnResult


def when(timestamp: float) -> str:
    """A moment as the operator's local time, to the second."""
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def time_left(expires_at: float, now: float) -> str:
    """How long an approval has left, in words (``in 10 min``, ``expired``)."""
    left = expires_at - now
    if left <= 0:
        return "expired"
    if left < 60:
        return f"in {int(left)} s"
    if left < 3600:
        return f"in {round(left / 60)} min"
    if left < 2 * 86400:
        return f"in {round(left / 3600)} h"
    return f"in {int(left // 86400)} days"


def expiry(approval: Approval, now: float) -> str:
    """When an approval expires, and how long that is from ``now``."""
    return f"{when(approval.expires_at)} ({time_left(approval.expires_at, now)})"


def print_reply(flow: str, result: TurnResult) -> None:
    """A turn's reply under the flow's name and step: JSON, Markdown or plain text by its type."""
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


def argument_text(value: Any) -> str:
    """An argument's value as one would type it: text as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def approval_card(approval: Approval, now: float, commands: str | None = None) -> Panel:
    """What a person needs to decide one call: what it does (in code's words), the arguments it
    runs with, who must approve, until when, its id, and (``commands``) how to decide it."""
    arguments = Table(box=None, padding=(0, 2, 0, 0), show_edge=False)
    arguments.add_column("argument", style="dim")
    arguments.add_column("value")
    for name, value in approval.args.items():
        arguments.add_row(escape(name), escape(argument_text(value)))
    facts = Table.grid(padding=(0, 2))
    facts.add_row("[dim]tool[/dim]", escape(approval.tool))
    facts.add_row("[dim]who[/dim]", f"{escape(approval.approvers.describe())} must approve")
    facts.add_row(
        "[dim]expires[/dim]", f"{when(approval.expires_at)} ({time_left(approval.expires_at, now)})"
    )
    facts.add_row("[dim]id[/dim]", escape(approval.id))
    parts: list[RenderableType] = [Text(approval.summary, style="bold"), Text()]
    if approval.args:
        parts += [arguments, Text()]
    parts.append(facts)
    if commands:
        parts += [Text(), Text(commands, style="dim")]
    return Panel(Group(*parts), title="waiting for approval", title_align="left", expand=False)


def decisions_table(approvals: Sequence[Approval], now: float) -> Table:
    """A session's approvals as its audit trail: what was asked, how it was decided, by whom and
    when, bound to which arguments (their SHA-256, shortened), and why. A pending one past its
    time reads ``expired`` (it is recorded so with the session's next message)."""
    table = Table()
    table.add_column("id", no_wrap=True)
    for name in ("tool", "summary", "status", "asked", "decided by", "decided", "args sha256", "reason"):
        table.add_column(name)
    for approval in approvals:
        status: str = approval.status
        if approval.pending and now >= approval.expires_at:
            status = "expired"
        elif approval.pending:
            status = f"pending ({time_left(approval.expires_at, now)})"
        table.add_row(
            approval.id,
            escape(approval.tool),
            escape(approval.summary),
            status,
            when(approval.created_at),
            escape(approval.decided_by or "-"),
            when(approval.decided_at) if approval.decided_at is not None else "-",
            approval.args_sha256[:12] or "-",
            escape(approval.reason or "-"),
        )
    return table


def match_approval(given: str, approvals: Iterable[Approval]) -> list[Approval]:
    """The approvals whose id is ``given`` or starts with it (``apr_`` may be left out)."""
    wanted = given if given.startswith("apr_") else f"apr_{given}"
    candidates = list(approvals)
    exact = [a for a in candidates if a.id == wanted]
    return exact or [a for a in candidates if a.id.startswith(wanted)]


def unique_prefixes(ids: list[str], shortest: int) -> list[str]:
    """For each id, its shortest prefix of at least ``shortest`` characters that no other listed id
    starts with (the whole id when it is that short, or a prefix of another): what a narrow table
    shows, as short git hashes are, since the commands take a unique prefix."""
    shown = []
    for given in ids:
        size = shortest
        while size < len(given) and any(other != given and other.startswith(given[:size]) for other in ids):
            size += 1
        shown.append(given[:size])
    return shown
