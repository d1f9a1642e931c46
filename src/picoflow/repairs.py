"""Repair patterns: what every flow does when the user leaves the path.

A pattern is a value (``repair("cancel")``, a ``Repair`` outcome) that a step returns — a
``SlotStep`` from its reading of the message, any step from a tool or a hook — and the runner
resolves through the step's ``on_repair``, by the policy below, reporting it as a
``PatternFired`` event. The patterns (``picoflow.outcomes.PATTERNS``):

* ``repeat``: the last message the user was sent is sent again, word for word;
* ``cancel``: the current activity ends and the flow goes back to its start step (or
  ``cancel_to``), saying so; when that would throw away what the user gave (a half-filled form) it
  asks first;
* ``skip``: the user declines the pending question: an optional one is left, a required one asked
  once more, then ``on_required_skip`` decides;
* ``out_of_scope``: a fixed, polite answer, then the pending question again; after
  ``max_out_of_scope`` in a row, a handoff;
* ``clarify``: a choice that is not clear asks which one, with the options written by code; after
  ``max_clarifications`` in a row, a handoff;
* ``no_progress``: a question asked ``no_progress_after`` times without an answer is not asked
  again in the same words: the step says what it could not take, with an example, or hands off;
* ``handoff``: the session goes to the flow's handoff step, where a person takes over;
* ``correction``: something said earlier changes: the conversation goes back to the step that
  holds it (``correct_in``, else the latest ``SlotStep`` it went through), which takes the new
  value, says what changed and redoes what depended on it (a list is searched again); a pending
  approval was already withdrawn by the message itself;
* ``digression``: a question outside the current step is answered by ``digress_to``; that step
  ends with ``Step.resume(answer)``, and the interrupted step asks its question again. The steps
  interrupted are a stack: a digression inside a digression resumes twice.

Every text said is in ``RepairTexts`` (one per locale), never in the flow's code paths.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from picoflow.outcomes import PATTERNS, PatternName

__all__ = ["RepairTexts", "Repairs"]

STATE_KEY = "repair"
"""The key of a step's state the patterns keep their counts under (out of scope in a row, a
confirmation being asked, a question asked without progress)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RepairTexts:
    """The words of the repair patterns in one language. ``{question}`` is the question pending,
    ``{lost}`` what a cancel would throw away, ``{options}`` a clarification's choices, ``{why}``
    what could not be taken."""

    confirm_cancel: str = (
        "Shall I drop everything you told me so far ({lost}) and start over? Please say yes or no."
    )
    """Asked before a cancel that throws away what the user gave."""
    cancelled: str = "All right, I have dropped that. {question}"
    """Said once the activity is cancelled; ``{question}`` is what the start step asks first."""
    kept_going: str = "Fine, let's go on. {question}"
    """Said when the user does not confirm a cancel."""
    out_of_scope: str = "I'm sorry, I can't help with that here. {question}"
    skip_required: str = "I need this one to go on. {question}"
    """Said when a required question is skipped the first time."""
    clarify: str = "Which one do you mean? {options}"
    no_progress: str = "I could not use that answer. {why} {question} {example}"
    """Said instead of the same question a third time: ``{why}`` is the rule the answer broke, if
    any, and ``{example}`` the question's example (``example`` below), if it has one."""
    example: str = "For example: {example}"
    handoff_unavailable: str = "I'm sorry, no one can take over here. {question}"
    """Said when a handoff is wanted but the flow has no handoff step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Repairs:
    """A flow's (``Flow.repairs``) or a step's (``Step.repairs``) repair policy."""

    off: frozenset[PatternName] = frozenset()
    """Patterns not applied: their ``Repair`` outcomes are ignored (the turn goes on as if the
    message were an ordinary one)."""
    cancel_to: str | type | None = None
    """Where a cancel goes: a step or its name; None: the flow's start step."""
    confirm_cancel: bool = True
    """Ask before cancelling when that throws away what the user gave."""
    max_out_of_scope: int = 2
    """Out-of-scope requests in a row before the session is handed off (0: never)."""
    max_clarifications: int = 2
    """Clarifications asked in a row before the session is handed off (0: never)."""
    no_progress_after: int = 2
    """Times a question may be asked without an answer before the step changes course."""
    on_no_progress: Literal["explain", "handoff"] = "explain"
    """What a step does then: say what it could not take (with the question's example), or hand off."""
    on_required_skip: Literal["ask_again", "handoff", "cancel"] = "handoff"
    """What follows a required question declined twice."""
    handoff: str | type | None = None
    """The step a handoff goes to; None: the flow's step that awaits a human, if it has one."""
    correct_in: str | type | None = None
    """The step a correction made elsewhere goes back to; None: the latest ``SlotStep`` the
    conversation went through (a correction with nowhere to go asks the question again)."""
    digress_to: str | type | None = None
    """The step that answers a question outside the current one (an FAQ, another order's
    status); None: a digression is answered as out of scope."""
    texts: Mapping[str, RepairTexts] = field(default_factory=lambda: MappingProxyType({"": RepairTexts()}))
    """The words per locale (``""``: any other); a step answers in its ``locale``."""

    def __post_init__(self) -> None:
        unknown = [name for name in self.off if name not in PATTERNS]
        if unknown:
            raise ValueError(
                f"unknown repair pattern(s) {', '.join(map(repr, unknown))}; patterns: {', '.join(PATTERNS)}"
            )
        for name in ("max_out_of_scope", "max_clarifications", "no_progress_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} cannot be negative")

    def allows(self, pattern: PatternName) -> bool:
        return pattern not in self.off

    def words(self, locale: str | None) -> RepairTexts:
        """The texts of ``locale`` (or of its language: "de" for "de-CH"), else the default ones."""
        texts = self.texts
        if locale:
            for key in (locale, locale.split("-", 1)[0]):
                if key in texts:
                    return texts[key]
        return texts.get("") or next(iter(texts.values()), RepairTexts())


def keep(state: MutableMapping[str, Any], kept: Mapping[str, Any]) -> None:
    """Store the patterns' bookkeeping in a step's state (none: the key goes, so a step that never
    met a pattern has no trace of them)."""
    if kept:
        state[STATE_KEY] = dict(kept)
    else:
        state.pop(STATE_KEY, None)


def counts(state: Mapping[str, Any]) -> dict[str, Any]:
    """The patterns' bookkeeping kept in a step's state (a copy)."""
    kept = state.get(STATE_KEY)
    return dict(kept) if isinstance(kept, Mapping) else {}
