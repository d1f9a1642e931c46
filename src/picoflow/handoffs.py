"""Handoffs: a conversation leaves the flow's path and a person takes it over.

A flow lists the ``Handoff`` step (``picoflow.step``) and any step may ``go(Handoff)``, with
``.with_state(reason=...)`` saying why. Entering it puts the session in the status
``awaiting_human`` with a ``HandoffTicket``: where the user was, why, and a summary written by code
(never by a model) for the person who takes over. Until staff hand the conversation back, the
user's messages are kept for staff and no model is called; staff take the session, reply in it,
and hand it back to a step (``FlowEngine.take``, ``reply_as_staff``, ``hand_back``).

These are plain values (no I/O).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from picoflow.messages import Message

__all__ = [
    "STAFF_VISIBILITY",
    "HandoffTicket",
    "QueuedHandoff",
    "handoff_summary",
]

STAFF_VISIBILITY = "staff"
"""The visibility (``Caller.visibilities``) a caller needs to see the queue of handoffs and act on
them, unless ``FlowEngine(staff_visibility=...)`` names another."""

MAX_USER_MESSAGES = 3
"""How many of the user's latest messages a summary quotes."""
MAX_LINE_CHARS = 200
"""Longest line of a summary: a longer value or message is cut, marked with an ellipsis."""


@dataclass(frozen=True, slots=True)
class HandoffTicket:
    """Why and since when a session waits for a person, and who took it (stored in the session)."""

    step: str
    """The step the user was in when the conversation was handed off (where it goes back by
    default); the Handoff step itself when the conversation started there."""
    handoff_step: str
    """The Handoff step the session waits in (a flow may have several)."""
    reason: str | None
    """Why, as the step that handed off said it (``with_state(reason=...)``)."""
    summary: str
    """What the person taking over reads first: written by code from the session."""
    since: float
    """Unix time the session started waiting."""
    taken_by: str | None = None
    """The principal of the member of staff who took it (None: still in the queue)."""
    taken_at: float | None = None


@dataclass(frozen=True, slots=True)
class QueuedHandoff:
    """One session awaiting a human, as the staff queue lists it (``FlowEngine.handoffs``)."""

    session_id: str
    flow: str
    step: str
    """The step the user was in when it was handed off."""
    reason: str | None
    summary: str
    since: float
    taken_by: str | None
    principal: str | None
    """The user the session belongs to."""


def handoff_summary(
    *,
    flow: str,
    step: str | None,
    reason: str | None,
    states: Mapping[str, Mapping[str, Any]],
    messages: Iterable[Message],
) -> str:
    """The summary of a handoff, in lines a person reads at a glance: the flow, the step the user
    was in, the reason, what each step's state holds (one short JSON line per value) and the user's
    last messages. Written from the session only, never by a model."""
    lines = [f"Flow: {flow}", f"Step: {step or '-'}", f"Reason: {reason or 'not given'}"]
    held = [
        _cut(f"  {name}.{key} = {json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)}")
        for name, state in states.items()
        for key, value in state.items()
    ]
    if held:
        lines += ["State:", *held]
    said = [message.content for message in messages if message.is_from_user and message.within is None]
    if said:
        lines.append("Last messages from the user:")
        lines += [_cut(f"  > {' '.join(text.split())}") for text in said[-MAX_USER_MESSAGES:]]
    return "\n".join(lines)


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"
