"""The connections of a ``PostgresStore``: a psycopg pool behind a circuit breaker, and which driver
errors mean the database is out of reach.

When the database cannot be reached, the breaker keeps requests from queueing behind connect
attempts: the first failure opens it, and while it is open every call fails at once with
``StoreUnavailable`` (HTTP 503 with Retry-After). After a backoff (0.5 s, doubling up to 2 s) one
call tries a fresh pool (half-open); the calls arriving meanwhile wait for that one attempt rather
than each making their own. Success closes the breaker, failure reopens it with a longer backoff.

Errors of a statement on a working connection do not touch the breaker: the database is busy
(lock, deadlock, cancelled, out of resources: ``StoreError``, retryable) or the statement itself
failed (refused data, a bug: not an outage, see ``picoflow.sessions._sql``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from picoflow.exceptions import StoreError, StoreUnavailable
from picoflow.sessions._sql import fault, refused

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool

    Connection = AsyncConnection[TupleRow]
    Pool = AsyncConnectionPool[Connection]

_GONE = ("08", "57P01", "57P02", "57P03")
"""SQLSTATEs of a connection the server ended or refused: connection exception, shutdown, starting up."""

_BUSY = ("40", "53", "55P03", "57014", "58")
"""SQLSTATEs of a reachable database that could not do it now: serialization failure or deadlock,
insufficient resources, lock not available, statement timeout, system (I/O) error."""

_REFUSED = ("22", "23", "54")
"""SQLSTATEs of refused data: data exception, integrity violation, program limit (a value too large)."""


def primary_message(exc: BaseException) -> str:
    """Only the primary message: the server's DETAIL and CONTEXT lines can quote stored text."""
    diagnostic = getattr(exc, "diag", None)
    text = getattr(diagnostic, "message_primary", None) or str(exc)
    return (text.splitlines() or [""])[0]


class Breaker:
    """Whether calls may try the database: closed (yes), open until ``until`` (no), then one probe.

    The backoff is short and capped so that turns work again within seconds of the database's
    return; it only has to spare the database and the callers a storm of doomed connect attempts.
    """

    first_backoff = 0.5
    max_backoff = 2.0

    def __init__(self) -> None:
        self.until: float | None = None  # monotonic time the open breaker lets a probe through
        self.backoff = self.first_backoff

    def blocked_for(self) -> float | None:
        """Seconds left while open, else None (closed, or time for a probe)."""
        if self.until is None:
            return None
        left = self.until - time.monotonic()
        return left if left > 0 else None

    def failed(self) -> None:
        if self.until is not None:  # a failed probe: wait longer before the next one
            self.backoff = min(self.backoff * 2, self.max_backoff)
        self.until = time.monotonic() + self.backoff

    def succeeded(self) -> None:
        self.until = None
        self.backoff = self.first_backoff


