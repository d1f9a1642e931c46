"""``SQLiteStore``: durable sessions in one SQLite file, the embedded default. No server needed.

The store's SQL and how a save's rows are written; which thread runs each call, and what the
driver's errors mean, is ``picoflow.sessions._sqlite_connections``.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from picoflow.attachments import Attachment
from picoflow.messages import Message
from picoflow.session import Session
from picoflow.sessions import _rows
from picoflow.sessions._files import NO_FILES, file_rows
from picoflow.sessions._sql import LIVE, Params, SQLStore, Statements
from picoflow.sessions._sqlite_connections import SQLiteConnections, transaction
from picoflow.sessions._sqlite_known import KnownSessions, Read
from picoflow.sessions.migrations import check_sqlite, upgrade_sqlite

Synchronous = Literal["FULL", "NORMAL"]

# One statement, so it reads one consistent snapshot even while another process commits. CROSS JOIN
# fixes the join order (SQLite never reorders it) and INDEXED BY the index, so each namespace is a
# range scan of the live index instead of a walk over the session's whole transcript: once ANALYZE
# has run (``PRAGMA optimize`` runs it too), SQLite otherwise builds a temporary index over every
# message of the session on each load. No ORDER BY: sorting would copy every body into a sorter,
# and the rows are put in order after they are read (``restore_session``).
_LOAD = """
WITH head AS (SELECT live, document FROM picoflow_sessions WHERE id = :id)
SELECT NULL, NULL, document FROM head
UNION ALL
SELECT m.seq, m.namespace, m.body
FROM head
CROSS JOIN json_each(head.live) AS ns
CROSS JOIN picoflow_messages AS m INDEXED BY picoflow_messages_live
  ON m.session_id = :id AND m.namespace = ns.key AND m.seq >= ns.value
"""

# ON CONFLICT (id) rather than OR IGNORE: only an existing session is a conflict; any other
# constraint the row breaks is an error.
_INSERT = """
INSERT INTO picoflow_sessions
    (id, flow, status, principal, current_step, revision, turns, created_at, updated_at, flow_version, live,
     document)
VALUES (
    :id, :flow, :status, :principal, :current_step, :revision, :turns, :created_at, :updated_at,
    :flow_version, :live, :document
)
ON CONFLICT (id) DO NOTHING
"""

_UPDATE = """
UPDATE picoflow_sessions
SET flow = :flow, status = :status, principal = :principal, current_step = :current_step,
    revision = :revision, turns = :turns, updated_at = :updated_at, flow_version = :flow_version,
    live = :live, document = :document
WHERE id = :id AND revision = :expected
"""

_INSERT_MESSAGES = "INSERT INTO picoflow_messages (session_id, seq, namespace, body) VALUES (?, ?, ?, ?)"

# A file the session holds already is kept as it is; any other broken constraint is an error.
_INSERT_FILES = """
INSERT INTO picoflow_files
    (session_id, sha256, name, media_type, size, data, stored_at, revision, ordinal)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id, sha256) DO NOTHING
