"""``MemoryStore``: sessions kept in this process. For tests, demos and single-process tools."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence

from picoflow.attachments import Attachment, AttachmentRef
from picoflow.messages import Message
from picoflow.session import OPEN_STATUSES, LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions._files import NO_FILES, SessionFiles, file_rows
from picoflow.sessions._rows import check_page, check_save, conflict
from picoflow.sessions.base import LiveSession


class MemoryStore:
    """An in-process ``SessionStore``. Lost when the process exits.

    Saves are compare-and-swap like every other store; there is no ``await`` between the
    revision check and the write, so concurrent tasks cannot interleave inside a save.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._transcripts: dict[str, list[Message]] = {}
        self._errors: dict[str, list[LogRecord]] = {}
        self._timelines: dict[str, list[tuple[int, str]]] = {}
        self._files = SessionFiles()

    async def load(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        return None if session is None else session.copy()

    async def save(
        self,
        session: Session,
        *,
        expected_revision: int | None,
        appended: Sequence[tuple[str, Message]] = (),
        files: Sequence[Attachment] = NO_FILES,
    ) -> int:
        check_save(session, expected_revision, appended)
        rows = None if files is NO_FILES else file_rows(files)
        stored = self._sessions.get(session.id)
        if expected_revision is None:
            if stored is not None:
                raise conflict(session.id, expected_revision)
            revision = 1
        else:
            if stored is None or stored.revision != expected_revision:
                raise conflict(session.id, expected_revision)
            revision = expected_revision + 1
            if appended and appended[0][1].seq < stored.next_seq:
                raise ValueError(f"appended message seq {appended[0][1].seq} is already stored")
        session.revision = revision
        # Keep a copy: callers may go on changing their object after a save.
        self._sessions[session.id] = session.copy()
        self._transcripts.setdefault(session.id, []).extend([message for _, message in appended])
        if rows:
            self._files.add(session.id, rows)
        return revision

    async def load_files(self, session_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        return self._files.load(session_id, hashes)

    async def list_files(self, session_id: str) -> list[AttachmentRef]:
        return self._files.list(session_id)

    async def delete(self, session_id: str) -> bool:
        self._transcripts.pop(session_id, None)
        self._errors.pop(session_id, None)
        self._timelines.pop(session_id, None)
        self._files.drop(session_id)
        return self._sessions.pop(session_id, None) is not None

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
        check_page(limit, offset)
        found = [
            s.info()
            for s in self._sessions.values()
            if (flow is None or s.flow == flow)
            and (status is None or s.status == status)
            and (principal is None or s.principal == principal)
            and (errors is None or bool(self._errors.get(s.id)) == errors)
        ]
        found.sort(key=lambda info: (-info.updated_at, info.id))
        return found[offset : offset + limit]

    async def live_sessions(self, flow: str, *, after: str = "", limit: int = 1000) -> list[LiveSession]:
        check_page(limit, 0)
        live = (s for s in self._sessions.values() if s.flow == flow and s.status in OPEN_STATUSES)
        page = heapq.nsmallest(limit, (s for s in live if s.id > after), key=lambda session: session.id)
        return [LiveSession(session.id, _without_messages(session)) for session in page]

    async def live_versions(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for session in self._sessions.values():
            if session.status in OPEN_STATUSES:
                key = (session.flow, session.flow_version)
                counts[key] = counts.get(key, 0) + 1
        return counts

    async def find_ids(self, prefix: str, limit: int = 10) -> list[str]:
        return sorted(id_ for id_ in self._sessions if id_.startswith(prefix))[:limit]

    async def transcript(self, session_id: str) -> list[Message]:
        return list(self._transcripts.get(session_id, ()))

    async def record_error(self, session_id: str, record: LogRecord) -> None:
        if not isinstance(record, LogRecord):
            raise TypeError(f"record_error() needs a LogRecord, not {type(record).__name__}")
        self._errors.setdefault(session_id, []).append(record)

    async def errors(self, session_id: str) -> list[LogRecord]:
        return list(self._errors.get(session_id, ()))

    async def record_timeline(
        self, session_id: str, turn: int, body: str, *, keep_turns: int | None = None
    ) -> None:
        if not isinstance(body, str):
            raise TypeError(f"record_timeline() needs JSON text, not {type(body).__name__}")
        kept = self._timelines.setdefault(session_id, [])
        if keep_turns is not None:
            kept[:] = [(number, text) for number, text in kept if number > turn - keep_turns]
        kept.append((turn, body))

    async def timelines(self, session_id: str, turn: int | None = None) -> list[str]:
        return [text for number, text in self._timelines.get(session_id, ()) if turn in (None, number)]

    async def close(self) -> None:
        """Nothing to release."""


def _without_messages(session: Session) -> Session:
    """A copy as a SQL store reads a session from its document alone: each namespace empty."""
    copied = session.copy()
    for namespace in copied.memory.values():
        namespace.messages = []
    return copied
