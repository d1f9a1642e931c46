"""Schema migrations: from an empty database, idempotent, refused when the database is newer."""

from __future__ import annotations

import pytest
from store_helpers import Backend, new_session, play_turn

from picoflow.exceptions import StoreError
from picoflow.sessions import PostgresStore, SQLiteStore
from picoflow.sessions.migrations import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS, Migration

TABLES = [
    "picoflow_errors",
    "picoflow_files",
    "picoflow_messages",
    "picoflow_schema_migrations",
    "picoflow_sessions",
    "picoflow_timelines",
]


def tables(backend: Backend) -> list[str]:
    if backend.kind == "sqlite":
        rows = backend.sql("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'picoflow%'")
    else:
        rows = backend.sql("SELECT tablename FROM pg_tables WHERE schemaname = ?", (backend.schema,))
    return sorted(row[0] for row in rows)


@pytest.mark.parametrize("migrations", [SQLITE_MIGRATIONS, POSTGRES_MIGRATIONS], ids=["sqlite", "postgres"])
def test_migrations_are_numbered_from_one_without_gaps(migrations: tuple[Migration, ...]) -> None:
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert all(m.name and m.statements for m in migrations)


def test_both_dialects_reach_the_same_version() -> None:
    assert [m.version for m in SQLITE_MIGRATIONS] == [m.version for m in POSTGRES_MIGRATIONS]


async def test_upgrade_from_an_empty_database_then_again_is_a_no_op(sql_backend: Backend) -> None:
    store = sql_backend.open(auto_upgrade=False)
    assert isinstance(store, SQLiteStore | PostgresStore)

    with pytest.raises(StoreError, match=r"schema version 0 .* `picoflow db upgrade`"):
        await store.load("any")
    assert await store.upgrade() == [1, 2, 3]
    assert await store.upgrade() == []

    assert tables(sql_backend) == TABLES
    assert sql_backend.sql("SELECT version, name FROM {p}picoflow_schema_migrations ORDER BY version") == [
        (1, SQLITE_MIGRATIONS[0].name),
        (2, SQLITE_MIGRATIONS[1].name),
        (3, SQLITE_MIGRATIONS[2].name),
    ]
    session = new_session("after-upgrade")
    assert await store.save(session, expected_revision=None, appended=play_turn(session, "t1")) == 1


async def test_a_store_upgrades_on_first_use_by_default(sql_backend: Backend) -> None:
    store = sql_backend.open()
    assert await store.load("any") is None
    assert tables(sql_backend) == TABLES
    # A second store on the same database finds nothing to do.
    other = sql_backend.open()
    assert isinstance(other, SQLiteStore | PostgresStore)
    assert await other.upgrade() == []


async def test_a_current_database_opens_without_auto_upgrade(sql_backend: Backend) -> None:
    assert await sql_backend.open().load("any") is None
    strict = sql_backend.open(auto_upgrade=False)
    assert await strict.load("any") is None


async def test_a_database_from_a_newer_release_is_refused(sql_backend: Backend) -> None:
    await sql_backend.open().load("warm-up")
    sql_backend.sql("INSERT INTO {p}picoflow_schema_migrations (version, name) VALUES (99, 'future')")

    with pytest.raises(StoreError, match="schema version 99, newer than this picoflow"):
        await sql_backend.open().load("any")
    with pytest.raises(StoreError, match="needs 3"):
        await sql_backend.open(auto_upgrade=False).load("any")
