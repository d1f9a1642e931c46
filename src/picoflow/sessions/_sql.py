"""What the SQL stores share: the ``SessionStore`` calls that differ only in their SQL text, written
once over three driver primitives, and what a driver error that is not an outage becomes.

A store failure is an outage (``StoreError``, 503, retry later) only when the database cannot be
reached or used right now: down, busy, out of disk, its file unusable. Each store decides that from
its driver's codes. Anything else the driver raises fails the same way on a retry, so it must not
read as "try again later": data the database refuses becomes a ``ValueError`` and any other fault a
``RuntimeError``, both chained to the driver's error, which the engine reports as an internal error
(500).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from picoflow.attachments import AttachmentRef
from picoflow.messages import Message
from picoflow.session import OPEN_STATUSES, LogRecord, SessionInfo, SessionStatus
from picoflow.sessions import _rows
from picoflow.sessions._files import as_bytes, wanted_hashes
from picoflow.sessions.base import LiveSession

Params = Sequence[object] | Mapping[str, object]

LIVE = "status IN ({})".format(", ".join(f"'{status}'" for status in OPEN_STATUSES))
"""The SQL condition of a live session (its statuses are picoflow's own words, not input)."""


@dataclass(frozen=True, slots=True)
class Statements:
    """A dialect's SQL for the shared calls, with its table names and parameter style."""

    sessions: str
    """The (qualified) sessions table."""
    error_records: str
    """The (qualified) table of error records."""
    mark: Callable[[str], str]
    """A named placeholder in the driver's style: ``:name`` or ``%(name)s``."""
    find_ids: str
    """Parameters: prefix length, prefix, limit."""
    transcript: str
    errors: str
    record_error: str
    """Parameters: session id, encoded record."""
    timelines: str
    """Rows ``(body,)`` in the order recorded; parameter: session id."""
    timelines_of_turn: str
    """Rows ``(body,)`` of one turn; parameters: session id, turn."""
    load_files: str
    """Rows ``(sha256, data)``; parameters: session id, the hashes as ``hash_list`` gives them."""
    hash_list: Callable[[list[str]], object]
    """The hashes wanted, as the one parameter ``load_files`` takes for them."""
    list_files: str
    """Rows ``(name, media_type, size, sha256)`` in the order first stored; parameter: session id."""
    live_page: str
    """Rows ``(id, document)`` of live sessions in id order; parameters: flow, the id to start
    after, limit."""
    live_versions: str
    """Rows ``(flow, flow_version, count)`` of live sessions; no parameter."""


class SQLStore(ABC):
    """The calls every SQL store makes the same way; subclasses supply SQL and the driver calls."""

    statements: Statements

    def __init__(self) -> None:
        self._decoded = _rows.DecodedMemory()
        """Messages parsed by earlier loads (``restore_session``)."""

    async def list_sessions(
        self,
        *,
        flow: str | None = None,
        status: SessionStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
        offset: int = 0,
        errors: bool | None = None,
    ) -> list[SessionInfo]:
        filters: dict[str, str | None] = {"flow": flow, "status": status, "principal": principal}
        statements = self.statements
        query, params = _rows.listing_query(
            statements.sessions,
            statements.mark,
            filters,
            limit,
            offset,
            None if errors is None else (statements.error_records, errors),
        )
        return [SessionInfo(*row) for row in await self._fetch(query, params)]

    async def find_ids(self, prefix: str, limit: int = 10) -> list[str]:
        rows = await self._fetch(self.statements.find_ids, (len(prefix), prefix, limit))
        return [row[0] for row in rows]

    async def transcript(self, session_id: str) -> list[Message]:
        rows = await self._fetch(self.statements.transcript, (session_id,))
        return _rows.decode_messages(row[0] for row in rows)

    async def record_error(self, session_id: str, record: LogRecord) -> None:
        await self._execute(self.statements.record_error, (session_id, _rows.encode_record(record)))

    async def errors(self, session_id: str) -> list[LogRecord]:
        rows = await self._fetch(self.statements.errors, (session_id,))
        return _rows.decode_records(row[0] for row in rows)

    async def timelines(self, session_id: str, turn: int | None = None) -> list[str]:
        if turn is None:
            rows = await self._fetch(self.statements.timelines, (session_id,))
        else:
            rows = await self._fetch(self.statements.timelines_of_turn, (session_id, turn))
        return [row[0] for row in rows]

    async def load_files(self, session_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        wanted = wanted_hashes(hashes)
        if not wanted:
            return {}
        params = (session_id, self.statements.hash_list(wanted))
        return {sha: as_bytes(data) for sha, data in await self._fetch(self.statements.load_files, params)}

    async def list_files(self, session_id: str) -> list[AttachmentRef]:
        rows = await self._fetch(self.statements.list_files, (session_id,))
        return [AttachmentRef(name, media_type, int(size), sha) for name, media_type, size, sha in rows]

    async def live_sessions(self, flow: str, *, after: str = "", limit: int = 1000) -> list[LiveSession]:
        _rows.check_page(limit, 0)
        rows = await self._fetch(self.statements.live_page, (flow, after, limit))
        return [_rows.live_session(session_id, document) for session_id, document in rows]

    async def live_versions(self) -> dict[tuple[str, str], int]:
        rows = await self._fetch(self.statements.live_versions, ())
        return {(flow, version): int(count) for flow, version, count in rows}

    def _forget(self, session_id: str) -> None:
        """Drop what loads of a deleted session parsed (only to free the memory: see ``DecodedMemory``)."""
        self._decoded.forget(session_id)

    @abstractmethod
    async def _fetch(self, query: str, params: Params) -> list[Any]:
        """The rows of one read-only query."""

    @abstractmethod
    async def _execute(self, query: str, params: Params) -> None:
        """One write statement, committed."""


def refused(where: str, exc: BaseException, text: str) -> ValueError:
    """The database refused a value (too large, out of range, a broken constraint): the same save
    would be refused again, so this is the caller's data, not an outage."""
    return ValueError(f"{where} refused the data: {type(exc).__name__}: {text}")


def fault(where: str, exc: BaseException, text: str) -> RuntimeError:
    """A driver error that is neither an outage nor refused data: a bug, a damaged database or a
    schema changed behind the store's back."""
    return RuntimeError(f"{where}: {type(exc).__name__}: {text}")
