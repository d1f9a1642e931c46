"""Request and response bodies of the HTTP API, its errors, and the server's settings.

Request models ignore unknown fields on purpose: clients written for PicoFlow send extra fields,
and a field named like the caller's identity (``principal``, ``customer_id``) must never reach the
engine; the identity comes from authentication only.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from picoflow.approvals import Approval
from picoflow.attachments import Attachment, AttachmentRef
from picoflow.flow import FlowSpec
from picoflow.handoffs import QueuedHandoff
from picoflow.messages import Message
from picoflow.results import TurnResult
from picoflow.server.auth import Identity
from picoflow.server.errors import DEFAULT_RETRY_AFTER as DEFAULT_RETRY_AFTER
from picoflow.server.errors import ApiError as ApiError
from picoflow.server.errors import run_error as run_error
from picoflow.server.errors import turn_error as turn_error
from picoflow.server.render import render_reply
from picoflow.session import Session
from picoflow.usage import Usage

__all__ = [
    "ApiError",
    "ApprovalOut",
    "ApproversOut",
    "CallerOut",
    "DecisionRequest",
    "EndResponse",
    "ErrorBody",
    "ErrorDetail",
    "FieldProblem",
    "FlowOut",
    "HandBackRequest",
    "HandoffOut",
    "HealthResponse",
    "MessageOut",
    "MessagesOut",
    "PendingApprovalOut",
    "RunRequest",
    "RunResponse",
    "ServerSettings",
    "SessionOut",
    "SessionSummary",
    "StaffMessageRequest",
    "StepOut",
    "TakeRequest",
    "ToolCallOut",
    "TransitionOut",
    "TurnRequest",
    "TurnResponse",
    "UsageOut",
    "WarningOut",
    "run_error",
    "turn_error",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How the HTTP server behaves. Every field has a safe default for local development."""

    host: str = "127.0.0.1"
    """Address the server is bound to; open mode is allowed by default only on a loopback address."""
    api_keys: Mapping[str, Identity | str] = field(default_factory=dict)
    """API key -> principal (or ``Identity``). See ``picoflow.server.auth.load_api_keys``."""
    open_mode: bool | None = None
    """Serve requests without a key. ``None``: only when no keys are set and ``host`` is loopback."""
    open_principal: str | None = "local"
    """Principal of keyless requests in open mode (owns the sessions they create)."""
    inspect_visibility: str = "inspect"
    """The visibility (``Caller.visibilities``, from the API key) a caller needs to read its
    sessions' timelines (``GET /v1/sessions/{id}/timeline``); keyless callers in open mode may."""
    max_message_chars: int | None = None
    """Longest user message accepted (413 beyond). ``create_app`` makes it the engine's
    ``max_message_chars``, the one rule every caller of the engine meets; ``None`` keeps the engine's."""
    max_body_bytes: int = 1_048_576
    """Largest request body accepted (413 beyond)."""
    body_timeout: float | None = 30.0
    """Seconds a request's whole body may take to arrive (408 beyond); ``None``: no limit."""
    cors_origins: Sequence[str] | None = None
    """Origins allowed by CORS. ``None``: any origin when keys are required; in open mode only
    pages served from this machine, so a web site cannot drive a developer's local server."""
    allowed_hosts: Sequence[str] | None = None
    """Accepted ``Host`` headers. ``None``: loopback names in open mode on loopback (stops DNS
    rebinding), any host otherwise."""
    default_flow: str | None = None
    """Flow the chat page selects first; ``None`` picks the first registered flow."""
    ui: bool = True
    """Serve the chat page at ``/``."""
    close_engine: bool = False
    """Close the engine (store and model connections) when the application shuts down."""
    prepare_models: bool = True
    """Load the models the flows need (the embedded one) when the application starts, and read the
    default flow's first prompt; otherwise they load with the first turn. ``/readyz`` reports it."""
    sse_heartbeat: float = 15.0
    """Seconds between keep-alive comments on an event stream while a turn is working."""
    follow_idle: float = 25.0
    """Seconds a live timeline stream (``GET /v1/sessions/{id}/timeline/live``) stays open while no
    turn of its session runs; it then ends, and a client that still watches opens it again."""
    title: str = "picoflow"


