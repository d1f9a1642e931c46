"""Per-step memory: live windows over a session's messages, erasing and compaction.

Compaction keeps a namespace from growing without bound: when its live window passes
``trigger`` messages, everything but the last ``keep_recent`` is folded into a running summary
(which the step's system prompt then carries). The cut never separates an assistant tool call
from its tool results, so the request a model receives is always well formed.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from picoflow.messages import Message, ModelRequest
from picoflow.session import Namespace

Summarizer = Callable[[Sequence[Message], str | None], Awaitable[str] | str]
"""``(messages to fold in, previous summary) -> new summary``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction:
    """Compaction policy of one step's memory."""

    summarize: Summarizer
    """Writes the new summary from the evicted messages and the previous summary."""
    trigger: int = 16
    """Compact when the live window holds more than this many messages."""
    keep_recent: int = 8
    """Messages kept verbatim after compaction (the cut may keep a few more to keep pairs whole)."""

    def __post_init__(self) -> None:
        if self.keep_recent < 1:
            raise ValueError("Compaction.keep_recent must be at least 1")
        if self.trigger <= self.keep_recent:
            raise ValueError("Compaction.trigger must be larger than keep_recent")


def safe_cut(messages: Sequence[Message], keep_recent: int) -> int:
    """Index where the kept suffix starts: at most ``len - keep_recent``, moved back so that the
    kept part neither starts with a tool result nor separates a tool call from its results."""
    cut = max(0, len(messages) - keep_recent)
    while cut > 0 and messages[cut].role == "tool":
        cut -= 1
    return cut


async def compact(namespace: Namespace, policy: Compaction) -> bool:
    """Fold old messages of ``namespace`` into its summary. Returns whether anything changed."""
    messages = namespace.messages
    if len(messages) <= policy.trigger:
        return False
    cut = safe_cut(messages, policy.keep_recent)
    if cut == 0:
        return False
    await fold(namespace, cut, policy.summarize)
    return True


async def fold(namespace: Namespace, cut: int, summarize: Summarizer) -> None:
    """Fold the first ``cut`` live messages of ``namespace`` into its summary (``cut`` must be a
    safe cut: the kept part neither starts with a tool result nor is empty)."""
    summary = summarize(namespace.messages[:cut], namespace.summary)
    if inspect.isawaitable(summary):
        summary = await summary
    if not isinstance(summary, str):
        raise TypeError(f"the summarizer returned {type(summary).__name__}, not str")
    namespace.summary = summary
    forget(namespace, cut)


def forget(namespace: Namespace, cut: int) -> None:
    """Drop the first ``cut`` live messages (a safe cut, keeping at least one): they leave memory,
    and stay in the session's transcript."""
    namespace.messages = list(namespace.messages[cut:])
    namespace.start = namespace.messages[0].seq


def model_summarizer(model: object, *, instructions: str | None = None) -> Summarizer:
    """A summarizer that asks ``model`` to write the summary: a ``picoflow.models.base.Model``, or a
    selection such as ``"openai:gpt-4.1-nano"`` (checked now, its adapter created on first use)."""
    from picoflow.models.base import Model
    from picoflow.models.catalog import ModelSelection, as_selection, create_model, validate_selection

    if isinstance(model, str | ModelSelection):
        selection = as_selection(model)
        validate_selection(selection)
    elif not isinstance(model, Model):
        raise TypeError("model_summarizer needs a picoflow Model or a model selection")
    prompt = instructions or (
        "Summarize the conversation below for the assistant who will continue it. Keep every fact, "
        "choice and open question the user gave; drop pleasantries. Answer with the summary only."
    )

    async def summarize(messages: Sequence[Message], previous: str | None) -> str:
        lines = [f"Earlier summary: {previous}"] if previous else []
        for message in map(Message.as_remembered, messages):
            if message.role == "tool":
                lines.append(f"[tool {message.name} result] {message.content}")
            elif message.tool_calls:
                calls = ", ".join(f"{call.name}({call.args_json()})" for call in message.tool_calls)
                lines.append(f"assistant called: {calls}")
            else:
                lines.append(f"{message.role}: {message.content}")
        request = ModelRequest(system=prompt, messages=[Message.user("\n".join(lines))])
        writer = model if isinstance(model, Model) else create_model(selection)
        response = await writer.request(request)
        return response.text.strip()

    return summarize
