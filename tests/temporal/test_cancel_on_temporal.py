"""Cancelling a turn (or a decision) running on Temporal (``FlowEngine.cancel`` with a
``TemporalExecutor``): from any engine with a client — here a second one, sharing nothing with
the engine that submitted the turn but the store and Temporal — the job stops where it waits,
nothing of it is stored, no tool starts after the cancel, its caller gets ``TurnCancelled``, and
the next turn works. The worker runs in the test's event loop, so a model held at a request and a
tool waiting for the test coordinate it by events, never timers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from tests.cancel_support import CancelDesk, Started, claim_given_up, note, pay, slow

from picoflow import Caller, Cancelled, FlowEngine
from picoflow.exceptions import SessionNotFound, TurnCancelled, TurnNotRunning
from picoflow.models import ScriptedModel
from picoflow.server import ServerSettings, create_app
from picoflow.sessions import SQLiteStore
from picoflow.temporal import TemporalExecutor, build_worker
from picoflow.testing import HeldModel, transcript_lines

ALICE = Caller(principal="alice")
BOB = Caller(principal="bob")
SECONDS = 60  # a bound on each wait, should the cancel never land: the test fails, never hangs


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    Started.reset()
    yield
    Started.reset()


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address)


class Desk:
    """A desk on Temporal: ``engine`` submits the turns, ``other`` (another engine, as another
    server process would be) cancels them; the worker's model holds its ``at``-th request."""

    def __init__(
        self, engine: FlowEngine, other: FlowEngine, model: HeldModel, script: ScriptedModel
    ) -> None:
        self.engine = engine
        self.other = other
        self.model = model
        self.script = script


@asynccontextmanager
async def desk_on_temporal(
    client: Client, folder: Path, at: int, script: list[object]
) -> AsyncIterator[Desk]:
    queue = f"cancel-{uuid.uuid4().hex[:8]}"
    scripted = ScriptedModel(script)
    held = HeldModel(scripted, at=at)
    worker = FlowEngine([CancelDesk], store=SQLiteStore(folder / "s.db"), model=held)
    engine, other = (
        FlowEngine(
            [CancelDesk],
            store=SQLiteStore(folder / "s.db"),
            model=ScriptedModel([]),
            executor=TemporalExecutor(client, task_queue=queue),
        )
        for _ in range(2)
    )
    async with build_worker(client, queue, worker):
        yield Desk(engine, other, held, scripted)
    for each in (engine, other, worker):
        await each.aclose()


async def started_session(desk: Desk) -> str:
    first = await desk.engine.run("desk", "hello", caller=ALICE)
    assert first.ok and first.session_id is not None
    return first.session_id


async def test_a_turn_cancelled_in_its_model_call_stores_nothing_and_the_next_turn_works(
    client: Client, tmp_path: Path
) -> None:
    async with desk_on_temporal(client, tmp_path, 3, ["Hi!", [note("a", "c1")], "Back."]) as desk:
        engine = desk.engine
        session_id = await started_session(desk)
        before = await engine.get_session(session_id, principal="alice")
        lines = await transcript_lines(engine, session_id)

        running = asyncio.create_task(engine.run("desk", "note a then b", session_id, caller=ALICE))
        await asyncio.wait_for(desk.model.held.wait(), SECONDS)  # note a ran; the next call waits
        assert Started.calls == ["note:a"]
        for stranger in (BOB, Caller()):
            with pytest.raises(SessionNotFound):
                await desk.other.cancel(session_id, caller=stranger)
        assert await desk.other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
        result = await asyncio.wait_for(running, SECONDS)
        assert result.error is not None and result.error.is_a(TurnCancelled)
        assert (result.session_id, result.message, result.error.status) == (
            session_id,
            "This turn was cancelled; nothing of it was saved.",
            409,
        )
        # The model activity is told to stop (at its next heartbeat): the held call is cancelled.
        await asyncio.wait_for(desk.model.cancelled.wait(), SECONDS)
        desk.model.release()
        assert await engine.get_session(session_id, principal="alice") == before
        assert (
            await transcript_lines(engine, session_id)
            == lines
            == ["Desk | user: hello", "Desk | assistant: Hi!"]
        )
        assert await engine.session_errors(session_id, principal="alice") == []  # a cancel is no failure
        with pytest.raises(TurnNotRunning):
            await desk.other.cancel(session_id, caller=ALICE)  # it ended

        again = await engine.run("desk", "anything new?", session_id, caller=ALICE)
        assert (again.ok, again.message) == (True, "Back.")
        assert await transcript_lines(engine, session_id) == [
            "Desk | user: hello",
            "Desk | assistant: Hi!",
            "Desk | user: anything new?",
            "Desk | assistant: Back.",
        ]
        assert Started.calls == ["note:a"]
        desk.script.assert_complete()


