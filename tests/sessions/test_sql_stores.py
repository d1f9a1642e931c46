"""What the SQL stores add to the contract: bad input is refused before anything is written, and
driver trouble (locks, closed stores, unreachable servers) surfaces as a clear ``StoreError``."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from store_helpers import Appended, Backend, append, erase, new_session, play_turn

from picoflow.exceptions import SessionConflict, StoreError
from picoflow.messages import Message, ToolCall
from picoflow.session import LogRecord, Session, session_to_json
from picoflow.sessions import PostgresStore, SessionStore, SQLiteStore, open_store
from picoflow.sessions.postgres import _LOAD as postgres_load
from picoflow.sessions.sqlite import _LOAD as sqlite_load


def unstamped(session: Session, appended: Appended) -> Appended:
    return [(ns, replace(m, seq=-1)) for ns, m in appended]


def shuffled(session: Session, appended: Appended) -> Appended:
    return [appended[1], appended[0], *appended[2:]]


def from_the_future(session: Session, appended: Appended) -> Appended:
    return [*appended[:-1], (appended[-1][0], replace(appended[-1][1], seq=session.next_seq))]


def reused_seq(session: Session, appended: Appended) -> Appended:
    # Seq 0 is already stored: the session row update must be rolled back with the messages.
    return [(appended[0][0], replace(appended[0][1], seq=0)), *appended[1:]]


def no_namespace(session: Session, appended: Appended) -> Appended:
    return [("", appended[0][1]), *appended[1:]]


def not_a_message(session: Session, appended: Appended) -> Appended:
    return [("ask", "hello"), *appended]  # type: ignore[list-item]


def lone_surrogate(session: Session, appended: Appended) -> Appended:
    return [(appended[0][0], replace(appended[0][1], content="broken \ud800 text")), *appended[1:]]


def state_not_json(session: Session, appended: Appended) -> Appended:
    session.states["ask"]["handle"] = object()
    return appended


BAD_APPENDS: list[tuple[Callable[[Session, Appended], Appended], str]] = [
    (unstamped, "has no seq"),
    (shuffled, "out of seq order"),
    (from_the_future, "next_seq is"),
    (reused_seq, "reuses a seq already stored"),
    (no_namespace, "namespace must be a non-empty string"),
    (not_a_message, "expected a Message"),
    (lone_surrogate, "cannot store this value as JSON"),
    (state_not_json, "cannot store this value as JSON"),
]


@pytest.mark.parametrize(("spoil", "message"), BAD_APPENDS, ids=[f.__name__ for f, _ in BAD_APPENDS])
async def test_bad_input_is_refused_and_writes_nothing(
    sql_store: SessionStore, spoil: Callable[[Session, Appended], Appended], message: str
) -> None:
    session = new_session("bad-1")
    await sql_store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    stored = await sql_store.load("bad-1")
    assert stored is not None
    before = session_to_json(stored)

    appended = spoil(session, play_turn(session, "t2"))
    with pytest.raises(ValueError, match=message):
        await sql_store.save(session, expected_revision=1, appended=appended)

    assert session.revision == 1
    after = await sql_store.load("bad-1")
    assert after is not None
    assert session_to_json(after) == before
    assert len(await sql_store.transcript("bad-1")) == 4
    # Nothing is left half-done: the stored session takes the next good turn.
    assert await sql_store.save(after, expected_revision=1, appended=play_turn(after, "t2")) == 2


@pytest.mark.parametrize("expected", [-1, True, 1.0, "1"])
async def test_a_bad_expected_revision_is_refused(sql_store: SessionStore, expected: object) -> None:
    session = new_session("bad-rev")
    with pytest.raises(ValueError, match="expected_revision"):
        await sql_store.save(session, expected_revision=expected, appended=play_turn(session, "t1"))  # type: ignore[arg-type]
    assert await sql_store.load("bad-rev") is None


async def test_an_empty_session_id_is_refused(sql_store: SessionStore) -> None:
    with pytest.raises(ValueError, match=r"session\.id"):
        await sql_store.save(new_session(""), expected_revision=None)


@pytest.mark.parametrize("page", [{"limit": -1}, {"offset": -5}, {"limit": "10"}])
async def test_bad_paging_is_refused(sql_store: SessionStore, page: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"limit|offset"):
        await sql_store.list_sessions(**page)  # type: ignore[arg-type]


async def test_record_error_needs_a_log_record(sql_store: SessionStore) -> None:
    with pytest.raises(TypeError, match="LogRecord"):
        await sql_store.record_error("x", "boom")  # type: ignore[arg-type]
    assert await sql_store.errors("x") == []


async def test_a_session_without_turns_or_memory_round_trips(sql_store: SessionStore) -> None:
    session = new_session("bare")
    await sql_store.save(session, expected_revision=None)
    assert await sql_store.load("bare") == session
    assert await sql_store.transcript("bare") == []


async def test_a_closed_store_refuses_work(sql_store: SessionStore) -> None:
    await sql_store.load("warm-up")
    await sql_store.close()
    await sql_store.close()
    with pytest.raises(StoreError, match="closed"):
        await sql_store.load("any")


# --- SQLite -------------------------------------------------------------------------------------


async def test_sqlite_uses_wal_and_creates_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "still" / "s.sqlite3"
    store = SQLiteStore(path)
    assert await store.load("x") is None
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_sqlite_lock_held_too_long_is_a_store_error_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = open_store(f"sqlite:///{path}?busy_timeout=0.2")
    session = new_session("locked")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))

    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked"):
            await store.save(session, expected_revision=1, appended=play_turn(session, "t2"))
        assert session.revision == 1
        assert (await store.load("locked")) is not None  # readers are not blocked by a writer in WAL
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert len(await store.transcript("locked")) == 4
    loaded = await store.load("locked")
    assert loaded is not None
    assert await store.save(loaded, expected_revision=1, appended=play_turn(loaded, "t2")) == 2
    await store.close()


@pytest.mark.parametrize("path", ["", ":memory:", "file:x.db?mode=memory"])
def test_sqlite_refuses_in_memory_databases(path: str) -> None:
    with pytest.raises(ValueError, match="MemoryStore"):
        SQLiteStore(path)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"synchronous": "OFF"}, "synchronous"),
        ({"busy_timeout": 0}, "busy_timeout"),
        ({"readers": 0}, "readers"),
    ],
)
def test_sqlite_refuses_bad_options(tmp_path: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SQLiteStore(tmp_path / "s.sqlite3", **options)  # type: ignore[arg-type]


# --- PostgreSQL ---------------------------------------------------------------------------------


@pytest.mark.postgres
async def test_postgres_keeps_sessions_in_its_schema(postgres_url: str, postgres_schema: str) -> None:
    backend = Backend(
        "postgres",
        f"{postgres_url}?schema={postgres_schema}",
        postgres_url=postgres_url,
        schema=postgres_schema,
    )
    store = backend.open()
    session = new_session("in-schema")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    await backend.close_all()
    assert backend.sql("SELECT id, revision FROM {p}picoflow_sessions") == [("in-schema", 1)]
    assert backend.sql("SELECT count(*) FROM {p}picoflow_messages") == [(4,)]
    assert backend.sql(
        "SELECT count(*) FROM pg_tables WHERE tablename = 'picoflow_sessions' AND schemaname = 'public'"
    ) == [(0,)]


async def test_postgres_unreachable_is_a_clear_store_error() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout=0.5)
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL 127\.0\.0\.1:1/none"):
        await store.load("x")
    await store.close()


@pytest.mark.parametrize("schema", ["a-b", 'x"; DROP TABLE y; --', "", "1abc", "a" * 64])
def test_postgres_refuses_unsafe_schema_names(schema: str) -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresStore("postgresql://127.0.0.1/test", schema=schema)


def test_postgres_without_psycopg_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    with pytest.raises(ImportError, match=r"install picoflow-ai\[postgres\]"):
        PostgresStore("postgresql://127.0.0.1/test")


async def test_conflicts_carry_the_session_id(sql_store: SessionStore) -> None:
    session = new_session("conflict-id")
    await sql_store.save(session, expected_revision=None)
    with pytest.raises(SessionConflict) as caught:
        await sql_store.save(session, expected_revision=0)
    assert caught.value.session_id == "conflict-id"
    assert type(caught.value) is SessionConflict


async def test_errors_keep_their_order_and_fields(sql_store: SessionStore) -> None:
    records = [
        LogRecord(f"code{n}", f"message {n} ✓", "error", f"step{n}", n, 1700000000.0 + n) for n in range(5)
    ]
    for record in records:
        await sql_store.record_error("ordered", record)
    assert await sql_store.errors("ordered") == records


async def test_tool_calls_survive_with_raw_and_nested_arguments(sql_store: SessionStore) -> None:
    session = new_session("calls")
    calls = [ToolCall("a", {"deep": {"list": [1, {"x": "ü"}]}}, "1"), ToolCall("b", "not { json", "2")]
    appended: Appended = []
    append(session, "ask", Message.assistant("", calls), appended)
    await sql_store.save(session, expected_revision=None, appended=appended)
    loaded = await sql_store.load("calls")
    assert loaded is not None
    assert loaded.memory["ask"].messages[0].tool_calls == tuple(calls)


async def test_a_load_reads_live_memory_only_even_with_table_statistics(sql_backend: Backend) -> None:
    """Once ANALYZE has run, a planner left to itself read a long session's whole transcript on every
    load (PostgreSQL: a hash join over a scan; SQLite: a temporary index). Loads must stay one index
    range scan per namespace, from its start."""
    store = sql_backend.open()
    session = new_session("long")
    appended: Appended = []
    for turn in range(600):
        if turn % 5 == 0:
            erase(session, "ask")
        appended += play_turn(session, f"t{turn}")
    await store.save(session, expected_revision=None, appended=appended)
    if sql_backend.kind == "sqlite":
        assert sql_backend.sqlite_path is not None
        with contextlib.closing(sqlite3.connect(sql_backend.sqlite_path)) as conn:
            conn.execute("ANALYZE")
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sqlite_load, {"id": "long"})]
        assert "SEARCH m USING INDEX picoflow_messages_live (session_id=? AND namespace=? AND seq>?)" in plan
    else:
        assert sql_backend.postgres_url is not None
        query = postgres_load.replace("{p}", f'"{sql_backend.schema}".')
        with psycopg.connect(sql_backend.postgres_url, autocommit=True) as conn:
            conn.execute(f'ANALYZE "{sql_backend.schema}".picoflow_messages')
            plan = [row[0] for row in conn.execute("EXPLAIN " + query, {"id": "long"}).fetchall()]
        text = "\n".join(plan)
        assert "Seq Scan on picoflow_messages" not in text and "Hash Join" not in text, text
        assert any("Index Cond" in line and "seq >= ns.start" in line for line in plan), text
    loaded = await store.load("long")
    assert loaded is not None
    assert loaded.memory["ask"].messages == session.memory["ask"].messages
    assert len(loaded.memory["ask"].messages) == 20
