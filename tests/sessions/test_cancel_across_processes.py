"""Cancelling a turn that another process runs, on one PostgreSQL database (``CancelChannel``).

Two engines, each on a ``PostgresStore`` of its own over the test's schema, stand in for two
server processes: engine A runs the turn, engine B (which runs nothing) cancels it. The cancel
travels over ``LISTEN``/``NOTIFY``: B publishes a request and waits for A's answer. A real second
OS process does the same at the end. Every point is reached by events (a model held at a request,
a tool waiting), never by timers; ``GUARD`` only bounds a wait that would otherwise hang.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from tests.cancel_support import CancelDesk, Started, claim_given_up, hold_at, note, pay, slow
from tests.server.support import client_for, events_of

from picoflow import Caller, Cancelled, FlowEngine
from picoflow.exceptions import SessionNotFound, TurnCancelled, TurnNotRunning
from picoflow.models import ScriptedModel
from picoflow.server import ServerSettings
from picoflow.session import Session
from picoflow.sessions import MemoryStore, PostgresStore, SQLiteStore
from picoflow.sessions.base import CancelChannel
from picoflow.testing import transcript_lines

pytestmark = pytest.mark.postgres

ALICE = Caller(principal="alice")
GUARD = 60.0
"""Seconds a cancel that must be answered may wait (a hang guard: an answer comes at once)."""
WORKER = Path(__file__).with_name("cancel_worker.py")

Stores = Callable[..., PostgresStore]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    Started.reset()
    yield
    Started.reset()


@pytest.fixture
async def stores(postgres_url: str, postgres_schema: str) -> AsyncIterator[Stores]:
    """Another ``PostgresStore`` on the test's schema at each call (closed after the test)."""
    opened: list[PostgresStore] = []

    def open_one(cancel_wait: float = GUARD, **params: str) -> PostgresStore:
        url = postgres_url + "".join(
            f"{'&' if '?' in postgres_url else '?'}{k}={v}" for k, v in params.items()
        )
        store = PostgresStore(url, schema=postgres_schema, cancel_wait=cancel_wait)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


def canceller(store: PostgresStore) -> FlowEngine:
    """Engine B: the same flow on its own store; it runs no turn."""
    return FlowEngine([CancelDesk], store=store, model=ScriptedModel([]))


async def started_session(engine: FlowEngine) -> tuple[str, Session]:
    first = await engine.run("desk", "hello", caller=ALICE)
    assert first.ok and first.session_id is not None
    stored = await engine.get_session(first.session_id, principal="alice")
    assert stored is not None
    return first.session_id, stored


async def test_a_turn_held_in_its_model_request_is_cancelled_from_another_process(stores: Stores) -> None:
    engine, model, script = hold_at(3, ["Hi!", [note("a", "c1")], "Back."], store=stores())
    other = canceller(stores())
    session_id, before = await started_session(engine)

    running = asyncio.create_task(engine.run("desk", "note a then b", session_id, caller=ALICE))
    await model.held.wait()
    assert Started.calls == ["note:a"]
    assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    result = await running
    assert model.cancelled.is_set()
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert (result.session_id, result.message, result.error.status) == (
        session_id,
        "This turn was cancelled; nothing of it was saved.",
        409,
    )
    model.release()
    # Nothing of the turn is stored, as either process reads it.
    assert await engine.get_session(session_id, principal="alice") == before
    assert await other.get_session(session_id, principal="alice") == before
    assert await transcript_lines(other, session_id) == ["Desk | user: hello", "Desk | assistant: Hi!"]
    assert await other.session_errors(session_id, principal="alice") == []
    assert Started.calls == ["note:a"]

    again = await engine.run("desk", "anything new?", session_id, caller=ALICE)
    assert (again.ok, again.message) == (True, "Back.")
    assert await transcript_lines(other, session_id) == [
        "Desk | user: hello",
        "Desk | assistant: Hi!",
        "Desk | user: anything new?",
        "Desk | assistant: Back.",
    ]
    assert Started.calls == ["note:a"]
    script.assert_complete()