async def test_a_turn_cancelled_while_its_tool_runs_starts_no_tool_after_it(
    client: Client, tmp_path: Path
) -> None:
    script: list[object] = ["Hi!", [slow("x", "c1"), note("after", "c2")], "Back."]
    async with desk_on_temporal(client, tmp_path, 99, script) as desk:
        engine = desk.engine
        session_id = await started_session(desk)
        before = await engine.get_session(session_id, principal="alice")
        running = asyncio.create_task(engine.run("desk", "look x up", session_id, caller=ALICE))
        await asyncio.wait_for(Started.slow_started.wait(), SECONDS)  # the tool activity runs
        assert await desk.other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
        result = await asyncio.wait_for(running, SECONDS)
        assert result.error is not None and result.error.is_a(TurnCancelled)
        # The activity is asked to stop; had the handler finished, its result would be dropped.
        await asyncio.wait_for(Started.slow_cancelled.wait(), SECONDS)
        assert Started.calls == ["slow:x"]  # the call after it in the same response never started
        assert await engine.get_session(session_id, principal="alice") == before

        again = await engine.run("desk", "hi again", session_id, caller=ALICE)
        assert (again.ok, again.message) == (True, "Back.")
        assert Started.calls == ["slow:x"]
        desk.script.assert_complete()


async def test_a_first_turn_cancelled_leaves_no_session_and_only_its_owner_may_cancel_it(
    client: Client, tmp_path: Path
) -> None:
    async with desk_on_temporal(client, tmp_path, 2, [[note("a", "c1")]]) as desk:
        running = asyncio.create_task(desk.engine.run("desk", "note a", caller=ALICE))
        await asyncio.wait_for(desk.model.held.wait(), SECONDS)
        (session_id,) = Started.sessions
        with pytest.raises(SessionNotFound):  # not stored yet, and not Bob's: its workflow says so
            await desk.other.cancel(session_id, caller=BOB)
        assert await desk.other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
        result = await asyncio.wait_for(running, SECONDS)
        assert result.error is not None and result.error.is_a(TurnCancelled)
        assert result.session_id is None  # no session was stored
        assert await desk.engine.get_session(session_id, principal="alice") is None
        assert await desk.engine.store.transcript(session_id) == []
        with pytest.raises(SessionNotFound):  # nothing runs, nothing is stored
            await desk.other.cancel(session_id, caller=ALICE)


async def test_a_decision_cancelled_while_its_approved_call_runs(client: Client, tmp_path: Path) -> None:
    script: list[object] = ["Hi!", [pay(5, "c1")], "It may or may not have gone through."]
    async with desk_on_temporal(client, tmp_path, 99, script) as desk:
        engine = desk.engine
        session_id = await started_session(desk)
        asked = await engine.run("desk", "pay 5", session_id, caller=ALICE)
        (approval,) = asked.pending

        deciding = asyncio.create_task(engine.decide(session_id, approval.id, "approve", caller=ALICE))
        await asyncio.wait_for(Started.slow_started.wait(), SECONDS)  # the approved call runs
        assert await desk.other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "decision")
        result = await asyncio.wait_for(deciding, SECONDS)
        assert result.error is not None and result.error.is_a(TurnCancelled)
        await asyncio.wait_for(Started.slow_cancelled.wait(), SECONDS)
        # The claim was given up: the next message goes on at once, the call answered as unknown.
        await claim_given_up(engine, session_id, "alice")
        desk.script.assert_complete()


async def test_delete_turn_over_http_cancels_a_turn_on_temporal(client: Client, tmp_path: Path) -> None:
    settings = ServerSettings(api_keys={"key-a": "alice", "key-b": "bob"}, prepare_models=False)
    alice, bob = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    async with desk_on_temporal(client, tmp_path, 2, ["Hi!", "Back."]) as desk:
        # The turn's request and the cancel reach two servers (apps on two engines).
        serving, cancelling = (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=create_app(e, settings=settings)), base_url="http://t"
            )
            for e in (desk.engine, desk.other)
        )
        async with serving, cancelling:
            created = await serving.post("/v1/flows/desk/sessions", json={"message": "hello"}, headers=alice)
            assert created.status_code == 201
            session_id = created.json()["session_id"]
            before = (await serving.get(f"/v1/sessions/{session_id}", headers=alice)).json()
            waiting = asyncio.create_task(
                serving.post(f"/v1/sessions/{session_id}/turns", json={"message": "wait"}, headers=alice)
            )
            await asyncio.wait_for(desk.model.held.wait(), SECONDS)
            stranger = await cancelling.delete(f"/v1/sessions/{session_id}/turn", headers=bob)
            assert (stranger.status_code, stranger.json()["error"]["kind"]) == (404, "session_not_found")
            cancel = await cancelling.delete(f"/v1/sessions/{session_id}/turn", headers=alice)
            assert (cancel.status_code, cancel.json()) == (
                202,
                {"session_id": session_id, "cancelled": "turn"},
            )
            answer = await asyncio.wait_for(waiting, SECONDS)
            assert answer.status_code == 409
            assert answer.json()["error"]["kind"] == "turn_cancelled"
            assert (await serving.get(f"/v1/sessions/{session_id}", headers=alice)).json() == before
            idle = await cancelling.delete(f"/v1/sessions/{session_id}/turn", headers=alice)
            assert (idle.status_code, idle.json()["error"]["kind"]) == (409, "turn_not_running")
            await asyncio.wait_for(desk.model.cancelled.wait(), SECONDS)
            desk.model.release()
            again = await serving.post(
                f"/v1/sessions/{session_id}/turns", json={"message": "hi"}, headers=alice
            )
            assert (again.status_code, again.json()["message"]) == (200, "Back.")
        desk.script.assert_complete()
