"""``SQLiteStore``: durable sessions in one SQLite file, the embedded default. No server needed.

The store's SQL and how a save's rows are written; which thread runs each call, and what the
driver's errors mean, is ``picoflow.sessions._sqlite_connections``.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from picoflow.messages import Message
from picoflow.session import Session
from picoflow.sessions import _rows
from picoflow.sessions._sql import Params, SQLStore, Statements
from picoflow.sessions._sqlite_connections import SQLiteConnections, transaction
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
    (id, flow, status, principal, current_step, revision, turns, created_at, updated_at, live, document)
VALUES (
    :id, :flow, :status, :principal, :current_step, :revision, :turns, :created_at, :updated_at, :live,
    :document
)
ON CONFLICT (id) DO NOTHING
"""

_UPDATE = """
UPDATE picoflow_sessions
SET flow = :flow, status = :status, principal = :principal, current_step = :current_step,
    revision = :revision, turns = :turns, updated_at = :updated_at, live = :live, document = :document
WHERE id = :id AND revision = :expected
"""

_INSERT_MESSAGES = "INSERT INTO picoflow_messages (session_id, seq, namespace, body) VALUES (?, ?, ?, ?)"

STATEMENTS = Statements(
    sessions="picoflow_sessions",
    mark=lambda name: f":{name}",
    # substr, not LIKE: ids may hold '_', which LIKE reads as a wildcard.
    find_ids="SELECT id FROM picoflow_sessions WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT ?",
    transcript="SELECT body FROM picoflow_messages WHERE session_id = ? ORDER BY seq",
    errors="SELECT body FROM picoflow_errors WHERE session_id = ? ORDER BY id",
    record_error="INSERT INTO picoflow_errors (session_id, body) VALUES (?, ?)",
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


def save_rows(
    session: Session, expected_revision: int | None, appended: Sequence[tuple[str, Message]]
) -> SQLiteSave:
    """Validate a save and encode its rows (no I/O)."""
    prepared = _rows.prepare_save(session, expected_revision, appended)
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
        session.id, expected_revision, prepared.revision, row, messages, prepared.document, live
    )


def write_save(conn: sqlite3.Connection, rows: SQLiteSave) -> int:
    """Write a save's rows in one transaction, if the stored revision is still the expected one.
    Returns the connection's ``data_version`` while it held the write lock."""

    def write(conn: sqlite3.Connection) -> int:
        version: int = conn.execute("PRAGMA data_version").fetchone()[0]
        statement = _INSERT if rows.expected is None else _UPDATE
        if conn.execute(statement, rows.session).rowcount != 1:
            raise _rows.conflict(rows.session_id, rows.expected)
        try:
            conn.executemany(_INSERT_MESSAGES, rows.messages)
        except sqlite3.IntegrityError as exc:
            if exc.sqlite_errorcode == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
                raise _rows.seq_reused(rows.session_id) from None
            raise
        return version

    return transaction(conn, write)


Loaded = tuple[str | None, _rows.Live]


