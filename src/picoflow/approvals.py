"""Approvals: a side effect the model proposed waits for a person's structured decision.

A tool marked ``@tool(approval=...)`` never runs on the model's say-so. When the model proposes
a call to it and the arguments validate, the turn ends with the call *pending*: an ``Approval``
bound to the session, the step, the tool, the SHA-256 of its canonical arguments and the flow's
version. ``FlowEngine.decide`` then approves or denies it, in any process; an approved call runs
exactly once, with the approval id as its idempotency key, and the turn goes on from its result.
No text in a message and no model output can approve anything: only a decision made through
``decide`` by a caller the approval admits.

These are plain values (no I/O); the session keeps every approval it ever asked for, decided or
not, as its audit trail.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from picoflow.messages import ToolCall

__all__ = ["Approval", "Approvers", "Decision", "PausedResponse", "args_sha256", "visible_to"]

Decision = Literal["approve", "deny"]
EXPIRED = "expired before anyone decided it"
"""The reason recorded with an approval whose time ran out."""
TOOL_CHANGED = "withdrawn: its tool changed in a new version of the flow"
"""The reason recorded with an approval withdrawn because a new version of the flow changed (or
removed) its tool (``picoflow.versions``)."""
STEP_CHANGED = "withdrawn: the step that proposed it changed in a new version of the flow"
"""The reason recorded with an approval withdrawn because a new version of the flow removed the
step that proposed it, or renamed it without keeping its memory (``picoflow.versions``)."""

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "withdrawn"]
"""``expired``: its time ran out before a decision; ``withdrawn``: a new message came first (the
conversation moved on). Neither ran anything, as ``denied``."""


@dataclass(frozen=True, slots=True)
class Approvers:
    """Who may decide: the session's own principal, and callers holding any of ``roles`` (the
    visibilities of ``Caller``, such as ``"staff"``)."""

    principal: bool = True
    roles: tuple[str, ...] = ()

    def admit(self, principal: str | None, visibilities: Iterable[str], owner: str | None) -> bool:
        """Whether a caller with ``principal`` and ``visibilities`` may decide for a session owned
        by ``owner`` (an anonymous session is its anonymous callers', as for its turns)."""
        if self.principal and principal == owner:
            return True
        return not set(self.roles).isdisjoint(visibilities)

    def describe(self) -> str:
        """Who may decide, in words."""
        who = ["the customer"] if self.principal else []
        who += [f"someone with the {role!r} role" for role in self.roles]
        return " or ".join(who) or "nobody"


@dataclass(frozen=True, slots=True)
class Approval:
    """One proposed call waiting for (or given) a decision."""

    id: str
    """What ``decide`` names, and the call's idempotency key when it runs."""
    tool: str
    args: Mapping[str, Any]
    """The validated arguments, as JSON values (what runs, if approved)."""
    summary: str
    """What will happen, in words written by code (never by the model)."""
    approvers: Approvers
    expires_at: float
    """Unix time after which the approval can only be refused."""
    step: str = ""
    call_id: str = ""
    args_sha256: str = ""
    """SHA-256 of the canonical JSON of ``args``: the decision is bound to exactly these."""
    tool_sha256: str = ""
    """SHA-256 of the tool's definition when the call was proposed."""
    flow_version: str = ""
    created_at: float = 0.0
    status: ApprovalStatus = "pending"
    decided_by: str | None = None
    """The principal of the caller who decided (None for one expired or withdrawn)."""
    decided_at: float | None = None
    reason: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """A person's label for each argument that has one: the title its tool gives the argument
    (``Field(title="Room type")``). A page or a terminal shows it for the argument's name, and an
    argument without one by its name made readable (``room_type``: "Room type")."""

    @property
    def pending(self) -> bool:
        return self.status == "pending"


@dataclass(frozen=True, slots=True)
class PausedResponse:
    """A model response of ``step`` (or a call its code proposed) whose calls wait for decisions:
    none of them runs until every approval it needs is decided, then they run in order, as one
    response."""

    step: str
    calls: tuple[ToolCall, ...]
    approvals: tuple[str, ...]
    """Ids of the approvals this response waits for."""
    visibilities: tuple[str, ...] = ()
    """The proposing caller's visibilities: the calls run with them, whoever decided."""
    resuming_since: float | None = None
    """When a process took the decided response up to run it (a run that stopped half way is not
    taken up again: its calls may have had their effect)."""
    by_code: bool = False
    """The step's code proposed the calls (``call``), not its model: they run whether or not the
    model is offered their tool, and the user's words are not asked to bear out their arguments."""


def args_sha256(args: Mapping[str, Any]) -> str:
    """The SHA-256 of ``args`` as canonical JSON (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def visible_to(
    approvals: Iterable[Approval],
    principal: str | None,
    visibilities: Iterable[str],
    owner: str | None,
    now: float,
) -> list[Approval]:
    """The approvals a caller may see in a session owned by ``owner``: all of them in its own
    session, elsewhere those its roles may decide. Each as it stands at ``now``: a pending one past
    its time reads ``expired`` (it is recorded so with the session's next message)."""
    roles = set(visibilities)
    own = principal == owner
    shown = []
    for approval in approvals:
        if not (own or not roles.isdisjoint(approval.approvers.roles)):
            continue
        if approval.pending and now >= approval.expires_at:
            approval = dataclasses.replace(approval, status="expired", reason=EXPIRED)
        shown.append(approval)
    return shown
