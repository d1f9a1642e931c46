"""The error tree, arranged by who must act.

* ``FlowDefinitionError`` — the flow's author, at build time (``FlowEngine(flows=...)``).
* ``RunError`` and its family — the operator or the caller, at run time. Each carries the
  session id and step it happened in, a stable ``kind`` for programs, and ``public_message``,
  text that is safe to show an end user (it never holds internals or submitted values).
* ``ToolError`` — raised *by a tool handler* to refuse a call the model can correct; it is not a
  failure of the turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar


class PicoflowError(Exception):
    """Base class of every error picoflow raises."""


class FlowDefinitionError(PicoflowError):
    """A flow, step or tool is defined wrongly. Raised when the flow is built, before any turn."""


class RunError(PicoflowError):
    """A turn could not complete. The session keeps its last committed state."""

    kind: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    """HTTP status of this failure: 4xx the caller must change the request, 502 the model
    misbehaved, 503 a dependency is down (retry later), 500 a bug."""
    retryable: ClassVar[bool] = False
    recorded: ClassVar[bool] = True
    """Whether the failure is filed in the session's error log (not for a request that never
    reached a session of the caller: an unknown session or flow, or refused input)."""
    keeps_session: ClassVar[bool] = True
    """Whether the result still names the session the caller asked for (not when there is none
    for the caller, or the input was refused before it was looked at)."""
    public_message: str = "The assistant could not complete this turn."
    retry_after: float | None = None
    """Seconds to wait before retrying, when the failing dependency said so."""

    def __init__(self, message: str, *, session_id: str | None = None, step: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.step = step

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.public_message

    @property
    def public_text(self) -> str:
        """What an end user may be told."""
        return self.public_message


class UsageLimitExceeded(RunError):
    """A per-turn budget (model calls, tool calls or tokens) ran out."""

    kind = "usage_limit"
    status = 422

    def __init__(self, limit: str, value: int, **where: str | None) -> None:
        super().__init__(f"turn exceeded its {limit} limit of {value}", **where)
        self.limit = limit
        self.value = value

    @property
    def public_text(self) -> str:
        return f"This request needed more work than one turn allows ({self.limit} limit of {self.value})."


class AttemptsExhausted(RunError):
    """Every attempt of a step produced a rejected, empty or malformed response."""

    kind = "attempts_exhausted"
    status = 502
    public_message = "The assistant could not produce an acceptable answer. Please rephrase or try again."


class ModelError(RunError):
    """The model provider is unavailable (network, timeouts, configuration): retry later."""

    kind = "model_unavailable"
    status = 503
    retryable = True
    public_message = "The language model is unavailable right now. Please try again shortly."


class ModelMisbehaved(ModelError):
    """The model answered, but not usably: it raised, sent garbage, or a reply over the size cap.

    Asking again later would meet the same model, so this is 502 and not retryable.
    """

    kind = "model_error"
    status = 502
    retryable = False
    public_message = "The language model gave an unusable answer. Please rephrase or try again."


class ModelHTTPError(ModelError):
    """The provider answered with an error status after every retry."""

    kind = "model_unavailable"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
        **where: str | None,
    ) -> None:
        super().__init__(message, **where)
        self.status_code = status_code
        self.retry_after = retry_after
        self.provider = provider


class ScriptExhausted(ModelError):
    """A ``ScriptedModel`` was asked for more responses than its script holds."""

    kind = "script_exhausted"
    status = 502  # the test's model misbehaved: no outage, nothing to retry
    retryable = False


class ContextWindowExceeded(RunError):
    """Even the smallest request a step can send (its prompt, tools, the user's latest message and
    what the turn added since, plus room for the answer) does not fit the model's context window.

    Older memory has already been dropped; what is left cannot be, so the model is not called. The
    stored session is unchanged, and a shorter message works.
    """

    kind = "context_window_exceeded"
    status = 413
    public_message = "That message is too long for the assistant to read. Please send a shorter one."


class ToolFailure(RunError):
    """A tool handler raised something other than ``ToolError``. The cause is chained, never shown."""

    kind = "tool_failed"


class HookFailure(RunError):
    """A step hook (prompt, on_enter, check_response, ...) raised."""

    kind = "hook_failed"


class SubStepFailed(RunError):
    """A sub-step run with ``run_step`` (or ``run_steps`` / ``batch``) failed; ``cause`` says why.

    The caller may catch it and carry on: the failed run left nothing behind (its messages, state
    and model choices are dropped). Uncaught, the turn fails as ``cause`` would have: a model
    outage inside a sub-step is still a retryable outage.
    """

    kind = "sub_step_failed"

    def __init__(self, message: str, *, cause: RunError, step: str | None = None) -> None:
        super().__init__(message, session_id=cause.session_id, step=step)
        self.cause = cause

    @property
    def root_cause(self) -> RunError:
        """The failure at the bottom of nested sub-steps."""
        cause = self.cause
        while isinstance(cause, SubStepFailed):
            cause = cause.cause
        return cause


class SubStepsFailed(SubStepFailed):
    """Some of the sub-steps of ``run_steps`` / ``batch`` failed; every other one finished.

    ``results`` holds, in the order asked, each answer or the ``SubStepFailed`` of that run, so the
    caller keeps what succeeded; ``answers`` is the same with None for a failure, and ``by_key`` maps
    the keys of a ``run_steps({...})`` mapping to those.
    """

    kind = "sub_steps_failed"

    def __init__(self, message: str, *, results: list[Any], keys: Sequence[Any] | None = None) -> None:
        failures = [result for result in results if isinstance(result, SubStepFailed)]
        super().__init__(message, cause=failures[0], step=failures[0].step)
        self.results = results
        self.keys = list(keys) if keys is not None else None

    @property
    def by_key(self) -> dict[Any, Any]:
        """For ``run_steps({...})``: each key's answer, None for a failure."""
        if self.keys is None:
            raise ValueError("by_key is for run_steps given a mapping; use answers")
        return dict(zip(self.keys, self.answers, strict=True))

    @property
    def failures(self) -> list[SubStepFailed]:
        return [result for result in self.results if isinstance(result, SubStepFailed)]

    @property
    def answers(self) -> list[Any]:
        return [None if isinstance(result, SubStepFailed) else result for result in self.results]


