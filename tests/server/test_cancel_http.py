"""``DELETE /v1/sessions/{session_id}/turn``: the running turn (or decision) of the session is
cancelled: 202 for the canceller, `409 turn_cancelled` for the turn's own request or a `cancelled`
event ending its stream, the session as it was before the turn, no tool started after the cancel,
and the next turn works. 404 for an unknown session or another principal's, 409 when nothing runs,
401 without a key. Coordinated by events (a model held at a request, a tool waiting), never timers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.cancel_support import Started, hold_at, note, pay

from picoflow.server import ServerSettings

from .support import client_for, events_of

SETTINGS = ServerSettings(api_keys={"key-a": "alice", "key-b": "bob"})
ALICE = {"Authorization": "Bearer key-a"}
BOB = {"Authorization": "Bearer key-b"}
CANCELLED = {
    "kind": "turn_cancelled",
    "message": "This turn was cancelled; nothing of it was saved.",
    "retryable": False,
    "retry_after": None,
    "fields": [],
}


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    Started.reset()
    yield
    Started.reset()


async def started(client: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    """A session of the desk after its first turn, and the session as the API shows it."""
    created = await client.post("/v1/flows/desk/sessions", json={"message": "hello"}, headers=ALICE)
    assert created.status_code == 201
    session_id: str = created.json()["session_id"]
    shown = await client.get(f"/v1/sessions/{session_id}", headers=ALICE)
    return session_id, shown.json()


async def test_a_streamed_turn_cancelled_ends_with_a_cancelled_event_and_stores_nothing() -> None:
    engine, model, script = hold_at(3, ["Hi!", [note("a", "c1")], "Back."])
    async with client_for(engine, SETTINGS) as client:
        session_id, before = await started(client)
        streaming = asyncio.create_task(
            client.post(
                f"/v1/sessions/{session_id}/turns", json={"message": "note a", "stream": True}, headers=ALICE
            )
        )
        await model.held.wait()  # note a ran; the next model request waits
        cancel = await client.delete(f"/v1/sessions/{session_id}/turn", headers=ALICE)
        assert (cancel.status_code, cancel.json()) == (202, {"session_id": session_id, "cancelled": "turn"})
        stream = await streaming
        assert stream.status_code == 200
        assert [name for name, _ in events_of(stream.text)] == ["tool_call", "tool_result", "cancelled"]
        last = events_of(stream.text)[-1][1]
        assert last == {"status": 409, "error": {**CANCELLED, "session_id": session_id}}
        assert model.cancelled.is_set()
        after = await client.get(f"/v1/sessions/{session_id}", headers=ALICE)
        assert after.json() == before
        assert Started.calls == ["note:a"]

        again = await client.post(f"/v1/sessions/{session_id}/turns", json={"message": "hi"}, headers=ALICE)
        assert (again.status_code, again.json()["message"]) == (200, "Back.")
        transcript = (await client.get(f"/v1/sessions/{session_id}", headers=ALICE)).json()["transcript"]
        assert [(m["role"], m["content"]) for m in transcript] == [
            ("user", "hello"),
            ("assistant", "Hi!"),
            ("user", "hi"),
            ("assistant", "Back."),
        ]
    assert Started.calls == ["note:a"]
    script.assert_complete()


async def test_a_turn_cancelled_answers_its_own_request_409_turn_cancelled() -> None:
    engine, model, script = hold_at(2, ["Hi!", "Back."])
    async with client_for(engine, SETTINGS) as client:
        session_id, before = await started(client)
        waiting = asyncio.create_task(
            client.post(f"/v1/sessions/{session_id}/turns", json={"message": "wait"}, headers=ALICE)
        )
        await model.held.wait()
        assert (await client.delete(f"/v1/sessions/{session_id}/turn", headers=ALICE)).status_code == 202
        answer = await waiting
        assert answer.status_code == 409
        assert answer.json() == {"error": {**CANCELLED, "session_id": session_id}}
        assert (await client.get(f"/v1/sessions/{session_id}", headers=ALICE)).json() == before
        again = await client.post(f"/v1/sessions/{session_id}/turns", json={"message": "hi"}, headers=ALICE)
        assert (again.status_code, again.json()["message"]) == (200, "Back.")
    script.assert_complete()


async def test_what_cannot_be_cancelled_and_who_may_not() -> None:
    engine, model, script = hold_at(2, ["Hi!", "Still here."])
    async with client_for(engine, SETTINGS) as client:
        session_id, _ = await started(client)
        idle = await client.delete(f"/v1/sessions/{session_id}/turn", headers=ALICE)
        assert (idle.status_code, idle.json()["error"]["kind"]) == (409, "turn_not_running")
        assert idle.json()["error"]["message"] == "No turn of this conversation is running."
        for path in ("/v1/sessions/no-such-session/turn", "/v1/sessions/bad%20id!/turn"):
            unknown = await client.delete(path, headers=ALICE)
            assert (unknown.status_code, unknown.json()["error"]["kind"]) == (404, "session_not_found")

        waiting = asyncio.create_task(
            client.post(f"/v1/sessions/{session_id}/turns", json={"message": "wait"}, headers=ALICE)
        )
        await model.held.wait()
        stranger = await client.delete(f"/v1/sessions/{session_id}/turn", headers=BOB)
        assert (stranger.status_code, stranger.json()["error"]["kind"]) == (404, "session_not_found")
        nobody = await client.delete(f"/v1/sessions/{session_id}/turn")
        assert (nobody.status_code, nobody.json()["error"]["kind"]) == (401, "unauthorized")
        model.release()
        answer = await waiting
        assert (answer.status_code, answer.json()["message"]) == (200, "Still here.")  # untouched
        ended = await client.delete(f"/v1/sessions/{session_id}/turn", headers=ALICE)
        assert ended.status_code == 409
    script.assert_complete()


async def test_a_streamed_decision_cancelled_while_its_call_runs_ends_with_a_cancelled_event() -> None:
    engine, _, script = hold_at(99, ["Hi!", [pay(5, "c1")], "I cannot tell whether it went through."])
    async with client_for(engine, SETTINGS) as client:
        session_id, _ = await started(client)
        turns = f"/v1/sessions/{session_id}/turns"
        asked = await client.post(turns, json={"message": "pay 5"}, headers=ALICE)
        (approval,) = asked.json()["pending"]
        deciding = asyncio.create_task(
            client.post(
                f"/v1/sessions/{session_id}/approvals/{approval['id']}",
                json={"decision": "approve", "stream": True},
                headers=ALICE,
            )
        )
        await Started.slow_started.wait()
        cancel = await client.delete(f"/v1/sessions/{session_id}/turn", headers=ALICE)
        assert cancel.status_code == 202
        assert cancel.json() == {"session_id": session_id, "cancelled": "decision"}
        stream = await deciding
        names = [name for name, _ in events_of(stream.text)]
        assert names == ["approval_decided", "tool_call", "cancelled"]
        assert Started.slow_cancelled.is_set()
        after = await client.post(
            f"/v1/sessions/{session_id}/turns", json={"message": "did it?"}, headers=ALICE
        )
        assert (after.status_code, after.json()["message"]) == (200, "I cannot tell whether it went through.")
    assert Started.calls == ["slow:pay 5"]
    script.assert_complete()
