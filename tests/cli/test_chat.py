"""``picoflow chat``: a whole conversation, /new and /quit, continuing a session by a prefix of its id,
and the embedded model's load shown before the first prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.cli import desk

from picoflow.cli import loading
from picoflow.models import ScriptedModel
from picoflow.models.readiness import LoadStatus, LoadTracker, Phase
from picoflow.session import Session
from picoflow_demos.hotel.scripted import CONVERSATION, SHERWOOD, model_script

from .approval_support import (
    BIG,
    DECISIONS,
    HEADER,
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
from .support import invoke, stored_sessions, write_script


def test_chat_plays_the_hotel_conversation_then_sessions_show_it(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'chat.sqlite3'}"
    model = write_script(tmp_path / "hotel.json", model_script())
    # The last message chooses a hotel: the booking waits for the guest's /approve.
    said = "\n".join(turn.user for turn in CONVERSATION) + "\n/approve\n"
    chat = invoke("chat", "hotel", "--store", store, "--model", model, input=said)
    assert chat.exit_code == 0, chat.output
    out = chat.output
    assert "Is your stay in the Portland area?" in out
    assert "Hampton Inn Portland-Airport" in out and "$440.50" in out  # the price comparison table
    # Choosing books nothing: the card waits, and /approve books.
    waiting, approved = out.split("waiting for approval", 1)[1].split("you › approved", 1)
    assert "Your booking is confirmed." not in waiting and f"Book {SHERWOOD}, two beds" in waiting
    assert "Your booking is confirmed." in approved and SHERWOOD in approved
    assert "The conversation is complete." in out
    session_id = out.split("picoflow sessions show ")[1].split(")")[0]

    listed = invoke("sessions", "list", "--store", store)
    assert listed.exit_code == 0
    row = next(line for line in listed.output.splitlines() if session_id in line)
    assert "hotel" in row and "completed" in row and "Goodbye" in row and "15" in row and "local" in row

    shown = invoke("sessions", "show", session_id, "--store", store)
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert (
        "steps visited  Explore → Present → Explore → Present → Explore → Present → Compare → Present"
        " → Goodbye" in text
    )
    assert "status         completed" in text
    assert "15 (revision 17)" in text  # the decision is a turn: claimed, checkpointed, committed
    assert "model calls" in text and "tool calls" in text
    assert "user: Hi" in text and "Your booking is confirmed." in text and '"action": "change_search"' in text

    assert invoke("sessions", "list", "--store", store, "--status", "running").output.strip() == "no sessions"
    missing = invoke("sessions", "show", "nope", "--store", store)
    assert missing.exit_code == 1 and "no session nope" in missing.output


def test_chat_new_quit_and_failures(tmp_path: Path) -> None:
    # The hotel flow's model only reads each message; code writes the greeting.
    greetings = ['{"found": []}', '{"found": []}']
    model = write_script(tmp_path / "script.json", greetings)
    result = invoke(
        "chat", "hotel", "--store", "memory://", "--model", model, input="hi\n/new\nhello\nmore\n/quit\n"
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("Hello! I can help you find a hotel") == 2
    assert "new conversation" in result.output
    # A session kept in memory is not offered to `sessions show`, which could not find it.
    assert "kept in memory only: it ended with this chat" in result.output
    assert "picoflow sessions show" not in result.output
    # The script ran out on the third message: a clear error, and the chat goes on until /quit.
    assert "could not" in result.output.lower() or "unavailable" in result.output.lower()
    assert invoke("chat", "nope", "--store", "memory://").exit_code == 1
    bad = invoke("chat", "hotel", "--store", "memory://", "--model", f"scripted:{tmp_path / 'none.json'}")
    assert bad.exit_code == 1 and "cannot read the model script" in bad.output


def test_chat_continues_a_session_given_by_a_unique_prefix(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'chat.sqlite3'}"
    # Each chat reads the script afresh and sends one message.
    model = write_script(tmp_path / "script.json", ['{"found": []}'])
    first = invoke("chat", "hotel", "--store", store, "--model", model, input="hi\n/quit\n")
    assert first.exit_code == 0, first.output
    session_id = first.output.split("picoflow sessions show ")[1].split(")")[0]

    again = invoke(
        "chat", "hotel", "--session", session_id[:8], "--store", store, "--model", model, input="hello\n"
    )
    assert again.exit_code == 0, again.output
    assert f"session {session_id} (picoflow sessions show {session_id})" in again.output
    shown = invoke("sessions", "show", session_id, "--store", store)
    assert "2 (revision 2)" in shown.output and "user: hi" in shown.output and "user: hello" in shown.output


def test_chat_refuses_a_session_it_cannot_name_in_one_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'chat.sqlite3'}"
    stored_sessions(store, *(Session(id=i, flow="hotel", current_step="Explore") for i in ("ab-1", "ab-2")))
    for given, problem in [
        ("ab", "ab is ambiguous: it starts ab-1, ab-2; give more characters"),
        (
            "zz",
            "no session zz in this store: `picoflow sessions list` shows them (is --store the right one?)",
        ),
        ("not an id!", "session id must be 1-128 letters, digits, '-' or '_'"),
    ]:
        refused = invoke("chat", "hotel", "--session", given, "--store", store, input="hi\n")
        assert refused.exit_code == 1, refused.output
        assert refused.output.splitlines() == [f"error: {problem}"]


# --- calls waiting for approval: the card, /approve and /deny -------------------------------------


@pytest.mark.usefixtures("fixed_time")
def test_chat_shows_the_card_and_approve_runs_the_call_once(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat_lines(
        tmp_path, store, [SMALL, "Your refund is on its way."], "refund 40001\n/approve looks right\n"
    )
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


@pytest.mark.usefixtures("fixed_time")
def test_chat_deny_with_a_reason_runs_nothing_and_the_model_is_told(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat_lines(
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


@pytest.mark.usefixtures("fixed_time")
def test_chat_names_one_of_several_waiting_calls_by_its_id(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    first = chat_lines(tmp_path, store, [[SMALL, NOTE]], "refund and tell me\n")
    session_id = session_of("\n".join(first))
    refund, note = stored_approvals(store, session_id)
    several = (
        "/approve {id} [reason] runs it, /deny {id} [reason] refuses it; typing a message instead withdraws "
        "them all"
    )
    cards = [
        *card("Refund $25.50 on order 40001", [("order_id", "40001"), ("amount", "25.5")], "the customer",
              refund.id, several.format(id=refund.id)),
        *card("Send the note 'hi'", [("text", "hi")], "the customer", note.id, several.format(id=note.id)),
    ]  # fmt: skip
    assert first[3:] == ["you › desk › (Desk)", *cards, "you ›", first[-1]]
    # Continued later, the session shows what waits, and the chat decides one call at a time.
    said = f"/approve\n/approve {note.id[4:12]} fine\n/deny\n"
    out = chat_lines(tmp_path, store, ["All done."], said, "--session", session_id[:8])
    assert out == [
        *HEADER,
        *cards,
        f"you › /approve needs an approval id: /approve ID [reason] (waiting: {refund.id}, {note.id})",
        "you › approved Send the note 'hi' (fine)",
        "desk › (Desk)",
        *card("Refund $25.50 on order 40001", [("order_id", "40001"), ("amount", "25.5")], "the customer",
              refund.id, ONE_WAITS),
        "you › denied Refund $25.50 on order 40001",
        "desk › (Desk)",
        "All done.",
        "you ›",
        f"session {session_id} (picoflow sessions show {session_id})",
    ]  # fmt: skip
    assert desk.LEDGER == [(None, 0, 0.0)]  # the note ran; the refund did not
    assert [(a.status, a.reason) for a in stored_approvals(store, session_id)] == [
        ("denied", None),
        ("approved", "fine"),
    ]


@pytest.mark.usefixtures("fixed_time")
def test_chat_a_message_instead_withdraws_the_waiting_call(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat_lines(
        tmp_path, store, [SMALL, "What else can I do?"], "/approve\n/help\nrefund 40001\nnever mind\n/deny\n"
    )
    session_id = session_of("\n".join(out))
    (approval,) = stored_approvals(store, session_id)
    assert out == [
        *HEADER,
        "you › nothing waits for a decision",
        "you › /attach FILE              send a file with your next message (/detach drops them)",
        "/approve [reason]         approve the call waiting for your decision: it runs, and the flow goes on",
        "/deny [reason]            deny it: it does not run, and the flow is told why",
        "/approve ID [reason]      with several waiting, name one (its id or a prefix); /deny ID too",
        "/new                      start a new conversation",
        "/quit                     leave (Ctrl-D too)",
        "Anything else is a message; sent while a call waits, it withdraws that call.",
        "you › desk › (Desk)",
        *card("Refund $25.50 on order 40001", [("order_id", "40001"), ("amount", "25.5")], "the customer",
              approval.id, ONE_WAITS),
        "you › withdrawn: Refund $25.50 on order 40001 (your message came first)",
        "desk › (Desk)",
        "What else can I do?",
        "you › nothing waits for a decision",
        "you ›",
        f"session {session_id} (picoflow sessions show {session_id})",
    ]  # fmt: skip
    assert desk.LEDGER == []
    assert (approval.status, approval.decided_by) == ("withdrawn", None)


# --- the embedded model's load, shown before it is needed ----------------------------------------


class LoadingScript(ScriptedModel):
    """A scripted model behind a load that goes through every phase when prepared."""

    def __init__(self, script: list[Any], fail: str | None = None) -> None:
        super().__init__(script, name="scripted:loading")
        self.tracker = LoadTracker()
        self.fail = fail
        self.prepared: list[tuple[bool, str | None]] = []

    @property
    def load_status(self) -> LoadTracker:
        return self.tracker

    async def prepare(self, warm: Any = None, *, cache_name: str | None = None) -> LoadStatus:
        self.prepared.append((warm is not None, cache_name))
        total = 1_117_320_768
        self.tracker.report(Phase.DOWNLOADING, done=0, total=total, part=1, parts=22)
        self.tracker.report(Phase.DOWNLOADING, done=40_000_000, total=total, part=1, parts=22)
        self.tracker.report(Phase.DOWNLOADING, done=312_400_000, total=total, part=7, parts=22)
        self.tracker.report(Phase.CHECKING, done=0, total=total)
        if self.fail:
            self.tracker.report(Phase.FAILED, reason=self.fail)
            return self.tracker.status
        self.tracker.report(Phase.LOADING)
        self.tracker.report(Phase.WARMING)
        self.tracker.report(Phase.READY)
        return self.tracker.status


def test_chat_shows_the_model_loading_before_the_first_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    model = LoadingScript(['{"found": []}'])
    monkeypatch.setattr(loading, "build_model", lambda choice: model)
    result = invoke("chat", "hotel", "--store", "memory://", input="hi\n/quit\n")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    first_prompt = lines.index("model ready") + 1
    assert lines[first_prompt - 6 : first_prompt] == [
        "Downloading the offline model: 0 of 1,117 MB (part 1 of 22)",
        "Downloading the offline model: 312 of 1,117 MB (part 7 of 22)",
        "Checking the model file…",
        "Loading the model…",
        "Getting ready…",
        "model ready",
    ]
    assert lines[first_prompt].startswith("you › ")
    assert "Hello! I can help you find a hotel" in result.output
    # The start step's prompt was read ahead, under the flow's name.
    assert model.prepared == [(True, "hotel")]


def test_chat_ends_when_the_model_cannot_be_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    model = LoadingScript([], fail="no network")
    monkeypatch.setattr(loading, "build_model", lambda choice: model)
    result = invoke("chat", "hotel", "--store", "memory://", input="hi\n")
    assert result.exit_code == 1
    assert result.output.splitlines()[-4:] == [
        "Downloading the offline model: 0 of 1,117 MB (part 1 of 22)",
        "Downloading the offline model: 312 of 1,117 MB (part 7 of 22)",
        "Checking the model file…",
        "error: The offline model could not be loaded: no network",
    ]
    assert "you ›" not in result.output


@pytest.mark.usefixtures("fixed_time")
def test_chat_with_the_role_an_approval_names_decides_it(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'desk.sqlite3'}"
    out = chat_lines(tmp_path, store, [BIG, "Refunded."], "refund 40001\n/approve\n", "--role", "staff")
    session_id = session_of("\n".join(out))
    (approval,) = stored_approvals(store, session_id)
    assert out[-5:] == [
        "you › approved Refund $250.00 on order 40001",
        "desk › (Desk)",
        "Refunded.",
        "you ›",
        f"session {session_id} (picoflow sessions show {session_id})",
    ]
    assert [(approval.id, 40001, 250.0)] == desk.LEDGER
    assert (approval.status, approval.decided_by) == ("approved", "local")


def test_keys_typed_while_a_spinner_runs_are_neither_echoed_nor_kept() -> None:
    """On a terminal (a pseudo-terminal here), echo is off inside the block, what was typed meanwhile
    is dropped at its end, and the terminal's settings come back; a pipe is left as it is."""
    import os
    import pty
    import termios

    from picoflow.cli.chat import keys_held

    controller, terminal = pty.openpty()
    with os.fdopen(terminal, "rb", buffering=0) as stream:
        before = termios.tcgetattr(terminal)
        with keys_held(stream):
            inside = termios.tcgetattr(terminal)
            assert not inside[3] & termios.ECHO and not inside[3] & termios.ICANON
            os.write(controller, b"typed while loading\n")
        assert termios.tcgetattr(terminal) == before
        os.write(controller, b"hello\n")
        assert stream.read(6) == b"hello\n"  # the keys typed inside were dropped
    os.close(controller)
    reading, writing = os.pipe()
    with os.fdopen(reading, "rb") as pipe, keys_held(pipe):
        pass
    os.close(writing)