class ToolSourceUnavailable(RunError):
    """An MCP server a flow uses could not be started or did not list its tools; retry later."""

    kind = "tool_source_unavailable"
    status = 503
    retryable = True
    public_message = "A service the assistant needs is unavailable. Please try again later."


class FlowNotFound(RunError):
    kind = "flow_not_found"
    status = 404
    recorded = False
    public_message = "No such flow."


class SessionNotFound(RunError):
    kind = "session_not_found"
    status = 404
    recorded = False
    keeps_session = False
    public_message = "No such session."


class SessionConflict(RunError):
    """Another turn committed to this session first (compare-and-swap on the revision failed)."""

    kind = "session_conflict"
    status = 409
    retryable = True
    public_message = "This conversation was changed by another request. Please retry."


class StoreError(RunError):
    """The session store failed to load or save."""

    kind = "store_error"
    status = 503
    retryable = True
    public_message = "The conversation could not be saved. Please try again."


class StoreUnavailable(StoreError):
    """The store cannot be reached right now (its database is down): retry after ``retry_after``."""

    kind = "store_unavailable"
    public_message = "Conversations cannot be saved right now. Please try again shortly."

    def __init__(self, message: str, *, retry_after: float | None = None, **where: str | None) -> None:
        super().__init__(message, **where)
        self.retry_after = retry_after


class InvalidInput(RunError):
    """The caller's input was refused before the turn started (empty or oversized message, bad id)."""

    kind = "invalid_input"
    status = 422
    recorded = False
    keeps_session = False

    def __init__(self, message: str, *, field: str | None = None, **where: str | None) -> None:
        super().__init__(message, **where)
        self.field = field
        """The input that broke the rule (``message``, ``session_id``, ...), when there is one."""

    @property
    def public_text(self) -> str:
        return self.message


class MessageTooLong(InvalidInput):
    kind = "message_too_long"
    status = 413


class AttachmentRefused(InvalidInput):
    """A file of the turn is of a type not accepted, or its bytes contradict its declared type."""

    kind = "attachment_refused"
    status = 415

    def __init__(self, message: str, **where: str | None) -> None:
        super().__init__(message, field="attachments", **where)


class AttachmentTooLarge(InvalidInput):
    """A file, or the files of one turn together, are over the limits (or too many)."""

    kind = "attachment_too_large"
    status = 413

    def __init__(self, message: str, **where: str | None) -> None:
        super().__init__(message, field="attachments", **where)


class SessionCompleted(RunError):
    """The session has ended (completed or aborted); it is never resumed."""

    kind = "session_completed"
    status = 409
    public_message = "This conversation has ended. Start a new one."


class FlowMismatch(RunError):
    """The session belongs to another flow."""

    kind = "flow_mismatch"
    status = 409
    public_message = "This conversation belongs to another flow."


class MigrationFailed(FlowMismatch):
    """A session stored under another version of its flow cannot be brought to this one: the step
    it stands in is gone and neither ``Flow.renamed`` nor ``Flow.fallback`` says where it goes, or
    a step's ``migrate`` raised. Nothing is stored; ``picoflow sessions check`` lists such sessions
    before a deploy."""

    kind = "migration_failed"
    public_message = "This conversation cannot continue with the current version of the assistant."


