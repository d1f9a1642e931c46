"""Schema migrations of the SQL session stores.

Each dialect has an append-only list of migrations: never edit or reorder a released one, add a
new version at the end. ``picoflow_schema_migrations`` records the versions a database has run.
``upgrade_*`` applies the missing ones inside one transaction that first takes a lock, so several
processes starting at once run each migration exactly once and the losers find nothing to do.

Table names carry a ``picoflow_`` prefix because the database is often shared with the
application's own tables (``sessions`` and ``schema_migrations`` are common names).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from picoflow.exceptions import StoreError

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    """SQL statements; ``{p}`` stands for the table-name qualifier (a schema, or nothing)."""


SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, append-only messages and error records",
        (
            """CREATE TABLE picoflow_sessions (
                id TEXT PRIMARY KEY,
                flow TEXT NOT NULL,
                status TEXT NOT NULL,
                principal TEXT,
                current_step TEXT NOT NULL,
                revision INTEGER NOT NULL,
                turns INTEGER NOT NULL,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                live TEXT NOT NULL,
                document TEXT NOT NULL
            )""",
            "CREATE INDEX picoflow_sessions_recent ON picoflow_sessions (updated_at DESC, id)",
            "CREATE INDEX picoflow_sessions_flow ON picoflow_sessions (flow, updated_at DESC, id)",
            "CREATE INDEX picoflow_sessions_principal ON picoflow_sessions (principal, updated_at DESC, id)",
            """CREATE TABLE picoflow_messages (
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                namespace TEXT NOT NULL,
                body TEXT NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            "CREATE INDEX picoflow_messages_live ON picoflow_messages (session_id, namespace, seq)",
            """CREATE TABLE picoflow_errors (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL,
                body TEXT NOT NULL
            )""",
            "CREATE INDEX picoflow_errors_session ON picoflow_errors (session_id, id)",
        ),
    ),
    Migration(
        2,
        "files of a session, once per session by SHA-256",
        (
            # (revision, ordinal) is the order files were first stored in: the revision of the save
            # that brought them and their place among its files (see picoflow.sessions._files).
            """CREATE TABLE picoflow_files (
                session_id TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                name TEXT NOT NULL,
                media_type TEXT NOT NULL,
                size INTEGER NOT NULL,
                data BLOB NOT NULL,
                stored_at REAL NOT NULL,
                revision INTEGER NOT NULL,
                ordinal INTEGER NOT NULL,
                PRIMARY KEY (session_id, sha256)
            )""",
        ),
    ),
    Migration(
        3,
        "timelines of turns, beside the session",
        (
            """CREATE TABLE picoflow_timelines (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL,
                turn INTEGER NOT NULL,
                recorded_at REAL NOT NULL,
                body TEXT NOT NULL
            )""",
            "CREATE INDEX picoflow_timelines_session ON picoflow_timelines (session_id, turn, id)",
        ),
    ),
    Migration(
        4,
        "the version of its flow each session last ran on",
        # Rows stored before it read "" (unrecorded): their next turn migrates them.
        ("ALTER TABLE picoflow_sessions ADD COLUMN flow_version TEXT NOT NULL DEFAULT ''",),
    ),
)

