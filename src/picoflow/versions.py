"""Flow versions: what a session stored under one version of its flow becomes under another.

A flow's version (``Flow.version``) is the one it declares, else a digest of its structure. Every
session records the version its last turn ran on (``Session.flow_version``). When a turn or a
decision loads a session stored under another version, ``migrate_session`` brings it to this one
before anything runs, on the job's private copy, so the migration is committed with the job or
not at all:

1. a step that was renamed (``Flow.renamed``) carries on its old name's state, and the session
   if it stood there;
2. a session standing in a step that is gone, unmapped, goes to ``Flow.fallback`` (the turn then
   tells the user so); without a fallback it cannot continue (``MigrationFailed``), and the state
   of a step that is gone is dropped;
3. each step's ``migrate(state, from_version)`` converts its stored state;
4. a form (``SlotStep``) keeps the fields that still validate under its new slots model and asks
   again for the others;
5. a pending approval stays pending when its tool is unchanged, and is withdrawn when its tool
   changed or is gone (a decision on it is then refused, and the next message tells the model).

What it did is recorded (``SessionMigration``: in the session, in the turn's events and its
timeline). ``picoflow sessions check`` runs the same function on sessions it never saves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from picoflow.approvals import STEP_CHANGED, TOOL_CHANGED
from picoflow.exceptions import MigrationFailed
from picoflow.flow import FlowSpec, tool_sha256
from picoflow.session import (
    MAX_MIGRATIONS,
    MigrationAction,
    MigrationChange,
    Session,
    SessionMigration,
    copy_json,
)
from picoflow.slots.step import SlotStep

__all__ = ["CheckGroup", "CheckVerdict", "FlowCheck", "SessionCheck", "check_session", "migrate_session"]

_ABSENT = object()

SUB_STEP_STATE = ":"
"""A state key holding it (``flow:step``) is a step of another flow run as a sub-step: that flow's
versions are its own, so the state is left as it is."""


def migrate_session(session: Session, spec: FlowSpec, now: float) -> SessionMigration | None:
    """Bring ``session`` (of ``spec``'s flow) to ``spec``'s version, in place, and return what was
    done; None when it ran on this version already. ``now`` dates the record and the approvals
    withdrawn. Raises ``MigrationFailed`` when the session cannot continue under this version;
    ``session`` is then half changed: pass a copy that is thrown away on failure (a job's is)."""
    if session.flow_version == spec.version:
        if session.current_step not in spec.steps:
            raise MigrationFailed(
                f"the session stands in step {session.current_step!r}, which flow {spec.name} "
                f"no longer has, yet it was stored under the same version {spec.version!r}: a declared "
                "Flow.version must change when the flow's steps do",
                session_id=session.id,
                step=session.current_step,
            )
        return None
    return _Migration(session, spec, now).run()


class _Migration:
    """One session's migration: the names it finds mapped as it goes, and what it changed."""

    def __init__(self, session: Session, spec: FlowSpec, now: float) -> None:
        self.session = session
        self.spec = spec
        self.now = now
        self.changes: list[MigrationChange] = []
        self.renames: dict[str, str] = {}
        """The old names this session used, with the step that carries each on."""

    def place(self, name: str) -> str | None:
        """Where step ``name`` of the stored session is in this version (None: it is gone)."""
        if name in self.spec.steps:
            return name
        new = self.spec.renamed.get(name)
        if new is not None:
            self.renames.setdefault(name, new)
        return new

    def note(self, action: MigrationAction, step: str, detail: str = "", approval: str | None = None) -> None:
        self.changes.append(MigrationChange(action, step, detail, approval))

    def run(self) -> SessionMigration:
        session, spec = self.session, self.spec
        from_version = session.flow_version
        here = self._where_it_stands()
        states = self._states(from_version)
        session.sequence = self._placed(session.sequence)
        session.interrupted = self._placed(session.interrupted)
        session.prompts = self._placed_keys(session.prompts)
        session.models = self._placed_keys(session.models)
        self._handoff()
        self._approvals()
        session.current_step = here
        session.states = states
        session.flow_version = spec.version
        renamed = [MigrationChange("renamed", new, f"from {old}") for old, new in self.renames.items()]
        record = SessionMigration(
            from_version, spec.version, session.turns + 1, self.now, (*renamed, *self.changes)
        )
        session.migrations = (*session.migrations, record)[-MAX_MIGRATIONS:]
        return record

    def _where_it_stands(self) -> str:
        stood = self.session.current_step
        here = self.place(stood)
        if here is not None:
            return here
        fallback = self.spec.fallback
        if fallback is None:
            raise MigrationFailed(
                f"the session stands in step {stood!r}, which flow {self.spec.name} no longer "
                "has: map it to its new step in Flow.renamed, or declare Flow.fallback",
                session_id=self.session.id,
                step=stood,
            )
        self.note("fell_back", fallback, f"from {stood}")
        return fallback

    def _states(self, from_version: str) -> dict[str, dict[str, Any]]:
        """Each step's state under its name in this version, migrated; the states of steps that are
        gone dropped. A step's own name keeps its state before an old name mapped onto it."""
        stored = self.session.states
        states: dict[str, dict[str, Any]] = {}
        for key, state in stored.items():
            if SUB_STEP_STATE in key or key in self.spec.steps:
                states[key] = state
        for key, state in stored.items():
            if SUB_STEP_STATE in key or key in self.spec.steps:
                continue
            target = self.place(key)
            if target is None:
                if state:
                    self.note("state_dropped", key, "the step is gone")
            elif states.get(target):
                if state:
                    self.note(
                        "state_dropped", target, f"the state of {key}: {target} holds a state of its own"
                    )
            else:
                states[target] = state
        for name, state in list(states.items()):
            if SUB_STEP_STATE not in name and state:
                states[name] = self._migrated(name, state, from_version)
        return states

    def _migrated(self, name: str, state: dict[str, Any], from_version: str) -> dict[str, Any]:
        """The state as step ``name``'s ``migrate`` and, for a form, its slots model leave it."""
        step = self.spec.steps[name].cls
        where = {"session_id": self.session.id, "step": name}
        try:
            migrated = step.migrate(copy_json(state), from_version)
        except Exception as exc:
            raise MigrationFailed(
                f"migrate() of step {name} raised {type(exc).__name__}: {exc}", **where
            ) from exc
        if not isinstance(migrated, dict):
            raise MigrationFailed(
                f"migrate() of step {name} must return the state as a dict, not {type(migrated).__name__}",
                **where,
            )
        try:
            migrated = to_jsonable_python(migrated)
        except PydanticSerializationError as exc:
            raise MigrationFailed(
                f"migrate() of step {name} returned a state that is not JSON: {exc}", **where
            ) from exc
        if migrated != state:
            keys = sorted(
                key for key in {*state, *migrated} if state.get(key, _ABSENT) != migrated.get(key, _ABSENT)
            )
            self.note("state_migrated", name, ", ".join(keys))
        if issubclass(step, SlotStep):
            try:
                migrated, dropped = step.revalidated_state(migrated)
            except ValidationError as exc:
                raise MigrationFailed(
                    f"the form stored in step {name} is not readable ({exc.error_count()} problem(s))",
                    **where,
                ) from exc
            for field, why in dropped.items():
                self.note("field_dropped", name, why if why.startswith(f"{field}:") else f"{field}: {why}")
        return migrated

    def _placed(self, names: list[str]) -> list[str]:
        placed = (self.place(name) for name in names)
        return [name for name in placed if name is not None]

    def _placed_keys(self, values: Mapping[str, str]) -> dict[str, str]:
        placed = ((self.place(name), value) for name, value in values.items())
        return {name: value for name, value in placed if name is not None}

    def _handoff(self) -> None:
        """A session awaiting a human: the Handoff step it waits in, and the step it goes back to."""
        session = self.session
        ticket = session.handoff
        if ticket is None:
            return
        waiting_in = self.place(ticket.handoff_step)
        if waiting_in is None:
            session.handoff = None
            if session.status == "awaiting_human":
                session.status = "running"
            self.note("handoff_ended", ticket.handoff_step, "the Handoff step it waited in is gone")
            return
        back = self.place(ticket.step) or self.spec.fallback
        if back is None:
            raise MigrationFailed(
                f"the session goes back to step {ticket.step!r} after its handoff, which flow "
                f"{self.spec.name} no longer has: map it in Flow.renamed, or declare Flow.fallback",
                session_id=session.id,
                step=ticket.step,
            )
        session.handoff = dataclasses.replace(ticket, step=back, handoff_step=waiting_in)

    def _approvals(self) -> None:
        """The response waiting for decisions: its pending approvals carried where their tool is
        the same, withdrawn where it changed or is gone. A response whose step is gone, or renamed
        without keeping its memory (``Step.memory``), cannot be answered where its calls are: it no
        longer waits, and each of its pending approvals is withdrawn."""
        session = self.session
        paused = session.paused
        if paused is None:
            return
        moved_to = self.place(paused.step)
        step = self.spec.steps.get(moved_to) if moved_to is not None else None
        answerable = step is not None and (moved_to == paused.step or step.namespace in session.memory)
        tools = step.tools if answerable and step is not None else {}
        where = moved_to or paused.step
        trail = []
        for approval in session.approvals:
            if approval.id in paused.approvals and approval.pending:
                tool = tools.get(approval.tool)
                if tool is not None and tool_sha256(tool) == approval.tool_sha256:
                    approval = dataclasses.replace(approval, step=where, flow_version=self.spec.version)
                    self.note("approval_carried", where, approval.tool, approval.id)
                else:
                    reason = TOOL_CHANGED if answerable else STEP_CHANGED
                    approval = dataclasses.replace(
                        approval, status="withdrawn", decided_at=self.now, reason=reason
                    )
                    self.note("approval_withdrawn", where, approval.tool, approval.id)
            trail.append(approval)
        session.approvals = tuple(trail)
        if answerable and moved_to is not None:
            session.paused = dataclasses.replace(paused, step=moved_to)
            return
        session.paused = None
        if session.status == "awaiting_approval":
            session.status = "running"


# --- the pre-deploy check ------------------------------------------------------------------------

CheckVerdict = Literal["current", "migrate", "fall_back", "fail"]
"""What loading a stored session under this version would do: nothing (it ran on this version
already), migrate it, send it to the fallback step, or fail (the session cannot continue)."""

NOTHING_CHANGED = "the version only: nothing else changes"
"""The change of a session whose migration records the new version and nothing more."""

MAX_EXAMPLES = 5
"""Session ids a group of the check keeps as examples (the rest are counted)."""


@dataclass(frozen=True, slots=True)
class SessionCheck:
    """The verdict on one stored session."""

    session_id: str
    verdict: CheckVerdict
    migration: SessionMigration | None = None
    """What migrating it would do (``migrate`` and ``fall_back``)."""
    reason: str | None = None
    """Why it would fail (``fail``)."""


def check_session(session: Session, spec: FlowSpec, now: float) -> SessionCheck:
    """What loading ``session`` under ``spec`` would do. ``session`` is migrated in place: give one
    nothing saves (``picoflow sessions check`` reads each from the store for this alone)."""
    try:
        migration = migrate_session(session, spec, now)
    except MigrationFailed as exc:
        return SessionCheck(session.id, "fail", reason=exc.message)
    if migration is None:
        return SessionCheck(session.id, "current")
    return SessionCheck(session.id, "fall_back" if migration.fell_back else "migrate", migration)


@dataclass(slots=True)
class CheckGroup:
    """Sessions the check found doing the same thing: one change, or one reason to fail."""

    what: str
    sessions: int = 0
    examples: list[str] = field(default_factory=list)
    """The ids of the first ``MAX_EXAMPLES`` of them, in the order checked (id order)."""

    def add(self, session_id: str) -> None:
        self.sessions += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(session_id)


@dataclass(slots=True)
class FlowCheck:
    """The pre-deploy check of one flow's live sessions against a version of it: how many would
    stay as they are, migrate, fall back or fail, and why, grouped (its size does not grow with
    the number of sessions: ``sessions check`` walks a million of them in pages)."""

    flow: str
    version: str
    """The version checked against (the code about to be deployed)."""
    stored: dict[str, int] = field(default_factory=dict)
    """The live sessions by the version they last ran on ("" unrecorded), as the store counts them."""
    verdicts: dict[CheckVerdict, int] = field(
        default_factory=lambda: {"current": 0, "migrate": 0, "fall_back": 0, "fail": 0}
    )
    changes: dict[str, CheckGroup] = field(default_factory=dict)
    """What the migrations would do (sessions that migrate or fall back), by change."""
    failures: dict[str, CheckGroup] = field(default_factory=dict)
    """Why sessions would fail, by reason."""
    seconds: float = 0.0
    """How long the check took."""

    @property
    def checked(self) -> int:
        return sum(self.verdicts.values())

    @property
    def failed(self) -> int:
        return self.verdicts["fail"]

    def add(self, check: SessionCheck) -> None:
        self.verdicts[check.verdict] += 1
        if check.reason is not None:
            _group(self.failures, check.reason).add(check.session_id)
        if check.migration is None:
            return
        described = dict.fromkeys(describe_change(change) for change in check.migration.changes)
        for what in described or (NOTHING_CHANGED,):
            _group(self.changes, what).add(check.session_id)

    def unreadable(self, session_id: str, problem: str) -> None:
        """A stored session the store could not read: it would fail too."""
        self.add(SessionCheck(session_id, "fail", reason=problem))


def describe_change(change: MigrationChange) -> str:
    """A change in words, the same for every session it happens to (an approval's id left out)."""
    words = change.action.replace("_", " ")
    return f"{words} {change.step}: {change.detail}" if change.detail else f"{words} {change.step}"


def _group(groups: dict[str, CheckGroup], what: str) -> CheckGroup:
    group = groups.get(what)
    if group is None:
        group = groups[what] = CheckGroup(what)
    return group
