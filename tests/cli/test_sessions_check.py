"""``picoflow sessions check``: a store holding sessions of the first version of a flow, checked
against the second (``two_versions``). It says what would happen to each live session, grouped,
changes nothing, reads the store in pages, and exits with 1 when a session would fail."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from picoflow.cli.sessions import WOULD_FAIL
from picoflow.session import Session
from picoflow.sessions import open_store
from two_versions import BOOKED, MIGRATED_FROM, StaysV1, StaysV2, seed

from .support import invoke, stored_sessions

NOW = 1_000.0
V1 = StaysV1.version
V2 = StaysV2.version
GUESTS_RULE = "guests: input should be a valid integer, unable to parse string as an integer"
MISSING_EXTRAS = (
    "the session stands in step 'Extras', which flow stays no longer has: map it to its new step in "
    "Flow.renamed, or declare Flow.fallback"
)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A SQLite store holding the first version's five sessions."""
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"

    async def seeded() -> None:
        store = open_store(url)
        try:
            await seed(store, NOW)
        finally:
            await store.close()

    asyncio.run(seeded())
    BOOKED.clear()
    MIGRATED_FROM.clear()
    return url


def rows(url: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        return db.execute(
            "SELECT id, status, current_step, revision, turns, updated_at, flow_version, live, document "
            "FROM picoflow_sessions ORDER BY id"
        ).fetchall()


def lines(output: str) -> list[str]:
    """The output's lines, each word as printed; a table's padding and a rule's length, which follow
    the widest cell, as two spaces and three dashes."""
    return [re.sub("─+", "───", re.sub(" {2,}", "  ", line.rstrip())) for line in output.splitlines()]


def check(url: str, flows: str, *extra: str) -> Any:
    return invoke("sessions", "check", "--flows", f"two_versions:{flows}", "--store", url, *extra)


def test_a_store_whose_sessions_can_all_continue_is_checked_and_left_as_it_was(store_url: str) -> None:
    stored_sessions(store_url, Session(id="elsewhere", flow="hotel", current_step="Explore"))
    before = rows(store_url)
    checked = check(store_url, "StaysV2")

    assert checked.exit_code == 0, checked.output
    assert lines(checked.output) == [
        f"flow stays · checked against version {V2[:12]} ───",
        f"5 live session(s); stored under {V1[:12]}: 5",
        "  current 0 · migrate 4 · fall back 1 · fail 0",
        "",
        "would change  sessions  for example",
        "───",
        "renamed Review: from Compare  4  changed, removed, renamed, …",
        "state migrated Review: hotels, options  4  changed, removed, renamed, …",
        f"field dropped Explore: {GUESTS_RULE}  2  removed, retyped",
        "approval carried Book: hold  1  same",
        "approval withdrawn Book: book  1  changed",
        "fell back Explore: from Extras  1  removed",
        "state dropped Extras: the step is gone  1  removed",
        "",
        "not checked (their flows were not given): hotel (1)",
        "no session would fail",
    ]
    assert rows(store_url) == before
    assert MIGRATED_FROM == [V1] * 4 and BOOKED == []


def test_a_session_that_would_fail_is_named_with_its_reason_and_the_exit_code_says_so(store_url: str) -> None:
    before = rows(store_url)
    checked = check(store_url, "StaysV2WithoutFallback")

    assert checked.exit_code == WOULD_FAIL == 1
    shown = lines(checked.output)
    assert shown[:3] == [
        f"flow stays · checked against version {V2[:12]} ───",
        f"5 live session(s); stored under {V1[:12]}: 5",
        "  current 0 · migrate 4 · fall back 0 · fail 1",
    ]
    assert shown[-5:] == [
        "would fail  sessions  for example",
        "───",
        f"{MISSING_EXTRAS}  1  removed",
        "",
        "1 session(s) would fail: see each reason (a step they stand in needs Flow.renamed or Flow.fallback) "
        "before deploying",
    ]
    assert rows(store_url) == before


def test_the_report_as_json_is_the_same_whatever_the_page_size(store_url: str) -> None:
    reports = []
    for page in ("1000", "2", "1"):
        checked = check(store_url, "StaysV2WithoutFallback", "--json", "--page", page)
        assert checked.exit_code == WOULD_FAIL, checked.output
        report = json.loads(checked.output)
        assert isinstance(report["flows"][0].pop("seconds"), float)
        reports.append(report)
    assert (
        reports[0]
        == reports[1]
        == reports[2]
        == {
            "flows": [
                {
                    "flow": "stays",
                    "version": V2,
                    "stored": {V1: 5},
                    "checked": 5,
                    "verdicts": {"current": 0, "migrate": 4, "fall_back": 0, "fail": 1},
                    "changes": [
                        {
                            "what": "renamed Review: from Compare",
                            "sessions": 3,
                            "examples": ["changed", "renamed", "same"],
                        },
                        {
                            "what": "state migrated Review: hotels, options",
                            "sessions": 3,
                            "examples": ["changed", "renamed", "same"],
                        },
                        {"what": "approval carried Book: hold", "sessions": 1, "examples": ["same"]},
                        {"what": "approval withdrawn Book: book", "sessions": 1, "examples": ["changed"]},
                        {
                            "what": f"field dropped Explore: {GUESTS_RULE}",
                            "sessions": 1,
                            "examples": ["retyped"],
                        },
                    ],
                    "failures": [{"what": MISSING_EXTRAS, "sessions": 1, "examples": ["removed"]}],
                }
            ],
            "not_checked": {},
            "failed": 1,
        }
    )


def test_a_session_the_store_cannot_read_would_fail(store_url: str) -> None:
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE picoflow_sessions SET document = '{\"id\": \"same\"}' WHERE id = 'same'")
    checked = check(store_url, "StaysV2", "--json")

    assert checked.exit_code == WOULD_FAIL
    report = json.loads(checked.output)["flows"][0]
    assert report["verdicts"] == {"current": 0, "migrate": 3, "fall_back": 1, "fail": 1}
    assert report["failures"] == [
        {
            "what": "stored session is not readable: 2 problem(s), first at flow: Field required",
            "sessions": 1,
            "examples": ["same"],
        }
    ]


def test_sessions_that_ended_or_ran_on_this_version_already_need_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    stored_sessions(
        url,
        Session(id="current", flow="stays", current_step="Explore", flow_version=V2),
        Session(id="ended", flow="stays", current_step="Extras", status="completed"),
        Session(id="unrecorded", flow="stays", current_step="Explore"),
    )
    checked = check(url, "StaysV2")

    assert checked.exit_code == 0, checked.output
    assert lines(checked.output) == [
        f"flow stays · checked against version {V2[:12]} ───",
        f"2 live session(s); stored under (unrecorded): 1, {V2[:12]}: 1",
        "  current 1 · migrate 1 · fall back 0 · fail 0",
        "",
        "would change  sessions  for example",
        "───",
        "the version only: nothing else changes  1  unrecorded",
        "",
        "no session would fail",
    ]


def test_a_missing_store_or_flow_is_one_line_and_no_traceback(tmp_path: Path) -> None:
    missing = check(f"sqlite:///{tmp_path / 'none.sqlite3'}", "StaysV2")
    assert missing.exit_code == 1
    assert "error: no session store at" in missing.output and not (tmp_path / "none.sqlite3").exists()
    unknown = check(f"sqlite:///{tmp_path / 'none.sqlite3'}", "NoSuchFlow")
    assert unknown.exit_code == 1 and "two_versions:NoSuchFlow is not a Flow subclass" in unknown.output
