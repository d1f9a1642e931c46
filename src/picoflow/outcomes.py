"""What happens next, as a value: ``go``, ``stay`` and ``direct``, plus ``Reject`` for the acceptance gate.

A tool handler, ``LogicStep.run_logic()`` or ``Step.on_response()`` returns one of these; ``call``
is for the step's code to propose one of its own tool calls, as its model would. Each is
a plain immutable value that can be built anywhere (a test, a helper, a module constant); the runner
resolves "the step that returned it" when it applies one. The ``with_*`` builders return a new
value, so the order of a chain does not matter.
The runner applies an outcome's effects in a fixed order: transition, prompt, state, content
type, tool feedback, message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Self, get_args

from pydantic_core import to_json

from picoflow._frozen import quick_init


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """Common effects of every outcome. Use ``go``, ``stay`` or ``direct`` to make one."""

    feedback: str | None = None
    """Text of the tool result sent back for each tool call of the response."""
    state: Mapping[str, Any] | None = None
    """Keys merged into the destination step's state."""
    prompt: str | None = None
    """Replaces the destination step's prompt until the conversation leaves that step."""
    content_type: str | None = None
    """MIME type of this turn's reply (default ``text/plain``)."""
    message: str | None = None
    """A user message added to the destination step's memory (e.g. the user's words, forwarded)."""

    def with_state(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> Self:
        merged = dict(self.state or {})
        if values:
            merged.update(values)
        merged.update(more)
        return replace(self, state=merged)

    def with_prompt(self, prompt: str) -> Self:
        return replace(self, prompt=prompt)

    def with_message(self, message: str) -> Self:
        return replace(self, message=message)

    def with_content_type(self, content_type: str) -> Self:
        if "/" not in content_type:
            raise ValueError(f"content type must look like 'type/subtype', got {content_type!r}")
        return replace(self, content_type=content_type)

    def with_tool_feedback(self, feedback: str) -> Self:
        return replace(self, feedback=feedback)


def _step_name(target: type | str) -> str:
    if isinstance(target, str):
        return target
    name = getattr(target, "name", None)
    return name if isinstance(name, str) else target.__name__


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Go(Outcome):
    """Move to ``target`` and continue the same turn there."""

    target: type | str

    @property
    def target_name(self) -> str:
        return _step_name(self.target)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Stay(Outcome):
    """Keep the step that returned it; the feedback goes to the model, which takes its next turn."""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Direct(Outcome):
    """End the turn with exactly ``content``. No further model call."""

    content: str
    target: type | str | None = None
    """Step the conversation moves to before the reply (``direct_to``); None stays where it is."""
    remember: str | None = None
    """What the step's memory keeps in place of ``content`` (see ``remember_as``); None keeps it all."""

    @property
    def target_name(self) -> str | None:
        """The name of the step moved to first, or None to answer from the step that returned it."""
        return None if self.target is None else _step_name(self.target)

    def remember_as(self, note: str) -> Direct:
        """Show the user ``content`` whole but keep only ``note`` in the step's memory.

        For a long reply written in code (a comparison table, a list): later requests send the model
        the note ("Compared hotels 2, 5 and 8 on price.") instead of the whole text, while the
        transcript keeps every word the user saw.
        """
        if not isinstance(note, str) or not note.strip():
            raise ValueError("remember_as() needs a short note of what the reply showed")
        return replace(self, remember=note.strip())


def go(target: type | str) -> Go:
    """Move the conversation to ``target`` (a step class or its name) and continue the turn there."""
    if isinstance(target, str):
        target = target.strip()
        if not target:
            raise ValueError("go() needs a step, not an empty name")
    return Go(target=target)


def stay(feedback: str = "Accepted.") -> Stay:
    """Stay on the step that returns it and give the model ``feedback`` as the tool result."""
    return Stay(feedback=feedback)


def direct(content: Any) -> Direct:
    """End the turn with ``content`` as the reply, verbatim, without calling the model again.

    A string is sent as is; any other value (dict, list, Pydantic model) is sent as JSON with the
    content type ``application/json``. The content is recorded in memory as the assistant's message.
    """
    if isinstance(content, str):
        return Direct(content=content)
    return Direct(content=to_json(content).decode(), content_type="application/json")


def direct_to(target: type | str, content: Any) -> Direct:
    """Move the conversation to ``target`` and end the turn with exactly ``content``, without a model call.

    The content is recorded as the assistant's message in the target step's memory, where the next
    turn continues (e.g. show a list built in code and let the next step take the user's choice).
    """
    if isinstance(target, str) and not target.strip():
        raise ValueError("direct_to() needs a step, not an empty name")
    outcome = direct(content)
    return replace(outcome, target=target.strip() if isinstance(target, str) else target)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Call(Outcome):
    """A call of one of the step's own tools, proposed by its code rather than its model (``call``)."""

    tool: str | Callable[..., Any]
    """The tool's name, or its ``@tool`` method."""
    args: Mapping[str, Any]
    """The arguments by parameter name, checked against the tool's schema before anything runs."""

    @property
    def tool_name(self) -> str | None:
        """The name given, or None for a method (the runner finds the tool it defines)."""
        return self.tool if isinstance(self.tool, str) else None


def call(tool: str | Callable[..., Any], /, **args: Any) -> Call:
    """Propose a call of one of this step's tools from code, exactly as if its model had proposed it.

    For a step whose code, not its model, decides what to do (which hotel "the cheapest" is, which
    order to refund): return ``call(self.book, hotel=..., check_in=...)`` from ``on_response`` or
    ``on_model_error``. No model is asked. The arguments are validated against the tool's schema (a
    mismatch is the code's bug and fails the turn); a tool marked ``@tool(approval=...)`` waits for
    a decision as any proposed call does (the same ``Approval``, events and routes, the turn ending
    with ``TurnResult.pending``, and ``on_denied`` told of a denial); any other tool runs at once.
    The tool's result then goes on as a model's call would: its outcome is applied, and a plain
    result goes to the step's model. The tool need not be offered to the model (``active_tools``
    may leave it out). ``with_state`` and ``with_prompt`` apply to the step as the call is proposed.
    """
    if isinstance(tool, str):
        tool = tool.strip()
        if not tool:
            raise ValueError("call() needs a tool, not an empty name")
    elif not callable(tool):
        raise TypeError(f"call() takes a tool's name or its @tool method, not {tool!r:.60}")
    return Call(tool=tool, args=dict(args))


PatternName = Literal[
    "correction",
    "cancel",
    "digression",
    "clarify",
    "skip",
    "repeat",
    "out_of_scope",
    "no_progress",
    "handoff",
]
"""The repair patterns: what a conversation does when the user leaves the path."""

PATTERNS: tuple[PatternName, ...] = get_args(PatternName)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Repair(Outcome):
    """The user left the path: ``pattern`` names how (a cancel, a request to repeat, a question the
    flow cannot serve...). The step's ``on_repair`` turns it into where the conversation goes, by
    the flow's ``Repairs`` policy, and the turn reports it (a ``PatternFired`` event)."""

    pattern: PatternName
    detail: str | None = None
    """What the pattern is about, for the event and the words said: the question a clarification
    asks, the field a skip declines, why a handoff is wanted."""
    options: tuple[str, ...] = ()
    """The choices a clarification offers, written by code (for ``no_progress`` from a
    ``SlotStep``'s ``on_complete``: the reply that would have been sent a third time)."""


def repair(pattern: PatternName, *, detail: str | None = None, options: tuple[str, ...] = ()) -> Repair:
    """The user left the path by ``pattern``; the step's ``on_repair`` decides what follows."""
    if pattern not in PATTERNS:
        raise ValueError(f"{pattern!r} is not a repair pattern; patterns: {', '.join(PATTERNS)}")
    if pattern == "clarify" and len(options) < 2:
        raise ValueError("a clarification offers at least two options")
    return Repair(pattern=pattern, detail=detail, options=tuple(options))


@dataclass(frozen=True, slots=True)
class Reject:
    """Returned by ``Step.check_response`` to refuse a model response before anything runs.

    ``reason`` is sent to the model as a correction, and the model is asked again (within the
    step's attempt budget).
    """

    reason: str

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise ValueError("Reject needs a reason the model can act on")


@dataclass(frozen=True, slots=True)
class RetryWith:
    """Returned by ``on_model_error`` to ask the same request again of another model, once."""

    model: Any
    """A ``"provider:name"`` selection, a ``ModelSelection`` or a ``Model``."""


def retry_with(model: Any) -> RetryWith:
    """From ``on_model_error``: try the failed call once more with ``model``."""
    return RetryWith(model)
