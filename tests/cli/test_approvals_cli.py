"""``picoflow approvals list|approve|deny`` and ``/approve`` / ``/deny`` in ``picoflow chat``: a
call to a gated tool shows a card, runs once when someone it admits approves, and never for anyone
else."""

from __future__ import annotations

from pathlib import Path

from tests.cli import desk

from picoflow.models import ToolCall

from .approval_support import FLOWS, fixed_time, lines, session_of, stored_approvals, table
from .support import invoke, write_script

__all__ = ["fixed_time"]

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


def chat(tmp_path: Path, store: str, script: list[object], said: str, *extra: str) -> list[str]:
    model = write_script(tmp_path / "chat.json", script)
    done = invoke("chat", "desk", "--flows", FLOWS, "--store", store, "--model", model, *extra, input=said)
    assert done.exit_code == 0, done.output
    return lines(done.output)


def test_chat_shows_the_card_and_approve_runs_the_call_once(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat(tmp_path, store, [SMALL, "Your refund is on its way."], "refund 40001\n/approve looks right\n")
    session_id = session_of("\n".join(out))
    (approval,) = stored_approvals(store, session_id)
    assert out == [
        *HEADER,
        "you › desk › (Desk)",
        "╭─ waiting for approval ──────────────────────────────────────────────────────────────────────╮",
        "│ Refund $25.50 on order 40001                                                                │",
        "│                                                                                             │",
        "│ argument  value                                                                             │",
        "│ order_id  40001                                                                             │",
        "│ amount    25.5                                                                              │",
        "│                                                                                             │",
        "│ tool     refund                                                                             │",
        "│ who      the customer must approve                                                          │",
        "│ expires  2027-01-15 08:10:00 (in 10 min)                                                    │",
        f"│ id       {approval.id}                                                       │",
        "│                                                                                             │",
        "│ /approve [reason] runs it, /deny [reason] refuses it; typing a message instead withdraws it │",
        "╰─────────────────────────────────────────────────────────────────────────────────────────────╯",
        "you › approved Refund $25.50 on order 40001 (looks right)",
        "desk › (Desk)",
        "Your refund is on its way.",
        "you ›",
        f"session {session_id} (picoflow sessions show {session_id})",
    ]
    assert out[3:18] == [
        "you › desk › (Desk)",
        *card(
            "Refund $25.50 on order 40001",
            [("order_id", "40001"), ("amount", "25.5")],
            "the customer",
            approval.id,
            ONE_WAITS,
        ),
    ]
    assert [(approval.id, 40001, 25.5)] == desk.LEDGER
    assert (approval.status, approval.decided_by, approval.reason) == ("approved", "local", "looks right")

    shown = invoke("sessions", "show", session_id, "--store", store)
    assert shown.exit_code == 0, shown.output
    text = lines(shown.output)
    assert text[text.index("Desk user: refund 40001") :][:6] == [
        "Desk user: refund 40001",
        'Desk assistant: → refund({"order_id": 40001, "amount": 25.5})',
        "Desk ✓ refund → refunded $25.50 on order 40001",
        "Desk assistant: Your refund is on its way.",
        "─" * 94 + " decisions " + "─" * 95,
        text[text.index("Desk user: refund 40001") + 5],
    ]
    assert table(shown.output) == [
        DECISIONS,
        [approval.id, "refund", "Refund $25.50 on order 40001", "approved", "2027-01-15 08:00:00", "local",
         "2027-01-15 08:00:00", approval.args_sha256[:12], "looks right"],
    ]  # fmt: skip


DECISIONS = ["id", "tool", "summary", "status", "asked", "decided by", "decided", "args sha256", "reason"]


def test_chat_deny_with_a_reason_runs_nothing_and_the_model_is_told(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat(
        tmp_path, store, [SMALL, "I will not refund it, then."], "refund 40001\n/deny the parcel arrived\n"
    )
    session_id = session_of("\n".join(out))
    (approval,) = stored_approvals(store, session_id)
    assert out[-5:] == [
        "you › denied Refund $25.50 on order 40001 (the parcel arrived)",
        "desk › (Desk)",
        "I will not refund it, then.",
        "you ›",
        f"session {session_id} (picoflow sessions show {session_id})",
    ]
    assert desk.LEDGER == []
    assert (approval.status, approval.decided_by, approval.reason) == (
        "denied",
        "local",
        "the parcel arrived",
    )
    shown = invoke("sessions", "show", session_id, "--store", store).output
    assert "Desk ✗ refund → Not run: refund was denied: the parcel arrived" in lines(shown)
    assert table(shown) == [
        DECISIONS,
        [approval.id, "refund", "Refund $25.50 on order 40001", "denied", "2027-01-15 08:00:00", "local",
         "2027-01-15 08:00:00", approval.args_sha256[:12], "the parcel arrived"],
    ]  # fmt: skip


def test_a_staff_only_call_is_refused_to_the_customer_and_approved_by_staff(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat(tmp_path, store, [BIG], "refund 40001\n/approve\n")
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
    assert table(queue.output) == [
        ["id", "session", "tool", "summary", "who", "expires"],
        [approval.id, session_id, "refund", "Refund $250.00 on order 40001", "someone with the 'staff' role",
         "2027-01-15 08:10:00 (in 10 min)"],
    ]  # fmt: skip

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
