"""The session document: the durable record of one conversation, as plain values (no I/O).

A session is the durable record of one conversation with one flow. Memory is kept per namespace
as the *live* suffix of that namespace's messages; every message ever appended also stays in the
session's transcript (erasing or compacting memory never deletes history). Messages carry a
session-wide ``seq``, so a store can persist them append-only: a turn hands the store exactly the
messages it appended.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from picoflow.approvals import Approval, PausedResponse
from picoflow.handoffs import HandoffTicket
from picoflow.messages import Message
from picoflow.usage import Usage

_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
"""The UUID variant digit (``10xx`` in binary) for a random hex digit, keeping its two low bits."""


def new_session_id() -> str:
    """A random (version 4) UUID in its usual text form, made without ``uuid.UUID``'s overhead:
    a new session costs one id, and ids must be unguessable, so its 122 random bits come from
    ``os.urandom``; the version and variant digits are written over the hex text."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


def copy_json(value: Any) -> Any:
    """Copy nested dicts and lists (JSON values); immutable leaves are shared. Much faster than deepcopy."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value


SessionStatus = Literal["running", "awaiting_approval", "awaiting_human", "completed", "aborted"]
"""``awaiting_approval``: calls the model proposed wait for a decision (a new message withdraws
them); ``awaiting_human``: the conversation was handed off (``Handoff``), messages go to staff and
no model is called until staff hand it back."""

OPEN_STATUSES: tuple[SessionStatus, ...] = ("running", "awaiting_approval", "awaiting_human")
"""The statuses of a session that takes new messages."""

#: Bumped when the document's shape changes incompatibly; ``Flow.on_restore_session`` sees old ones.
DOCUMENT_VERSION = 1

MAX_MIGRATIONS = 20
"""Migrations a session keeps in its record (the latest ones): one per deploy that changed its flow."""

MigrationAction = Literal[
    "renamed",
    "fell_back",
    "state_migrated",
    "state_dropped",
    "field_dropped",
    "approval_carried",
    "approval_withdrawn",
    "handoff_ended",
]
"""What a migration did to a session loaded under a new version of its flow (``picoflow.versions``):

* ``renamed``: a step of ``Flow.renamed`` took over an old step's state (and the session, if it
  stood there);
* ``fell_back``: the step the session stood in is gone, unmapped: it went to ``Flow.fallback``;
* ``state_migrated``: the step's ``migrate(state, from_version)`` changed its state;
* ``state_dropped``: the state of a step that is gone, unmapped, was dropped;
* ``field_dropped``: a form's field no longer validates under the new slots model: it is asked again;
* ``approval_carried``: a pending approval whose tool is unchanged stays pending under the new version;
* ``approval_withdrawn``: a pending approval whose tool changed (or is gone) was withdrawn;
* ``handoff_ended``: the Handoff step the session waited in is gone: it no longer awaits a human."""


@dataclass(frozen=True, slots=True)
class MigrationChange:
    """One thing a migration did, in words for the flow's author (never a user's value)."""

    action: MigrationAction
    step: str
    """The step it concerns (under its new name when it was renamed)."""
    detail: str = ""
    """What exactly: the old name, a field and the rule it broke, the keys a state changed, an
    approval's tool."""
    approval: str | None = None
    """The id of the approval carried or withdrawn."""


@dataclass(frozen=True, slots=True)
class SessionMigration:
    """A session stored under one version of its flow, brought to another when it was loaded."""

    from_version: str
    """The version the session last ran on ("": stored before versions were recorded)."""
    to_version: str
    turn: int
    """The turn that migrated it (the first to run on ``to_version``)."""
    at: float
    changes: tuple[MigrationChange, ...] = ()

    @property
    def fell_back(self) -> MigrationChange | None:
        """The change that sent the session to the flow's fallback step, if there was one."""
        return next((change for change in self.changes if change.action == "fell_back"), None)


@dataclass(slots=True)
class Namespace:
    """The live memory of one namespace."""

    messages: list[Message] = field(default_factory=list)
    start: int = 0
    """Smallest ``seq`` still live: erasing or compacting moves it forward."""
    summary: str | None = None
    """Summary of the messages compaction removed from the live window."""


@dataclass(slots=True)
class LogRecord:
    """A warning or error noted during a turn."""

    code: str
    message: str
    level: Literal["warning", "error"] = "warning"
    step: str | None = None
    turn: int | None = None
    at: float = field(default_factory=time.time)


