"""Approvals as the engine offers them: a decision's input checked into a ``DecisionRequest``
(which the engine hands to its executor, as a turn), and the approvals a caller may see — those of
one session, and the queue of pending ones a supervisor may decide."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

from picoflow._run.jobs import DecisionRequest
from picoflow._run.session_turn import may_access, store_call
from picoflow.approvals import Approval, Decision, visible_to
from picoflow.context import Caller
from picoflow.engine._checks import check_session_id, optional_text
from picoflow.exceptions import InvalidInput
from picoflow.sessions.base import SessionStore

APPROVAL_ID = re.compile(r"^apr_[0-9a-f]{24}$")
MAX_REASON_CHARS = 2000
"""A decision's reason (told to the model when denying) is at most this long."""


class ApprovalsHost(Protocol):
    """What the approvals read from their engine."""

    store: SessionStore
    clock: Callable[[], float]


class Approvals:
    """The approvals of the sessions in the engine's store, as each caller may see them."""

    def __init__(self, host: ApprovalsHost) -> None:
        self.host = host

    def request(
        self, session_id: str, approval_id: str, decision: str, reason: str | None, caller: Caller
    ) -> DecisionRequest:
        """The decision, checked, taken now; ``InvalidInput`` naming what is malformed."""
        check_session_id(session_id)
        return DecisionRequest(
            session_id,
            check_approval_id(approval_id),
            check_decision(decision),
            optional_text(reason, "reason", MAX_REASON_CHARS),
            caller,
            self.host.clock(),
        )

    async def of_session(self, session_id: str, caller: Caller) -> list[Approval] | None:
        """The session's approvals the caller may see, as each stands now; None when the session
        is unknown or shows the caller none."""
        check_session_id(session_id)
        async with store_call("loading session", session_id):
            session = await self.host.store.load(session_id)
        if session is None:
            return None
        who, roles = caller.principal, caller.visibilities
        shown = visible_to(session.approvals, who, roles, session.principal, self.host.clock())
        if not shown and not may_access(session, who):
            return None
        return shown

    async def pending(self, caller: Caller, flow: str | None, limit: int) -> list[tuple[str, Approval]]:
        """(session id, approval) for every pending, unexpired approval the caller may decide,
        most recent session first."""
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500", field="limit")
        store = self.host.store
        who, roles = caller.principal, caller.visibilities
        found: list[tuple[str, Approval]] = []
        now = self.host.clock()
        offset = 0
        while len(found) < limit:
            async with store_call("listing sessions"):
                page = await store.list_sessions(
                    status="awaiting_approval", flow=flow, limit=100, offset=offset
                )
            for info in page:
                async with store_call("loading session", info.id):
                    session = await store.load(info.id)
                if session is None:
                    continue
                owner = session.principal
                found += [
                    (session.id, approval)
                    for approval in visible_to(session.approvals, who, roles, owner, now)
                    if approval.pending and approval.approvers.admit(who, roles, owner)
                ]
            if len(page) < 100:
                break
            offset += 100
        return found[:limit]


def check_approval_id(approval_id: object) -> str:
    if not isinstance(approval_id, str) or not APPROVAL_ID.match(approval_id):
        raise InvalidInput("approval id must be apr_ and 24 hexadecimal digits", field="approval_id")
    return approval_id


def check_decision(decision: object) -> Decision:
    if decision == "approve" or decision == "deny":
        return decision
    raise InvalidInput('decision must be "approve" or "deny"', field="decision")
