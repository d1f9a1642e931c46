"""What a turn reports while it runs (for streaming and progress displays)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from picoflow._frozen import quick_init
from picoflow.approvals import Approval
from picoflow.session import SessionMigration


@quick_init
@dataclass(frozen=True, slots=True)
class StepEntered:
    """The conversation moved to ``step``."""

    step: str
    previous: str | None
    parent: str | None = None
    """In a sub-step run (``run_step``): the id of the tool call it runs under, or the calling
    step's name when a hook started it. None in the turn itself."""


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCalled:
    """A validated tool call is about to run."""

    step: str
    id: str
    name: str
    args: Mapping[str, Any]
    parent: str | None = None
    """In a sub-step run (``run_step``): the id of the tool call it runs under, or the calling
    step's name when a hook started it. None in the turn itself."""


@quick_init
@dataclass(frozen=True, slots=True)
class ToolReturned:
    """The result of a tool call, as sent back to the model."""

    step: str
    id: str
    name: str
    content: str
    is_error: bool
    parent: str | None = None
    """In a sub-step run (``run_step``): the id of the tool call it runs under, or the calling
    step's name when a hook started it. None in the turn itself."""


@quick_init
@dataclass(frozen=True, slots=True)
class TextChunk:
    """Part of the model's answer text, as it is generated (only when the provider streams, and
    never for a step with an ``output``: its structured answer is a value for code, not words)."""

    step: str
    text: str
    parent: str | None = None
    """In a sub-step run (``run_step``): the id of the tool call it runs under, or the calling
    step's name when a hook started it. None in the turn itself."""


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A call the model proposed waits for a decision; the turn ends with it pending."""

    step: str
    approval: Approval
    parent: str | None = None
    """Always None: a sub-step run cannot wait for a decision."""


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """Someone decided an approval (``FlowEngine.decide``): who, when, what and why."""

    approval: Approval
    parent: str | None = None
    """Always None: decisions are the turn's own."""


@dataclass(frozen=True, slots=True)
class ReadingJudged:
    """A reading of the user's message was judged item by item (``picoflow.slots``): what was kept,
    dropped (and by which rule) or repaired, with the words that bore each item out."""

    step: str
    verdicts: tuple[Mapping[str, Any], ...]
    """Each verdict as plain JSON (``Verdict.to_json()``): field, value, action, rule, evidence."""
    parent: str | None = None
    """In a sub-step run (``run_step``): the id of the tool call it runs under, or the calling
    step's name when a hook started it. None in the turn itself."""


@dataclass(frozen=True, slots=True)
class PatternFired:
    """The user left the path and a repair pattern (``picoflow.repairs``) took over: ``pattern``
    names which (cancel, repeat, out_of_scope...), ``detail`` what it was about."""

    step: str
    pattern: str
    detail: str | None = None
    parent: str | None = None
    """Always None: repairs are the turn's own."""


@dataclass(frozen=True, slots=True)
class HandedOff:
    """The conversation was handed to a person (a ``Handoff`` step): the session awaits a human."""

    step: str
    """The step the user was in when it was handed off."""
    reason: str | None
    summary: str
    """What the person taking over reads first, written by code (``HandoffTicket.summary``)."""
    parent: str | None = None
    """Always None: only the turn itself hands off."""


@dataclass(frozen=True, slots=True)
class SessionMigrated:
    """The session was stored under another version of its flow and was brought to this one
    before the turn ran (``picoflow.versions``): what changed, from which version to which."""

    migration: SessionMigration
    parent: str | None = None
    """Always None: the session is migrated before the turn runs."""


TurnEvent = (
    StepEntered
    | ToolCalled
    | ToolReturned
    | TextChunk
    | ApprovalRequested
    | ApprovalDecided
    | ReadingJudged
    | PatternFired
    | HandedOff
    | SessionMigrated
)


