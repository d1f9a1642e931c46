"""What a transcript says the user saw (``Message.is_shown``), and how structured answers stored
before ``kind="output"`` existed are told from replies (``with_outputs_marked``): an answer that
opens like JSON and does not end its turn was read by code; a reply ends its turn, JSON or not."""

from __future__ import annotations

from dataclasses import replace

from picoflow.messages import Message, MessageKind, ToolCall, with_outputs_marked

READING = '{"found": [{"field": "check_in", "quote": "May 10", "value": "2027-05-10"}]}'
FENCED = '```json\n{"orders": [40015], "action": "refund"}\n```'


def user(text: str, kind: MessageKind | None = None, within: str | None = None) -> Message:
    return replace(Message.user(text, kind=kind), within=within)


def assistant(text: str, kind: MessageKind | None = None, within: str | None = None) -> Message:
    return replace(Message.assistant(text, kind=kind), within=within)


def kinds(messages: list[Message]) -> list[tuple[str, str | None, bool]]:
    return [(m.content, m.kind, m.is_shown) for m in messages]


def test_what_the_user_saw() -> None:
    call = ToolCall("price", {}, "c1")
    messages = [
        user("hi"),
        assistant("Welcome!", "direct"),
        user("book it"),
        assistant(READING, "output"),
        user("These fields were not accepted", "correction"),
        user("Continue.", "crossing"),
        user("book room 2", "forwarded"),
        Message.assistant("Let me price it.", [call]),
        Message.assistant("", [call]),
        Message.tool(call, "Accepted."),
        assistant("It comes to $360."),
        user("what is the weather?", within="Scout@9"),
        assistant("Sunny.", within="Scout@9"),
    ]
    assert [m.content for m in messages if m.is_shown] == [
        "hi",
        "Welcome!",
        "book it",
        "Let me price it.",
        "It comes to $360.",
    ]


def test_answers_code_read_are_marked_and_replies_are_left_as_they_are() -> None:
    stored = [
        user("I arrive May 10"),
        assistant(READING),  # a correction follows: code read it
        user("These fields were not accepted", "correction"),
        assistant(READING),  # the next step's crossing follows
        user("Continue.", "crossing"),
        assistant(FENCED),  # a sub-step run, then the reply code wrote
        user("lookup 40015", within="Orders@5"),
        assistant('{"ok": true}', within="Orders@5"),
        assistant("Order 40015 is refunded.", "direct"),
        user("as JSON please"),
        assistant('{"order": 40015, "status": "refunded"}'),  # the model's reply: its turn ends
        user("thanks"),
        assistant("I routed on these words."),  # prose code routed on: not a structured answer
        user("Continue.", "crossing"),
        assistant("[1, 2]"),  # the last message: a reply
    ]
    marked = with_outputs_marked(stored)
    assert kinds(marked) == [
        ("I arrive May 10", None, True),
        (READING, "output", False),
        ("These fields were not accepted", "correction", False),
        (READING, "output", False),
        ("Continue.", "crossing", False),
        (FENCED, "output", False),
        ("lookup 40015", None, False),
        ('{"ok": true}', None, False),
        ("Order 40015 is refunded.", "direct", True),
        ("as JSON please", None, True),
        ('{"order": 40015, "status": "refunded"}', None, True),
        ("thanks", None, True),
        ("I routed on these words.", None, True),
        ("Continue.", "crossing", False),
        ("[1, 2]", None, True),
    ]
    assert all(m.kind is None for m in stored if m.role == "assistant" and m.content.startswith(("{", "`")))


def test_a_reply_before_a_turn_that_starts_with_a_sub_step_run_stays_a_reply() -> None:
    # A LogicStep that runs a sub-step before it forwards the user's words starts the next turn.
    stored = [
        user("status?"),
        assistant('{"status": "shipped"}'),
        user("check the courier", within="Courier@2"),
        assistant("on time", within="Courier@2"),
        user("and the refund?", "forwarded"),
        assistant("No refund is due.", "direct"),
    ]
    assert with_outputs_marked(stored) == stored


def test_messages_with_a_kind_or_calls_are_never_remarked() -> None:
    call = ToolCall("refund", {"order": 40015}, "c1")
    stored = [
        user("refund 40015"),
        Message.assistant('{"thinking": "refund"}', [call]),
        Message.tool(call, "Refunded."),
        assistant('{"table": 1}', "direct"),
        user("ok"),
    ]
    assert with_outputs_marked(stored) == stored
    assert with_outputs_marked([]) == []
