"""Cancelling a running turn through the engine (``FlowEngine.cancel``): the turn stops where it
waits, nothing of it is stored, no tool starts after the cancel, its caller gets a
``TurnCancelled`` result, and the next turn works. Every point is reached by events (a model held
at a request, a tool or a save waiting for the test), never by timers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cancel_support import Started, claim_given_up, hold_at, note, pay, slow

from picoflow import Caller, Cancelled, FlowEngine
from picoflow.exceptions import InvalidInput, SessionNotFound, TurnCancelled, TurnNotRunning
from picoflow.session import Session
from picoflow.sessions import MemoryStore
from picoflow.testing import transcript_lines

ALICE = Caller(principal="alice")


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    Started.reset()
    yield
    Started.reset()


async def started_session(engine: FlowEngine) -> tuple[str, Session]:
    first = await engine.run("desk", "hello", caller=ALICE)
    assert first.ok and first.session_id is not None
    stored = await engine.get_session(first.session_id, principal="alice")
    assert stored is not None
    return first.session_id, stored


async def test_a_turn_cancelled_in_its_model_request_stores_nothing_and_the_next_turn_works() -> None:
    # The held third request never reaches the script: "Back." answers the next turn.
    engine, model, script = hold_at(3, ["Hi!", [note("a", "c1")], "Back."])
    session_id, before = await started_session(engine)
    lines = await transcript_lines(engine, session_id)

    running = asyncio.create_task(engine.run("desk", "note a then b", session_id, caller=ALICE))
    await model.held.wait()
    assert Started.calls == ["note:a"]
    assert await engine.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    result = await running
    assert model.cancelled.is_set()
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert (result.session_id, result.message, result.error.status, result.error.kind) == (
        session_id,
        "This turn was cancelled; nothing of it was saved.",
        409,
        "turn_cancelled",
    )
    model.release()
    after = await engine.get_session(session_id, principal="alice")
    assert after == before
    assert await transcript_lines(engine, session_id) == lines
    assert lines == ["Desk | user: hello", "Desk | assistant: Hi!"]
    assert await engine.session_errors(session_id, principal="alice") == []  # a cancel is no failure
    assert Started.calls == ["note:a"]

    again = await engine.run("desk", "anything new?", session_id, caller=ALICE)
    assert (again.ok, again.message) == (True, "Back.")
    assert await transcript_lines(engine, session_id) == [
        "Desk | user: hello",
        "Desk | assistant: Hi!",
        "Desk | user: anything new?",
        "Desk | assistant: Back.",
    ]
    assert Started.calls == ["note:a"]
    script.assert_complete()


async def test_a_turn_cancelled_in_a_tool_starts_no_tool_after_it() -> None:
    engine, _model, script = hold_at(99, ["Hi!", [slow("x", "c1"), note("after", "c2")], "Back."])
    session_id, before = await started_session(engine)
    running = asyncio.create_task(engine.run("desk", "look x up", session_id, caller=ALICE))
    await Started.slow_started.wait()
    assert await engine.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    result = await running
    assert Started.slow_cancelled.is_set()
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert Started.calls == ["slow:x"]  # the call after it in the same response never started
    assert await engine.get_session(session_id, principal="alice") == before
    again = await engine.run("desk", "hi again", session_id, caller=ALICE)
    assert (again.ok, again.message) == (True, "Back.")
    assert Started.calls == ["slow:x"]
    script.assert_complete()


async def test_a_first_turn_cancelled_leaves_no_session() -> None:
    engine, model, _script = hold_at(2, [[note("a", "c1")]])
    running = asyncio.create_task(engine.run("desk", "note a", caller=ALICE))
    await model.held.wait()
    assert Started.calls == ["note:a"]
    (session_id,) = Started.sessions
    with pytest.raises(SessionNotFound):  # not stored yet, and not Bob's
        await engine.cancel(session_id, caller=Caller(principal="bob"))
    assert await engine.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    result = await running
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert result.session_id is None  # no session was stored: the result names none
    assert await engine.get_session(session_id, principal="alice") is None
    assert await engine.store.transcript(session_id) == []


async def test_what_cannot_be_cancelled_is_refused_and_another_principal_reaches_nothing() -> None:
    engine, model, script = hold_at(2, ["Hi!", "Still here."])
    session_id, _before = await started_session(engine)
    with pytest.raises(TurnNotRunning) as idle:
        await engine.cancel(session_id, caller=ALICE)
    assert (idle.value.status, idle.value.kind) == (409, "turn_not_running")
    with pytest.raises(SessionNotFound):
        await engine.cancel("no-such-session", caller=ALICE)
    with pytest.raises(InvalidInput):
        await engine.cancel("bad id!", caller=ALICE)

    running = asyncio.create_task(engine.run("desk", "wait", session_id, caller=ALICE))
    await model.held.wait()
    for stranger in (Caller(principal="bob"), Caller()):
        with pytest.raises(SessionNotFound):
            await engine.cancel(session_id, caller=stranger)
    model.release()
    result = await running
    assert (result.ok, result.message) == (True, "Still here.")  # Bob's cancel touched nothing
    with pytest.raises(TurnNotRunning):
        await engine.cancel(session_id, caller=ALICE)  # it ended
    script.assert_complete()


class HeldSaves(MemoryStore):
    """A memory store whose next save, once ``hold()`` is called, waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.saving = asyncio.Event()
        self.release = asyncio.Event()
        self._armed = False

    def hold(self) -> None:
        self._armed = True

    async def save(self, session: Session, *args: Any, **kwargs: Any) -> int:
        if self._armed:
            self._armed = False
            self.saving.set()
            await self.release.wait()
        return await super().save(session, *args, **kwargs)


