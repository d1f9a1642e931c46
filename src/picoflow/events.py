"""What a turn reports while it runs (for streaming and progress displays)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from picoflow.approvals import Approval


@dataclass(frozen=True, slots=True)
class StepEntered:
    """The conversation moved to ``step``."""

    step: str
    previous: str | None
    parent: str | None = None
    """In a sub-step run (``run_step``): the id of the tool call it runs under, or the calling
    step's name when a hook started it. None in the turn itself."""


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
)