"""

STATEMENTS = Statements(
    sessions="picoflow_sessions",
    error_records="picoflow_errors",
    mark=lambda name: f":{name}",
    # substr, not LIKE: ids may hold '_', which LIKE reads as a wildcard.
    find_ids="SELECT id FROM picoflow_sessions WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT ?",
    transcript="SELECT body FROM picoflow_messages WHERE session_id = ? ORDER BY seq",
    errors="SELECT body FROM picoflow_errors WHERE session_id = ? ORDER BY id",
    record_error="INSERT INTO picoflow_errors (session_id, body) VALUES (?, ?)",
    timelines="SELECT body FROM picoflow_timelines WHERE session_id = ? ORDER BY id",
    timelines_of_turn="SELECT body FROM picoflow_timelines WHERE session_id = ? AND turn = ? ORDER BY id",
    # One parameter however many hashes (SQLite limits a statement's parameters).
    load_files=(
        "SELECT sha256, data FROM picoflow_files"
        " WHERE session_id = ? AND sha256 IN (SELECT value FROM json_each(?))"
    ),
    hash_list=json.dumps,
    list_files=(
        "SELECT name, media_type, size, sha256 FROM picoflow_files"
        " WHERE session_id = ? ORDER BY revision, ordinal"
    ),
    # The primary key's index, walked from the last id of the page before (keyset pagination).
    live_page=(
        f"SELECT id, document FROM picoflow_sessions WHERE flow = ? AND {LIVE} AND id > ? ORDER BY id LIMIT ?"
    ),
    live_versions=f"SELECT flow, flow_version, count(*) FROM picoflow_sessions WHERE {LIVE} GROUP BY 1, 2",
)


@dataclass(frozen=True, slots=True)
class SQLiteSave:
    """A save as SQLite takes it: its rows, encoded before any I/O, as statement parameters."""

    session_id: str
    expected: int | None
    revision: int
    session: dict[str, object]
    messages: list[tuple[str, int, str, str]]
    document: str
    live: dict[str, int]
    """Per namespace, the seq its live messages start at."""
    files: list[tuple[object, ...]]
    """The rows of the files the save brought (``_INSERT_FILES``)."""


def save_rows(
    session: Session,
    expected_revision: int | None,
    appended: Sequence[tuple[str, Message]],
    files: Sequence[Attachment] = NO_FILES,
) -> SQLiteSave:
    """Validate a save and encode its rows (no I/O)."""
    prepared = _rows.prepare_save(session, expected_revision, appended)
    file_params: list[tuple[object, ...]] = []
    if files is not NO_FILES:
        stored_at = time.time()
        file_params = [
            (
                session.id,
                f.sha256,
                f.name,
                f.media_type,
                f.size,
                f.data,
                stored_at,
                prepared.revision,
                f.ordinal,
            )
            for f in file_rows(files)
        ]
    row = _rows.session_columns(session, prepared, expected_revision)
    live = dict(zip(prepared.namespaces, prepared.starts, strict=True))
    row["live"] = json.dumps(live)
    messages = [
        (session.id, seq, namespace, body)
        for seq, namespace, body in zip(
            prepared.seqs, prepared.message_namespaces, prepared.bodies, strict=True
        )
    ]
    return SQLiteSave(
        session.id, expected_revision, prepared.revision, row, messages, prepared.document, live, file_params
    )


def write_save(conn: sqlite3.Connection, rows: SQLiteSave) -> None:
    """Write a save's rows in one transaction, if the stored revision is still the expected one."""

    def write(conn: sqlite3.Connection) -> None:
        statement = _INSERT if rows.expected is None else _UPDATE
        if conn.execute(statement, rows.session).rowcount != 1:
            raise _rows.conflict(rows.session_id, rows.expected)
        try:
            conn.executemany(_INSERT_MESSAGES, rows.messages)
        except sqlite3.IntegrityError as exc:
            if exc.sqlite_errorcode == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
                raise _rows.seq_reused(rows.session_id) from None
            raise
        if rows.files:
            conn.executemany(_INSERT_FILES, rows.files)

    transaction(conn, write)


def _delete(session_id: str, conn: sqlite3.Connection) -> bool:
    def delete(conn: sqlite3.Connection) -> bool:
        conn.execute("DELETE FROM picoflow_messages WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM picoflow_errors WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM picoflow_files WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM picoflow_timelines WHERE session_id = ?", (session_id,))
        return conn.execute("DELETE FROM picoflow_sessions WHERE id = ?", (session_id,)).rowcount > 0

    return transaction(conn, delete)


def _record_timeline(
    session_id: str, turn: int, body: str, keep_turns: int | None, conn: sqlite3.Connection
) -> None:
    """One turn's timeline and, in the same transaction, the retention's deletions."""

    def write(conn: sqlite3.Connection) -> None:
        if keep_turns is not None:
            conn.execute(
                "DELETE FROM picoflow_timelines WHERE session_id = ? AND turn <= ?",
                (session_id, turn - keep_turns),
            )
        conn.execute(
            "INSERT INTO picoflow_timelines (session_id, turn, recorded_at, body) VALUES (?, ?, ?, ?)",
            (session_id, turn, time.time(), body),
        )

    transaction(conn, write)


def _fetch(query: str, params: Params, conn: sqlite3.Connection) -> list[Any]:
    return conn.execute(query, params).fetchall()


def _load(session_id: str, conn: sqlite3.Connection) -> tuple[str | None, _rows.Live] | None:
    rows = conn.execute(_LOAD, {"id": session_id}).fetchall()
    return _rows.group_rows(rows) if rows else None


def _execute(query: str, params: Params, conn: sqlite3.Connection) -> None:
    conn.execute(query, params)


