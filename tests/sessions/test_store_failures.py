"""Which store failures are outages, on both SQL stores.

Only a database out of reach, or too busy right now, is a ``StoreError`` (HTTP 503, retry later):
``StoreUnavailable`` when it cannot be reached at all. Data the database refuses, a broken
constraint, text it cannot encode, a schema damaged behind the store's back or stored data it cannot
read fail the same way on every retry: they surface as other exceptions, which the engine reports as
internal errors (500). A lost compare-and-swap stays a ``SessionConflict``.
"""

from __future__ import annotations

import asyncio
import functools
import random
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest
from store_helpers import Appended, Backend, erase, new_session, play_turn

from picoflow.exceptions import RunError, SessionConflict, StoreError, StoreUnavailable
from picoflow.session import LogRecord, Session, session_to_json
from picoflow.sessions import PostgresStore, SessionStore, SQLiteStore, open_store
from picoflow.sessions import sqlite as sqlite_module


def not_an_outage(exc: BaseException) -> bool:
    """What the engine reports as an internal error rather than "the store is unavailable"."""
    return not isinstance(exc, RunError | OSError)


@pytest.fixture
async def pg_backend(postgres_url: str, postgres_schema: str) -> AsyncIterator[Backend]:
    backend = Backend(
        "postgres",
        f"{postgres_url}?schema={postgres_schema}",
        postgres_url=postgres_url,
        schema=postgres_schema,
    )
    yield backend
    await backend.close_all()


def _namespace_too_large_to_index(session: Session) -> str:
    """Messages go to a namespace whose name, random text PostgreSQL cannot compress, is longer
    than an index row may be (the live index holds it); SQLite has no such limit."""
    rng = random.Random(7)
    return "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(4000))


SPOILS: dict[str, Callable[[Session], object]] = {
    "integer_beyond_64_bits": lambda s: setattr(s, "turns", 2**63),
    "missing_required_value": lambda s: setattr(s, "flow", None),
    "nul_in_a_text_column": lambda s: setattr(s, "current_step", "ask\x00"),
    "namespace_too_large_for_the_index": _namespace_too_large_to_index,
}
SQLITE_KEEPS = {"nul_in_a_text_column", "namespace_too_large_for_the_index"}


@pytest.mark.parametrize("spoil", list(SPOILS))
async def test_data_the_database_refuses_is_not_an_outage(sql_backend: Backend, spoil: str) -> None:
    store = sql_backend.open()
    good = new_session("kept")
    await store.save(good, expected_revision=None, appended=play_turn(good, "t1"))
    stored = await store.load("kept")
    assert stored is not None
    before = session_to_json(stored)

    refused = new_session("refused")
    namespace = SPOILS[spoil](refused)
    turn = functools.partial(play_turn, namespace=namespace) if isinstance(namespace, str) else play_turn
    if sql_backend.kind == "sqlite" and spoil in SQLITE_KEEPS:
        assert await store.save(refused, expected_revision=None, appended=turn(refused, "t")) == 1
        return
    stored.turns += 1
    SPOILS[spoil](stored)
    for session, expected in ((refused, None), (stored, 1)):
        with pytest.raises(ValueError) as caught:
            await store.save(session, expected_revision=expected, appended=turn(session, "t2"))
        assert not_an_outage(caught.value), repr(caught.value)
        # Nor a lost compare-and-swap (SQLite used to report a refused new row as one).
        assert not isinstance(caught.value, SessionConflict)

    # Nothing was written, and the store goes on working at once (no breaker opened).
    assert await store.load("refused") is None
    after = await store.load("kept")
    assert after is not None and session_to_json(after) == before
    # An open breaker would refuse this save at once; it succeeds.
    assert await store.save(after, expected_revision=1, appended=play_turn(after, "t2")) == 2


async def test_text_the_driver_cannot_encode_is_not_an_outage(sql_store: SessionStore) -> None:
    for call in (
        lambda: sql_store.load("broken \ud800"),
        lambda: sql_store.find_ids("broken \ud800"),
        lambda: sql_store.record_error("broken \ud800", LogRecord("code", "message")),
    ):
        with pytest.raises(ValueError) as caught:
            await call()
        assert not_an_outage(caught.value)
    assert await sql_store.list_sessions() == []


async def test_a_table_dropped_behind_the_store_is_a_fault_not_an_outage(sql_backend: Backend) -> None:
    store = sql_backend.open()
    session = new_session("orphan")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    sql_backend.sql("DROP TABLE {p}picoflow_errors")
    with pytest.raises(RuntimeError, match="picoflow_errors") as caught:
        await store.record_error("orphan", LogRecord("code", "message"))
    assert not_an_outage(caught.value)
    assert await store.load("orphan") is not None  # the rest still works


