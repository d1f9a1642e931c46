"""The connections of a ``SQLiteStore``, the threads that run them, and which ``sqlite3`` errors
mean the file cannot be used right now.

Every write of this process goes through one *writer* connection, so writers of this process never
wait on SQLite's busy handler for each other; other processes on the same file are serialised by
``BEGIN IMMEDIATE`` and the busy timeout. Reads run on a few reader threads, each with a connection
of its own; in WAL mode they never block on the writer.

A blocking call goes to a thread so that the event loop keeps serving while it waits, but the
hand-off costs two thread wake-ups: on a fast disk, a good part of the call itself (about 0.1 ms
beside a 0.3 ms commit). So while the writer connection is free and its recent writes were quick
(under ``inline_limit``), a call runs on the caller's own thread instead. It never waits there for
a lock: when another process holds the write lock, the call moves to the writer thread, which
waits for it through the busy handler. Session loads use the writer connection the same way when it
is free, because its page cache still holds what the last writes changed.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from picoflow.exceptions import StoreError
from picoflow.sessions._sql import fault, refused

T = TypeVar("T")
Work = Callable[[sqlite3.Connection], T]

_OUTAGES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
    }
)
"""Primary result codes of a file that cannot be used right now: locked or busy past the timeout,
out of memory, disk I/O trouble, disk full, cannot be opened; or not usable at all until someone
restores it (damaged, or not a database): the store is down, not the request wrong."""

_REFUSED = frozenset(
    {sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_RANGE}
)


def result_code(exc: sqlite3.Error) -> int | None:
    """The primary result code of ``exc`` (extended codes carry it in their low byte)."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def transaction(conn: sqlite3.Connection, work: Work[T]) -> T:
    """Run ``work`` in one write transaction: all of it is committed, or none of it."""
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


class _NotNow(Exception):
    """The call cannot run on the caller's thread right now; the writer thread takes it."""