class PostgresPool:
    """Pooled connections to one database, opened on first use; ``prepare`` runs once on the first
    connection (schema check or upgrade) before any other call is served."""

    def __init__(
        self,
        url: str,
        where: str,
        *,
        min_size: int,
        max_size: int,
        connect_timeout: float,
        prepare: Callable[[Connection], Awaitable[object]],
    ) -> None:
        self.where = where
        self.breaker = Breaker()
        self._url = url
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._prepare = prepare
        self._pool: Pool | None = None
        self._opening: asyncio.Lock | None = None
        self._ready = False
        self._closed = False
        self._discarded: set[asyncio.Task[None]] = set()  # pools closing in the background

    @contextlib.asynccontextmanager
    async def connection(self, *, ready: bool = True) -> AsyncIterator[Connection]:
        """A pooled connection (``ready=False``: even before ``prepare`` ran). Driver errors come
        out classified: ``StoreUnavailable``, ``StoreError``, ``ValueError`` or ``RuntimeError``."""
        pool = await self._open(ready=ready)
        async with self._checked(pool) as conn:
            yield conn
        self.breaker.succeeded()

    async def close(self) -> None:
        """Close the pool; later calls fail with ``StoreError``."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        if self._discarded:
            await asyncio.gather(*self._discarded, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def _checked(self, pool: Pool) -> AsyncIterator[Connection]:
        import psycopg
        import psycopg_pool

        conn: Connection | None = None
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            # Every connection busy, or none can be made: the pool cannot tell, so neither can we.
            # Treated as an outage; a busy pool recovers at the next probe, 0.5 s later.
            self._lost(pool)
            raise self._unavailable(f"no connection within {self._connect_timeout:g}s") from exc
        except psycopg.Error as exc:
            state = exc.sqlstate or ""
            gone = isinstance(exc, psycopg.OperationalError) and (not state or state.startswith(_GONE))
            # A statement error leaves its connection open; a lost server closes it (PoolClosed:
            # the pool was discarded by another caller's failure meanwhile).
            if gone or conn is None or conn.closed or conn.broken or isinstance(exc, psycopg_pool.PoolClosed):
                self._lost(pool)
                raise self._unavailable(f"connection lost: {type(exc).__name__}") from exc
            text = primary_message(exc)
            if state.startswith(_BUSY):
                raise StoreError(f"{self.where}: {type(exc).__name__}: {text}") from exc
            if isinstance(exc, psycopg.DataError | psycopg.IntegrityError) or state.startswith(_REFUSED):
                raise refused(self.where, exc, text) from exc
            raise fault(self.where, exc, text) from exc

    def _unavailable(self, why: str) -> StoreUnavailable:
        return StoreUnavailable(f"{self.where}: {why}", retry_after=self.breaker.blocked_for())

    def _lost(self, pool: Pool) -> None:
        """The database is unreachable: open the breaker and drop the pool for a fresh one later.

        A fresh pool rather than the old one's own reconnecting, whose backoff grows to minutes:
        the probe's new pool connects at once when the database is back.
        """
        self.breaker.failed()
        if self._pool is pool:
            self._pool = None
            self._discard(pool)

    def _discard(self, pool: Pool) -> None:
        """Close ``pool`` in the background: the callers waiting for an answer need not wait for it."""
        task = asyncio.create_task(pool.close(timeout=1.0), name="picoflow-close-pool")
        self._discarded.add(task)
        task.add_done_callback(self._discarded.discard)

    async def _open(self, *, ready: bool) -> Pool:
        if self._pool is not None and (self._ready or not ready):
            return self._pool
        if self.breaker.blocked_for() is not None:
            raise self._unavailable("the database was unreachable moments ago")
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._closed:
                raise StoreError(f"PostgresStore({self.where!r}) is closed")
            # Callers that queued behind an attempt which failed share its outcome: the breaker
            # it opened fails them now, instead of each making a connect attempt of its own.
            if self.breaker.blocked_for() is not None:
                raise self._unavailable("the database was unreachable moments ago")
            if self._pool is None:
                try:
                    self._pool = await self._new_pool()
                except StoreUnavailable:
                    self.breaker.failed()
                    raise
            pool = self._pool
            if ready and not self._ready:
                async with self._checked(pool) as conn:
                    await self._prepare(conn)
                self._ready = True
            self.breaker.succeeded()
            return pool

    async def _new_pool(self) -> Pool:
        from psycopg import AsyncConnection
        from psycopg_pool import AsyncConnectionPool, PoolTimeout

        pool: Pool = AsyncConnectionPool(
            self._url,
            connection_class=AsyncConnection,
            kwargs={"autocommit": True},
            min_size=self._min_size,
            max_size=self._max_size,
            # A checkout waits no longer than a connect may take: past that the database is down.
            timeout=self._connect_timeout,
            open=False,
            name="picoflow",
        )
        try:
            await pool.open(wait=True, timeout=self._connect_timeout)
        except PoolTimeout as exc:
            self._discard(pool)
            raise StoreUnavailable(
                f"cannot connect to {self.where} within {self._connect_timeout:g}s"
            ) from exc
        return pool