async def test_a_turn_whose_commit_started_is_past_cancelling_and_commits_whole() -> None:
    store = HeldSaves()
    engine, _model, script = hold_at(99, ["Hi!", [note("a", "c1")], "Noted."], store=store)
    session_id, before = await started_session(engine)
    store.hold()
    running = asyncio.create_task(engine.run("desk", "note a", session_id, caller=ALICE))
    await store.saving.wait()  # the final commit is under way
    with pytest.raises(TurnNotRunning):
        await engine.cancel(session_id, caller=ALICE)
    store.release.set()
    result = await running
    assert (result.ok, result.message) == (True, "Noted.")
    after = await engine.get_session(session_id, principal="alice")
    assert after is not None and after.revision == before.revision + 1
    assert await transcript_lines(engine, session_id) == [
        "Desk | user: hello",
        "Desk | assistant: Hi!",
        "Desk | user: note a",
        'Desk | assistant: -> note({"text": "a"}) #c1',
        f"Desk | tool note #c1: noted a in {session_id}",
        "Desk | assistant: Noted.",
    ]
    script.assert_complete()


async def test_run_stream_ends_with_the_cancelled_result() -> None:
    engine, model, _script = hold_at(2, ["Hi!"])
    session_id, _ = await started_session(engine)
    seen: list[Any] = []

    async def listen() -> None:
        async for item in engine.run_stream("desk", "wait", session_id, caller=ALICE):
            seen.append(item)

    listening = asyncio.create_task(listen())
    await model.held.wait()
    await engine.cancel(session_id, caller=ALICE)
    await listening
    (finished,) = seen
    assert finished.result.error is not None and finished.result.error.is_a(TurnCancelled)


async def test_a_decision_cancelled_while_its_approved_call_runs_frees_the_session_at_once() -> None:
    engine, _model, script = hold_at(99, ["Hi!", [pay(5, "c1")], "It may or may not have gone through."])
    session_id, _ = await started_session(engine)
    asked = await engine.run("desk", "pay 5", session_id, caller=ALICE)
    (approval,) = asked.pending
    waiting = await engine.get_session(session_id, principal="alice")
    assert waiting is not None and waiting.status == "awaiting_approval"

    deciding = asyncio.create_task(engine.decide(session_id, approval.id, "approve", caller=ALICE))
    await Started.slow_started.wait()  # the approved call runs
    assert await engine.cancel(session_id, caller=ALICE) == Cancelled(session_id, "decision")
    result = await deciding
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert Started.slow_cancelled.is_set()
    # The claim was given up: the next message goes on at once, the call answered as unknown.
    await claim_given_up(engine, session_id, "alice")
    script.assert_complete()