class SQLiteConnections:
    """The writer connection and its thread, the reader threads, and the error classification."""

    inline_limit = 0.001
    """Seconds: writes run on the caller's thread only while the median of the recent ones took
    less (a median, so that an occasional slow commit, a checkpoint say, does not flip the mode)."""

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout: float,
        synchronous: str,
        readers: int,
        prepare: Callable[[sqlite3.Connection], None],
    ) -> None:
        self.path = path
        self._busy_ms = int(busy_timeout * 1000)
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._prepare = prepare
        self._name = f"SQLiteStore({str(path)!r})"
        self._writer_thread = ThreadPoolExecutor(1, thread_name_prefix="picoflow-sqlite-writer")
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="picoflow-sqlite-reader")
        self._writer: sqlite3.Connection | None = None
        self._writer_lock = threading.Lock()  # whoever holds it may use the writer connection
        self._queued = 0  # calls handed to the writer thread and not finished
        self._count_lock = threading.Lock()
        self._recent: deque[float] = deque(maxlen=9)  # the last writes' durations
        self._write_seconds = math.inf  # their median; unknown at first
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._ready = False
        self._closed = False

    async def write(self, work: Work[T], *, prepared: bool = True, inline: bool = True) -> T:
        """Run ``work`` on the writer connection, on this thread when that is cheaper (and
        ``inline`` allows it: a write known to be large goes to the writer thread)."""
        if inline and prepared and self._write_seconds < self.inline_limit:
            try:
                return self._classified(self._inline, work, True)
            except _NotNow:
                pass
        return await self._handed(self._writer_thread, self._on_writer_thread, work, prepared)

    async def read_fresh(self, *, on_writer: Work[T], elsewhere: Work[T]) -> T:
        """Run a read on the writer connection when it is free, else ``elsewhere`` on a reader."""
        try:
            return self._classified(self._inline, on_writer, False)
        except _NotNow:
            return await self.read(elsewhere)

    async def read(self, work: Work[T]) -> T:
        """Run a read on a reader thread."""
        return await self._handed(self._readers, self._on_reader_thread, work)

    async def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        await asyncio.to_thread(self._shutdown)

    # --- running calls ------------------------------------------------------------------------

    def _inline(self, work: Work[T], write: bool) -> T:
        if not self._ready or self._queued or self._writer is None:
            raise _NotNow
        if not self._writer_lock.acquire(blocking=False):
            raise _NotNow
        try:
            if self._closed:
                raise StoreError(f"{self._name} is closed")
            started = time.perf_counter()
            try:
                result = work(self._writer)  # its busy timeout is 0 here: it never waits
            except sqlite3.OperationalError as exc:
                if result_code(exc) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise _NotNow from exc  # nothing was done: the transaction was rolled back
                raise
            if write:
                self._timed(time.perf_counter() - started)
            return result
        finally:
            self._writer_lock.release()

    def _on_writer_thread(self, work: Work[T], prepared: bool) -> T:
        with self._writer_lock:
            conn = self._writer_connection(prepared)
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            try:
                started = time.perf_counter()
                result = work(conn)
                self._timed(time.perf_counter() - started)
                return result
            finally:
                conn.execute("PRAGMA busy_timeout = 0")

    def _on_reader_thread(self, work: Work[T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open(self._busy_ms)
        self._ensure_ready(conn)
        return work(conn)

    def _unqueue(self, _: object) -> None:
        with self._count_lock:
            self._queued -= 1

    def _timed(self, seconds: float) -> None:
        self._recent.append(seconds)
        self._write_seconds = sorted(self._recent)[len(self._recent) // 2]

    async def _handed(self, executor: ThreadPoolExecutor, call: Callable[..., T], *args: object) -> T:
        writer = executor is self._writer_thread
        if writer:
            with self._count_lock:
                self._queued += 1
        try:
            handed = executor.submit(call, *args)
        except RuntimeError:
            if writer:
                self._unqueue(None)
            raise StoreError(f"{self._name} is closed") from None
        if writer:
            # Done, or cancelled before it ran: either way the writer connection is free of it.
            handed.add_done_callback(self._unqueue)
        try:
            return await asyncio.wrap_future(handed)
        except (sqlite3.Error, OSError, OverflowError) as exc:
            raise self._classify(exc) from exc

    def _classified(self, call: Callable[[Work[T], bool], T], work: Work[T], write: bool) -> T:
        try:
            return call(work, write)
        except (sqlite3.Error, OSError, OverflowError) as exc:
            raise self._classify(exc) from exc

    def _classify(self, exc: BaseException) -> BaseException:
        """Locked, busy, disk or I/O trouble is an outage a later retry may get past (``StoreError``,
        503); refused data and every other driver error are not (see ``picoflow.sessions._sql``)."""
        text = str(exc)
        if isinstance(exc, OSError):
            return StoreError(f"{self._name}: {type(exc).__name__}: {text}")
        if isinstance(exc, OverflowError):  # an integer beyond SQLite's 64 bits
            return refused(self._name, exc, text)
        assert isinstance(exc, sqlite3.Error)
        code = result_code(exc)
        if code in _OUTAGES:
            return StoreError(f"{self._name}: {type(exc).__name__}: {text}")
        if isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError) or code in _REFUSED:
            return refused(self._name, exc, text)
        return fault(self._name, exc, text)

    # --- connections --------------------------------------------------------------------------

    def _writer_connection(self, prepared: bool) -> sqlite3.Connection:
        if self._writer is None:
            self._writer = self._open(self._busy_ms)
        if prepared:
            self._ensure_ready(self._writer)
        return self._writer

    def _ensure_ready(self, conn: sqlite3.Connection) -> None:
        if not self._ready:
            with self._lock:
                if not self._ready:
                    self._prepare(conn)
                    self._ready = True

    def mark_ready(self) -> None:
        """The schema is current (an explicit upgrade ran): no connection needs to check it."""
        self._ready = True

    def _open(self, busy_ms: int) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise StoreError(f"{self._name} is closed")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: BEGIN and COMMIT are issued explicitly (``transaction``).
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
                self._use_wal(conn)
                conn.execute(f"PRAGMA synchronous = {self._synchronous}")
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
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = result_code(exc) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _shutdown(self) -> None:
        self._writer_thread.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._writer_lock, self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
            self._writer = None