class KnownRows:
    """The stored rows of recent sessions as the writer connection last read or wrote them.

    ``PRAGMA data_version`` on a connection changes exactly when *another* connection commits to
    the file, and every write of this store goes through the writer connection. So while it is
    unchanged since a session's rows were read, and this store's own saves kept them up to date,
    they are what a load would read: a load on the writer connection then skips the query. Any other
    commit to the file (another process, another store on it) changes the version, and the next load
    reads again. Bounded by ``limit`` sessions and ``max_chars`` of text.
    """

    def __init__(self, limit: int = 256, max_chars: int = 16_000_000) -> None:
        self._entries: _rows.Bounded[str, tuple[int, Loaded]] = _rows.Bounded(limit, max_chars)

    def load(self, conn: sqlite3.Connection, session_id: str) -> Loaded | None:
        """The session's rows, from memory if nothing else committed since they were known."""
        version: int = conn.execute("PRAGMA data_version").fetchone()[0]
        known = self._entries.get(session_id)
        if known is not None and known[0] == version:
            return known[1]
        # The version first: a commit landing between the two is then seen as a change next time.
        loaded = _load(session_id, conn)
        if loaded is not None:
            self._keep(session_id, version, loaded)
        return loaded

    def saved(self, session_id: str, version: int, rows: SQLiteSave) -> None:
        """A save committed on the writer connection at ``version``: the known rows become the
        saved document and live messages, if they were current when the save began."""
        known = self._entries.get(session_id)
        if known is None or known[0] != version:
            self.forget(session_id)
            return
        before = known[1][1]
        live: _rows.Live = {}
        for namespace, start in rows.live.items():
            seqs, bodies = before.get(namespace, ([], []))
            if seqs and seqs[0] < start:  # the window moved on (memory erased or compacted)
                cut = bisect.bisect_left(seqs, start)
                seqs, bodies = seqs[cut:], bodies[cut:]
            added = [
                (seq, body) for _, seq, name, body in rows.messages if name == namespace and seq >= start
            ]
            if added and seqs and added[0][0] < seqs[-1]:  # not all after the known ones
                merged = sorted([*zip(seqs, bodies, strict=True), *added])
                seqs, bodies = [seq for seq, _ in merged], [body for _, body in merged]
            elif added:
                seqs, bodies = seqs + [seq for seq, _ in added], bodies + [body for _, body in added]
            if seqs:
                live[namespace] = (seqs, bodies)
        self._keep(session_id, version, (rows.document, live))

    def forget(self, session_id: str | None = None) -> None:
        """Drop one session's rows, or all of them."""
        self._entries.drop(None if session_id is None else lambda key: key == session_id)

    def _keep(self, session_id: str, version: int, loaded: Loaded) -> None:
        size = len(loaded[0] or "") + sum(sum(map(len, bodies)) for _, bodies in loaded[1].values())
        self._entries.put(session_id, (version, loaded), size)


def _delete(session_id: str, conn: sqlite3.Connection) -> bool:
    def delete(conn: sqlite3.Connection) -> bool:
        conn.execute("DELETE FROM picoflow_messages WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM picoflow_errors WHERE session_id = ?", (session_id,))
        return conn.execute("DELETE FROM picoflow_sessions WHERE id = ?", (session_id,)).rowcount > 0

    return transaction(conn, delete)


def _fetch(query: str, params: Params, conn: sqlite3.Connection) -> list[Any]:
    return conn.execute(query, params).fetchall()


def _load(session_id: str, conn: sqlite3.Connection) -> Loaded | None:
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
        self._known = KnownRows()
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

    async def save(
        self,
        session: Session,
        *,
        expected_revision: int | None,
        appended: Sequence[tuple[str, Message]] = (),
    ) -> int:
        rows = save_rows(session, expected_revision, appended)
        await self._connections.write(functools.partial(self._write_save, rows))
        session.revision = rows.revision
        return rows.revision

    async def delete(self, session_id: str) -> bool:
        existed = await self._connections.write(functools.partial(self._delete, session_id))
        self._forget(session_id)
        return existed

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

    # The work below runs while it holds the writer connection, so what the known rows say changes
    # with the write itself: no load can come between them.

    def _delete(self, session_id: str, conn: sqlite3.Connection) -> bool:
        self._known.forget(session_id)
        return _delete(session_id, conn)

    def _upgrade(self, conn: sqlite3.Connection) -> list[int]:
        self._known.forget()  # a migration may rewrite stored rows
        return upgrade_sqlite(conn, str(self.path))

    def _write_save(self, rows: SQLiteSave, conn: sqlite3.Connection) -> None:
        try:
            version = write_save(conn, rows)
        except BaseException:
            self._known.forget(rows.session_id)
            raise
        self._known.saved(rows.session_id, version, rows)

    async def _load_rows(self, session_id: str) -> Loaded | None:
        return await self._connections.read_fresh(
            on_writer=functools.partial(self._known.load, session_id=session_id),
            elsewhere=functools.partial(_load, session_id),
        )

    async def _fetch(self, query: str, params: Params) -> list[Any]:
        return await self._connections.read(functools.partial(_fetch, query, params))

    async def _execute(self, query: str, params: Params) -> None:
        await self._connections.write(functools.partial(_execute, query, params))
