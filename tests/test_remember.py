"""Exact replies remembered compactly: the user and the transcript get the whole text, the model the note."""

from __future__ import annotations

import pytest

from picoflow import Flow, FlowEngine, LogicStep, Step, direct, direct_to, tool
from picoflow._run.tokens import message_tokens
from picoflow.memory import Compaction, model_summarizer
from picoflow.messages import Message, ModelRequest
from picoflow.models import FunctionModel, ScriptedModel, ToolCall
from picoflow.outcomes import Direct
from picoflow.sessions import SQLiteStore
from picoflow.testing import request_lines, transcript_lines

TABLE = "| Night | #2 | #5 |\n| --- | ---: | ---: |\n" + "| Sun 8/1/2027 | $440.50 | $380.88 |\n" * 7


class Pick(Step):
    """Help the user compare hotels."""

    @tool
    def compare(self, hotels: list[int]) -> Direct:
        """Compare hotels side by side."""
        numbers = ", ".join(map(str, hotels))
        return direct(TABLE).remember_as(f"Compared hotels {numbers} on price.")

    @tool
    def book(self, hotel: int) -> Direct:
        """Book a hotel."""
        return direct_to(Booked, f"Booked hotel {hotel}.\n{TABLE}").remember_as(f"Booked hotel {hotel}.")


class Booked(Step):
    """The booking is done; answer questions about it."""


class Hotels(Flow):
    name = "hotels"
    steps = [Pick, Booked]


def test_remember_as_keeps_the_content_and_refuses_an_empty_note() -> None:
    outcome = direct(TABLE).remember_as("  Compared hotels 2 and 5.  ")
    assert outcome == Direct(content=TABLE, remember="Compared hotels 2 and 5.")
    moved = direct_to(Booked, "done").remember_as("Booked.")
    assert (moved.target_name, moved.content, moved.remember) == ("Booked", "done", "Booked.")
    with pytest.raises(ValueError, match="needs a short note"):
        direct(TABLE).remember_as(" ")


def test_a_remembered_message_is_shown_by_its_note() -> None:
    message = Message("assistant", TABLE, kind="direct", remembered_as="Compared.")
    assert message.as_remembered() == Message("assistant", "Compared.", kind="direct")
    assert message_tokens(message) == message_tokens(Message("assistant", "Compared."))
    plain = Message.user("hi")
    assert plain.as_remembered() is plain


async def test_the_user_and_the_transcript_get_the_table_the_model_the_note(tmp_path: object) -> None:
    model = ScriptedModel(
        [
            ToolCall("compare", {"hotels": [2, 5]}),
            ToolCall("book", {"hotel": 5}),
            "Your stay is at hotel 5.",
        ]
    )
    store = SQLiteStore(f"{tmp_path}/sessions.sqlite3")
    engine = FlowEngine([Hotels], model=model, store=store)
    first = await engine.run("hotels", "compare 2 and 5")
    sid = first.session_id or ""
    second = await engine.run("hotels", "book 5", sid)
    third = await engine.run("hotels", "where do I stay?", sid)

    assert [first.message, second.message, third.message] == [
        TABLE,
        f"Booked hotel 5.\n{TABLE}",
        "Your stay is at hotel 5.",
    ]
    assert request_lines(model.requests[1]) == [
        "system: Help the user compare hotels.",
        "user: compare 2 and 5",
        'assistant: -> compare({"hotels": [2, 5]}) #call_1',
        "tool compare #call_1: Accepted.",
        "assistant [direct]: Compared hotels 2, 5 on price.",
        "user: book 5",
    ]
    assert request_lines(model.requests[2]) == [
        "system: The booking is done; answer questions about it.",
        "assistant [direct]: Booked hotel 5.",
        "user: where do I stay?",
    ]
    assert await transcript_lines(engine, sid) == [
        "Pick | user: compare 2 and 5",
        'Pick | assistant: -> compare({"hotels": [2, 5]}) #call_1',
        "Pick | tool compare #call_1: Accepted.",
        f"Pick | assistant [direct]: {TABLE}",
        "Pick | user: book 5",
        'Pick | assistant: -> book({"hotel": 5}) #call_2',
        "Pick | tool book #call_2: Accepted.",
        f"Booked | assistant [direct]: Booked hotel 5.\n{TABLE}",
        "Booked | user: where do I stay?",
        "Booked | assistant: Your stay is at hotel 5.",
    ]
    transcript = await engine.store.transcript(sid)
    assert [m.remembered_as for m in transcript if m.kind == "direct"] == [
        "Compared hotels 2, 5 on price.",
        "Booked hotel 5.",
    ]
    session = await engine.store.load(sid)
    assert session is not None
    assert [m.content for m in session.memory["Booked"].messages] == [
        f"Booked hotel 5.\n{TABLE}",
        "where do I stay?",
        "Your stay is at hotel 5.",
    ]
    await engine.aclose()


class Menu(LogicStep):
    """Show the menu in code."""

    def run_logic(self) -> Direct:
        return direct("1. Soup\n2. Salad\n3. Pie").remember_as("Showed the menu of 3 dishes.")


class Diner(Flow):
    name = "diner"
    steps = [Menu]


async def test_a_logic_step_remembers_its_reply_by_its_note() -> None:
    engine = FlowEngine([Diner], model=ScriptedModel([]))
    result = await engine.run("diner", "menu?")
    session = await engine.store.load(result.session_id or "")
    assert session is not None
    assert result.message == "1. Soup\n2. Salad\n3. Pie"
    [user, reply] = session.memory["Menu"].messages
    assert (user.content, reply.content, reply.remembered_as) == (
        "menu?",
        "1. Soup\n2. Salad\n3. Pie",
        "Showed the menu of 3 dishes.",
    )


async def test_a_summarizer_reads_the_notes_not_the_tables() -> None:
    summarizer = FunctionModel(lambda request: "The user compared hotels.")
    summarize = model_summarizer(summarizer)
    table = Message("assistant", TABLE, kind="direct", remembered_as="Compared hotels 2 and 5 on price.")
    assert await summarize([Message.user("compare 2 and 5"), table], None) == "The user compared hotels."
    [request] = summarizer.requests
    assert isinstance(request, ModelRequest)
    assert (
        request.messages[0].content == "user: compare 2 and 5\nassistant: Compared hotels 2 and 5 on price."
    )
    assert Compaction(summarize=summarize).trigger == 16