class SQLiteStore(SQLStore):
    """A ``SessionStore`` in a SQLite file (WAL mode), safe to share between processes.

    ``synchronous="FULL"`` (the default) makes every committed turn survive a power cut;
    ``"NORMAL"`` is faster and still survives a crash of the process, but the last turns may be
    lost if the machine itself goes down.
    """

    statements = STATEMENTS

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        auto_upgrade: bool = True,
        busy_timeout: float = 5.0,
        synchronous: Synchronous = "FULL",
        readers: int = 2,
    ) -> None:
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise ValueError("SQLiteStore needs a file path; use MemoryStore for sessions kept in memory")
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        if busy_timeout <= 0:
            raise ValueError(f"busy_timeout must be positive seconds, not {busy_timeout!r}")
        if readers < 1:
            raise ValueError(f"readers must be at least 1, not {readers!r}")
        super().__init__()
        self._known = KnownSessions()
        self.path = Path(path)
        self.auto_upgrade = auto_upgrade
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self._connections = SQLiteConnections(
            self.path,
            busy_timeout=busy_timeout,
            synchronous=synchronous,
            readers=readers,
            prepare=self._prepare,
        )

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    async def load(self, session_id: str) -> Session | None:
        read = functools.partial(_load, session_id)
        return await self._connections.read_fresh(
            on_writer=functools.partial(self._known.load, session_id=session_id, read=read),
            elsewhere=functools.partial(self._restore, read),
        )

    async def save(
        self,
        session: Session,
        *,
        expected_revision: int | None,
        appended: Sequence[tuple[str, Message]] = (),
        files: Sequence[Attachment] = NO_FILES,
    ) -> int:
        rows = save_rows(session, expected_revision, appended, files)
        # Files may be megabytes: written on the writer thread, never on the event loop's.
        await self._connections.write(functools.partial(self._write_save, rows), inline=not rows.files)
        session.revision = rows.revision
        return rows.revision

    async def delete(self, session_id: str) -> bool:
        existed = await self._connections.write(functools.partial(self._delete, session_id))
        self._forget(session_id)
        return existed

    async def record_timeline(
        self, session_id: str, turn: int, body: str, *, keep_turns: int | None = None
    ) -> None:
        if not isinstance(body, str):
            raise TypeError(f"record_timeline() needs JSON text, not {type(body).__name__}")
        await self._connections.write(
            functools.partial(_record_timeline, session_id, turn, body, keep_turns), inline=len(body) < 65_536
        )

    async def close(self) -> None:
        """Finish pending calls and close every connection. The store cannot be used afterwards."""
        await self._connections.close()

    async def upgrade(self) -> list[int]:
        """Apply missing schema migrations (what ``picoflow db upgrade`` runs); return their versions."""
        applied = await self._connections.write(self._upgrade, prepared=False)
        self._connections.mark_ready()
        return applied

    def _prepare(self, conn: sqlite3.Connection) -> None:
        if self.auto_upgrade:
            upgrade_sqlite(conn, str(self.path))
        else:
            check_sqlite(conn, str(self.path))

    # The work below runs while it holds the writer connection, so what is known of a session
    # changes with the write itself: no load can come between them.

    def _delete(self, session_id: str, conn: sqlite3.Connection) -> bool:
        self._known.forget(session_id)
        return _delete(session_id, conn)

    def _upgrade(self, conn: sqlite3.Connection) -> list[int]:
        self._known.forget()  # a migration may rewrite stored rows
        return upgrade_sqlite(conn, str(self.path))

    def _write_save(self, rows: SQLiteSave, conn: sqlite3.Connection) -> None:
        try:
            write_save(conn, rows)
        except BaseException:
            self._known.forget(rows.session_id)
            raise
        self._known.saved(rows.session_id, rows.document, rows.live, rows.messages)

    def _restore(self, read: Read, conn: sqlite3.Connection) -> Session | None:
        """A load on a reader thread (the writer connection is busy)."""
        loaded = read(conn)
        return None if loaded is None else _rows.restore_session(*loaded, self._decoded)

    async def _fetch(self, query: str, params: Params) -> list[Any]:
        return await self._connections.read(functools.partial(_fetch, query, params))

    async def _execute(self, query: str, params: Params) -> None:
        await self._connections.write(functools.partial(_execute, query, params))