class EventRecords:
    """A turn's events as plain JSON records, each a mapping with a ``kind``, in the order they
    came: what eval scenarios assert on (``picoflow.evals``) and what a turn's timeline holds
    (``picoflow.timeline``). Call it with each event (an ``on_event`` listener).

    * ``entered`` (``step``, ``from``) and ``left`` (``step``, ``to``): the conversation moved;
    * ``field_set`` (``step``, ``field``, ``value``; ``repaired``: the rule that repaired it) and
      ``field_dropped`` (``step``, ``field``, ``value``, ``rule``): a reading's verdicts;
    * ``tool`` (``step``, ``id``, ``name``, ``args``, ``ok``, ``result``): a call and what the model
      was told (a call refused before it ran has no ``args``);
    * ``approval_requested`` and ``approval_decided``; ``pattern``; ``handoff``;
    * ``migrated`` (``from_version``, ``to_version``, ``changes``: each with its ``action``,
      ``step`` and ``detail``): the session was brought to this version of its flow first.

    With ``detailed`` a verdict's record also carries its ``action`` and, when it has them, its
    ``evidence`` (the words that bore it out: source, start, end, text) and ``why``; a tool record
    its call's ``id``. Events of a sub-step run carry ``parent``.
    """

    __slots__ = ("_calls", "detailed", "records")

    def __init__(self, *, detailed: bool = False) -> None:
        self.records: list[dict[str, Any]] = []
        self.detailed = detailed
        self._calls: dict[str, dict[str, Any]] = {}

    def __call__(self, event: TurnEvent) -> None:
        # The events of every turn (steps entered, tools) go to their own methods, which a timeline's
        # recorder calls directly, without building the event; the rarer ones are turned here.
        if isinstance(event, StepEntered):
            self.entered(event.step, event.previous, event.parent)
        elif isinstance(event, ToolCalled):
            self.tool_called(event.step, event.id, event.name, event.args, event.parent)
        elif isinstance(event, ToolReturned):
            self.tool_returned(event.step, event.id, event.name, event.content, event.is_error, event.parent)
        else:
            for record in self._records_of(event):
                self.add(record, event.parent)

    def add(self, record: dict[str, Any], parent: str | None) -> None:
        """Append ``record`` (of a sub-step run's event when ``parent`` is given)."""
        if parent is not None:
            record["parent"] = parent
        self.records.append(record)

    def completed(self, record: dict[str, Any]) -> None:
        """``record``, added before, was completed in place (a tool call's, by its result)."""

    def entered(self, step: str, previous: str | None, parent: str | None = None) -> None:
        """``StepEntered``: the ``left`` record of the step before, if any, and the ``entered`` one."""
        if previous is not None:
            self.add({"kind": "left", "step": previous, "to": step}, parent)
        self.add({"kind": "entered", "step": step, "from": previous}, parent)

    def tool_called(
        self, step: str, call_id: str, name: str, args: Mapping[str, Any], parent: str | None = None
    ) -> None:
        """``ToolCalled``: the call's record, its result to come (``tool_returned``)."""
        record: dict[str, Any] = {"kind": "tool", "step": step, "name": name}
        if self.detailed:
            record["id"] = call_id
        record.update(args=dict(args), ok=None, result=None)
        self._calls[call_id] = record
        self.add(record, parent)

    def tool_returned(
        self, step: str, call_id: str, name: str, content: str, is_error: bool, parent: str | None = None
    ) -> None:
        """``ToolReturned``: the call's record completed, or one of its own for a call refused
        before it ran (arguments that did not validate, a tool not offered)."""
        known = self._calls.pop(call_id, None)
        if known is not None:
            known.update(ok=not is_error, result=content)
            self.completed(known)
            return
        refused: dict[str, Any] = {"kind": "tool", "step": step, "name": name}
        if self.detailed:
            refused["id"] = call_id
        refused.update(ok=False, result=content)
        self.add(refused, parent)

    def _records_of(self, event: TurnEvent) -> Iterable[dict[str, Any]]:
        if isinstance(event, ReadingJudged):
            for verdict in event.verdicts:
                yield self._verdict_record(event.step, verdict)
        elif isinstance(event, ApprovalRequested):
            approval = event.approval
            yield {
                "kind": "approval_requested",
                "step": event.step,
                "tool": approval.tool,
                "args": dict(approval.args),
                "approval": approval.id,
            }
        elif isinstance(event, ApprovalDecided):
            approval = event.approval
            yield {
                "kind": "approval_decided",
                "step": approval.step,
                "tool": approval.tool,
                "args": dict(approval.args),
                "decision": approval.status,
                "by": approval.decided_by,
            }
        elif isinstance(event, PatternFired):
            yield {"kind": "pattern", "step": event.step, "name": event.pattern, "detail": event.detail}
        elif isinstance(event, HandedOff):
            yield {"kind": "handoff", "step": event.step, "reason": event.reason}
        elif isinstance(event, SessionMigrated):
            yield migration_record(event.migration)
        # TextChunk: the reply is the reader's to add, whole (its parts say nothing more)

    def _verdict_record(self, step: str, verdict: Mapping[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {"step": step, "field": verdict["field"], "value": verdict.get("value")}
        action = verdict["action"]
        if action == "dropped":
            record = {"kind": "field_dropped", **record, "rule": verdict.get("rule")}
        else:
            record = {"kind": "field_set", **record}
            if action == "repaired":
                record["repaired"] = verdict.get("rule")
        if self.detailed:
            record["action"] = action
            if action != "dropped":
                record["rule"] = verdict.get("rule")
            for key in ("evidence", "read_as", "why"):
                if key in verdict:
                    record[key] = verdict[key]
        return record


def migration_record(migration: SessionMigration) -> dict[str, Any]:
    """A migration as plain JSON: the ``migrated`` record of a turn's events and timeline."""
    return {
        "kind": "migrated",
        "from_version": migration.from_version,
        "to_version": migration.to_version,
        "changes": [
            {"action": change.action, "step": change.step, "detail": change.detail}
            | ({"approval": change.approval} if change.approval else {})
            for change in migration.changes
        ],
    }