async def test_a_turn_cancelled_in_a_tool_from_another_process_starts_no_tool_after_it(
    stores: Stores,
) -> None:
    engine, _model, script = hold_at(
        99, ["Hi!", [slow("x", "c1"), note("after", "c2")], "Back."], store=stores()
    )
    other = canceller(stores())
    session_id, before = await started_session(engine)

    running = asyncio.create_task(engine.run("desk", "look x up", session_id, caller=ALICE))
    await Started.slow_started.wait()
    assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    result = await running
    assert Started.slow_cancelled.is_set()
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert Started.calls == ["slow:x"]  # the call after it in the same response never started
    assert await other.get_session(session_id, principal="alice") == before

    again = await engine.run("desk", "hi again", session_id, caller=ALICE)
    assert (again.ok, again.message) == (True, "Back.")
    assert Started.calls == ["slow:x"]
    script.assert_complete()


async def test_with_nothing_running_anywhere_the_cancel_waits_its_bound_and_finds_no_turn(
    stores: Stores,
) -> None:
    engine, _model, script = hold_at(99, ["Hi!"], store=stores())
    other = canceller(stores(cancel_wait=0.2))
    session_id, _before = await started_session(engine)  # engine A listens from its first turn
    with pytest.raises(TurnNotRunning) as idle:
        await other.cancel(session_id, caller=ALICE)
    assert (idle.value.status, idle.value.kind) == (409, "turn_not_running")
    with pytest.raises(SessionNotFound):  # nothing is asked of other processes for it
        await other.cancel("no-such-session", caller=ALICE)
    script.assert_complete()


async def test_another_principal_reaches_no_turn_of_another_process(stores: Stores) -> None:
    engine, model, script = hold_at(2, ["Hi!", "Still here."], store=stores())
    other = canceller(stores())
    session_id, _before = await started_session(engine)

    running = asyncio.create_task(engine.run("desk", "wait", session_id, caller=ALICE))
    await model.held.wait()
    for stranger in (Caller(principal="bob"), Caller()):
        with pytest.raises(SessionNotFound):
            await other.cancel(session_id, caller=stranger)
    model.release()
    result = await running
    assert (result.ok, result.message) == (True, "Still here.")  # Bob's cancel touched nothing
    assert not model.cancelled.is_set()
    script.assert_complete()


async def test_malformed_notifications_are_ignored_and_the_listener_goes_on(
    stores: Stores, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="picoflow")
    store = stores()
    engine, model, script = hold_at(3, ["Hi!", [note("a", "c1")], [slow("x", "c2")], "Done."], store=store)
    other = canceller(stores())
    session_id, _before = await started_session(engine)

    # A first cancel answered: A's listener is connected from here on.
    running = asyncio.create_task(engine.run("desk", "note a", session_id, caller=ALICE))
    await model.held.wait()
    assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    assert (await running).error is not None
    model.release()
    stored = await other.get_session(session_id, principal="alice")
    assert stored is not None

    def request(**changed: object) -> str:
        fields = {
            "v": 1,
            "kind": "cancel",
            "id": "0" * 32,
            "session": session_id,
            "revision": stored.revision,
        }
        return json.dumps({**fields, **changed})

    malformed = [
        "",
        "not json",
        "[1, 2]",
        "{" * 600,
        json.dumps({"kind": "cancel"}),
        request(v=2),
        request(kind="stop"),
        request(id="not-a-request-id"),
        request(revision=str(stored.revision)),
        request(revision=True),
        request(revision=-1),
        request(session=""),
        request(session="s" * 201),
        request(session=7),
        request(principal="alice"),  # a field a request never carries
        json.dumps({"v": 1, "kind": "cancelled", "id": "1" * 32, "job": "everything"}),
        request() + " " * 1024,
    ]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for payload in malformed:
            conn.execute("SELECT pg_notify(%s, %s)", (store.cancel_channel, payload))

    # Notifications reach a listener in the order they were sent: once A answers the next cancel,
    # it has heard (and ignored) every one above.
    running = asyncio.create_task(engine.run("desk", "look x up", session_id, caller=ALICE))
    await Started.slow_started.wait()
    assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    result = await running
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert Started.calls == ["note:a", "slow:x"]
    ignored = [r for r in caplog.records if "malformed cancel notification" in r.getMessage()]
    # Both processes listen (B since its first cancel) and each ignores every one.
    assert len(ignored) == 2 * len(malformed) and {r.levelno for r in ignored} == {logging.DEBUG}
    assert all(session_id not in r.getMessage() for r in ignored)  # the payload is not logged

    again = await engine.run("desk", "and now?", session_id, caller=ALICE)
    assert (again.ok, again.message) == (True, "Done.")
    script.assert_complete()


