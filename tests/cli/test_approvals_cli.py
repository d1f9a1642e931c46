"""``picoflow approvals list|approve|deny``: a supervisor's queue, and deciding from the command line
as the caller ``--as`` and ``--role`` name: a call runs once when someone it admits approves, and
never for anyone else. (``/approve`` and ``/deny`` in chat are in test_chat.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli import desk

from picoflow import cli

from .approval_support import (
    BIG,
    FLOWS,
    NOTE,
    ONE_WAITS,
    SMALL,
    card,
    chat_lines,
    lines,
    session_of,
    stored_approvals,
    table,
)
from .support import invoke, write_script

pytestmark = pytest.mark.usefixtures("fixed_time")


def test_a_staff_only_call_is_refused_to_the_customer_and_approved_by_staff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat_lines(tmp_path, store, [BIG], "refund 40001\n/approve\n")
    session_id = session_of("\n".join(out))
    (approval,) = stored_approvals(store, session_id)
    assert out[3:] == [
        "you › desk › (Desk)",
        *card(
            "Refund $250.00 on order 40001",
            [("order_id", "40001"), ("amount", "250.0")],
            "someone with the 'staff' role",
            approval.id,
            ONE_WAITS,
        ),
        f"you › not approved: approval {approval.id} needs someone with the 'staff' role",
        "you ›",
        f"session {session_id} (picoflow sessions show {session_id})",
    ]
    assert desk.LEDGER == []

    # The queue: the customer may decide nothing; staff see the call.
    mine = invoke("approvals", "list", "--store", store)
    assert mine.exit_code == 0 and mine.output == "no approvals wait for local\n"
    queue = invoke("approvals", "list", "--store", store, "--as", "sup-9", "--role", "staff")
    assert queue.exit_code == 0, queue.output
    same = invoke("approvals", "list", "--store", store, "--as", "sup-9", "--role", "staff", "--flow", "desk")
    assert same.output == queue.output
    other = invoke(
        "approvals", "list", "--store", store, "--as", "sup-9", "--role", "staff", "--flow", "hotel"
    )
    assert other.output == "no approvals wait for sup-9 (staff)\n"
    # From 120 columns the ids are whole; at 80 every column is still there, each id by its
    # shortest unique prefix (the commands take one), a long cell wrapped, never cut.
    assert queue.output.splitlines()[2].split()[:3] == [approval.id, session_id, "refund"]
    monkeypatch.setattr(cli.console, "width", 80)
    narrow = invoke("approvals", "list", "--store", store, "--as", "sup-9", "--role", "staff")
    rows = narrow.output.splitlines()
    assert max(len(row) for row in rows) <= 80, narrow.output
    assert rows[0].split() == ["id", "session", "tool", "summary", "who", "expires"]
    assert rows[2].split()[:3] == [approval.id[:12], session_id[:8], "refund"]
    assert "2027-01-15 08:10:00 (in 10 min)" in rows[2] and "…" not in narrow.output
    monkeypatch.setattr(cli.console, "width", 200)

    # The customer names the approval by a prefix, from the command line too: refused, nothing runs.
    decide = ["--flows", FLOWS, "--store", store]
    silent = ["--model", write_script(tmp_path / "silent.json", [])]  # a refusal asks no model
    refused = invoke(
        "approvals", "approve", session_id[:8], approval.id[:10], *decide, *silent, "--as", "local"
    )
    assert refused.exit_code == 1
    assert (
        refused.output == f"error: not approved: approval {approval.id} needs someone with the 'staff' role\n"
    )
    assert desk.LEDGER == []

    approved = invoke(
        "approvals", "approve", session_id[:8], approval.id[4:12], *decide,
        "--model", write_script(tmp_path / "after.json", ["Refunded."]),
        "--as", "sup-9", "--role", "staff", "--reason", "checked the parcel",
    )  # fmt: skip
    assert approved.exit_code == 0, approved.output
    assert lines(approved.output) == [
        f"approved {approval.id}: Refund $250.00 on order 40001 (session {session_id})",
        "desk › (Desk)",
        "Refunded.",
    ]
    assert [(approval.id, 40001, 250.0)] == desk.LEDGER
    (decided,) = stored_approvals(store, session_id)
    assert (decided.status, decided.decided_by, decided.reason) == ("approved", "sup-9", "checked the parcel")

    again = invoke(
        "approvals", "deny", session_id, approval.id, *decide, *silent, "--as", "sup-9", "--role", "staff"
    )
    assert again.exit_code == 1
    assert again.output == f"error: not denied: approval {approval.id} was approved already\n"
    assert invoke("approvals", "list", "--store", store, "--as", "sup-9", "--role", "staff").output == (
        "no approvals wait for sup-9 (staff)\n"
    )
    trail = invoke(
        "approvals", "list", "--session", session_id[:8], "--store", store, "--as", "sup-9", "--role", "staff"
    )
    assert trail.exit_code == 0, trail.output
    assert table(trail.output) == [
        ["id", "tool", "summary", "status", "who", "expires", "decided by", "reason"],
        [approval.id, "refund", "Refund $250.00 on order 40001", "approved", "someone with the 'staff' role",
         "2027-01-15 08:10:00", "sup-9", "checked the parcel"],
    ]  # fmt: skip
    assert [(approval.id, 40001, 250.0)] == desk.LEDGER


def test_deny_from_the_command_line_and_a_turn_failing_after_the_decision(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    options = ["--flows", FLOWS, "--store", store]
    chat_lines(tmp_path, store, [[SMALL, NOTE]], "refund and tell me\n")
    session_id = listed_session(store)
    refund, note = stored_approvals(store, session_id)
    denied = invoke(
        "approvals", "deny", session_id, refund.id[:12], *options, "--reason", "the parcel arrived",
        "--model", write_script(tmp_path / "none.json", []),
    )  # fmt: skip
    # One of two decided: nothing runs yet, and the other one still waits.
    assert denied.exit_code == 0, denied.output
    assert lines(denied.output) == [
        f"denied {refund.id}: Refund $25.50 on order 40001 (session {session_id})",
        "desk › (Desk)",
        "Waiting for approval: Send the note 'hi' (the customer must approve)",
        *card("Send the note 'hi'", [("text", "hi")], "the customer", note.id,
              f"picoflow approvals approve|deny {session_id} {note.id} [--reason TEXT]"),
    ]  # fmt: skip
    assert desk.LEDGER == []
    # The note runs, then the model has nothing to say: the decision stands, the exit code says so.
    failed = invoke(
        "approvals",
        "approve",
        session_id,
        note.id,
        *options,
        "--model",
        write_script(tmp_path / "none.json", []),
    )
    assert failed.exit_code == 3
    assert lines(failed.output) == [
        f"approved {note.id}: Send the note 'hi' (session {session_id})",
        "error: the decision stands, but the turn after it failed: The language model is unavailable right "
        "now. Please try again shortly.",
    ]
    assert desk.LEDGER == [(None, 0, 0.0)]
    assert [a.status for a in stored_approvals(store, session_id)] == ["denied", "approved"]


NOT_STORED = " in this store: `picoflow sessions list` shows them (is --store the right one?)"
"""What the command says after ``no session ID``."""


def listed_session(store: str) -> str:
    listing = invoke("sessions", "list", "--store", store, "--wide").output.splitlines()[2:]
    (session_id,) = [line.split()[0] for line in listing if line.strip()]
    return session_id


def test_approvals_refuse_what_they_cannot_name_or_decide_in_one_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    chat_lines(tmp_path, store, [[SMALL, NOTE]], "refund and tell me\n")
    session_id = listed_session(store)
    refund, _ = stored_approvals(store, session_id)
    options = ["--flows", FLOWS, "--store", store, "--model", write_script(tmp_path / "none.json", [])]
    both = ", ".join(approval.id for approval in stored_approvals(store, session_id))
    for args, problem in [
        (["approve", "nope", refund.id], f"no session nope{NOT_STORED}"),
        (["approve", session_id, "zz"], f"no approval zz in session {session_id} for local"),
        (["approve", session_id, " "], "name the approval: its id or a unique prefix"),
        (
            ["deny", session_id, "apr_"],
            f"apr_ is ambiguous: it starts {both}; give more characters",
        ),
        (["approve", session_id, refund.id, "--as", " "], "--as must name a principal"),
        (["approve", session_id, refund.id, "--role", ""], "--role must not be empty"),
        # Someone else's session: a whole id goes to the engine, which says nothing exists.
        (
            ["approve", session_id, refund.id, "--as", "cust-2"],
            f"not approved: no approval {refund.id} for this caller",
        ),
        (
            ["deny", session_id, refund.id, "--reason", "x" * 2001],
            "not denied: reason is longer than 2000 characters",
        ),
        (
            ["approve", session_id, refund.id, "--flows", "nowhere:Flow"],
            "cannot import nowhere (is it importable from here? run from the folder that holds it, "
            "or set PYTHONPATH): No module named 'nowhere'",
        ),
    ]:
        refused = (
            invoke("approvals", *args, *options) if "--flows" not in args else invoke("approvals", *args)
        )
        assert refused.exit_code == 1, refused.output
        assert refused.output == f"error: {problem}\n"
    for args, said in [
        (["--session", "nope"], f"error: no session nope{NOT_STORED}\n"),
        (["--session", session_id, "--as", "cust-2"], f"no approvals in session {session_id} for cust-2\n"),
        (
            ["--as", "sup-9", "--role", "staff"],
            "no approvals wait for sup-9 (staff)\n",
        ),  # small refunds are the customer's
    ]:
        listed = invoke("approvals", "list", "--store", store, *args)
        assert listed.output == said
    assert desk.LEDGER == []
    assert [a.status for a in stored_approvals(store, session_id)] == ["pending", "pending"]


def test_a_decision_the_flows_cannot_take_is_not_taken(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    chat_lines(tmp_path, store, [SMALL], "refund 40001\n")
    session_id = listed_session(store)
    (refund,) = stored_approvals(store, session_id)
    # Without --flows the demo flows are loaded: the session's flow is not among them.
    refused = invoke("approvals", "approve", session_id, refund.id, "--store", store)
    assert refused.exit_code == 1
    assert refused.output == (
        "error: not approved: No such flow. (load the flows the session runs with --flows module:Class)\n"
    )
    assert [a.status for a in stored_approvals(store, session_id)] == ["pending"]
    assert desk.LEDGER == []
