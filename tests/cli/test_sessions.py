"""``picoflow sessions list|show`` (through an engine without flows) and ``picoflow db upgrade``;
``show`` labels each message that is not a plain exchange with its kind, the model's structured
answers (``output``) included, whenever they were stored."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock

import pytest

from booking_readings import (
    BOOK,
    FIRST_READING,
    GOODBYE,
    NIGHTS,
    NIGHTS_READING,
    PRICE_WORDS,
    QUOTE,
    TURNS,
    WELCOME,
    BookingFlow,
    script,
    stored_as_before_output,
)
from picoflow import cli
from picoflow.approvals import Approval, Approvers
from picoflow.cli import sessions
from picoflow.cli.loading import CliError
from picoflow.engine import ANY_PRINCIPAL, FlowEngine
from picoflow.models import ScriptedModel
from picoflow.session import LogRecord, Session
from picoflow.sessions import open_store
from picoflow.sessions.memory import MemoryStore

from .approval_support import DECISIONS, NOW, table
from .support import invoke, stored_sessions

IDS = ["0933f88d-b1", "0933f88d-c2", "0933f_x", "0933fAx", "1"]


def test_sessions_show_takes_a_unique_prefix_and_names_an_ambiguous_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    stored_sessions(url, *(Session(id=i, flow="hotel", current_step="Explore") for i in IDS))
    shown = invoke("sessions", "show", "0933f88d-b", "--store", url)
    assert shown.exit_code == 0, shown.output
    assert "session 0933f88d-b1" in shown.output
    ambiguous = invoke("sessions", "show", "0933f88d", "--store", url)
    assert ambiguous.exit_code == 1
    assert "0933f88d is ambiguous: it starts 0933f88d-b1, 0933f88d-c2; give more characters" in " ".join(
        ambiguous.output.split()
    )
    missing = invoke("sessions", "show", "9", "--store", url)
    assert missing.exit_code == 1 and "no session 9" in missing.output
    exact = invoke("sessions", "show", "1", "--store", url)
    assert exact.exit_code == 0 and "session 1" in exact.output


def test_sessions_show_names_at_most_five_of_many_matches(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    stored_sessions(url, *(Session(id=f"a{n}", flow="hotel", current_step="Explore") for n in range(8)))
    ambiguous = invoke("sessions", "show", "a", "--store", url)
    assert ambiguous.exit_code == 1
    assert (
        ambiguous.output == "error: a is ambiguous: it starts a0, a1, a2, a3, a4, ...; give more characters\n"
    )


def test_sessions_show_warnings_and_errors_of_any_principal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    session = Session(id="s1", flow="hotel", current_step="Present", principal="alice")
    session.warnings.append(LogRecord("slow_tool", "search took 9 s", step="Explore"))
    stored_sessions(url, session)

    async def record() -> None:
        opened = open_store(url)
        await opened.record_error(
            "s1", LogRecord("tool_failed", "search failed", level="error", step="Present")
        )
        await opened.close()

    asyncio.run(record())
    shown = invoke("sessions", "show", "s1", "--store", url)
    assert shown.exit_code == 0, shown.output
    lines = [line.rstrip() for line in shown.output.splitlines()]
    assert "principal      alice" in lines
    assert "slow_tool search took 9 s" in lines
    assert "tool_failed in Present: search failed" in lines


def test_sessions_show_refuses_a_session_deleted_while_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FlowEngine(store=MemoryStore())
    asyncio.run(
        engine.store.save(
            Session(id="s1", flow="hotel", current_step="Explore", principal="alice"), expected_revision=None
        )
    )

    async def read() -> None:
        await sessions._read_session(engine, "s1")

    gone = AsyncMock(return_value=None)  # found and then, between two reads, deleted
    monkeypatch.setattr(engine, "session_errors", gone)
    with pytest.raises(CliError, match="no session s1"):
        asyncio.run(read())
    gone.assert_awaited_once_with("s1", principal=ANY_PRINCIPAL)


def test_sessions_list_is_readable_in_80_columns_and_whole_on_a_wide_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    first, second = "7f3a9c21-0000-4000-8000-000000000001", "7f3a9c21-9999-4000-8000-000000000002"
    stored_sessions(
        url,
        Session(id=first, flow="products", current_step="Catalogue", principal="customer-42", turns=12),
        Session(
            id=second, flow="hotel", current_step="Explore", principal="alice", status="awaiting_approval"
        ),
    )
    monkeypatch.setattr(cli.console, "width", 80)
    narrow = invoke("sessions", "list", "--store", url)
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line.split() for line in lines[2:]]
    # Ids by the shortest prefix (8 or more) no other listed id starts with; every value whole.
    assert sorted(row[:6] for row in rows if len(row) > 6) == [
        ["7f3a9c21-0", "products", "running", "Catalogue", "12", "customer-42"],
        ["7f3a9c21-9", "hotel", "awaiting", "Explore", "0", "alice"],
    ]
    assert any("approval" in line.split() for line in lines)  # the status wraps, never cut
    shown = invoke("sessions", "show", "7f3a9c21-9", "--store", url)
    assert shown.exit_code == 0 and second in shown.output  # a prefix the listing shows is taken
    monkeypatch.setattr(cli.console, "width", 140)
    wide = invoke("sessions", "list", "--store", url)
    assert first in wide.output and second in wide.output and "awaiting approval" in wide.output


def test_sessions_list_filters_and_reads_a_long_listing_page_by_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    stored_sessions(
        url,
        *(
            Session(id=f"s{n}", flow="hotel", current_step="Explore", principal="alice", updated_at=100.0 + n)
            for n in range(5)
        ),
        Session(id="b0", flow="orders", current_step="Support", principal="bob", updated_at=50.0),
        Session(id="n0", flow="orders", current_step="Support", updated_at=40.0),  # nobody's
    )
    # The engine lists at most 500 at once; a smaller page shows the listing is read in pages.
    monkeypatch.setattr(sessions, "_PAGE", 2)
    every = invoke("sessions", "list", "--store", url, "--limit", "1000")
    assert every.exit_code == 0, every.output
    assert listed_ids(every.output) == ["b0", "n0", "s0", "s1", "s2", "s3", "s4"]  # every principal's
    some = invoke("sessions", "list", "--store", url, "--limit", "3", "--flow", "hotel")
    assert listed_ids(some.output) == ["s2", "s3", "s4"]  # the most recent
    bobs = invoke("sessions", "list", "--store", url, "--principal", "bob")
    assert listed_ids(bobs.output) == ["b0"]
    nobody = invoke("sessions", "list", "--store", url, "--principal", "carol")
    assert nobody.exit_code == 0 and nobody.output == "no sessions\n"


def listed_ids(output: str) -> list[str]:
    """The id column of a ``sessions list`` table, sorted."""
    rows = output.splitlines()[2:]  # after the header and its rule
    return sorted(line.split()[0] for line in rows if line.strip())


def test_sessions_refuse_bad_ids_options_and_stores_in_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite3"
    junk.write_text("not a database, whatever its name says", encoding="utf-8")
    for args, problem in [
        (["show", "not an id!", "--store", "memory://"], "session id must be 1-128 letters, digits"),
        (["show", "s1", "--store", "mysql://x"], "unknown session store 'mysql'"),
        (["list", "--store", "mysql://x"], "unknown session store 'mysql'"),
        (["list", "--store", f"sqlite:///{junk}"], "file is not a database"),
        (["show", "s1", "--store", f"sqlite:///{junk}"], "file is not a database"),
    ]:
        refused = invoke("sessions", *args)
        assert refused.exit_code == 1, refused.output
        assert len(refused.output.splitlines()) == 1 and problem in refused.output, refused.output
    for args in (["list", "--limit", "0"], ["list", "--status", "paused"]):
        usage = invoke("sessions", *args, "--store", "memory://")
        assert usage.exit_code == 2 and "Invalid value" in usage.output and "Traceback" not in usage.output


def test_db_upgrade(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    first = invoke("db", "upgrade", "--store", store)
    assert first.exit_code == 0 and "applied migration(s) 1" in first.output
    again = invoke("db", "upgrade", env={"PICOFLOW_STORE": store})
    assert again.exit_code == 0 and "already up to date" in again.output
    memory = invoke("db", "upgrade", "--store", "memory://")
    assert memory.exit_code == 0 and "nothing to upgrade" in memory.output
    wrong = invoke("db", "upgrade", "--store", "mysql://x")
    assert wrong.exit_code == 1 and "unknown session store" in wrong.output


@pytest.mark.usefixtures("fixed_time")
def test_sessions_show_lists_every_decision_as_the_audit_trail(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    staff = Approvers(principal=False, roles=("staff",))

    def asked(n: int, **decided: Any) -> Approval:
        return Approval(
            id=f"apr_{n:024x}", tool="refund", args={"order_id": n, "amount": 250.0},
            summary=f"Refund $250.00 on order {n}", approvers=staff, expires_at=NOW + 600 - 1000 * (n == 5),
            step="Desk", call_id=f"c{n}", args_sha256=f"{n:x}" * 64, created_at=NOW - 60, **decided,
        )  # fmt: skip

    session = Session(id="s1", flow="desk", current_step="Desk", principal="cust-1")
    session.approvals = (
        asked(1, status="approved", decided_by="sup-9", decided_at=NOW - 30, reason="checked the parcel"),
        asked(2, status="denied", decided_by="cust-1", decided_at=NOW - 20),
        asked(3, status="withdrawn", reason="a new message came first"),
        asked(4),
        asked(5),  # its time ran out, and nothing recorded that yet
    )
    stored_sessions(url, session)
    shown = invoke("sessions", "show", "s1", "--store", url)
    assert shown.exit_code == 0, shown.output
    text = [line.rstrip() for line in shown.output.splitlines()]
    assert "─" * 94 + " decisions " + "─" * 95 in text

    def row(n: int, status: str, by: str = "-", at: str = "-", reason: str = "-") -> list[str]:
        summary = f"Refund $250.00 on order {n}"
        return [
            f"apr_{n:024x}",
            "refund",
            summary,
            status,
            "2027-01-15 07:59:00",
            by,
            at,
            f"{n:x}" * 12,
            reason,
        ]

    assert table(shown.output) == [
        DECISIONS,
        row(1, "approved", "sup-9", "2027-01-15 07:59:30", "checked the parcel"),
        row(2, "denied", "cust-1", "2027-01-15 07:59:40"),
        row(3, "withdrawn", reason="a new message came first"),
        row(4, "pending (in 10 min)"),
        row(5, "expired"),
    ]
    # A session that never asked for an approval shows no decisions section.
    stored_sessions(url, Session(id="s2", flow="desk", current_step="Desk"))
    assert " decisions " not in invoke("sessions", "show", "s2", "--store", url).output


def booked(url: str) -> str:
    """The booking conversation played into the store at ``url``; its session id."""

    async def play() -> str:
        engine = FlowEngine([BookingFlow], store=open_store(url), model=ScriptedModel(script()))
        session_id = None
        try:
            for text, _ in TURNS:
                result = await engine.run("booking", text, session_id)
                assert result.ok, result.error
                session_id = result.session_id
        finally:
            await engine.aclose()
        assert session_id is not None
        return session_id

    return asyncio.run(play())


def transcript_section(output: str) -> list[str]:
    lines = [line.rstrip() for line in output.splitlines()]
    start = next(i for i, line in enumerate(lines) if " transcript " in line) + 1
    return lines[start:]


def test_sessions_show_marks_structured_answers_in_sessions_stored_before_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sessions.sqlite3"
    url = f"sqlite:///{path}"
    session_id = booked(url)
    monkeypatch.setattr(cli.console, "width", 240)
    shown = invoke("sessions", "show", session_id, "--store", url)
    assert shown.exit_code == 0, shown.output
    expected = [
        "Dates user: Hi",
        f"Dates assistant (direct): {WELCOME}",
        "Dates user: I arrive on 2027-05-10 for 40 nights",
        f"Dates assistant (output): {FIRST_READING}",
        "Dates user (correction): These fields were not accepted:",
        "- nights: input should be less than or equal to 30",
        "Answer again with those items corrected, or without them where the message does not give them.",
        f"Dates assistant (direct): {NIGHTS}",
        "Dates user: 3 nights",
        f"Dates assistant (output): {NIGHTS_READING}",
        "Quote user (crossing): Continue.",
        f"Quote assistant: {PRICE_WORDS} → price({{}})",
        "Quote ✓ price → Accepted.",
        f"Confirm assistant (direct): {QUOTE}",
        "Confirm user: Yes, book it",
        f"Confirm assistant (output): {BOOK}",
        "Booked user (crossing): I'm done, thank you.",
        f"Booked assistant: {GOODBYE}",
    ]
    assert transcript_section(shown.output) == expected

    # Stored as picoflow stored them before kind "output" existed: shown the same.
    assert stored_as_before_output(path) == 3
    before = invoke("sessions", "show", session_id, "--store", url)
    assert before.exit_code == 0, before.output
    assert transcript_section(before.output) == expected


def test_commands_on_stored_sessions_never_create_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run in a folder without a store, ``sessions``, ``approvals`` and ``handoffs`` say where they
    looked, in one line, and leave no empty ``picoflow.sqlite3`` behind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PICOFLOW_STORE", raising=False)
    for args in (
        ["sessions", "list"],
        ["sessions", "show", "s1"],
        ["approvals", "list"],
        ["handoffs", "list"],
    ):
        refused = invoke(*args)
        assert refused.exit_code == 1, refused.output
        assert len(refused.output.splitlines()) == 1 and "no session store at" in refused.output, (
            refused.output
        )
    missing = tmp_path / "elsewhere.db"
    refused = invoke("sessions", "list", "--store", f"sqlite:///{missing}")
    assert refused.exit_code == 1 and str(missing) in refused.output.replace("\n", "")
    assert list(tmp_path.iterdir()) == []
