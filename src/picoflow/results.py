"""What a turn gives back: ``TurnResult``, with ``TurnError`` when it failed; what a cancel did:
``Cancelled`` (values, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from picoflow._frozen import quick_init
from picoflow.approvals import Approval
from picoflow.exceptions import RunError
from picoflow.usage import Usage

__all__ = ["Cancelled", "TurnError", "TurnFinished", "TurnResult"]


@quick_init
@dataclass(frozen=True, slots=True)
class TurnError:
    """Why a turn failed, in words safe for an end user, plus what a program needs to react.

    ``error_class`` is the class of the failure; ``kind``, ``status`` and ``retryable`` come from it,
    so a program reacts with ``result.error.is_a(SessionNotFound)`` rather than by comparing strings.
    """

    error_class: type[RunError]
    message: str
    """Text safe to show an end user."""
    retry_after: float | None = None
    """Seconds to wait before retrying, when the failing dependency said so."""
    reference: str | None = None
    """Session id the error record was filed under (for a failed first turn, the session kept as it
    was before the turn; or, when even that could not be stored, the id it would have had)."""
    field: str | None = None
    """For refused input: which input broke the rule (``message``, ``session_id``)."""

    @property
    def kind(self) -> str:
        """Stable code: ``usage_limit``, ``model_unavailable``, ``session_conflict``, ..."""
        return self.error_class.kind

    @property
    def status(self) -> int:
        """HTTP status of the failure."""
        return self.error_class.status

    @property
    def retryable(self) -> bool:
        return self.error_class.retryable

    def is_a(self, *types: type[RunError]) -> bool:
        return issubclass(self.error_class, types)


@quick_init
@dataclass(frozen=True, slots=True)
class TurnResult:
    """The outcome of one turn."""

    message: str
    """The reply to show (or the public error text when the turn failed)."""
    session_id: str | None
    """None only when the first turn of a new session failed (nothing was stored)."""
    completed: bool
    content_type: str = "text/plain"
    step: str | None = None
    """Step the conversation is in after the turn."""
    usage: Usage = field(default_factory=Usage)
    error: TurnError | None = None
    warnings: tuple[str, ...] = ()
    flow: str | None = None
    """The flow of the session (None when the turn failed before the flow was known)."""
    pending: tuple[Approval, ...] = ()
    """Calls the model proposed that wait for a decision (``FlowEngine.decide``); the turn ended
    with them, and ``message`` says what they will do."""
    awaiting_human: bool = False
    """The session waits for a person (a ``Handoff``): the user's message went to staff and no model
    was called; ``message`` is what the user is told meanwhile (often nothing: staff answer)."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """Last event of ``run_stream``: the turn's result."""

    result: TurnResult


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What ``FlowEngine.cancel`` did: the job running in the session was asked to stop. The job's
    own caller gets its result, a ``TurnCancelled`` failure (a stream ends with it); the session
    keeps its last committed state."""

    session_id: str
    job: Literal["turn", "decision"]
    """What was running: a turn, or a decision (with the turn it resumed)."""
