"""The transcript ``GET /v1/sessions/{id}`` returns, which the chat page rebuilds itself from on a
reload: every message, each saying whether the user saw it (``shown``), and the model's structured
answers (a SlotStep's reading, a typed ``output``) marked ``kind="output"``, never shown, never
streamed as text. Sessions stored before that kind existed read the same; a JSON reply the model
wrote stays a reply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from booking_readings import (
    BOOK,
    GOODBYE,
    NIGHTS,
    PRICE_WORDS,
    QUOTE,
    SEEN,
    TRANSCRIPT,
    TURNS,
    WELCOME,
    BookingFlow,
    Decision,
    script,
    stored_as_before_output,
)
from picoflow import Flow, FlowEngine, Step
from picoflow.models import ScriptedModel
from picoflow.sessions import MemoryStore, SQLiteStore

from .support import client_for, events_of


async def talk(client: httpx.AsyncClient, flow: str, messages: list[str]) -> tuple[str, list[Any]]:
    """Each message streamed as a turn of one session: the session id, and each turn's events."""
    session_id, turns = None, []
    for message in messages:
        path = f"/v1/sessions/{session_id}/turns" if session_id else f"/v1/flows/{flow}/sessions"
        reply = await client.post(path, json={"message": message, "stream": True})
        assert reply.status_code == 200, reply.text
        events = events_of(reply.text)
        assert events[-1][0] == "result", events
        session_id = events[-1][1]["session_id"]
        turns.append(events)
    assert session_id is not None
    return session_id, turns


def lines(session: dict[str, Any]) -> list[tuple[str, str | None, bool, str, str]]:
    return [(m["role"], m["kind"], m["shown"], m["step"], m["content"]) for m in session["transcript"]]


async def test_the_transcript_says_what_the_user_saw_and_marks_structured_answers() -> None:
    model = ScriptedModel(script())
    engine = FlowEngine([BookingFlow], store=MemoryStore(), model=model)
    async with client_for(engine) as client:
        session_id, turns = await talk(client, "booking", [text for text, _ in TURNS])
        # Streamed, the readings never come as text: only the words the model wrote for the user do.
        assert [[data["text"] for name, data in events if name == "text"] for events in turns] == [
            [],
            [],
            [PRICE_WORDS],
            [GOODBYE],
        ]
        assert [events[-1][1]["message"] for events in turns] == [WELCOME, NIGHTS, QUOTE, GOODBYE]

        session = (await client.get(f"/v1/sessions/{session_id}?render=html")).json()
        assert session["status"] == "completed"
        assert lines(session) == TRANSCRIPT
        calls = [(m["seq"], m["tool_calls"]) for m in session["transcript"] if m["tool_calls"]]
        assert calls == [(9, [{"id": "c1", "name": "price", "args": {}}])]
        seen = [(m["role"], m["content"]) for m in session["transcript"] if m["shown"]]
        assert seen == SEEN
        assert SEEN == [
            ("user", "Hi"),
            ("assistant", WELCOME),
            ("user", "I arrive on 2027-05-10 for 40 nights"),
            ("assistant", NIGHTS),
            ("user", "3 nights"),
            ("assistant", PRICE_WORDS),
            ("assistant", QUOTE),
            ("user", "Yes, book it"),
            ("assistant", GOODBYE),
        ]
        assert not any(m["content"].startswith("{") for m in session["transcript"] if m["shown"])
    model.assert_complete()


async def test_a_session_stored_before_structured_answers_were_marked_reads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite3"
    engine = FlowEngine([BookingFlow], store=SQLiteStore(path), model=ScriptedModel(script()))
    async with client_for(engine) as client:
        session_id, _ = await talk(client, "booking", [text for text, _ in TURNS])
        marked = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert lines(marked) == TRANSCRIPT

        assert stored_as_before_output(path) == 3
        stored = await engine.store.transcript(session_id)
        assert [m.kind for m in stored] == [kind if kind != "output" else None for _, kind, *_ in TRANSCRIPT]

        again = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert again["transcript"] == marked["transcript"]
    await engine.aclose()


class Lookup(Step):
    """Answer with the guest's decision as JSON."""

    output = Decision


class LookupFlow(Flow):
    name = "lookup"
    steps = [Lookup]


async def test_a_json_reply_the_model_wrote_stays_a_reply() -> None:
    # A step with an output and no on_response replies with the value itself: the user got it.
    model = ScriptedModel([BOOK, '{"action": "cancel"}'])
    engine = FlowEngine([LookupFlow], store=MemoryStore(), model=model)
    async with client_for(engine) as client:
        session_id, turns = await talk(client, "lookup", ["book it", "no, cancel"])
        assert [events[-1][1]["message"] for events in turns] == ['{"action":"book"}', '{"action":"cancel"}']
        assert [[name for name, _ in events] for events in turns] == [["step", "result"], ["result"]]
        session = (await client.get(f"/v1/sessions/{session_id}")).json()
        assert lines(session) == [
            ("user", None, True, "Lookup", "book it"),
            ("assistant", None, True, "Lookup", '{"action":"book"}'),
            ("user", None, True, "Lookup", "no, cancel"),
            ("assistant", None, True, "Lookup", '{"action":"cancel"}'),
        ]
