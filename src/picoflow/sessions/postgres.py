"""``PostgresStore``: durable sessions in PostgreSQL, for several app servers sharing them.

psycopg is imported only when a store is created, so ``picoflow`` works without the ``postgres``
extra. The pool's connections run in autocommit mode: a save is one statement (session row and
messages through data-modifying CTEs), which PostgreSQL runs as one transaction, in one round trip.
Connections, the circuit breaker for outages and the meaning of driver errors are in
``picoflow.sessions._postgres_pool``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from picoflow.attachments import Attachment
from picoflow.messages import Message
from picoflow.session import Session
from picoflow.sessions import _rows
from picoflow.sessions._files import file_rows
from picoflow.sessions._postgres_cancel import PostgresCancels, channel_name
from picoflow.sessions._postgres_pool import PostgresPool
from picoflow.sessions._sql import LIVE, Params, SQLStore, Statements
from picoflow.sessions.base import CancelRequest
from picoflow.sessions.migrations import check_postgres, check_schema_name, qualifier, upgrade_postgres

if TYPE_CHECKING:
    from picoflow.sessions._postgres_pool import Connection

_COLUMNS = (
    "id, flow, status, principal, current_step, revision, turns, created_at, updated_at, flow_version,"
    " namespaces, starts, document"
)

# The messages and files CTEs join ``head``, so nothing is inserted when the session row was not
# written; PostgreSQL runs every data-modifying CTE to completion even though the final SELECT
# ignores it. A file the session holds already is kept as it is (ON CONFLICT DO NOTHING; the
# save's own files are distinct, see ``file_rows``).
_ADD_MESSAGES = """added AS (
    INSERT INTO {p}picoflow_messages (session_id, seq, namespace, body)
    SELECT head.id, m.seq, m.namespace, m.body
    FROM head
    CROSS JOIN unnest(%(seqs)s::bigint[], %(message_namespaces)s::text[], %(bodies)s::json[])
        AS m(seq, namespace, body)
), stored AS (
    INSERT INTO {p}picoflow_files
        (session_id, sha256, name, media_type, size, data, stored_at, revision, ordinal)
    SELECT head.id, f.sha256, f.name, f.media_type, f.size, f.data, %(stored_at)s, %(revision)s, f.ordinal
    FROM head
    CROSS JOIN unnest(
        %(file_hashes)s::text[], %(file_names)s::text[], %(file_types)s::text[], %(file_sizes)s::bigint[],
        %(file_data)s::bytea[], %(file_ordinals)s::integer[]
    ) AS f(sha256, name, media_type, size, data, ordinal)
    ON CONFLICT (session_id, sha256) DO NOTHING
)
SELECT count(*) FROM head"""

_CREATE = (
    """WITH head AS (
    INSERT INTO {p}picoflow_sessions ("""
    + _COLUMNS
    + """)
    VALUES (%(id)s, %(flow)s, %(status)s, %(principal)s, %(current_step)s, %(revision)s, %(turns)s,
            %(created_at)s, %(updated_at)s, %(flow_version)s, %(namespaces)s::text[], %(starts)s::bigint[],
            %(document)s::json)
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
        updated_at = %(updated_at)s, flow_version = %(flow_version)s, namespaces = %(namespaces)s::text[],
        starts = %(starts)s::bigint[], document = %(document)s::json
    WHERE id = %(id)s AND revision = %(expected)s
    RETURNING id
), """
    + _ADD_MESSAGES
)

# One statement reads one snapshot, so the document (the row without a namespace) and its live
# messages always match. Each namespace is read by a LATERAL subquery with an ORDER BY of its own,
# which the planner cannot merge into a join: it runs as one index range scan from the namespace's
# start. As a plain join, once the table has statistics, the planner guesses that ``seq >= start``
# keeps a third of the session and reads its whole transcript instead, so loads slowed down as a
# session grew old.
_LOAD = """WITH head AS (SELECT namespaces, starts, document FROM {p}picoflow_sessions WHERE id = %(id)s)
SELECT NULL::bigint AS seq, NULL::text AS namespace, document::text AS body FROM head
UNION ALL
SELECT m.seq, m.namespace, m.body
FROM head
CROSS JOIN LATERAL unnest(head.namespaces, head.starts) AS ns(name, start)
CROSS JOIN LATERAL (
    SELECT seq, namespace, body::text AS body FROM {p}picoflow_messages
    WHERE session_id = %(id)s AND namespace = ns.name AND seq >= ns.start
    ORDER BY seq
) AS m"""


def _require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ImportError("PostgresStore needs psycopg 3: install picoflow-ai[postgres]") from exc


def _statements(p: str) -> Statements:
    return Statements(
        sessions=f"{p}picoflow_sessions",
        error_records=f"{p}picoflow_errors",
        mark=lambda name: f"%({name})s",
        # left(), not LIKE: ids may hold '_', which LIKE reads as a wildcard.
        find_ids=(
            f'SELECT id FROM {p}picoflow_sessions WHERE left(id, %s) = %s ORDER BY id COLLATE "C" LIMIT %s'
        ),
        transcript=f"SELECT body::text FROM {p}picoflow_messages WHERE session_id = %s ORDER BY seq",
        errors=f"SELECT body::text FROM {p}picoflow_errors WHERE session_id = %s ORDER BY id",
        record_error=f"INSERT INTO {p}picoflow_errors (session_id, body) VALUES (%s, %s::json)",
        timelines=f"SELECT body::text FROM {p}picoflow_timelines WHERE session_id = %s ORDER BY id",
        timelines_of_turn=(
            f"SELECT body::text FROM {p}picoflow_timelines WHERE session_id = %s AND turn = %s ORDER BY id"
        ),
        load_files=f"SELECT sha256, data FROM {p}picoflow_files WHERE session_id = %s AND sha256 = ANY(%s)",
        hash_list=list,
        list_files=(
            f"SELECT name, media_type, size, sha256 FROM {p}picoflow_files"
            " WHERE session_id = %s ORDER BY revision, ordinal"
        ),
        # The primary key's index (in the database's collation, as ``id >`` compares), walked from
        # the last id of the page before (keyset pagination).
        live_page=(
            f"SELECT id, document::text FROM {p}picoflow_sessions"
            f" WHERE flow = %s AND {LIVE} AND id > %s ORDER BY id LIMIT %s"
        ),
        live_versions=(
            f"SELECT flow, flow_version, count(*) FROM {p}picoflow_sessions WHERE {LIVE} GROUP BY 1, 2"
        ),
    )


class PostgresStore(SQLStore):
    """A ``SessionStore`` in PostgreSQL, shared safely by any number of processes and hosts.

    ``url`` is a libpq connection string or ``postgresql://`` URL. ``schema`` puts the tables in
    that schema (created if missing) instead of the connection's ``search_path``.

    It is a ``CancelChannel``: ``FlowEngine.cancel`` in one process stops a turn another process
    runs on the same database and schema, over ``LISTEN``/``NOTIFY`` (a process listens on one
    connection of its own, outside the pool, from its first turn on). ``cancel_wait`` is how many
    seconds a cancel that finds no turn in its own process waits for the process running it to
    answer; with none answering by then, the cancel finds no turn running (``TurnNotRunning``).
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
        cancel_wait: float = 2.0,
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
        if not (
            isinstance(cancel_wait, int | float)
            and not isinstance(cancel_wait, bool)
            and math.isfinite(cancel_wait)
            and cancel_wait > 0
        ):
            raise ValueError(f"cancel_wait must be a number of seconds above 0, not {cancel_wait!r}")
        super().__init__()
        self.schema = schema
        self.auto_upgrade = auto_upgrade
        self._url = url
        self._where = "PostgreSQL {}:{}/{}{}".format(
            params.get("host") or "localhost",
            params.get("port") or 5432,
            params.get("dbname") or params.get("user") or "",
            f" schema {schema}" if schema else "",
        )
        self._pool = PostgresPool(
            url,
            self._where,
            min_size=min_size,
            max_size=max_size,
            connect_timeout=connect_timeout,
            prepare=self._prepare,
        )
        p = qualifier(schema)
        self.statements = _statements(p)
        self._create_sql = _CREATE.replace("{p}", p)
        self._update_sql = _UPDATE.replace("{p}", p)
        self._load_sql = _LOAD.replace("{p}", p)
        self._p = p
        self._cancels = PostgresCancels(
            url,
            self._where,
            channel_name(schema),
            self._notify,
            wait=float(cancel_wait),
            connect_timeout=connect_timeout,
        )

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r})"

    async def load(self, session_id: str) -> Session | None:
        rows = await self._fetch(self._load_sql, {"id": session_id})
        return _rows.restore_session(*_rows.group_rows(rows), self._decoded) if rows else None

    async def save(
        self,
        session: Session,
        *,
        expected_revision: int | None,
        appended: Sequence[tuple[str, Message]] = (),
        files: Sequence[Attachment] = (),
    ) -> int:
        prepared = _rows.prepare_save(session, expected_revision, appended)
        stored = file_rows(files)
        params = {
            **_rows.session_columns(session, prepared, expected_revision),
            "namespaces": prepared.namespaces,
            "starts": prepared.starts,
            "seqs": prepared.seqs,
            "message_namespaces": prepared.message_namespaces,
            "bodies": prepared.bodies,
            "stored_at": time.time(),
            "file_hashes": [f.sha256 for f in stored],
            "file_names": [f.name for f in stored],
            "file_types": [f.media_type for f in stored],
            "file_sizes": [f.size for f in stored],
            "file_data": [f.data for f in stored],
            "file_ordinals": [f.ordinal for f in stored],
        }
        from psycopg.errors import UniqueViolation

        query = self._create_sql if expected_revision is None else self._update_sql
        async with self._pool.connection() as conn:
            try:
                cursor = await conn.execute(query, params)
            except UniqueViolation as exc:
                # The session row is written with ON CONFLICT DO NOTHING, so this is a message.
                if exc.diag.table_name == "picoflow_messages":
                    raise _rows.seq_reused(session.id) from None
                raise
            rows = await cursor.fetchall()
        if rows[0][0] != 1:
            raise _rows.conflict(session.id, expected_revision)
        session.revision = prepared.revision
        return prepared.revision

    async def delete(self, session_id: str) -> bool:
        p = self._p
        async with self._pool.connection() as conn, conn.transaction():
            # The session row goes first: its row lock makes a concurrent save wait, and the
            # following statements (new snapshots) then see every message that save committed.
            cursor = await conn.execute(f"DELETE FROM {p}picoflow_sessions WHERE id = %s", (session_id,))
            existed = cursor.rowcount > 0
            await conn.execute(f"DELETE FROM {p}picoflow_messages WHERE session_id = %s", (session_id,))
            await conn.execute(f"DELETE FROM {p}picoflow_errors WHERE session_id = %s", (session_id,))
            await conn.execute(f"DELETE FROM {p}picoflow_files WHERE session_id = %s", (session_id,))
            await conn.execute(f"DELETE FROM {p}picoflow_timelines WHERE session_id = %s", (session_id,))
        self._forget(session_id)
        return existed

    async def record_timeline(
        self, session_id: str, turn: int, body: str, *, keep_turns: int | None = None
    ) -> None:
        if not isinstance(body, str):
            raise TypeError(f"record_timeline() needs JSON text, not {type(body).__name__}")
        p = self._p
        # One statement: the retention's deletions and the insert commit together.
        query = (
            f"WITH gone AS (DELETE FROM {p}picoflow_timelines"
            " WHERE session_id = %(id)s AND turn <= %(oldest)s)"
            f" INSERT INTO {p}picoflow_timelines (session_id, turn, recorded_at, body)"
            " VALUES (%(id)s, %(turn)s, %(at)s, %(body)s::json)"
        )
        oldest = turn - keep_turns if keep_turns is not None else -1
        params = {"id": session_id, "oldest": oldest, "turn": turn, "at": time.time(), "body": body}
        await self._execute(query, params)

    async def ping(self) -> None:
        """One ``SELECT 1`` (readiness checks); fails like any call while the database is down."""
        await self._fetch("SELECT 1", ())

    @property
    def cancel_wait(self) -> float:
        """Seconds a cancel that finds no job in its own process waits for another's answer."""
        return self._cancels.wait

    @property
    def cancel_channel(self) -> str:
        """The ``LISTEN``/``NOTIFY`` channel its cancel requests travel on: one per database schema."""
        return self._cancels.channel

    def listen_for_cancels(self, answer: Callable[[CancelRequest], str | None]) -> Callable[[], None]:
        """Hand ``answer`` the cancel requests of every process on this database and schema
        (``CancelChannel``); the returned function stops it."""
        return self._cancels.listen(answer)

    async def request_cancel(self, session_id: str, revision: int) -> str | None:
        """Ask the process running a job of ``session_id`` to stop it (``CancelChannel``): what it
        stopped, or None when no process answered within ``cancel_wait`` seconds."""
        return await self._cancels.request(session_id, revision)

    async def close(self) -> None:
        """Stop listening for cancels and close the pool. The store cannot be used afterwards."""
        await self._cancels.close()
        await self._pool.close()

    async def upgrade(self) -> list[int]:
        """Apply missing schema migrations (what ``picoflow db upgrade`` runs); return their versions."""
        async with self._pool.connection(ready=False) as conn:
            return await upgrade_postgres(conn, self.schema, self._where)

    async def _notify(self, channel: str, payload: str) -> None:
        await self._execute("SELECT pg_notify(%s, %s)", (channel, payload))

    async def _prepare(self, conn: Connection) -> None:
        if self.auto_upgrade:
            await upgrade_postgres(conn, self.schema, self._where)
        else:
            await check_postgres(conn, self.schema, self._where)

    async def _fetch(self, query: str, params: Params) -> list[Any]:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchall()

    async def _execute(self, query: str, params: Params) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(query, params)