POSTGRES_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, append-only messages and error records",
        (
            # ``json`` rather than ``jsonb``: jsonb refuses the string "\u0000", which SQLite and
            # memory accept, so a session valid on one store would fail on another. ``json`` also
            # keeps the text verbatim, so loads return it without re-rendering a tree.
            """CREATE TABLE {p}picoflow_sessions (
                id text PRIMARY KEY,
                flow text NOT NULL,
                status text NOT NULL,
                principal text,
                current_step text NOT NULL,
                revision bigint NOT NULL,
                turns bigint NOT NULL,
                created_at double precision NOT NULL,
                updated_at double precision NOT NULL,
                namespaces text[] NOT NULL,
                starts bigint[] NOT NULL,
                document json NOT NULL
            )""",
            "CREATE INDEX picoflow_sessions_recent ON {p}picoflow_sessions (updated_at DESC, id)",
            "CREATE INDEX picoflow_sessions_flow ON {p}picoflow_sessions (flow, updated_at DESC, id)",
            "CREATE INDEX picoflow_sessions_principal"
            " ON {p}picoflow_sessions (principal, updated_at DESC, id)",
            """CREATE TABLE {p}picoflow_messages (
                session_id text NOT NULL,
                seq bigint NOT NULL,
                namespace text NOT NULL,
                body json NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            "CREATE INDEX picoflow_messages_live ON {p}picoflow_messages (session_id, namespace, seq)",
            """CREATE TABLE {p}picoflow_errors (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                session_id text NOT NULL,
                body json NOT NULL
            )""",
            "CREATE INDEX picoflow_errors_session ON {p}picoflow_errors (session_id, id)",
        ),
    ),
    Migration(
        2,
        "files of a session, once per session by SHA-256",
        (
            """CREATE TABLE {p}picoflow_files (
                session_id text NOT NULL,
                sha256 text NOT NULL,
                name text NOT NULL,
                media_type text NOT NULL,
                size bigint NOT NULL,
                data bytea NOT NULL,
                stored_at double precision NOT NULL,
                revision bigint NOT NULL,
                ordinal integer NOT NULL,
                PRIMARY KEY (session_id, sha256)
            )""",
            # Images and PDFs are compressed already: out of line, without a compression attempt.
            "ALTER TABLE {p}picoflow_files ALTER COLUMN data SET STORAGE EXTERNAL",
        ),
    ),
    Migration(
        3,
        "timelines of turns, beside the session",
        (
            """CREATE TABLE {p}picoflow_timelines (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                session_id text NOT NULL,
                turn bigint NOT NULL,
                recorded_at double precision NOT NULL,
                body json NOT NULL
            )""",
            "CREATE INDEX picoflow_timelines_session ON {p}picoflow_timelines (session_id, turn, id)",
        ),
    ),
    Migration(
        4,
        "the version of its flow each session last ran on",
        # A constant default: PostgreSQL 11 and later add the column without rewriting the table.
        ("ALTER TABLE {p}picoflow_sessions ADD COLUMN flow_version text NOT NULL DEFAULT ''",),
    ),
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_schema_name(schema: str) -> str:
    """A PostgreSQL schema name safe to splice into SQL (it cannot be a query parameter)."""
    if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
        raise ValueError(
            f"schema must be a plain identifier (letters, digits, underscore; at most 63), not {schema!r}"
        )
    return schema


def qualifier(schema: str | None) -> str:
    return "" if schema is None else f'"{check_schema_name(schema)}".'


def latest_version(migrations: tuple[Migration, ...]) -> int:
    return migrations[-1].version if migrations else 0


def _pending(migrations: tuple[Migration, ...], applied: set[int], where: str) -> list[Migration]:
    newest = latest_version(migrations)
    unknown = sorted(version for version in applied if version > newest)
    if unknown:
        raise StoreError(
            f"{where} has schema version {unknown[-1]}, newer than this picoflow knows ({newest}); "
            "upgrade picoflow instead of using an older release on this database"
        )
    return [migration for migration in migrations if migration.version not in applied]


def _not_current(where: str, current: int, newest: int) -> StoreError:
    return StoreError(
        f"{where} has schema version {current} but this picoflow needs {newest}; "
        "run `picoflow db upgrade` or open the store with auto_upgrade=True"
    )


# --- SQLite -----------------------------------------------------------------------------------

_SQLITE_LEDGER = """CREATE TABLE IF NOT EXISTS picoflow_schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)"""


def upgrade_sqlite(conn: sqlite3.Connection, where: str = "the database") -> list[int]:
    """Apply the missing SQLite migrations; return the versions applied (empty if up to date).

    ``conn`` must be in autocommit mode (``isolation_level=None``). ``BEGIN IMMEDIATE`` takes the
    database's write lock before anything is read, so a concurrent upgrader waits (busy timeout)
    and then sees the migrations already recorded.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_SQLITE_LEDGER)
        applied = {row[0] for row in conn.execute("SELECT version FROM picoflow_schema_migrations")}
        pending = _pending(SQLITE_MIGRATIONS, applied, where)
        for migration in pending:
            for statement in migration.statements:
                conn.execute(statement.format(p=""))
            conn.execute(
                "INSERT INTO picoflow_schema_migrations (version, name) VALUES (?, ?)",
                (migration.version, migration.name),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return [migration.version for migration in pending]


def check_sqlite(conn: sqlite3.Connection, where: str = "the database") -> None:
    """Fail clearly when the database is not at the schema version this code needs."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'picoflow_schema_migrations'"
    ).fetchone()
    current = 0
    if exists:
        row = conn.execute("SELECT coalesce(max(version), 0) FROM picoflow_schema_migrations").fetchone()
        current = row[0]
    if current != latest_version(SQLITE_MIGRATIONS):
        raise _not_current(where, current, latest_version(SQLITE_MIGRATIONS))


# --- PostgreSQL -------------------------------------------------------------------------------

_POSTGRES_LEDGER = """CREATE TABLE IF NOT EXISTS {p}picoflow_schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


async def upgrade_postgres(
    conn: AsyncConnection[TupleRow], schema: str | None = None, where: str = "the database"
) -> list[int]:
    """Apply the missing PostgreSQL migrations in one transaction; return the versions applied.

    The transaction-scoped advisory lock serialises upgraders of the same schema across every
    process and is released by the commit. ``CREATE SCHEMA IF NOT EXISTS`` is not safe to race
    either, hence it runs under the lock too.
    """
    p = qualifier(schema)
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"picoflow.migrations:{schema or ''}",)
        )
        if schema is not None:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(_POSTGRES_LEDGER.format(p=p))
        cursor = await conn.execute(f"SELECT version FROM {p}picoflow_schema_migrations")
        applied = {int(row[0]) for row in await cursor.fetchall()}
        pending = _pending(POSTGRES_MIGRATIONS, applied, where)
        for migration in pending:
            for statement in migration.statements:
                await conn.execute(statement.format(p=p))
            await conn.execute(
                f"INSERT INTO {p}picoflow_schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
    return [migration.version for migration in pending]


async def check_postgres(
    conn: AsyncConnection[TupleRow], schema: str | None = None, where: str = "the database"
) -> None:
    """Fail clearly when the database is not at the schema version this code needs."""
    p = qualifier(schema)
    cursor = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{p}picoflow_schema_migrations",))
    row = await cursor.fetchone()
    current = 0
    if row is not None and row[0]:
        cursor = await conn.execute(f"SELECT coalesce(max(version), 0) FROM {p}picoflow_schema_migrations")
        row = await cursor.fetchone()
        current = int(row[0]) if row is not None else 0
    if current != latest_version(POSTGRES_MIGRATIONS):
        raise _not_current(where, current, latest_version(POSTGRES_MIGRATIONS))
