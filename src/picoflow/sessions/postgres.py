"""``PostgresStore``: durable sessions in PostgreSQL, for several app servers sharing them.

psycopg is imported only when a store is created, so ``picoflow`` works without the ``postgres``
extra. The pool's connections run in autocommit mode: a save is one statement (session row and
messages through data-modifying CTEs), which PostgreSQL runs as one transaction, in one round trip.

When the database cannot be reached, a circuit breaker keeps requests from queueing behind connect
attempts: the first failure opens it, and while it is open every call fails at once with
``StoreUnavailable`` (HTTP 503 with Retry-After). After a backoff (0.5 s, doubling up to 2 s) one
call tries a fresh pool (half-open); the calls arriving meanwhile wait for that one attempt rather
than each making their own. Success closes the breaker, failure reopens it with a longer backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from picoflow.exceptions import StoreError, StoreUnavailable
from picoflow.messages import Message
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions import _rows
from picoflow.sessions.migrations import check_postgres, check_schema_name, qualifier, upgrade_postgres

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool

    Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]

_COLUMNS = (
    "id, flow, status, principal, current_step, revision, turns, created_at, updated_at,"
    " namespaces, starts, document"
)

# The messages CTE joins ``head``, so nothing is inserted when the session row was not written;
# PostgreSQL runs every data-modifying CTE to completion even though the final SELECT ignores it.
_ADD_MESSAGES = """added AS (
    INSERT INTO {p}picoflow_messages (session_id, seq, namespace, body)
    SELECT head.id, m.seq, m.namespace, m.body
    FROM head
    CROSS JOIN unnest(%(seqs)s::bigint[], %(message_namespaces)s::text[], %(bodies)s::json[])
        AS m(seq, namespace, body)
)
SELECT count(*) FROM head"""

_CREATE = (
    """WITH head AS (
    INSERT INTO {p}picoflow_sessions ("""
    + _COLUMNS
    + """)
    VALUES (%(id)s, %(flow)s, %(status)s, %(principal)s, %(current_step)s, %(revision)s, %(turns)s,
            %(created_at)s, %(updated_at)s, %(namespaces)s::text[], %(starts)s::bigint[], %(document)s::json)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), """
    + _ADD_MESSAGES
)

# Under READ COMMITTED a concurrent writer's UPDATE waits for the row lock, then re-checks the
# WHERE clause against the committed row: the revision no longer matches and it updates nothing.
_UPDATE = (
    """WITH head AS (
    UPDATE {p}picoflow_sessions
    SET flow = %(flow)s, status = %(status)s, principal = %(principal)s,
        current_step = %(current_step)s, revision = %(revision)s, turns = %(turns)s,
        updated_at = %(updated_at)s, namespaces = %(namespaces)s::text[], starts = %(starts)s::bigint[],
        document = %(document)s::json
    WHERE id = %(id)s AND revision = %(expected)s
    RETURNING id
), """
    + _ADD_MESSAGES
)

# One statement reads one snapshot, so the document and its live messages always match. Each namespace
# is read by a LATERAL subquery with an ORDER BY of its own, which the planner cannot merge into a
# join: it runs as one index range scan from the namespace's start. As a plain join, once the table
# has statistics, the planner guesses that ``seq >= start`` keeps a third of the session and reads
# its whole transcript instead, so loads slowed down as a session grew old.
_LOAD = """WITH head AS (SELECT namespaces, starts, document FROM {p}picoflow_sessions WHERE id = %(id)s)
SELECT 0 AS part, -1::bigint AS seq, NULL::text AS namespace, document::text AS body FROM head
UNION ALL
SELECT 1, m.seq, m.namespace, m.body
FROM head
CROSS JOIN LATERAL unnest(head.namespaces, head.starts) AS ns(name, start)
CROSS JOIN LATERAL (
    SELECT seq, namespace, body::text AS body FROM {p}picoflow_messages
    WHERE session_id = %(id)s AND namespace = ns.name AND seq >= ns.start
    ORDER BY seq
) AS m
ORDER BY part, seq"""


def _require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ImportError("PostgresStore needs psycopg 3: install picoflow[postgres]") from exc


def _store_error(where: str, exc: Exception) -> StoreError:
    # Only the primary message: the server's DETAIL and CONTEXT lines can quote stored text.
    diagnostic = getattr(exc, "diag", None)
    text = getattr(diagnostic, "message_primary", None) or str(exc).splitlines()[0]
    return StoreError(f"{where}: {type(exc).__name__}: {text}")


class _Breaker:
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


class PostgresStore:
    """A ``SessionStore`` in PostgreSQL, shared safely by any number of processes and hosts.

    ``url`` is a libpq connection string or ``postgresql://`` URL. ``schema`` puts the tables in
    that schema (created if missing) instead of the connection's ``search_path``.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        auto_upgrade: bool = True,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
    ) -> None:
        _require_psycopg()
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            # Not chained: psycopg's message may quote the URL, password included.
            raise ValueError("not a valid PostgreSQL connection URL") from None
        if schema is not None:
            check_schema_name(schema)
        if not 1 <= min_size <= max_size:
            raise ValueError(f"need 1 <= min_size <= max_size, not {min_size} and {max_size}")
        self.schema = schema
        self.auto_upgrade = auto_upgrade
        self._url = url
        self._where = "PostgreSQL {}:{}/{}{}".format(
            params.get("host") or "localhost",
            params.get("port") or 5432,
            params.get("dbname") or params.get("user") or "",
            f" schema {schema}" if schema else "",
        )
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._pool: Pool | None = None
        self._opening: asyncio.Lock | None = None
        self._ready = False
        self._closed = False
        self._breaker = _Breaker()
        self._discarded: set[asyncio.Task[None]] = set()  # pools closing in the background
        p = qualifier(schema)
        self._create_sql = _CREATE.replace("{p}", p)
        self._update_sql = _UPDATE.replace("{p}", p)
        self._load_sql = _LOAD.replace("{p}", p)
        self._p = p

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r})"

    # --- SessionStore -------------------------------------------------------------------------

    async def load(self, session_id: str) -> Session | None:
        rows = await self._fetch(self._load_sql, {"id": session_id})
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
        params = {
            **_rows.session_columns(session, prepared, expected_revision),
            "namespaces": prepared.namespaces,
            "starts": prepared.starts,
            "seqs": [m.seq for m in prepared.messages],
            "message_namespaces": [m.namespace for m in prepared.messages],
            "bodies": [m.body for m in prepared.messages],
        }
        from psycopg.errors import UniqueViolation

        query = self._create_sql if expected_revision is None else self._update_sql
        async with self._connection() as conn:
            try:
                cursor = await conn.execute(query, params)
            except UniqueViolation:
                # The session row is written with ON CONFLICT DO NOTHING, so this is a message.
                raise _rows.seq_reused(session.id) from None
            rows = await cursor.fetchall()
        if rows[0][0] != 1:
            raise _rows.conflict(session.id, expected_revision)
        session.revision = prepared.revision
        return prepared.revision

    async def delete(self, session_id: str) -> bool:
        p = self._p
        async with self._connection() as conn, conn.transaction():
            # The session row goes first: its row lock makes a concurrent save wait, and the
            # following statements (new snapshots) then see every message that save committed.
            cursor = await conn.execute(f"DELETE FROM {p}picoflow_sessions WHERE id = %s", (session_id,))
            existed = cursor.rowcount > 0
            await conn.execute(f"DELETE FROM {p}picoflow_messages WHERE session_id = %s", (session_id,))
            await conn.execute(f"DELETE FROM {p}picoflow_errors WHERE session_id = %s", (session_id,))
        return existed

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
            f"{self._p}picoflow_sessions", lambda name: f"%({name})s", filters, limit, offset
        )
        rows = await self._fetch(query, params)
        return [SessionInfo(*row) for row in rows]

    async def find_ids(self, prefix: str, limit: int = 10) -> list[str]:
        # left(), not LIKE: ids may hold '_', which LIKE reads as a wildcard.
        query = (
            f"SELECT id FROM {self._p}picoflow_sessions WHERE left(id, %s) = %s"
            ' ORDER BY id COLLATE "C" LIMIT %s'
        )
        rows = await self._fetch(query, (len(prefix), prefix, limit))
        return [row[0] for row in rows]

    async def transcript(self, session_id: str) -> list[Message]:
        rows = await self._fetch(
            f"SELECT body::text FROM {self._p}picoflow_messages WHERE session_id = %s ORDER BY seq",
            (session_id,),
        )
        return _rows.decode_messages(row[0] for row in rows)

    async def record_error(self, session_id: str, record: LogRecord) -> None:
        body = _rows.encode_record(record)
        async with self._connection() as conn:
            await conn.execute(
                f"INSERT INTO {self._p}picoflow_errors (session_id, body) VALUES (%s, %s::json)",
                (session_id, body),
            )

    async def errors(self, session_id: str) -> list[LogRecord]:
        rows = await self._fetch(
            f"SELECT body::text FROM {self._p}picoflow_errors WHERE session_id = %s ORDER BY id",
            (session_id,),
        )
        return _rows.decode_records(row[0] for row in rows)

    async def ping(self) -> None:
        """One ``SELECT 1`` (readiness checks); fails like any call while the database is down."""
        await self._fetch("SELECT 1", ())

    async def close(self) -> None:
        """Close the pool. The store cannot be used afterwards."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        if self._discarded:
            await asyncio.gather(*self._discarded, return_exceptions=True)

    async def upgrade(self) -> list[int]:
        """Apply missing schema migrations (what ``picoflow db upgrade`` runs); return their versions."""
        async with self._connection(ready=False) as conn:
            return await upgrade_postgres(conn, self.schema, self._where)

    # --- connections ----------------------------------------------------------------------------

    async def _fetch(self, query: str, params: Sequence[object] | Mapping[str, object]) -> list[Any]:
        async with self._connection() as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchall()

    @contextlib.asynccontextmanager
    async def _connection(self, *, ready: bool = True) -> AsyncIterator[AsyncConnection[TupleRow]]:
        """A pooled connection; driver failures surface as ``StoreError`` with the cause chained."""
        import psycopg
        import psycopg_pool
        from psycopg_pool import PoolTimeout

        pool = await self._open_pool(ready=ready)
        conn: AsyncConnection[TupleRow] | None = None
        try:
            async with pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            # Every connection busy, or none can be made: the pool cannot tell, so neither can we.
            # Treated as an outage; a busy pool recovers at the next probe, 0.5 s later.
            self._lost(pool)
            raise self._unavailable(f"no connection within {self._connect_timeout:g}s") from exc
        except psycopg.Error as exc:
            # A statement error leaves its connection open; a lost server closes it (PoolClosed:
            # the pool was discarded by another caller's failure meanwhile).
            if conn is None or conn.closed or conn.broken or isinstance(exc, psycopg_pool.PoolClosed):
                self._lost(pool)
                raise self._unavailable(f"connection lost: {type(exc).__name__}") from exc
            raise _store_error(self._where, exc) from exc
        else:
            self._breaker.succeeded()

    def _unavailable(self, why: str) -> StoreUnavailable:
        return StoreUnavailable(f"{self._where}: {why}", retry_after=self._breaker.blocked_for())

    def _lost(self, pool: Pool) -> None:
        """The database is unreachable: open the breaker and drop the pool for a fresh one later.

        A fresh pool rather than the old one's own reconnecting, whose backoff grows to minutes:
        the probe's new pool connects at once when the database is back.
        """
        self._breaker.failed()
        if self._pool is pool:
            self._pool = None
            self._discard(pool)

    def _discard(self, pool: Pool) -> None:
        """Close ``pool`` in the background: the callers waiting for an answer need not wait for it."""
        task = asyncio.create_task(pool.close(timeout=1.0), name="picoflow-close-pool")
        self._discarded.add(task)
        task.add_done_callback(self._discarded.discard)

    async def _open_pool(self, *, ready: bool) -> Pool:
        if self._pool is not None and (self._ready or not ready):
            return self._pool
        if self._breaker.blocked_for() is not None:
            raise self._unavailable("the database was unreachable moments ago")
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            # Callers that queued behind an attempt which failed share its outcome: the breaker
            # it opened fails them now, instead of each making a connect attempt of its own.
            if self._breaker.blocked_for() is not None:
                raise self._unavailable("the database was unreachable moments ago")
            if self._pool is None:
                try:
                    self._pool = await self._new_pool()
                except StoreUnavailable:
                    self._breaker.failed()
                    raise
            if ready and not self._ready:
                await self._prepare_schema(self._pool)
            self._breaker.succeeded()
            return self._pool

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
                f"cannot connect to {self._where} within {self._connect_timeout:g}s"
            ) from exc
        return pool

    async def _prepare_schema(self, pool: Pool) -> None:
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            async with pool.connection() as conn:
                if self.auto_upgrade:
                    await upgrade_postgres(conn, self.schema, self._where)
                else:
                    await check_postgres(conn, self.schema, self._where)
        except PoolTimeout as exc:
            self._lost(pool)
            raise self._unavailable(f"no connection within {self._connect_timeout:g}s") from exc
        except psycopg.Error as exc:
            raise _store_error(self._where, exc) from exc
        self._ready = True