@dataclass(slots=True)
class Session:
    """The durable state of one conversation."""

    id: str
    flow: str
    current_step: str
    revision: int = 0
    """0 until first saved; every committed turn adds one."""
    status: SessionStatus = "running"
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-step durable state (JSON values only)."""
    memory: dict[str, Namespace] = field(default_factory=dict)
    sequence: list[str] = field(default_factory=list)
    """Steps entered, in order (the start step first)."""
    usage: Usage = field(default_factory=Usage)
    warnings: list[LogRecord] = field(default_factory=list)
    principal: str | None = None
    """Who owns the session; only that caller may continue or read it."""
    prompts: dict[str, str] = field(default_factory=dict)
    """Prompt overrides set by ``with_prompt``, per step, until the conversation leaves that step."""
    models: dict[str, str] = field(default_factory=dict)
    """Effective ``provider:name`` model used by each step that called one."""
    turns: int = 0
    next_seq: int = 0
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    version: int = DOCUMENT_VERSION
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form, JSON-serialisable data for the application (never shown to the model)."""
    files_sent: int = 0
    """Files users sent with their messages so far (their bytes are in the store, by hash)."""
    approvals: tuple[Approval, ...] = ()
    """Every approval the session asked for, decided or not: its audit trail (immutable values:
    a change replaces the tuple)."""
    paused: PausedResponse | None = None
    """The model response whose calls wait for decisions (status ``awaiting_approval``)."""
    handoff: HandoffTicket | None = None
    """Why and since when the session waits for a person, and who took it (status
    ``awaiting_human``); None otherwise."""
    interrupted: list[str] = field(default_factory=list)
    """The steps digressions interrupted, the innermost last: each ``Step.resume`` goes back to
    the last one (``picoflow.repairs``)."""
    flow_version: str = ""
    """The version of the flow (``Flow.version``) the session's last turn ran on; "" for a session
    stored before versions were recorded. Loaded under another version, it is migrated first."""
    migrations: tuple[SessionMigration, ...] = ()
    """The migrations the session went through, oldest first (the latest ``MAX_MIGRATIONS``):
    with ``flow_version``, the version every turn ran on."""

    def namespace(self, name: str) -> Namespace:
        ns = self.memory.get(name)
        if ns is None:
            ns = self.memory[name] = Namespace(start=self.next_seq)
        return ns

    def state_of(self, step: str) -> dict[str, Any]:
        state = self.states.get(step)
        if state is None:
            state = self.states[step] = {}
        return state

    def copy(self) -> Session:
        """An independent copy: mutating it never touches this one. Messages are immutable and shared."""
        # Positional arguments in field order: a store copies the session on every save and load.
        return Session(
            self.id,
            self.flow,
            self.current_step,
            self.revision,
            self.status,
            {step: copy_json(state) if state else {} for step, state in self.states.items()},
            {name: Namespace(ns.messages.copy(), ns.start, ns.summary) for name, ns in self.memory.items()},
            self.sequence.copy(),
            self.usage.copy(),
            self.warnings.copy(),
            self.principal,
            self.prompts.copy(),
            self.models.copy(),
            self.turns,
            self.next_seq,
            self.created_at,
            self.updated_at,
            self.version,
            copy_json(self.metadata) if self.metadata else {},
            self.files_sent,
            self.approvals,
            self.paused,
            self.handoff,
            self.interrupted.copy(),
            self.flow_version,
            self.migrations,
        )

    def info(self) -> SessionInfo:
        return SessionInfo(
            id=self.id,
            flow=self.flow,
            status=self.status,
            current_step=self.current_step,
            principal=self.principal,
            revision=self.revision,
            turns=self.turns,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def version_of_turn(self, turn: int) -> str:
        """The version of the flow turn ``turn`` (from 1) ran on, as far as the session recorded it
        ("" when it ran before versions were recorded)."""
        version = self.migrations[0].from_version if self.migrations else self.flow_version
        for migration in self.migrations:
            if migration.turn <= turn:
                version = migration.to_version
        return version


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One line of a session listing."""

    id: str
    flow: str
    status: SessionStatus
    current_step: str
    principal: str | None
    revision: int
    turns: int
    created_at: float
    updated_at: float


SESSION_ADAPTER: TypeAdapter[Session] = TypeAdapter(Session)
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
LOG_ADAPTER: TypeAdapter[LogRecord] = TypeAdapter(LogRecord)


def session_to_json(session: Session) -> bytes:
    return SESSION_ADAPTER.dump_json(session)


def session_from_json(data: bytes | str) -> Session:
    return SESSION_ADAPTER.validate_json(data)