async def test_a_request_naming_an_older_revision_leaves_a_later_turn_alone(
    stores: Stores, postgres_url: str
) -> None:
    store = stores()
    script = ["Hi!", "Hi!", [slow("x", "c1")], [slow("y", "c2")], "Still here."]
    engine, model, scripted = hold_at(5, script, store=store)
    other = canceller(stores())
    first, _ = await started_session(engine)  # stored at revision 1
    second, _ = await started_session(engine)
    looking = asyncio.create_task(engine.run("desk", "look x up", second, caller=ALICE))
    await Started.slow_started.wait()
    assert await other.cancel(second, caller=ALICE) == Cancelled(second, "turn")  # A listens
    assert (await looking).error is not None

    Started.slow_started = asyncio.Event()
    looking = asyncio.create_task(engine.run("desk", "look y up", second, caller=ALICE))
    await Started.slow_started.wait()
    waiting = asyncio.create_task(engine.run("desk", "wait", first, caller=ALICE))
    await model.held.wait()  # the first session's turn, started on revision 1, waits for its model

    # Made when the session stood at revision 0: meant for a job that ended before this one began.
    stale = {"v": 1, "kind": "cancel", "id": "2" * 32, "session": first, "revision": 0}
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (store.cancel_channel, json.dumps(stale)))
    # Heard in order: once the second session's cancel is answered, the stale one was heard first.
    assert await other.cancel(second, caller=ALICE) == Cancelled(second, "turn")
    assert (await looking).error is not None
    model.release()
    result = await waiting
    assert (result.ok, result.message) == (True, "Still here.")
    assert not model.cancelled.is_set()
    assert Started.calls == ["slow:x", "slow:y"]
    scripted.assert_complete()


async def test_a_listener_whose_connection_dropped_connects_again(stores: Stores, postgres_url: str) -> None:
    name = f"pf_listen_{id(stores):x}"
    engine, model, script = hold_at(
        3, ["Hi!", [note("a", "c1")], [slow("x", "c2")], "Done."], store=stores(application_name=name)
    )
    other = canceller(stores())
    session_id, _before = await started_session(engine)
    running = asyncio.create_task(engine.run("desk", "note a", session_id, caller=ALICE))
    await model.held.wait()
    assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")  # A listens
    assert (await running).error is not None
    model.release()

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND query LIKE 'LISTEN %%'",
            (name,),
        ).fetchall()
    assert ended == [(True,)]  # A's listener, and only it

    # The turns go on meanwhile, and the next cancel reaches A once it listens again (the request
    # is published again while it waits).
    running = asyncio.create_task(engine.run("desk", "look x up", session_id, caller=ALICE))
    await Started.slow_started.wait()
    assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
    assert (await running).error is not None
    again = await engine.run("desk", "and now?", session_id, caller=ALICE)
    assert (again.ok, again.message) == (True, "Done.")
    script.assert_complete()