async def test_a_stored_session_that_cannot_be_read_is_a_fault_not_an_outage(sql_backend: Backend) -> None:
    store = sql_backend.open()
    session = new_session("damaged")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    assert await store.load("damaged") is not None
    # Written by another connection: the store must read it again, not serve what it knew.
    damaged = '{"id": "damaged", "flow": "private words"}'
    sql_backend.sql("UPDATE {p}picoflow_sessions SET document = ? WHERE id = ?", (damaged, "damaged"))
    with pytest.raises(RuntimeError, match="not readable") as caught:
        await store.load("damaged")
    assert not_an_outage(caught.value)
    assert "private" not in str(caught.value)  # the stored value is not quoted


async def test_a_session_replaced_by_another_process_is_loaded_anew(sql_backend: Backend) -> None:
    """A store never serves a load from what it knew once another connection has committed."""
    mine, theirs = sql_backend.open(), sql_backend.open()
    session = new_session("replaced")
    await mine.save(session, expected_revision=None, appended=play_turn(session, "mine"))
    assert await mine.load("replaced") is not None
    assert await theirs.delete("replaced")
    again = new_session("replaced")
    await theirs.save(again, expected_revision=None, appended=play_turn(again, "theirs"))
    loaded = await mine.load("replaced")
    assert loaded is not None
    assert [m.content for m in loaded.memory["ask"].messages] == [
        m.content for m in again.memory["ask"].messages
    ]
    assert loaded.memory["ask"].messages[0].content == "user theirs"


async def test_a_save_over_a_session_another_process_replaced_is_then_loaded_as_stored(
    sql_backend: Backend,
) -> None:
    """Another process replaces the session between this store's load and its save, with the same
    revision, so the compare-and-swap passes: what this store then loads is what is stored, not what
    it wrote on top of what it had read."""
    mine, theirs = sql_backend.open(), sql_backend.open()
    session = new_session("swapped")
    await mine.save(session, expected_revision=None, appended=play_turn(session, "mine"))
    loaded = await mine.load("swapped")
    assert loaded is not None
    assert await theirs.delete("swapped")
    other = new_session("swapped")
    await theirs.save(other, expected_revision=None, appended=play_turn(other, "theirs"))
    assert await mine.save(loaded, expected_revision=1, appended=play_turn(loaded, "again")) == 2
    stored, fresh = await mine.load("swapped"), await sql_backend.open().load("swapped")
    assert stored is not None and fresh is not None
    assert session_to_json(stored) == session_to_json(fresh)
    assert stored.memory["ask"].messages[0].content == "user theirs"


# --- outages ------------------------------------------------------------------------------------


async def test_postgres_refusing_connections_is_unavailable_and_fails_fast() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout=0.5)
    try:
        with pytest.raises(StoreUnavailable, match=r"cannot connect to PostgreSQL 127\.0\.0\.1:1/none"):
            await store.load("x")
        # The open breaker answers without trying to connect again.
        with pytest.raises(StoreUnavailable, match="unreachable moments ago") as refused:
            await store.save(new_session("x"), expected_revision=None)
        assert refused.value.retryable and refused.value.status == 503
        assert refused.value.retry_after is not None and 0 < refused.value.retry_after <= 2
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_connections_killed_under_the_store_are_unavailable_then_recover(
    pg_backend: Backend,
) -> None:
    name = f"pf-kill-{uuid.uuid4().hex[:8]}"
    store = open_store(pg_backend.url_with(application_name=name))
    pg_backend.opened.append(store)
    session = new_session("killed")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    assert pg_backend.postgres_url is not None
    with psycopg.connect(pg_backend.postgres_url, autocommit=True) as admin:
        # In the select list, not the WHERE clause: only the store's own connections are ended.
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    assert killed and all(ended for (ended,) in killed)
    with pytest.raises(StoreUnavailable) as lost:
        await store.load("killed")
    assert lost.value.retry_after is not None
    # The breaker lets a probe through after Retry-After; its fresh pool reaches the database.
    await asyncio.sleep(lost.value.retry_after)
    loaded = await store.load("killed")
    assert loaded is not None and loaded.turns == 1


