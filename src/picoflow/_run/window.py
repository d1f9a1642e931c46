"""Fitting each model request to the model's context window and the step's memory budget.

A step's memory only grows; a model reads at most its context window. Before every model call the
runner estimates the request (``picoflow._run.tokens``). When it would not fit, or the step's memory has
passed its ``memory_budget``, the oldest messages of the step's memory are folded into its summary
(the step's ``Compaction``) or dropped. A cut never separates a tool call from its results and
never removes the user's latest message; what leaves memory stays in the session's transcript.
When even the smallest request the step can send does not fit, the turn fails with
``ContextWindowExceeded`` rather than sending what the model cannot read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from picoflow._run.tokens import message_tokens, messages_tokens, request_ceiling, request_tokens
from picoflow.exceptions import ContextWindowExceeded
from picoflow.memory import fold, forget
from picoflow.messages import Message, ModelRequest
from picoflow.models.base import Model
from picoflow.session import Namespace, Session

if TYPE_CHECKING:
    from picoflow.flow import StepSpec

TRIMMED = "context_trimmed"
"""Code of the warning that says memory was cut to fit."""
LOW_WATER = 0.75
"""Share of the room memory is cut down to. Cutting well below the limit, rather than just under
it, leaves the start of memory unchanged for several turns: providers' prompt caches and the local
engine's reuse of its processed prompt both need an unchanged start, and a summarizer is not
called on every turn."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What the requests of one step with one model must respect."""

    window: int | None
    """The model's context window; None when unknown."""
    reserve: int
    """Tokens of the window kept for the answer."""
    budget: int | None
    """The step's ``memory_budget``."""

    @property
    def prompt(self) -> int | None:
        """Most tokens the prompt may take."""
        return None if self.window is None else self.window - self.reserve


def limits_for(model: Model, budget: int | None) -> Limits | None:
    """The limits of a step's requests, or None when there is nothing to check (the common fast path)."""
    window = model.context_window
    if window is None and budget is None:
        return None
    return Limits(window, model.output_reserve if window is not None else 0, budget)


def fits_at_a_glance(limits: Limits, request: ModelRequest) -> bool:
    """Whether ``request`` surely fits, judged from text lengths alone (most requests are far below
    their window); a memory budget always needs the closer look."""
    prompt = limits.prompt
    return limits.budget is None and prompt is not None and request_ceiling(request) <= prompt


def shown(messages: Sequence[Message]) -> Sequence[Message]:
    """``messages`` as the model is shown them: remembered replies by their notes."""
    for message in messages:
        if message.remembered_as is not None:
            return [m.as_remembered() for m in messages]
    return messages


def protected_from(messages: Sequence[Message]) -> int:
    """Index of the first message no cut may remove: the user's latest message (or, without one,
    the latest message a kept part may start with)."""
    fallback = 0
    for index in range(len(messages) - 1, -1, -1):
        role = messages[index].role
        if role == "user":
            return index
        if role != "tool" and not fallback:
            fallback = index
    return fallback


def cut_for(messages: Sequence[Message], target: int) -> int:
    """The first user message from which memory holds at most ``target`` tokens, or the protected
    start when even that part is larger.

    Memory is cut at user messages only: a whole exchange leaves (the user's words, the calls and
    results they led to, the answer), never a tool call without its results or an answer without
    its question.
    """
    protected = protected_from(messages)
    best = protected
    kept = sum(message_tokens(m) for m in messages[protected:])
    for index in range(protected - 1, -1, -1):
        kept += message_tokens(messages[index])
        if kept > target:
            break
        if messages[index].role == "user":
            best = index
    return best


@dataclass(slots=True)
class Fitting:
    """One request of a step being fitted: what to trim, how to rebuild the request, where to report."""

    limits: Limits
    spec: StepSpec
    model: str
    session: Session
    rebuild: Callable[[], Awaitable[ModelRequest]]
    """Builds the step's request again (prompt, memory as it now is, this attempt's corrections)."""
    report: Callable[[str, str, str | None], None]
    """``(code, message, step)``: records a session warning."""
    memory: Namespace = field(init=False)

    def __post_init__(self) -> None:
        self.memory = self.session.namespace(self.spec.namespace)

    @property
    def step(self) -> str:
        return self.spec.name

    @property
    def namespace(self) -> str:
        return self.spec.namespace

    def warn(self, text: str) -> None:
        self.report(TRIMMED, text, self.spec.name)

    async def fit(self, request: ModelRequest, extra: int) -> ModelRequest:
        """``request`` if it fits, else the request rebuilt after trimming memory; ``extra`` is how
        many trailing messages of the request are not memory (this attempt's corrections)."""
        limits, memory = self.limits, self.memory
        total = request_tokens(request)
        over = limits.prompt is not None and total > limits.prompt
        # The budget counts the messages only: a summary is bounded by its summarizer, and counting it
        # would have a growing summary evict every message on every turn.
        held = messages_tokens(memory.messages) if limits.budget is not None else 0
        if not over and (limits.budget is None or held <= limits.budget):
            return request
        room = limits.budget if limits.budget is not None else total
        if limits.prompt is not None:
            # What the messages may take: the prompt's share less everything else (the summary too).
            remembered = request.messages[: len(request.messages) - extra] if extra else request.messages
            room = min(room, limits.prompt - (total - messages_tokens(remembered)))
        cut = cut_for(memory.messages, int(room * LOW_WATER))
        if cut > 0:
            await self._trim(cut, self._reason(over))
            request = await self.rebuild()
        if limits.prompt is None:
            return request  # a budget is a wish: the protected part may stay above it
        if request_tokens(request) <= limits.prompt:
            return request
        cut = protected_from(memory.messages)
        if cut > 0:
            forget(memory, cut)
            self.warn(f"dropped the {cut} oldest messages of memory {self.namespace} to fit {self._window()}")
            request = await self.rebuild()
        if request_tokens(request) > limits.prompt and memory.summary:
            memory.summary = None
            self.warn(f"dropped the summary of memory {self.namespace} to fit {self._window()}")
            request = await self.rebuild()
        total = request_tokens(request)
        if total > limits.prompt:
            raise ContextWindowExceeded(
                f"step {self.step}: its smallest request needs about {total:,} tokens, but {self.model} "
                f"takes {limits.prompt:,} ({self._window()} less {limits.reserve:,} kept for the answer)",
                step=self.step,
            )
        return request

    async def _trim(self, cut: int, reason: str) -> None:
        compaction = self.spec.cls.compaction
        if compaction is not None:
            try:
                await fold(self.memory, cut, compaction.summarize)
            except Exception as exc:  # a failing summarizer must not leave the session stuck
                forget(self.memory, cut)
                self.warn(
                    f"dropped the {cut} oldest messages of memory {self.namespace} to fit {reason} "
                    f"(the summarizer raised {type(exc).__name__})"
                )
                return
            self.warn(f"summarised the {cut} oldest messages of memory {self.namespace} to fit {reason}")
            return
        forget(self.memory, cut)
        self.warn(f"dropped the {cut} oldest messages of memory {self.namespace} to fit {reason}")

    def _reason(self, over_window: bool) -> str:
        if over_window:
            return self._window()
        return f"the step's memory budget of {self.limits.budget:,} tokens"

    def _window(self) -> str:
        return f"the {self.limits.window:,}-token context window of {self.model}"