async def test_a_decision_is_cancelled_from_another_process_after_its_claim(stores: Stores) -> None:
    engine, _model, script = hold_at(
        99, ["Hi!", [pay(5, "c1")], "It may or may not have gone through."], store=stores()
    )
    other = canceller(stores())
    session_id, _before = await started_session(engine)
    asked = await engine.run("desk", "pay 5", session_id, caller=ALICE)
    (approval,) = asked.pending
    waiting = await other.get_session(session_id, principal="alice")
    assert waiting is not None and waiting.status == "awaiting_approval"

    deciding = asyncio.create_task(engine.decide(session_id, approval.id, "approve", caller=ALICE))
    await Started.slow_started.wait()  # the approved call runs; the decision's claim is stored
    claimed = await other.get_session(session_id, principal="alice")
    assert claimed is not None and claimed.revision == waiting.revision + 1
    # B asks on the revision the claim stored, one after the decision started on: still its job.
    assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "decision")
    result = await deciding
    assert result.error is not None and result.error.is_a(TurnCancelled)
    assert Started.slow_cancelled.is_set()
    await claim_given_up(engine, session_id, "alice")
    script.assert_complete()


async def test_the_http_cancel_landing_on_another_server_process_reaches_the_turn(stores: Stores) -> None:
    settings = ServerSettings(api_keys={"key-a": "alice"})
    alice = {"Authorization": "Bearer key-a"}
    engine, model, script = hold_at(3, ["Hi!", [note("a", "c1")], "Back."], store=stores())
    async with (
        client_for(engine, settings) as here,
        client_for(canceller(stores()), settings) as there,
        client_for(canceller(stores(cancel_wait=0.2)), settings) as impatient,
    ):
        created = await here.post("/v1/flows/desk/sessions", json={"message": "hello"}, headers=alice)
        session_id = created.json()["session_id"]
        streaming = asyncio.create_task(
            here.post(
                f"/v1/sessions/{session_id}/turns", json={"message": "note a", "stream": True}, headers=alice
            )
        )
        await model.held.wait()
        cancel = await there.delete(f"/v1/sessions/{session_id}/turn", headers=alice)
        assert (cancel.status_code, cancel.json()) == (202, {"session_id": session_id, "cancelled": "turn"})
        stream = await streaming
        assert [name for name, _ in events_of(stream.text)] == ["tool_call", "tool_result", "cancelled"]
        model.release()

        idle = await impatient.delete(f"/v1/sessions/{session_id}/turn", headers=alice)
        assert (idle.status_code, idle.json()["error"]["kind"]) == (409, "turn_not_running")
        again = await here.post(f"/v1/sessions/{session_id}/turns", json={"message": "hi"}, headers=alice)
        assert (again.status_code, again.json()["message"]) == (200, "Back.")
        shown = await there.get(f"/v1/sessions/{session_id}", headers=alice)
        assert [(m["role"], m["content"]) for m in shown.json()["transcript"]] == [
            ("user", "hello"),
            ("assistant", "Hi!"),
            ("user", "hi"),
            ("assistant", "Back."),
        ]
    assert Started.calls == ["note:a"]
    script.assert_complete()


async def test_stores_without_a_channel_keep_cancels_in_their_process(tmp_path: Path) -> None:
    assert not isinstance(MemoryStore(), CancelChannel)
    sqlite = SQLiteStore(tmp_path / "sessions.sqlite3")
    try:
        assert not isinstance(sqlite, CancelChannel)
    finally:
        await sqlite.close()


# --- a real second OS process -----------------------------------------------------------------


async def test_a_turn_running_in_another_os_process_is_cancelled(
    stores: Stores, postgres_url: str, postgres_schema: str
) -> None:
    store = stores()
    other = canceller(store)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        postgres_url,
        postgres_schema,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        async with asyncio.timeout(GUARD):
            line = await process.stdout.readline()
            if not line.startswith(b"held "):
                raise AssertionError(f"{line!r}: {(await process.stderr.read()).decode()}")
            session_id = line.split()[1].decode()
            assert await other.cancel(session_id, caller=ALICE) == Cancelled(session_id, "turn")
            stdout, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
        assert json.loads(stdout) == {"error": "turn_cancelled", "cancelled": True, "next": "Back."}
        assert await transcript_lines(other, session_id) == [
            "Desk | user: hello",
            "Desk | assistant: Hi!",
            "Desk | user: anything new?",
            "Desk | assistant: Back.",
        ]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