# --- errors -------------------------------------------------------------------------------------------


class _Body(BaseModel):
    # Strict: a value is of the type the document states (``"stream": 0`` is no boolean).
    model_config = ConfigDict(extra="ignore", strict=True)


class FieldProblem(BaseModel):
    field: str
    """Where the problem is, e.g. ``body.message``."""
    problem: str
    """The rule that failed (never the submitted value)."""


class ErrorDetail(BaseModel):
    kind: str = Field(description="Stable code: session_not_found, session_conflict, model_unavailable, ...")
    message: str = Field(description="Text safe to show an end user.")
    retryable: bool = False
    retry_after: float | None = Field(None, description="Seconds to wait before retrying, when known.")
    fields: list[FieldProblem] = Field(default_factory=list)
    session_id: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- PicoFlow-compatible routes -------------------------------------------------------------------


class RunRequest(_Body):
    """``POST /ai/run`` as PicoFlow clients send it (the session id travels in ``CHAT_SESSION_ID``)."""

    flowName: str = Field(min_length=1, max_length=64)  # PicoFlow's wire name
    message: str | None = None
    config: dict[str, Any] | None = None


class RunResponse(BaseModel):
    success: bool
    completed: bool
    message: str
    session: str | None
    contentType: str = "text/plain"  # PicoFlow's wire name


class EndResponse(BaseModel):
    success: bool
    session: str | None


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    timestamp: str


# --- resource API -----------------------------------------------------------------------------------


BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
"""Base64 as ``base64.b64decode(..., validate=True)`` takes it: the standard alphabet, padded."""


def _decoded(value: object) -> object:
    """The bytes of base64 text; text that is not base64 is refused, never read leniently (a
    lenient decoder drops what is not of its alphabet and reads other bytes than were sent)."""
    if not isinstance(value, str):
        return value  # refused by the bytes type, with its own message
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not base64 (the standard alphabet, padded with =)") from None


Base64Data = Annotated[
    bytes,
    BeforeValidator(_decoded),
    WithJsonSchema({"type": "string", "contentEncoding": "base64", "pattern": BASE64_PATTERN}),
]


