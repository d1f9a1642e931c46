"""Stored sessions as the engine offers them: created before any message, read (each read checked
against the caller's principal: the session, its transcript, files, error records and recorded
timelines), listed, found by a prefix of their id, and deleted."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from picoflow._run.session_turn import may_access, store_call
from picoflow.attachments import Attachment, AttachmentRef
from picoflow.context import ANY_PRINCIPAL, Caller, PrincipalFilter
from picoflow.engine._checks import MAX_OFFSET, check_session_id
from picoflow.engine._handoffs import may_read
from picoflow.exceptions import InvalidInput
from picoflow.flow import FlowSpec
from picoflow.messages import Message, with_outputs_marked
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus, new_session_id
from picoflow.sessions.base import SessionStore, TimelineStore
from picoflow.sessions.health import StoreHealth, store_check
from picoflow.timeline import SessionTimeline, TurnTimeline


class SessionsHost(Protocol):
    """What the stored sessions read from their engine."""

    store: SessionStore
    staff_visibility: str

    def session_lock(self, session_id: str) -> AbstractAsyncContextManager[None]: ...


class StoredSessions:
    """The sessions in the engine's store."""

    def __init__(self, host: SessionsHost) -> None:
        self.host = host

    async def create(self, spec: FlowSpec, caller: Caller, session_id: str | None) -> Session:
        if session_id is not None:
            check_session_id(session_id)
        session = Session(
            id=session_id or new_session_id(),
            flow=spec.name,
            current_step=spec.start,
            principal=caller.principal,
            flow_version=spec.version,
        )
        async with store_call("creating a session"):
            await self.host.store.save(session, expected_revision=None)
        return session.copy()

    async def get(self, session_id: str, principal: PrincipalFilter) -> Session | None:
        check_session_id(session_id)
        async with store_call("loading session"):
            session = await self.host.store.load(session_id)
        if session is None or not may_access(session, principal):
            return None
        return session

    async def transcript(self, session_id: str, principal: PrincipalFilter) -> list[Message] | None:
        if await self.get(session_id, principal) is None:
            return None
        async with store_call("reading a transcript"):
            stored = await self.host.store.transcript(session_id)
        return with_outputs_marked(stored)

    async def messages(
        self, session_id: str, after: int, caller: Caller
    ) -> tuple[Session, list[Message]] | None:
        """The session and the messages of it the user saw after ``after``: its owner reads
        them, and staff while it awaits a human."""
        check_session_id(session_id)
        if not -1 <= after <= MAX_OFFSET:
            raise InvalidInput(f"after must be between -1 and {MAX_OFFSET}", field="after")
        store = self.host.store
        async with store_call("loading session", session_id):
            session = await store.load(session_id)
        if session is None or not may_read(session, caller, self.host.staff_visibility):
            return None
        async with store_call("reading a transcript", session_id):
            stored = await store.transcript(session_id)
        shown = [m for m in with_outputs_marked(stored) if m.seq > after and m.is_shown]
        return session, shown

    async def files(self, session_id: str, principal: PrincipalFilter) -> list[AttachmentRef] | None:
        if await self.get(session_id, principal) is None:
            return None
        async with store_call("listing a session's files"):
            return await self.host.store.list_files(session_id)

    async def file(self, session_id: str, sha256: str, principal: PrincipalFilter) -> Attachment | None:
        refs = await self.files(session_id, principal)
        ref = next((ref for ref in refs or () if ref.sha256 == sha256), None)
        if ref is None:
            return None
        async with store_call("reading a session's file"):
            found = await self.host.store.load_files(session_id, [sha256])
        data = found.get(sha256)
        return None if data is None else Attachment(ref.name, ref.media_type, data)

    async def errors(self, session_id: str, principal: PrincipalFilter) -> list[LogRecord] | None:
        if principal is ANY_PRINCIPAL:
            check_session_id(session_id)
        elif await self.get(session_id, principal) is None:
            return None
        async with store_call("reading error records"):
            return await self.host.store.errors(session_id)

    async def timeline(
        self, session_id: str, principal: PrincipalFilter, turn: int | None
    ) -> SessionTimeline | None:
        session = await self.get(session_id, principal)
        if session is None:
            return None
        turns: list[TurnTimeline] = []
        store = self.host.store
        if isinstance(store, TimelineStore):
            async with store_call("reading timelines", session_id):
                texts = await store.timelines(session_id, turn)
            turns = [TurnTimeline.from_json(text) for text in texts]
        return SessionTimeline(session_id=session.id, flow=session.flow, turns=turns)

    async def list_sessions(
        self,
        principal: PrincipalFilter,
        flow: str | None,
        status: SessionStatus | None,
        limit: int,
        offset: int,
        errors: bool | None = None,
    ) -> list[SessionInfo]:
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500", field="limit")
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidInput(f"offset must be between 0 and {MAX_OFFSET}", field="offset")
        # Asked of the store only when wanted: a store written before the filter lists as it did.
        extra = {} if errors is None else {"errors": errors}
        async with store_call("listing sessions"):
            return await self.host.store.list_sessions(
                flow=flow,
                status=status,
                principal=None if principal is ANY_PRINCIPAL else principal,
                limit=limit,
                offset=offset,
                **extra,
            )

    async def find(self, id_or_prefix: str, limit: int) -> list[str]:
        check_session_id(id_or_prefix)
        async with store_call("finding sessions"):
            ids = await self.host.store.find_ids(id_or_prefix, limit=limit)
        # An exact id is its own prefix and sorts before every longer id that starts with it.
        return [id_or_prefix] if id_or_prefix in ids else ids

    async def health(self) -> StoreHealth | None:
        check = store_check(self.host.store)
        return None if check is None else await check.health()

    async def delete(self, session_id: str, principal: PrincipalFilter) -> bool:
        async with self.host.session_lock(session_id):
            if await self.get(session_id, principal) is None:
                return False
            async with store_call(f"deleting session {session_id}"):
                return await self.host.store.delete(session_id)
