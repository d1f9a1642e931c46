"""What the approval command tests share: the desk flow's options, a fixed clock and time zone (so
expiry times print exactly), and reading a chat's session id and the approvals stored."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest
from tests.cli import desk

from picoflow.approvals import Approval
from picoflow.cli import loading
from picoflow.sessions import open_store

NOW = 1_800_000_000.0
"""2027-01-15 08:00:00 UTC: when every approval of these tests is asked and decided."""
FLOWS = "tests.cli.desk:DeskFlow"


@pytest.fixture(autouse=True)
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(loading, "clock", lambda: NOW)
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    desk.LEDGER.clear()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
        desk.LEDGER.clear()


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
