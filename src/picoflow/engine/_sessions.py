"""Reading, finding and deleting stored sessions: the engine's services besides turns.

``FlowEngine`` inherits them; every read is checked against the caller's principal, and every
store failure comes out typed (``StoreError`` 503 for an outage, the store's own error as a 500).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from picoflow._run.session_turn import may_access, store_call
from picoflow.attachments import Attachment, AttachmentRef
from picoflow.context import ANY_PRINCIPAL, PrincipalFilter
from picoflow.exceptions import InvalidInput
from picoflow.messages import Message
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions.base import SessionStore
from picoflow.sessions.health import StoreHealth, store_check

if TYPE_CHECKING:
    from picoflow._run.session_turn import SessionTurns

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MAX_OFFSET = 1_000_000_000
"""Largest listing offset accepted: far beyond any real listing, well inside a 64-bit integer."""


class StoredSessions:
    """Session services over ``self.store``."""

    store: SessionStore
    _turns: SessionTurns

    async def get_session(self, session_id: str, *, principal: PrincipalFilter = None) -> Session | None:
        """The stored session, or None if unknown or owned by another principal (``ANY_PRINCIPAL``
        reads any session: for operators' tools, never for end users' requests).

        Raises ``InvalidInput`` for a malformed id and ``StoreError`` when the store fails."""
        check_session_id(session_id)
        async with store_call("loading session"):
            session = await self.store.load(session_id)
        if session is None or not may_access(session, principal):
            return None
        return session

    async def transcript(self, session_id: str, *, principal: PrincipalFilter = None) -> list[Message] | None:
        """Every message of the session in order (None if unknown or another principal's)."""
        if await self.get_session(session_id, principal=principal) is None:
            return None
        async with store_call("reading a transcript"):
            return await self.store.transcript(session_id)

    async def session_files(
        self, session_id: str, *, principal: PrincipalFilter = None
    ) -> list[AttachmentRef] | None:
        """The files users sent in the session, in the order first sent (None if unknown or another
        principal's). Each file once, under the name it was first sent with."""
        if await self.get_session(session_id, principal=principal) is None:
            return None
        async with store_call("listing a session's files"):
            return await self.store.list_files(session_id)

    async def session_file(
        self, session_id: str, sha256: str, *, principal: PrincipalFilter = None
    ) -> Attachment | None:
        """One file of the session by its SHA-256, with its bytes (None if the session is unknown
        or another principal's, or holds no such file)."""
        refs = await self.session_files(session_id, principal=principal)
        ref = next((ref for ref in refs or () if ref.sha256 == sha256), None)
        if ref is None:
            return None
        async with store_call("reading a session's file"):
            found = await self.store.load_files(session_id, [sha256])
        data = found.get(sha256)
        return None if data is None else Attachment(ref.name, ref.media_type, data)

    async def session_errors(
        self, session_id: str, *, principal: PrincipalFilter = None
    ) -> list[LogRecord] | None:
        """The error records filed with the session, oldest first (None if unknown or another's).

        With ``ANY_PRINCIPAL`` the records are read even when no session was ever saved under the
        id: a first turn that failed files its error under the id its session would have had."""
        if principal is ANY_PRINCIPAL:
            check_session_id(session_id)
        elif await self.get_session(session_id, principal=principal) is None:
            return None
        async with store_call("reading error records"):
            return await self.store.errors(session_id)

    async def list_sessions(
        self,
        *,
        principal: PrincipalFilter,
        flow: str | None = None,
        status: SessionStatus | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionInfo]:
        """The principal's sessions, most recent first (every principal's for ``ANY_PRINCIPAL``, and,
        as before, for None). Raises ``InvalidInput`` for a limit outside 1..500 or an offset
        outside 0..``MAX_OFFSET``, ``StoreError`` when the store fails."""
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500", field="limit")
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidInput(f"offset must be between 0 and {MAX_OFFSET}", field="offset")
        async with store_call("listing sessions"):
            return await self.store.list_sessions(
                flow=flow,
                status=status,
                principal=None if principal is ANY_PRINCIPAL else principal,
                limit=limit,
                offset=offset,
            )

    async def find_sessions(self, id_or_prefix: str, *, limit: int = 6) -> list[str]:
        """Ids of stored sessions equal to ``id_or_prefix`` or starting with it (at most ``limit``),
        the exact match alone when there is one: what a command line needs to accept short ids."""
        check_session_id(id_or_prefix)
        async with store_call("finding sessions"):
            ids = await self.store.find_ids(id_or_prefix, limit=limit)
        # An exact id is its own prefix and sorts before every longer id that starts with it.
        return [id_or_prefix] if id_or_prefix in ids else ids

    async def store_health(self) -> StoreHealth | None:
        """``ok`` or ``unavailable`` from a short, briefly cached ping of the store; None for stores
        that live in this process and need none (memory, SQLite)."""
        check = store_check(self.store)
        return None if check is None else await check.health()

    async def delete_session(self, session_id: str, *, principal: PrincipalFilter = None) -> bool:
        """Delete a session (waits for a turn in progress on it). False if it did not exist."""
        async with self._turns.session_lock(session_id):
            if await self.get_session(session_id, principal=principal) is None:
                return False
            async with store_call(f"deleting session {session_id}"):
                return await self.store.delete(session_id)


def check_session_id(session_id: str) -> None:
    """Refuse an id no store could hold, before any store is asked."""
    if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
        raise InvalidInput("session id must be 1-128 letters, digits, '-' or '_'", field="session_id")