class ApprovalRefused(RunError):
    """A decision on an approval was refused: nothing ran and nothing changed."""

    kind = "approval_refused"
    status = 409
    public_message = "This decision cannot be taken."

    @property
    def public_text(self) -> str:
        return self.message


class ApprovalNotFound(ApprovalRefused):
    """No such approval in a session the caller may decide in (never saying which)."""

    kind = "approval_not_found"
    status = 404
    recorded = False
    keeps_session = False


class ApprovalNotAllowed(ApprovalRefused):
    """The caller may see the approval but is not among those who may decide it."""

    kind = "approval_not_allowed"
    status = 403


class ApprovalDecided(ApprovalRefused):
    """The approval was decided already; a decision is taken once."""

    kind = "approval_decided"


class ApprovalExpired(ApprovalRefused):
    """The approval's time ran out before anyone decided it."""

    kind = "approval_expired"


class ApprovalStale(ApprovalRefused):
    """What the approval was given for changed: the flow, the tool, the arguments, or the session
    moved on."""

    kind = "approval_stale"


class ApprovalConflict(ApprovalRefused):
    """Another decision or message changed the session while this decision was taken."""

    kind = "approval_conflict"
    recorded = False


class ApprovalPending(RunError):
    """A new message came while a process carries out a decision on this session's calls."""

    kind = "approval_pending"
    status = 409
    retryable = True
    recorded = False
    public_message = "An approved action is being carried out. Please send your message again in a moment."


class TurnCancelled(RunError):
    """The turn (or the decision and the turn it resumed) was cancelled while it ran
    (``FlowEngine.cancel``, ``DELETE /v1/sessions/{id}/turn``, a protocol's own cancel): it stopped
    before its commit, so nothing of it was stored, and no tool started after the cancel. The
    session keeps its last committed state; the next message is a turn like any other."""

    kind = "turn_cancelled"
    status = 409
    recorded = False  # the caller's choice, not a failure: no error record, no "session with errors"
    public_message = "This turn was cancelled; nothing of it was saved."


class TurnNotRunning(RunError):
    """``FlowEngine.cancel`` found no turn or decision of the session running where its executor
    reaches: none was running, or it ended (or started its commit) before the cancel reached it.
    With the local executor, the process running a turn can cancel it, and so can every process
    sharing its ``PostgresStore`` (not a first turn's, whose session is not stored yet); with
    ``TemporalExecutor``, any process with a client to the Temporal service."""

    kind = "turn_not_running"
    status = 409
    recorded = False
    public_message = "No turn of this conversation is running."


class HandoffRefused(RunError):
    """A staff action on a handed-off session (take, reply, hand back) was refused: nothing changed."""

    kind = "handoff_refused"
    status = 409
    recorded = False
    public_message = "This action on the handed-off conversation cannot be taken."

    @property
    def public_text(self) -> str:
        return self.message


class HandoffNotAllowed(HandoffRefused):
    """The caller lacks the staff visibility (``FlowEngine.staff_visibility``)."""

    kind = "handoff_not_allowed"
    status = 403
    keeps_session = False


class HandoffNotFound(HandoffRefused):
    """No such session."""

    kind = "handoff_not_found"
    status = 404
    keeps_session = False


class HandoffNotWaiting(HandoffRefused):
    """The session does not await a human (never handed off, or handed back already)."""

    kind = "handoff_not_waiting"


class HandoffTaken(HandoffRefused):
    """Another member of staff has taken the session (take it with ``force`` to take it over)."""

    kind = "handoff_taken"


class HandoffNotTaken(HandoffRefused):
    """Nobody has taken the session yet: take it before replying or handing it back."""

    kind = "handoff_not_taken"


class HandoffConflict(HandoffRefused):
    """Another staff action or a message changed the session at the same moment; nothing was saved."""

    kind = "handoff_conflict"
    retryable = True


class ToolError(Exception):
    """Raise inside a tool handler to refuse the call with a message the model can act on.

    The message goes to the model as the tool result; the step stays where it is.
    """

    warning: tuple[str, str] | None = None
    """A session warning (code, text) recorded with the refusal: picoflow's MCP tools set it when
    the server failed, so operators see what the model was only told in general terms."""

    def __init__(self, message: str, *, warning: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.warning = warning


class ModelConfigurationError(ModelHTTPError):
    """The provider refused picoflow's settings: a wrong or missing API key, an unknown model or
    endpoint. Asking again cannot help; the operator must fix what the message names."""

    kind = "model_configuration"
    retryable = False
    public_message = "The language model is not set up correctly. Please tell the operator."