class FileIn(BaseModel):
    """A file in a JSON turn body, its bytes in base64."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("attachment", min_length=1, max_length=255, description="The file's name (a label).")
    media_type: str = Field(min_length=1, max_length=127, description="image/png, application/pdf, ...")
    data: Base64Data = Field(description="The file's bytes, base64-encoded (standard alphabet, padded).")

    def attachment(self) -> Attachment:
        return Attachment.from_bytes(self.data, self.media_type, self.name)


class AttachmentOut(BaseModel):
    """A file stored with a session."""

    name: str
    media_type: str
    size: int
    sha256: str
    url: str = Field(description="Where its owner reads its bytes.")

    @classmethod
    def from_ref(cls, ref: AttachmentRef, session_id: str) -> AttachmentOut:
        url = f"/v1/sessions/{session_id}/attachments/{ref.sha256}"
        return cls(name=ref.name, media_type=ref.media_type, size=ref.size, sha256=ref.sha256, url=url)


class TurnRequest(_Body):
    """One user message."""

    model_config = ConfigDict(
        extra="ignore", json_schema_extra={"examples": [{"message": "Hi, I need a hotel in Portland"}]}
    )

    message: str = Field(description="What the user said.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Per-request settings for the flow (RunContext.config; never stored).",
    )
    stream: bool = Field(
        False, description="Answer with Server-Sent Events (same as Accept: text/event-stream)."
    )
    attachments: list[FileIn] = Field(
        default_factory=list,
        description="Files sent with the message (or send multipart/form-data with 'attachments' parts).",
    )


class UsageOut(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    total_tokens: int = 0

    @classmethod
    def from_usage(cls, usage: Usage) -> UsageOut:
        # Read by pydantic-core from the attributes: no intermediate dict on the hot path.
        return cls.model_validate(usage, from_attributes=True)


class ApproversOut(BaseModel):
    """Who may decide an approval."""

    principal: bool = Field(description="The session's own principal (the customer) may decide.")
    roles: list[str] = Field(description="Callers holding any of these roles (visibilities) may decide.")
    description: str = Field(description="The same in words, e.g. \"someone with the 'staff' role\".")


class ApprovalOut(BaseModel):
    """A call the model proposed that waits for (or was given) a person's decision."""

    id: str = Field(description="What a decision names: POST /v1/sessions/{id}/approvals/{approval_id}.")
    tool: str
    args: dict[str, Any] = Field(description="The validated arguments: what runs if approved.")
    summary: str = Field(description="What will happen, in words written by the flow's code.")
    approvers: ApproversOut
    expires_at: float = Field(description="Unix time after which it can only be refused.")
    step: str
    call_id: str
    args_sha256: str
    tool_sha256: str
    flow_version: str
    created_at: float
    status: Literal["pending", "approved", "denied", "expired", "withdrawn"]
    decided_by: str | None = Field(description="The principal who decided (none when expired or withdrawn).")
    decided_at: float | None
    reason: str | None
    labels: dict[str, str] = Field(
        description="A person's label for each argument that has one (the title its tool gives it, such as "
        '"room_type": "Room type"); show an argument without one by its name made readable.',
    )

    @classmethod
    def from_approval(cls, approval: Approval) -> ApprovalOut:
        who = approval.approvers
        return cls(
            id=approval.id,
            tool=approval.tool,
            args=dict(approval.args),
            summary=approval.summary,
            approvers=ApproversOut(
                principal=who.principal, roles=list(who.roles), description=who.describe()
            ),
            expires_at=approval.expires_at,
            step=approval.step,
            call_id=approval.call_id,
            args_sha256=approval.args_sha256,
            tool_sha256=approval.tool_sha256,
            flow_version=approval.flow_version,
            created_at=approval.created_at,
            status=approval.status,
            decided_by=approval.decided_by,
            decided_at=approval.decided_at,
            reason=approval.reason,
            labels=dict(approval.labels),
        )


class PendingApprovalOut(BaseModel):
    """An approval waiting for the caller's decision, in the session it belongs to."""

    session_id: str
    approval: ApprovalOut


