"""The ``SessionStore`` contract, checked on every store: memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json

import pytest
from store_helpers import Backend, append, erase, new_session, play_turn, tag_of

from picoflow.exceptions import SessionConflict
from picoflow.messages import Message, ToolCall
from picoflow.session import LogRecord, Namespace, Session, session_to_json
from picoflow.sessions import SessionStore
from picoflow.usage import Usage

UNICODE = 'héllo 😀👩🏽‍💻 مرحبا بالعالم שלום עולם 漢字 \u200f\u202e e\u0301 \x00 \t\n"quoted" \\ back'
MEGABYTE = ("tool output ⚙ " * 80_000)[:1_000_000]


def full_session(session_id: str) -> tuple[Session, list[tuple[str, Message]]]:
    """A session with every field away from its default and awkward content everywhere."""
    session = new_session(session_id, flow="hotel", step="explore", principal="user-42 😀")
    appended: list[tuple[str, Message]] = []
    call = ToolCall(
        "search", {"city": "القاهرة", "nested": {"dates": ["2025-01-01"], "n": 2, "x": None}}, "c1"
    )
    raw = ToolCall("broken", "{not json", "c2")
    append(session, "explore", Message.user(UNICODE), appended)
    thought = [
        {"type": "thinking", "thinking": "Cairo? " + UNICODE, "signature": "c2lnbmF0dXJl=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
    ]
    append(session, "explore", Message.assistant("thinking…", [call, raw], reasoning=thought), appended)
    append(session, "explore", Message.tool(call, MEGABYTE), appended)
    append(session, "explore", Message.tool(raw, "arguments are not an object", is_error=True), appended)
    summed_up = Message("assistant", "סיכום: " + UNICODE, kind="direct", remembered_as="Summed up 🌍 \x00")
    append(session, "explore", summed_up, appended)
    append(session, "present", Message.user("next ➡", kind="forwarded"), appended)
    append(session, "present", Message.assistant("ok", kind="crossing"), appended)
    # Compaction: the two oldest explore messages leave the live window, a summary replaces them.
    explore = session.memory["explore"]
    explore.messages = explore.messages[2:]
    explore.start = explore.messages[0].seq
    explore.summary = "Earlier: the user greeted in five scripts 🌍"
    session.memory["empty"] = Namespace(start=session.next_seq)
    session.current_step = "present"
    session.status = "completed"
    session.states = {
        "explore": {"criteria": {"rooms": [{"type": "double", "beds": [1, 2]}], "ok": True, "ratio": 0.25}},
        "present": {"quotes": [], "note": UNICODE, "deep": {"a": {"b": {"c": {"d": [None, 1.5, "x"]}}}}},
    }
    session.sequence = ["explore", "present", "explore", "present"]
    session.usage = Usage(1200, 340, 50, 600, 70, 3, 2)
    session.warnings = [
        LogRecord("unknown_tool", "model called 'frobnicate' 🤖", "warning", "explore", 1, 1700000000.5),
        LogRecord("no_handler", "שגיאה", "error", None, None, 1700000001.25),
    ]
    session.models = {"explore": "openai:gpt-4.1-mini", "present": "scripted:test"}
    session.turns = 2
    session.created_at = 1700000000.123456
    session.updated_at = 1700000100.654321
    session.version = 1
    session.metadata = {"tenant": "acme", "tags": ["a", "ü"], "limits": {"daily": 10}}
    return session, appended


async def create(store: SessionStore, session_id: str, **kwargs: str | None) -> Session:
    session = new_session(session_id, **kwargs)  # type: ignore[arg-type]
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    return session


async def test_unknown_session_reads_as_nothing(store: SessionStore) -> None:
    assert await store.load("nope") is None
    assert await store.transcript("nope") == []
    assert await store.errors("nope") == []
    assert await store.delete("nope") is False


async def test_full_session_round_trips_exactly(store: SessionStore) -> None:
    session, appended = full_session("full-1")
    revision = await store.save(session, expected_revision=None, appended=appended)

    assert revision == 1
    assert session.revision == 1
    loaded = await store.load("full-1")
    assert loaded == session
    assert session_to_json(loaded) == session_to_json(session)
    assert loaded.memory["explore"].messages[0].content == MEGABYTE
    assert [m.seq for m in loaded.memory["explore"].messages] == [2, 3, 4]
    assert loaded.memory["empty"] == Namespace([], 7, None)
    assert await store.transcript("full-1") == [message for _, message in appended]


async def test_load_gives_a_private_copy(store: SessionStore) -> None:
    await create(store, "copy-1")
    first = await store.load("copy-1")
    assert first is not None
    first.states["ask"]["count"] = 99
    first.memory["ask"].messages.clear()
    first.metadata["x"] = 1
    first.sequence.append("elsewhere")

    second = await store.load("copy-1")
    assert second is not None
    assert second.states["ask"]["count"] == 1
    assert len(second.memory["ask"].messages) == 4
    assert second.metadata == {}
    assert second.sequence == ["ask"]


async def test_each_save_adds_one_revision(store: SessionStore) -> None:
    session = await create(store, "rev-1")
    for expected in range(1, 5):
        loaded = await store.load("rev-1")
        assert loaded is not None
        assert loaded.revision == expected
        revision = await store.save(
            loaded, expected_revision=expected, appended=play_turn(loaded, f"t{expected + 1}")
        )
        assert revision == loaded.revision == expected + 1
    final = await store.load("rev-1")
    assert final is not None
    assert final.turns == 5
    assert [tag_of(m) for m in await store.transcript("rev-1") if m.role == "user"] == [
        f"t{n}" for n in range(1, 6)
    ]
    assert session.revision == 1


async def test_creating_an_existing_session_conflicts_and_writes_nothing(store: SessionStore) -> None:
    await create(store, "dup-1")
    before = await store.load("dup-1")
    assert before is not None

    intruder = new_session("dup-1", flow="other")
    with pytest.raises(SessionConflict) as caught:
        await store.save(intruder, expected_revision=None, appended=play_turn(intruder, "intruder"))

    assert caught.value.session_id == "dup-1"
    assert intruder.revision == 0
    after = await store.load("dup-1")
    assert after is not None
    assert session_to_json(after) == session_to_json(before)
    assert len(await store.transcript("dup-1")) == 4


@pytest.mark.parametrize("stale", [0, 2, 7])
async def test_a_stale_revision_conflicts_and_writes_nothing(store: SessionStore, stale: int) -> None:
    await create(store, "stale-1")
    loaded = await store.load("stale-1")
    assert loaded is not None
    before = session_to_json(loaded)

    with pytest.raises(SessionConflict):
        await store.save(loaded, expected_revision=stale, appended=play_turn(loaded, "late"))

    assert loaded.revision == 1
    stored = await store.load("stale-1")
    assert stored is not None
    assert session_to_json(stored) == before
    assert len(await store.transcript("stale-1")) == 4
    # The loser reloads and retries: the store is not stuck.
    assert await store.save(stored, expected_revision=1, appended=play_turn(stored, "retry")) == 2


async def test_saving_an_unknown_session_with_a_revision_conflicts(store: SessionStore) -> None:
    ghost = new_session("ghost-1")
    with pytest.raises(SessionConflict):
        await store.save(ghost, expected_revision=3, appended=play_turn(ghost, "boo"))
    assert await store.load("ghost-1") is None
    assert await store.transcript("ghost-1") == []


async def test_concurrent_tasks_get_exactly_one_winner_per_revision(backend: Backend) -> None:
    stores = [backend.open() for _ in range(6)]
    await create(stores[0], "race-1")
    winners: list[str] = []
    for round_ in range(1, 6):
        loaded = await asyncio.gather(*(store.load("race-1") for store in stores))
        assert {session.revision for session in loaded if session} == {round_}
        saves = []
        for task, (store, session) in enumerate(zip(stores, loaded, strict=True)):
            assert session is not None
            appended = play_turn(session, f"r{round_}-task{task}")
            saves.append(store.save(session, expected_revision=round_, appended=appended))
        results = await asyncio.gather(*saves, return_exceptions=True)

        won = [task for task, result in enumerate(results) if result == round_ + 1]
        assert len(won) == 1, results
        assert all(isinstance(r, SessionConflict) for t, r in enumerate(results) if t != won[0]), results
        winners.append(f"r{round_}-task{won[0]}")

    final = await stores[0].load("race-1")
    assert final is not None
    assert final.revision == 6
    assert final.states["ask"]["last"] == winners[-1]
    transcript = await stores[0].transcript("race-1")
    assert [tag_of(m) for m in transcript if m.role == "user"] == ["t1", *winners]
    assert [m.seq for m in transcript] == list(range(24))


async def test_free_running_writers_lose_no_update(backend: Backend) -> None:
    await create(backend.open(), "hammer-1")
    won: list[str] = []
    conflicts = 0

    async def writer(name: str) -> None:
        nonlocal conflicts
        store = backend.open()
        for attempt in range(15):
            session = await store.load("hammer-1")
            assert session is not None
            tag = f"{name}-{attempt}"
            try:
                await store.save(
                    session, expected_revision=session.revision, appended=play_turn(session, tag)
                )
            except SessionConflict:
                conflicts += 1
            else:
                won.append(tag)
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(f"w{n}") for n in range(5)))

    final = await backend.open().load("hammer-1")
    assert final is not None
    assert len(won) + conflicts == 75
    assert final.revision == 1 + len(won)
    assert final.turns == 1 + len(won)
    transcript = await backend.open().transcript("hammer-1")
    assert sorted(tag_of(m) for m in transcript if m.role == "user") == sorted(["t1", *won])
    assert [m.seq for m in transcript] == list(range(4 * (1 + len(won))))


async def test_readers_never_see_a_half_written_turn(backend: Backend) -> None:
    writer_store, reader_store = backend.open(), backend.open()
    session = await create(writer_store, "reader-1")
    done = False

    async def write() -> None:
        nonlocal done
        for turn in range(2, 40):
            await writer_store.save(
                session, expected_revision=session.revision, appended=play_turn(session, f"t{turn}")
            )
            await asyncio.sleep(0)
        done = True

    async def read() -> int:
        seen = 0
        while not done:
            loaded = await reader_store.load("reader-1")
            assert loaded is not None
            assert loaded.revision == loaded.turns == loaded.states["ask"]["count"]
            assert len(loaded.memory["ask"].messages) == 4 * loaded.turns == loaded.next_seq
            seen += 1
            await asyncio.sleep(0)
        return seen

    _, reads = await asyncio.gather(write(), read())
    assert reads > 0


async def test_delete_removes_session_messages_and_errors(store: SessionStore) -> None:
    await create(store, "del-1")
    await store.record_error("del-1", LogRecord("boom", "it broke", "error"))

    assert await store.delete("del-1") is True
    assert await store.load("del-1") is None
    assert await store.transcript("del-1") == []
    assert await store.errors("del-1") == []
    assert await store.list_sessions() == []
    assert await store.delete("del-1") is False
    # The id is free again, with a fresh transcript from seq 0.
    again = await create(store, "del-1")
    assert again.revision == 1
    assert [m.seq for m in await store.transcript("del-1")] == [0, 1, 2, 3]


async def test_delete_of_errors_only_session_clears_them(store: SessionStore) -> None:
    await store.record_error("failed-first-turn", LogRecord("boom", "first turn failed", "error"))
    assert await store.delete("failed-first-turn") is False
    assert await store.errors("failed-first-turn") == []


async def test_sessions_are_isolated(store: SessionStore) -> None:
    a = await create(store, "iso-a")
    b = await create(store, "iso-b")
    for turn in range(2, 4):
        await store.save(a, expected_revision=a.revision, appended=play_turn(a, f"a{turn}"))
    await store.record_error("iso-a", LogRecord("a-only", "x"))

    loaded_b = await store.load("iso-b")
    assert loaded_b is not None
    assert session_to_json(loaded_b) == session_to_json(b)
    assert [tag_of(m) for m in await store.transcript("iso-b") if m.role == "user"] == ["t1"]
    assert await store.errors("iso-b") == []

    assert await store.delete("iso-b") is True
    loaded_a = await store.load("iso-a")
    assert loaded_a is not None
    assert loaded_a.revision == 3
    assert len(await store.transcript("iso-a")) == 12
    assert [r.code for r in await store.errors("iso-a")] == ["a-only"]


async def test_listing_filters_and_pages_newest_first(store: SessionStore) -> None:
    specs = [
        ("s1", "hotel", "running", "ann", 100.0),
        ("s2", "hotel", "completed", "bob", 200.0),
        ("s3", "orders", "running", "ann", 300.0),
        ("s4", "orders", "aborted", None, 400.0),
        ("s5", "hotel", "running", "ann", 500.0),
        ("s6", "hotel", "running", "bob", 500.0),
    ]
    for session_id, flow, status, principal, updated in specs:
        session = new_session(session_id, flow=flow, principal=principal)
        appended = play_turn(session, session_id)
        session.status = status  # type: ignore[assignment]
        session.created_at = updated - 50
        session.updated_at = updated
        await store.save(session, expected_revision=None, appended=appended)

    async def ids(**filters: object) -> list[str]:
        return [info.id for info in await store.list_sessions(**filters)]  # type: ignore[arg-type]

    # Ties on updated_at are broken by id.
    assert await ids() == ["s5", "s6", "s4", "s3", "s2", "s1"]
    assert await ids(flow="hotel") == ["s5", "s6", "s2", "s1"]
    assert await ids(status="running") == ["s5", "s6", "s3", "s1"]
    assert await ids(principal="ann") == ["s5", "s3", "s1"]
    assert await ids(flow="hotel", status="running", principal="bob") == ["s6"]
    assert await ids(flow="nothing") == []
    assert await ids(limit=2) == ["s5", "s6"]
    assert await ids(limit=2, offset=2) == ["s4", "s3"]
    assert await ids(limit=10, offset=5) == ["s1"]
    assert await ids(offset=6) == []
    assert await ids(limit=0) == []

    info = (await store.list_sessions(flow="orders", status="aborted"))[0]
    assert (info.id, info.flow, info.status, info.principal) == ("s4", "orders", "aborted", None)
    assert (info.current_step, info.revision, info.turns) == ("ask", 1, 1)
    assert (info.created_at, info.updated_at) == (350.0, 400.0)


async def test_listing_by_error_records(store: SessionStore) -> None:
    for session_id, updated in (("e1", 100.0), ("e2", 200.0), ("e3", 300.0)):
        session = new_session(session_id, flow="hotel", principal="ann")
        session.updated_at = updated
        await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    failed = LogRecord("model_error", "the model failed", "error", "ask", 2)
    await store.record_error("e1", failed)
    await store.record_error("e3", failed)
    await store.record_error("e3", failed)
    await store.record_error("never-saved", failed)  # a record alone lists no session

    async def ids(**filters: object) -> list[str]:
        return [info.id for info in await store.list_sessions(**filters)]  # type: ignore[arg-type]

    assert await ids(errors=True) == ["e3", "e1"]
    assert await ids(errors=False) == ["e2"]
    assert await ids(errors=None) == ["e3", "e2", "e1"]
    assert await ids(errors=True, principal="ann", flow="hotel", limit=1, offset=1) == ["e1"]
    assert await ids(errors=True, principal="bob") == []
    assert await store.delete("e3") is True
    assert await ids(errors=True) == ["e1"]


async def test_listing_reflects_the_latest_save(store: SessionStore) -> None:
    first = await create(store, "old")
    await create(store, "new")
    first.updated_at += 3600
    first.status = "completed"
    first.current_step = "done"
    await store.save(first, expected_revision=1, appended=play_turn(first, "t2"))

    listed = await store.list_sessions()
    assert [info.id for info in listed] == ["old", "new"]
    assert (listed[0].status, listed[0].current_step, listed[0].revision, listed[0].turns) == (
        "completed",
        "done",
        2,
        2,
    )


async def test_erased_memory_stays_in_the_transcript(store: SessionStore) -> None:
    session = new_session("erase-1")
    appended = play_turn(session, "t1")
    appended += play_turn(session, "side", namespace="other")
    await store.save(session, expected_revision=None, appended=appended)
    for turn in (2, 3):
        await store.save(session, expected_revision=session.revision, appended=play_turn(session, f"t{turn}"))

    erase(session, "ask")
    appended = play_turn(session, "t4")
    await store.save(session, expected_revision=session.revision, appended=appended)

    loaded = await store.load("erase-1")
    assert loaded is not None
    assert loaded.memory["ask"].messages == [message for _, message in appended]
    assert loaded.memory["ask"].start == 16
    assert [tag_of(m) for m in loaded.memory["other"].messages if m.role == "user"] == ["side"]
    transcript = await store.transcript("erase-1")
    assert [tag_of(m) for m in transcript if m.role == "user"] == ["t1", "side", "t2", "t3", "t4"]
    assert [m.seq for m in transcript] == list(range(20))

    # A namespace dropped from memory altogether is still history.
    del loaded.memory["other"]
    await store.save(loaded, expected_revision=loaded.revision)
    reloaded = await store.load("erase-1")
    assert reloaded is not None
    assert set(reloaded.memory) == {"ask"}
    assert len(await store.transcript("erase-1")) == 20


async def test_record_error_leaves_the_document_byte_identical(store: SessionStore) -> None:
    session, appended = full_session("err-1")
    await store.save(session, expected_revision=None, appended=appended)
    before = await store.load("err-1")
    assert before is not None

    first = LogRecord("tool_failed", "lookup raised KeyError 😬", "error", "explore", 3, 1700000200.5)
    second = LogRecord("store_error", "disk full", "error", None, None, 1700000300.25)
    await store.record_error("err-1", first)
    await store.record_error("err-1", second)

    after = await store.load("err-1")
    assert after is not None
    assert session_to_json(after) == session_to_json(before)
    assert after.revision == 1
    assert await store.errors("err-1") == [first, second]
    assert len(await store.transcript("err-1")) == len(appended)
    # The next turn still saves from the revision it loaded.
    assert await store.save(after, expected_revision=1, appended=play_turn(after, "t3")) == 2


async def test_record_error_before_the_session_exists(store: SessionStore) -> None:
    record = LogRecord("model_error", "first turn failed", "error", "ask", 1)
    await store.record_error("first-1", record)

    assert await store.load("first-1") is None
    assert await store.errors("first-1") == [record]
    await create(store, "first-1")
    assert await store.errors("first-1") == [record]


async def test_live_memory_comes_back_as_saved_even_when_start_lags(store: SessionStore) -> None:
    session = new_session("lag-1")
    # A namespace created only after its first message took its seq: start is one past it.
    first = Message.user("first").stamped(step="ask", seq=session.next_seq)
    session.next_seq += 1
    session.namespace("late").messages.append(first)
    appended = [("late", first), *play_turn(session, "t1")]
    await store.save(session, expected_revision=None, appended=appended)

    loaded = await store.load("lag-1")
    assert loaded is not None
    assert loaded.memory["late"] == Namespace([first], 1, None)
    assert session_to_json(loaded) == session_to_json(session)


async def test_memory_emptied_without_moving_start_stays_empty(store: SessionStore) -> None:
    session = await create(store, "cleared-1")
    session.memory["ask"].messages.clear()
    await store.save(session, expected_revision=1)
    loaded = await store.load("cleared-1")
    assert loaded is not None
    assert loaded.memory["ask"] == Namespace([], 0, None)

    appended = play_turn(loaded, "t2")
    await store.save(loaded, expected_revision=2, appended=appended)
    again = await store.load("cleared-1")
    assert again is not None
    assert again.memory["ask"].messages == [message for _, message in appended]
    assert len(await store.transcript("cleared-1")) == 8


async def test_a_remembered_reply_keeps_its_whole_text_beside_its_note(backend: Backend) -> None:
    store = backend.open()
    session = new_session("note-1")
    appended = play_turn(session, "t1")
    table = "| Night | #2 | #5 |\n" + "| Sun 8/1/2027 | $440.50 | $380.88 |\n" * 300
    note = "Compared hotels 2 and 5 on price."
    reply = append(session, "ask", Message("assistant", table, kind="direct", remembered_as=note), appended)
    await store.save(session, expected_revision=None, appended=appended)

    loaded = await store.load("note-1")
    assert loaded is not None
    assert loaded.memory["ask"].messages[-1] == reply
    assert (reply.content, reply.remembered_as) == (table, note)
    assert (await store.transcript("note-1"))[-1] == reply
    assert session_to_json(loaded) == session_to_json(session)
    if backend.url is None:
        return
    # A message row written before messages had notes reads back without one.
    [(body,)] = backend.sql(
        "SELECT CAST(body AS TEXT) FROM {p}picoflow_messages WHERE session_id = ? AND seq = 0", ("note-1",)
    )
    older = json.loads(body)
    assert older.pop("remembered_as") is None
    cast = "?::json" if backend.kind == "postgres" else "?"
    backend.sql(
        f"UPDATE {{p}}picoflow_messages SET body = {cast} WHERE session_id = ? AND seq = 0",
        (json.dumps(older), "note-1"),
    )
    again = await store.load("note-1")
    assert again is not None
    assert again.memory["ask"].messages[0] == loaded.memory["ask"].messages[0]
    assert again.memory["ask"].messages[0].remembered_as is None
