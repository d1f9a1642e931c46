"""The staff side of a handoff: the queue of sessions awaiting a human, taking one, replying in it
and handing it back. ``FlowEngine`` offers these as ``handoffs``, ``take``, ``reply_as_staff`` and
``hand_back``.

Only callers holding the staff visibility act here. Every change is one compare-and-swap save on
the session's revision: of two members of staff (or two server processes) acting on one session
at once, exactly one wins and the other is refused with ``HandoffConflict``, nothing saved. A
refusal leaves the stored session as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from picoflow._run.session_turn import may_access, store_call
from picoflow.context import Caller
from picoflow.engine._checks import check_text, optional_text
from picoflow.exceptions import (
    HandoffConflict,
    HandoffNotAllowed,
    HandoffNotFound,
    HandoffNotTaken,
    HandoffNotWaiting,
    HandoffTaken,
    InvalidInput,
    MessageTooLong,
    SessionConflict,
)
from picoflow.flow import FlowSpec
from picoflow.handoffs import HandoffTicket, QueuedHandoff
from picoflow.messages import Message
from picoflow.session import Session, SessionInfo
from picoflow.sessions.base import SessionStore

MAX_NOTE_CHARS = 2000


class DeskHost(Protocol):
    """What the staff desk reads from its engine."""

    store: SessionStore
    registry: Mapping[str, FlowSpec]
    clock: Callable[[], float]
    staff_visibility: str
    max_message_chars: int

    def session_lock(self, session_id: str) -> AbstractAsyncContextManager[None]: ...


class StaffDesk:
    """Staff actions on the sessions awaiting a human."""

    def __init__(self, host: DeskHost) -> None:
        self.host = host

    def check_staff(self, caller: Caller) -> None:
        """Refuse a caller without the staff visibility (``HandoffNotAllowed``, 403)."""
        wanted = self.host.staff_visibility
        if wanted not in caller.visibilities:
            raise HandoffNotAllowed(f"only callers with the {wanted!r} visibility may act on handoffs")

    async def queue(self, caller: Caller, flow: str | None, limit: int) -> list[QueuedHandoff]:
        """The sessions awaiting a human, oldest handoff first."""
        self.check_staff(caller)
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500", field="limit")
        found: list[QueuedHandoff] = []
        offset = 0
        store = self.host.store
        while True:
            async with store_call("listing sessions"):
                page = await store.list_sessions(status="awaiting_human", flow=flow, limit=100, offset=offset)
            for info in page:
                async with store_call("loading session", info.id):
                    session = await store.load(info.id)
                if session is not None and session.status == "awaiting_human" and session.handoff:
                    found.append(queued(session, session.handoff))
            if len(page) < 100:
                break
            offset += 100
        found.sort(key=lambda item: (item.since, item.session_id))
        return found[:limit]

    async def take(self, session_id: str, caller: Caller, force: bool) -> QueuedHandoff:
        """Assign the session to the caller; one taken by another is refused unless ``force``."""

        def change(session: Session, ticket: HandoffTicket) -> list[tuple[str, Message]]:
            if ticket.taken_by not in (None, caller.principal) and not force:
                raise HandoffTaken(
                    f"session {session_id} is taken by {ticket.taken_by}; take it with force to take it over",
                    session_id=session_id,
                )
            session.handoff = HandoffTicket(
                ticket.step,
                ticket.handoff_step,
                ticket.reason,
                ticket.summary,
                ticket.since,
                caller.principal,
                self.host.clock(),
            )
            return []

        session = await self._change(session_id, caller, change)
        assert session.handoff is not None
        return queued(session, session.handoff)

    async def reply(self, session_id: str, text: object, caller: Caller) -> Message:
        """Append a staff message (an assistant message the user sees, ``kind="staff"``, its
        ``author`` the caller) to the session taken by the caller."""
        self.check_staff(caller)  # before the input: who may not act learns nothing of its rules
        checked = self._text(text)
        written: list[Message] = []

        def change(session: Session, ticket: HandoffTicket) -> list[tuple[str, Message]]:
            self._check_taker(session_id, ticket, caller)
            namespace = self._namespace(session, ticket.handoff_step)
            held = session.namespace(namespace)  # a new namespace starts at this message
            seq = session.next_seq
            message = Message(
                "assistant",
                checked,
                step=ticket.handoff_step,
                kind="staff",
                seq=seq,
                at=time.time(),
                author=caller.principal,
            )
            held.messages.append(message)
            session.next_seq = seq + 1
            written.append(message)
            return [(namespace, message)]

        await self._change(session_id, caller, change)
        return written[0]

    async def hand_back(
        self, session_id: str, step: str | None, caller: Caller, note: str | None
    ) -> SessionInfo:
        """The conversation goes on in ``step`` (the step it was handed off from by default): status
        ``running``, the next message is answered by the model again. A ``note`` is given to that
        step's model with the user's next message. No step hooks run: staff moved the conversation,
        not a turn."""
        self.check_staff(caller)
        if step is not None and (not isinstance(step, str) or not step.strip()):
            raise InvalidInput("step must be the name of a step of the flow", field="step")
        checked_note = optional_text(note, "note", MAX_NOTE_CHARS)

        def change(session: Session, ticket: HandoffTicket) -> list[tuple[str, Message]]:
            self._check_taker(session_id, ticket, caller)
            spec = self.host.registry.get(session.flow)
            target = step.strip() if step is not None else ticket.step
            if step is None and target == ticket.handoff_step:  # the conversation started there
                if spec is None:
                    raise InvalidInput("name the step to hand the conversation back to", field="step")
                target = spec.start
            self._check_target(session, spec, target)
            session.status = "running"
            session.handoff = None
            session.states.pop(ticket.handoff_step, None)  # its reason was this handoff's
            session.current_step = target
            session.sequence.append(target)
            if not checked_note:
                return []
            namespace = spec.steps[target].namespace if spec is not None else target
            held = session.namespace(namespace)
            seq = session.next_seq
            message = Message(
                "user",
                f"A member of staff took this conversation over and handed it back: {checked_note}",
                step=target,
                kind="crossing",
                seq=seq,
                at=time.time(),
                author=caller.principal,
            )
            held.messages.append(message)
            session.next_seq = seq + 1
            return [(namespace, message)]

        session = await self._change(session_id, caller, change)
        return session.info()

    async def _change(
        self,
        session_id: str,
        caller: Caller,
        change: Callable[[Session, HandoffTicket], list[tuple[str, Message]]],
    ) -> Session:
        """Load the session awaiting a human, apply ``change`` to it and save it, compare-and-swap
        on the revision it was loaded at (``HandoffConflict`` when another change came first)."""
        self.check_staff(caller)
        store = self.host.store
        async with self.host.session_lock(session_id):
            async with store_call("loading session", session_id):
                session = await store.load(session_id)
            if session is None:
                raise HandoffNotFound(f"no session {session_id}", session_id=session_id)
            ticket = session.handoff
            if session.status != "awaiting_human" or ticket is None:
                raise HandoffNotWaiting(
                    f"session {session_id} is not awaiting a human (it is {session.status})",
                    session_id=session_id,
                )
            expected = session.revision
            appended = change(session, ticket)
            session.updated_at = time.time()
            try:
                async with store_call("saving session", session_id):
                    await store.save(session, expected_revision=expected, appended=appended)
            except SessionConflict as exc:
                raise HandoffConflict(
                    f"session {session_id} changed while this was done (another member of staff or a "
                    "message came first); nothing was saved",
                    session_id=session_id,
                ) from exc
            return session

    @staticmethod
    def _check_taker(session_id: str, ticket: HandoffTicket, caller: Caller) -> None:
        if ticket.taken_by is None:
            raise HandoffNotTaken(f"session {session_id} is not taken: take it first", session_id=session_id)
        if ticket.taken_by != caller.principal:
            raise HandoffTaken(f"session {session_id} is taken by {ticket.taken_by}", session_id=session_id)

    @staticmethod
    def _check_target(session: Session, spec: FlowSpec | None, target: str) -> None:
        if spec is None:
            if target not in session.sequence:
                raise InvalidInput(f"{target} is not a step this conversation was in", field="step")
            return
        found = spec.steps.get(target)
        if found is None:
            raise InvalidInput(f"{target} is not a step of flow {spec.name}", field="step")
        if found.is_terminal or found.cls.is_handoff:
            raise InvalidInput(
                f"{target} cannot take the conversation back: it ends or hands off", field="step"
            )

    def _namespace(self, session: Session, handoff_step: str) -> str:
        """Where the Handoff step keeps its messages (found in the stored messages when the flow is
        not registered here, as for a command line given only the store)."""
        spec = self.host.registry.get(session.flow)
        if spec is not None and handoff_step in spec.steps:
            return spec.steps[handoff_step].namespace
        for name, held in session.memory.items():
            if any(message.step == handoff_step for message in held.messages):
                return name
        return handoff_step

    def _text(self, text: object) -> str:
        if not isinstance(text, str):
            raise InvalidInput(f"text must be text, not {type(text).__name__}", field="text")
        limit = self.host.max_message_chars
        if len(text) > limit:
            raise MessageTooLong(f"text is longer than {limit} characters", field="text")
        checked = text.strip()
        if not checked:
            raise InvalidInput("text is empty", field="text")
        check_text(checked, "text")
        return checked


def queued(session: Session, ticket: HandoffTicket) -> QueuedHandoff:
    return QueuedHandoff(
        session.id,
        session.flow,
        ticket.step,
        ticket.reason,
        ticket.summary,
        ticket.since,
        ticket.taken_by,
        session.principal,
    )


def may_read(session: Session, caller: Caller, staff: str) -> bool:
    """The session's owner reads its messages; staff too while it awaits a human."""
    if may_access(session, caller.principal):
        return True
    return session.status == "awaiting_human" and staff in caller.visibilities
