"""``SQLiteStore``: durable sessions in one SQLite file, the embedded default. No server needed.

Blocking ``sqlite3`` calls run on worker threads, each with its own connection. Writes go through
one writer thread so writers of this process never wait on SQLite's busy handler for each other;
other processes on the same file are serialised by ``BEGIN IMMEDIATE`` and the busy timeout.
Reads run on a few reader threads and, in WAL mode, never block on the writer.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from picoflow.exceptions import RunError, StoreError
from picoflow.messages import Message
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions import _rows
from picoflow.sessions.migrations import check_sqlite, upgrade_sqlite

T = TypeVar("T")

Synchronous = Literal["FULL", "NORMAL"]

# One statement, so it reads one consistent snapshot even while another process commits. CROSS JOIN
# fixes the join order (SQLite never reorders it) and INDEXED BY the index, so each namespace is a
# range scan of the live index instead of a walk over the session's whole transcript: once ANALYZE
# has run (``PRAGMA optimize`` runs it too), SQLite otherwise builds a temporary index over every
# message of the session on each load.
_LOAD = """
WITH head AS (SELECT live, document FROM picoflow_sessions WHERE id = :id)
SELECT 0, -1, NULL, document FROM head
UNION ALL
SELECT 1, m.seq, m.namespace, m.body
FROM head
CROSS JOIN json_each(head.live) AS ns
CROSS JOIN picoflow_messages AS m INDEXED BY picoflow_messages_live
  ON m.session_id = :id AND m.namespace = ns.key AND m.seq >= ns.value
ORDER BY 1, 2
"""

_INSERT = """
INSERT INTO picoflow_sessions
    (id, flow, status, principal, current_step, revision, turns, created_at, updated_at, live, document)
VALUES (
    :id, :flow, :status, :principal, :current_step, :revision, :turns, :created_at, :updated_at, :live,
    :document
)
"""

_UPDATE = """
UPDATE picoflow_sessions
SET flow = :flow, status = :status, principal = :principal, current_step = :current_step,
    revision = :revision, turns = :turns, updated_at = :updated_at, live = :live, document = :document
