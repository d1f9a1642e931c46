"""Schema migrations: from an empty database, idempotent, refused when the database is newer."""

from __future__ import annotations

import json

import pytest
from store_helpers import Backend, new_session, play_turn

from picoflow import FlowEngine
from picoflow.exceptions import StoreError
from picoflow.models import ScriptedModel
from picoflow.session import Session, SessionMigration, session_to_json
from picoflow.sessions import PostgresStore, SQLiteStore
from picoflow.sessions.base import LiveSessions
from picoflow.sessions.migrations import (
    _POSTGRES_LEDGER,
    _SQLITE_LEDGER,
    POSTGRES_MIGRATIONS,
    SQLITE_MIGRATIONS,
    Migration,
)
from two_versions import StaysV2

NOW = 1_000.0

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
    assert await store.upgrade() == [1, 2, 3, 4]
    assert await store.upgrade() == []

    assert tables(sql_backend) == TABLES
    assert sql_backend.sql("SELECT version, name FROM {p}picoflow_schema_migrations ORDER BY version") == [
        (1, SQLITE_MIGRATIONS[0].name),
        (2, SQLITE_MIGRATIONS[1].name),
        (3, SQLITE_MIGRATIONS[2].name),
        (4, SQLITE_MIGRATIONS[3].name),
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
    with pytest.raises(StoreError, match="needs 4"):
        await sql_backend.open(auto_upgrade=False).load("any")


async def test_a_session_stored_before_flow_versions_reads_as_unrecorded_and_migrates(
    sql_backend: Backend,
) -> None:
    # The database as the release before flow versions left it: schema version 3, one session.
    sqlite = sql_backend.kind == "sqlite"
    if not sqlite:
        sql_backend.sql(f'CREATE SCHEMA "{sql_backend.schema}"')
    sql_backend.sql(_SQLITE_LEDGER if sqlite else _POSTGRES_LEDGER)
    for migration in (SQLITE_MIGRATIONS if sqlite else POSTGRES_MIGRATIONS)[:3]:
        for statement in migration.statements:
            sql_backend.sql(statement)
        sql_backend.sql(
            "INSERT INTO {p}picoflow_schema_migrations (version, name) VALUES (?, ?)",
            (migration.version, migration.name),
        )
    old = Session(id="old", flow="stays", current_step="Explore", revision=1, created_at=NOW, updated_at=NOW)
    document = json.loads(session_to_json(old))
    del document["flow_version"], document["migrations"]
    columns = "id, flow, status, principal, current_step, revision, turns, created_at, updated_at"
    if sqlite:
        sql_backend.sql(
            f"INSERT INTO picoflow_sessions ({columns}, live, document)"
            " VALUES ('old', 'stays', 'running', NULL, 'Explore', 1, 0, ?, ?, '{{}}', ?)",
            (NOW, NOW, json.dumps(document)),
        )
    else:
        sql_backend.sql(
            f"INSERT INTO {{p}}picoflow_sessions ({columns}, namespaces, starts, document)"
            " VALUES ('old', 'stays', 'running', NULL, 'Explore', 1, 0, ?, ?, '{{}}', '{{}}', ?::json)",
            (NOW, NOW, json.dumps(document)),
        )

    store = sql_backend.open()  # upgrades the schema on first use
    loaded = await store.load("old")
    assert loaded is not None and (loaded.flow_version, loaded.migrations) == ("", ())
    assert sql_backend.sql("SELECT flow_version FROM {p}picoflow_sessions") == [("",)]
    assert isinstance(store, LiveSessions)
    assert await store.live_versions() == {("stays", ""): 1}

    # Its next turn migrates it from the unrecorded version, and records the one it ran on.
    model = ScriptedModel([json.dumps({"found": [{"field": "city", "quote": "Paris", "value": "Paris"}]})])
    engine = FlowEngine([StaysV2], store=store, model=model, clock=lambda: NOW)
    result = await engine.run("stays", "Paris", session_id="old")
    assert result.error is None and result.message == "How many guests?"
    migrated = await store.load("old")
    assert migrated is not None and migrated.flow_version == StaysV2.version
    assert migrated.migrations == (SessionMigration("", StaysV2.version, 1, NOW),)
    assert sql_backend.sql("SELECT flow_version FROM {p}picoflow_sessions") == [(StaysV2.version,)]
    assert await store.live_versions() == {("stays", StaysV2.version): 1}