class DecisionRequest(BaseModel):
    """A decision on a pending approval. Unknown fields are refused: a decision is a structured
    act, and a misspelt ``reason`` silently dropped would deny without the reason meant."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"decision": "deny", "reason": "Refunds over $100 need a receipt."}]},
    )

    decision: Literal["approve", "deny"]
    reason: str | None = Field(
        None, description="Why (told to the model when denying); at most 2,000 characters."
    )
    stream: bool = Field(
        False, description="Answer with Server-Sent Events (same as Accept: text/event-stream)."
    )


class TurnResponse(BaseModel):
    session_id: str
    flow: str
    message: str
    content_type: str
    completed: bool
    step: str | None
    usage: UsageOut = Field(description="What this turn consumed.")
    warnings: list[str] = Field(default_factory=list)
    html: str | None = Field(None, description="The reply as safe HTML (with ?render=html).")
    pending: list[ApprovalOut] = Field(
        default_factory=list,
        description="Calls that wait for a decision: the turn ended with them (``message`` says so).",
    )
    awaiting_human: bool = Field(
        False,
        description="The conversation is with a person (handed off): the message went to staff, no model "
        "was called; staff replies come through GET /v1/sessions/{session_id}/messages.",
    )

    @classmethod
    def from_result(cls, result: TurnResult, flow: str, render: str | None) -> TurnResponse:
        return cls(
            session_id=result.session_id or "",
            flow=flow,
            message=result.message,
            content_type=result.content_type,
            completed=result.completed,
            step=result.step,
            usage=UsageOut.from_usage(result.usage),
            warnings=list(result.warnings),
            html=render_reply(result.message, result.content_type) if render == "html" else None,
            pending=[ApprovalOut.from_approval(approval) for approval in result.pending],
            awaiting_human=result.awaiting_human,
        )


class ToolCallOut(BaseModel):
    id: str
    name: str
    args: dict[str, Any] | str


class MessageOut(BaseModel):
    seq: int
    role: str
    content: str
    step: str | None
    kind: str | None = Field(
        None,
        description=(
            "Why the message is not a plain exchange between the user and the model: direct, crossing, "
            "forwarded, correction, nudge, summary, output (the model's structured answer, which "
            "code read; never sent to the user), staff (a person wrote it while the conversation "
            "was handed off), or call (a tool call the step's code proposed, not its model)."
        ),
    )
    shown: bool = Field(
        False,
        description=(
            "The user saw this message: what they typed, or a reply they were sent (a chat shows "
            "exactly these, in order)."
        ),
    )
    tool_calls: list[ToolCallOut] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    at: float = 0.0
    within: str | None = None
    """Set on the messages of a sub-step run (``run_step``): which run, such as ``"Hotels@4"``."""
    attachments: list[AttachmentOut] = Field(default_factory=list)
    html: str | None = None
    author: str | None = Field(
        None, description="For a message of kind staff: the member of staff who wrote it."
    )

    @classmethod
    def from_message(cls, message: Message, render: str | None, session_id: str = "") -> MessageOut:
        rendered = render == "html" and message.role == "assistant" and bool(message.content)
        return cls(
            seq=message.seq,
            role=message.role,
            content=message.content,
            step=message.step,
            kind=message.kind,
            shown=message.is_shown,
            tool_calls=[
                ToolCallOut(
                    id=call.id,
                    name=call.name,
                    args=dict(call.args) if isinstance(call.args, Mapping) else call.args,
                )
                for call in message.tool_calls
            ],
            tool_call_id=message.tool_call_id,
            name=message.name,
            is_error=message.is_error,
            at=message.at,
            within=message.within,
            attachments=[AttachmentOut.from_ref(ref, session_id) for ref in message.attachments],
            html=render_reply(message.content) if rendered else None,
            author=message.author,
        )


class WarningOut(BaseModel):
    code: str
    message: str
    level: str
    step: str | None
    turn: int | None
    at: float


class SessionOut(BaseModel):
    id: str
    flow: str
    status: str
    step: str
    sequence: list[str]
    turns: int
    revision: int
    created_at: float
    updated_at: float
    usage: UsageOut = Field(description="Everything the session has consumed so far.")
    models: dict[str, str] = Field(default_factory=dict, description="Model used by each step.")
    warnings: list[WarningOut] = Field(default_factory=list)
    transcript: list[MessageOut] | None = None
    attachments: list[AttachmentOut] | None = Field(
        None, description="The files sent in the session, each once (with the transcript)."
    )
    approvals: list[ApprovalOut] = Field(
        default_factory=list,
        description="Every approval the session asked for, oldest first, each as it stands now.",
    )

    @classmethod
    def from_session(
        cls,
        session: Session,
        transcript: list[Message] | None,
        render: str | None,
        files: list[AttachmentRef] | None = None,
        approvals: Sequence[Approval] = (),
    ) -> SessionOut:
        return cls(
            id=session.id,
            flow=session.flow,
            status=session.status,
            step=session.current_step,
            sequence=list(session.sequence),
            turns=session.turns,
            revision=session.revision,
            created_at=session.created_at,
            updated_at=session.updated_at,
            usage=UsageOut.from_usage(session.usage),
            models=dict(session.models),
            warnings=[WarningOut(**asdict(record)) for record in session.warnings],
            transcript=None
            if transcript is None
            else [MessageOut.from_message(m, render, session.id) for m in transcript],
            attachments=None if files is None else [AttachmentOut.from_ref(ref, session.id) for ref in files],
            approvals=[ApprovalOut.from_approval(approval) for approval in approvals],
        )


class CallerOut(BaseModel):
    """The caller as the server authenticated it (``GET /v1/me``)."""

    principal: str | None = Field(description="Whose sessions the caller reads and continues.")
    inspect: bool = Field(description="May read its sessions' timelines (the developer view).")
    staff: bool = Field(description="May take handed-off conversations and reply as staff.")
    roles: list[str] = Field(
        description="The caller's roles (visibilities): an approval naming one of them may be decided by it."
    )


class CancelOut(BaseModel):
    """A running job asked to stop (``DELETE /v1/sessions/{session_id}/turn``)."""

    session_id: str
    cancelled: Literal["turn", "decision"] = Field(
        description="What was running: a turn, or a decision on an approval with the turn it resumed."
    )


class SessionSummary(BaseModel):
    id: str
    flow: str
    status: str
    step: str
    turns: int
    created_at: float
    updated_at: float


class StepOut(BaseModel):
    name: str
    description: str
    kind: Literal["conversational", "logic", "terminal"]
    start: bool


class TransitionOut(BaseModel):
    source: str
    target: str
    via: str


class FlowOut(BaseModel):
    name: str
    description: str
    start: str
    terminate: str | None
    steps: list[StepOut]
    transitions: list[TransitionOut]
    sub_steps: list[TransitionOut] = Field(
        default_factory=list, description="Steps that run other steps as sub-steps (run_step), and via what."
    )
    diagram: str = Field(description="URL of the flow's SVG diagram.")

    @classmethod
    def from_spec(cls, spec: FlowSpec) -> FlowOut:
        return cls(
            name=spec.name,
            description=spec.description,
            start=spec.start,
            terminate=spec.terminate,
            steps=[
                StepOut(
                    name=step.name,
                    description=step.description,
                    kind="terminal" if step.is_terminal else "logic" if step.is_logic else "conversational",
                    start=step.name == spec.start,
                )
                for step in spec.steps.values()
            ],
            transitions=[
                TransitionOut(source=t.source, target=t.target, via=t.via) for t in spec.transitions
            ],
            sub_steps=[TransitionOut(source=t.source, target=t.target, via=t.via) for t in spec.sub_steps],
            diagram=f"/v1/flows/{spec.name}/diagram.svg",
        )


# --- handoffs ---------------------------------------------------------------------------------------------


class HandoffOut(BaseModel):
    """A session awaiting a human, as the staff queue shows it."""

    session_id: str
    flow: str
    step: str = Field(description="The step the user was in when the conversation was handed off.")
    reason: str | None = Field(description="Why, as the flow's code said it.")
    summary: str = Field(description="What to read first, written by the flow's code (never by a model).")
    since: float = Field(description="Unix time the session started waiting.")
    taken_by: str | None = Field(description="The member of staff who took it (none: nobody yet).")
    principal: str | None = Field(description="The user the session belongs to.")

    @classmethod
    def from_queued(cls, item: QueuedHandoff) -> HandoffOut:
        return cls(
            session_id=item.session_id,
            flow=item.flow,
            step=item.step,
            reason=item.reason,
            summary=item.summary,
            since=item.since,
            taken_by=item.taken_by,
            principal=item.principal,
        )


class TakeRequest(BaseModel):
    """Take a session awaiting a human (the body is optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    force: bool = Field(False, description="Take it over from the member of staff who took it.")


class StaffMessageRequest(BaseModel):
    """A message written by the member of staff who took the session."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"text": "Hi, I'm Ana. Let me look."}]}
    )

    text: str = Field(description="What the user reads, as sent by the caller.")


class HandBackRequest(BaseModel):
    """Give the conversation back to the flow."""

    model_config = ConfigDict(extra="forbid", strict=True)

    step: str | None = Field(
        None, description="The step it goes on in (by default the one it was handed off from)."
    )
    note: str | None = Field(
        None, description="Told to that step's model with the user's next message (never shown to the user)."
    )


class MessagesOut(BaseModel):
    """The messages the user saw after a point of the conversation, and where it stands."""

    session_id: str
    status: str
    step: str
    messages: list[MessageOut] = Field(description="Oldest first; each one the user saw (``shown``).")