WHERE id = :id AND revision = :expected
"""


class SQLiteStore:
    """A ``SessionStore`` in a SQLite file (WAL mode), safe to share between processes.

    ``synchronous="FULL"`` (the default) makes every committed turn survive a power cut;
    ``"NORMAL"`` is faster and still survives a crash of the process, but the last turns may be
    lost if the machine itself goes down.
    """

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
        self.path = Path(path)
        self.auto_upgrade = auto_upgrade
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="picoflow-sqlite-writer")
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="picoflow-sqlite-reader")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._ready = False
        self._closed = False

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # --- SessionStore -------------------------------------------------------------------------

    async def load(self, session_id: str) -> Session | None:
        rows = await self._read(self._fetch, _LOAD, {"id": session_id})
        if not rows:
            return None
        return _rows.restore_session(rows[0][3], ((row[2], row[3]) for row in rows[1:]))

    async def save(
        self,
        session: Session,
        *,
        expected_revision: int | None,
        appended: Sequence[tuple[str, Message]] = (),
    ) -> int:
        prepared = _rows.prepare_save(session, expected_revision, appended)
        row = {
            **_rows.session_columns(session, prepared, expected_revision),
            "live": json.dumps(dict(zip(prepared.namespaces, prepared.starts, strict=True))),
        }
        messages = [(session.id, m.seq, m.namespace, m.body) for m in prepared.messages]
        await self._write(self._save, session.id, expected_revision, row, messages)
        session.revision = prepared.revision
        return prepared.revision

    async def delete(self, session_id: str) -> bool:
        return await self._write(self._delete, session_id)

    async def list_sessions(
        self,
        *,
        flow: str | None = None,
        status: SessionStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[SessionInfo]:
        filters: dict[str, str | None] = {"flow": flow, "status": status, "principal": principal}
        query, params = _rows.listing_query(
            "picoflow_sessions", lambda name: f":{name}", filters, limit, offset
        )
        rows = await self._read(self._fetch, query, params)
        return [SessionInfo(*row) for row in rows]

    async def find_ids(self, prefix: str, limit: int = 10) -> list[str]:
        # substr, not LIKE: ids may hold '_', which LIKE reads as a wildcard.
        query = "SELECT id FROM picoflow_sessions WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT ?"
        rows = await self._read(self._fetch, query, (len(prefix), prefix, limit))
        return [row[0] for row in rows]

    async def transcript(self, session_id: str) -> list[Message]:
        rows = await self._read(
            self._fetch, "SELECT body FROM picoflow_messages WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return _rows.decode_messages(row[0] for row in rows)

    async def record_error(self, session_id: str, record: LogRecord) -> None:
        body = _rows.encode_record(record)
        await self._write(self._insert_error, session_id, body)

    async def errors(self, session_id: str) -> list[LogRecord]:
        rows = await self._read(
            self._fetch, "SELECT body FROM picoflow_errors WHERE session_id = ? ORDER BY id", (session_id,)
        )
        return _rows.decode_records(row[0] for row in rows)

    async def close(self) -> None:
        """Finish pending calls and close every connection. The store cannot be used afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        await asyncio.to_thread(self._shutdown)

    async def upgrade(self) -> list[int]:
        """Apply missing schema migrations (what ``picoflow db upgrade`` runs); return their versions."""
        return await self._write(self._upgrade)

    # --- worker-thread side -------------------------------------------------------------------

    def _fetch(self, query: str, params: tuple[object, ...] | dict[str, object]) -> list[Any]:
        return self._connection().execute(query, params).fetchall()

    def _save(
        self,
        session_id: str,
        expected: int | None,
        row: dict[str, object],
        messages: list[tuple[str, int, str, str]],
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            if expected is None:
                try:
                    conn.execute(_INSERT, row)
                except sqlite3.IntegrityError:
                    raise _rows.conflict(session_id, expected) from None
            elif conn.execute(_UPDATE, row).rowcount != 1:
                raise _rows.conflict(session_id, expected)
            try:
                conn.executemany(
                    "INSERT INTO picoflow_messages (session_id, seq, namespace, body) VALUES (?, ?, ?, ?)",
                    messages,
                )
            except sqlite3.IntegrityError:
                raise _rows.seq_reused(session_id) from None

        self._transaction(write)

    def _delete(self, session_id: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM picoflow_messages WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM picoflow_errors WHERE session_id = ?", (session_id,))
            return conn.execute("DELETE FROM picoflow_sessions WHERE id = ?", (session_id,)).rowcount > 0

        return self._transaction(delete)

    def _insert_error(self, session_id: str, body: str) -> None:
        self._connection().execute(
            "INSERT INTO picoflow_errors (session_id, body) VALUES (?, ?)", (session_id, body)
        )

    def _upgrade(self) -> list[int]:
        applied = upgrade_sqlite(self._connection(check=False), str(self.path))
        self._ready = True
        return applied

    def _transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._connection()
        # IMMEDIATE takes the write lock up front: a deferred transaction that reads first could
        # fail with SQLITE_BUSY on its first write instead of waiting.
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = work(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def _connection(self, *, check: bool = True) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        if check and not self._ready:
            with self._lock:
                if not self._ready:
                    where = str(self.path)
                    if self.auto_upgrade:
                        upgrade_sqlite(conn, where)
                    else:
                        check_sqlite(conn, where)
                    self._ready = True
        return conn

    def _open(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: this module issues BEGIN/COMMIT itself.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
                self._use_wal(conn)
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            except BaseException:
                conn.close()
                raise
            self._connections.append(conn)
            return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL (a lasting setting of the file, so usually already done).

        The switch needs an exclusive lock and SQLite reports a conflict at once instead of
        calling the busy handler, which happens when several processes open a new file together.
        """
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _shutdown(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        for conn in self._connections:
            conn.close()
        self._connections.clear()

    async def _read(self, call: Callable[..., T], *args: object) -> T:
        return await self._run(self._readers, call, *args)

    async def _write(self, call: Callable[..., T], *args: object) -> T:
        return await self._run(self._writer, call, *args)

    async def _run(self, executor: ThreadPoolExecutor, call: Callable[..., T], *args: object) -> T:
        try:
            future = asyncio.get_running_loop().run_in_executor(executor, functools.partial(call, *args))
        except RuntimeError:
            raise StoreError(f"{self!r} is closed") from None
        try:
            return await future
        except (sqlite3.OperationalError, OSError) as exc:
            # Locked, busy, disk or I/O trouble: an outage a later retry may get past.
            raise StoreError(f"{self!r}: {type(exc).__name__}: {exc}") from exc
        except sqlite3.Error as exc:
            # Integrity, data or programming errors are bugs, not outages: a 500, never retried.
            raise RunError(f"{self!r}: {type(exc).__name__}: {exc}") from exc
