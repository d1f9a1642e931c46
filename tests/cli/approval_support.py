"""What the approval command tests share: the desk flow's options, the time every approval is asked at,
an approval card's lines, and reading a chat's session id, tables and the approvals stored."""

from __future__ import annotations

import asyncio
from pathlib import Path

from picoflow.approvals import Approval
from picoflow.models import ToolCall
from picoflow.sessions import open_store

from .support import invoke, write_script

NOW = 1_800_000_000.0
"""2027-01-15 08:00:00 UTC: when every approval of these tests is asked and decided."""
FLOWS = "tests.cli.desk:DeskFlow"


def session_of(output: str) -> str:
    """The session id a chat names when it ends."""
    return output.split("picoflow sessions show ")[1].split(")")[0]


def stored_approvals(url: str, session_id: str) -> list[Approval]:
    async def load() -> list[Approval]:
        opened = open_store(url)
        try:
            session = await opened.load(session_id)
        finally:
            await opened.close()
        assert session is not None
        return list(session.approvals)

    return asyncio.run(load())


def lines(output: str) -> list[str]:
    """The output's lines without the spaces a wide console pads them with."""
    return [line.rstrip() for line in output.splitlines()]


def table(output: str) -> list[list[str]]:
    """The cells of every header and body row of the tables in ``output``, row by row."""
    return [
        [cell.strip() for cell in line.strip()[1:-1].split(line.strip()[0])]
        for line in output.splitlines()
        if line.strip()[:1] in ("│", "┃")
    ]


SMALL = ToolCall("refund", {"order_id": 40001, "amount": 25.5})
BIG = ToolCall("refund", {"order_id": 40001, "amount": 250.0})
NOTE = ToolCall("send_note", {"text": "hi"})
HEADER = [
    "─" * 97 + " desk " + "─" * 97,
    "A support desk whose refunds wait for approval.",
    "/attach FILE sends a file, /new starts over, /help lists the commands, /quit or Ctrl-D leaves",
]
ONE_WAITS = "/approve [reason] runs it, /deny [reason] refuses it; typing a message instead withdraws it"


def card(summary: str, args: list[tuple[str, str]], who: str, approval_id: str, commands: str) -> list[str]:
    """The lines of an approval's card, asked at NOW for ten minutes."""
    body = [summary, ""]
    if args:
        width = max(len("argument"), *(len(name) for name, _ in args))
        body += [f"{'argument':<{width}}  value", *(f"{n:<{width}}  {v}" for n, v in args), ""]
    body += [
        "tool     " + ("refund" if summary.startswith("Refund") else "send_note"),
        f"who      {who} must approve",
        "expires  2027-01-15 08:10:00 (in 10 min)",
        f"id       {approval_id}",
        "",
        commands,
    ]
    inner = max(len(line) for line in body)
    title = "─ waiting for approval "
    return [
        "╭" + title + "─" * (inner + 2 - len(title)) + "╮",
        *(f"│ {line:<{inner}} │" for line in body),
        "╰" + "─" * (inner + 2) + "╯",
    ]


def chat_lines(tmp_path: Path, store: str, script: list[object], said: str, *extra: str) -> list[str]:
    model = write_script(tmp_path / "chat.json", script)
    done = invoke("chat", "desk", "--flows", FLOWS, "--store", store, "--model", model, *extra, input=said)
    assert done.exit_code == 0, done.output
    return lines(done.output)


DECISIONS = ["id", "tool", "summary", "status", "asked", "decided by", "decided", "args sha256", "reason"]
"""The header of the decisions table ``sessions show`` prints."""