@pytest.mark.postgres
async def test_postgres_lock_timeout_is_a_retryable_store_error_not_unavailable(pg_backend: Backend) -> None:
    store = open_store(pg_backend.url_with(options="-c lock_timeout=200"))
    pg_backend.opened.append(store)
    session = new_session("held")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    assert pg_backend.postgres_url is not None
    with psycopg.connect(pg_backend.postgres_url) as holder:
        holder.execute(
            f'SELECT 1 FROM "{pg_backend.schema}".picoflow_sessions WHERE id = %s FOR UPDATE', ("held",)
        )
        with pytest.raises(StoreError) as busy:
            await store.save(session, expected_revision=1, appended=play_turn(session, "t2"))
        assert not isinstance(busy.value, StoreUnavailable)
        assert busy.value.retryable and "LockNotAvailable" in str(busy.value)
        holder.rollback()
    stored = await store.load("held")
    assert stored is not None and stored.revision == 1
    assert await store.save(stored, expected_revision=1, appended=play_turn(stored, "t2")) == 2


async def test_sqlite_file_that_cannot_be_used_is_an_outage(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "junk.sqlite3").write_text("not a database, whatever its name says")
    # The parent is a file; a folder; not a database.
    for path in (tmp_path / "a-file" / "s.sqlite3", tmp_path, tmp_path / "junk.sqlite3"):
        store = SQLiteStore(path)
        with pytest.raises(StoreError) as caught:
            await store.load("x")
        assert caught.value.retryable
        await store.close()


def _driver_error(kind: type[sqlite3.Error], message: str, code: int) -> sqlite3.Error:
    error = kind(message)
    error.sqlite_errorcode = code  # what the driver sets on the errors SQLite reports
    return error


SQLITE_ERRORS = [
    (_driver_error(sqlite3.OperationalError, "disk I/O error", sqlite3.SQLITE_IOERR_WRITE), StoreError),
    (_driver_error(sqlite3.OperationalError, "database or disk is full", sqlite3.SQLITE_FULL), StoreError),
    (_driver_error(sqlite3.OperationalError, "database is locked", sqlite3.SQLITE_BUSY), StoreError),
    (
        _driver_error(sqlite3.IntegrityError, "CHECK constraint failed", sqlite3.SQLITE_CONSTRAINT_CHECK),
        ValueError,
    ),
    (
        _driver_error(sqlite3.DatabaseError, "database disk image is malformed", sqlite3.SQLITE_CORRUPT),
        StoreError,
    ),
    (_driver_error(sqlite3.OperationalError, "no such column: x", sqlite3.SQLITE_ERROR), RuntimeError),
    (OSError(28, "No space left on device"), StoreError),
]


@pytest.mark.parametrize(("error", "expected"), SQLITE_ERRORS, ids=[str(e) for e, _ in SQLITE_ERRORS])
async def test_sqlite_errors_are_outages_only_for_locks_and_file_trouble(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, expected: type[Exception]
) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    session = new_session("s")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))

    def failing_write(conn: sqlite3.Connection, rows: sqlite_module.SQLiteSave) -> None:
        raise error

    monkeypatch.setattr(sqlite_module, "write_save", failing_write)
    with pytest.raises(expected) as caught:
        await store.save(session, expected_revision=1, appended=play_turn(session, "t2"))
    assert caught.value.__cause__ is error
    if expected is not StoreError:
        assert not_an_outage(caught.value)
    await store.close()


# --- what a store remembers between its own calls -----------------------------------------------


async def test_loads_after_a_stores_own_saves_read_what_a_fresh_store_reads(sql_backend: Backend) -> None:
    """Each load follows a save of the same store (which may answer it from what it wrote, see
    ``KnownRows``); a store opened afterwards reads the database itself. Both must agree through
    appends, erased memory, and dropped and emptied namespaces."""
    store = sql_backend.open()
    rng = random.Random(12)
    session = new_session("known")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t0"))
    for turn in range(1, 40):
        loaded = await store.load("known")
        assert loaded is not None
        move = rng.choice(["turn", "turn", "erase", "other", "drop", "clear"])
        appended: Appended = []
        if move == "erase":
            erase(loaded, "ask")
        elif move == "other":
            appended += play_turn(loaded, f"o{turn}", namespace="other")
        elif move == "drop":
            loaded.memory.pop("other", None)
        elif move == "clear":
            loaded.memory["ask"].messages.clear()  # emptied without moving start
        appended += play_turn(loaded, f"t{turn}")
        await store.save(loaded, expected_revision=loaded.revision, appended=appended)
        again = await store.load("known")
        assert again is not None and session_to_json(again) == session_to_json(loaded), move
    fresh = sql_backend.open()
    from_disk, from_store = await fresh.load("known"), await store.load("known")
    assert from_disk is not None and from_store is not None
    assert session_to_json(from_disk) == session_to_json(from_store)
