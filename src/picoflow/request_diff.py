"""What differs between two model requests, in words: the request a recording holds and the one
the code asks now. Eval recordings (``picoflow.evals.recording``) and session replays
(``picoflow.replay``) both stop at the first request they cannot answer and say why with this.

Each side is a ``RequestParts``: its parts reduced to values compared for equality (a hash, or the
text itself), so either side can be kept cheaply in a file or a timeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = ["RequestParts", "describe_difference"]


class RequestParts(Protocol):
    """A request's parts, each comparable with ``==``."""

    @property
    def role(self) -> str:
        """Who asked (an eval's ``flow``, ``user`` or ``judge``; a replay's ``flow``)."""
        ...

    @property
    def step(self) -> str | None: ...

    @property
    def system(self) -> str | None: ...

    @property
    def messages(self) -> Sequence[str]: ...

    @property
    def tools(self) -> Mapping[str, str]:
        """Each tool offered, by name."""
        ...

    @property
    def output(self) -> str | None: ...


def describe_difference(recorded: RequestParts, asked: RequestParts) -> str:
    """The parts of ``asked`` that differ from ``recorded``, in words ("the system prompt; message 3
    of 5"); "the request" when none of them does."""
    if recorded.role != asked.role:
        return f"asked by the {asked.role} model where the recording has the {recorded.role} model"
    found: list[str] = []
    if recorded.step != asked.step:
        found.append(f"the step is {asked.step} where the recording has {recorded.step}")
    if recorded.system != asked.system:
        found.append("the system prompt")
    if list(recorded.messages) != list(asked.messages):
        found.append(_messages_differ(recorded.messages, asked.messages))
    if dict(recorded.tools) != dict(asked.tools):
        found.append(_tools_differ(recorded.tools, asked.tools))
    if recorded.output != asked.output:
        found.append("the output schema")
    if not found:
        return "the request"
    return "; ".join(found)


def _messages_differ(recorded: Sequence[str], asked: Sequence[str]) -> str:
    first = next(
        (index for index, (old, new) in enumerate(zip(recorded, asked, strict=False)) if old != new),
        min(len(recorded), len(asked)),
    )
    if len(recorded) != len(asked):
        return f"{len(asked)} messages where the recording has {len(recorded)}, from message {first + 1} on"
    if first == len(asked) - 1:
        return "the last message"
    return f"message {first + 1} of {len(asked)}"


def _tools_differ(recorded: Mapping[str, str], asked: Mapping[str, str]) -> str:
    added = sorted(set(asked) - set(recorded))
    removed = sorted(set(recorded) - set(asked))
    changed = sorted(name for name in set(asked) & set(recorded) if asked[name] != recorded[name])
    said = [
        f"{label} {', '.join(names)}"
        for label, names in (("added", added), ("removed", removed), ("changed", changed))
        if names
    ]
    return "the tools (" + "; ".join(said) + ")" if said else "the tools' order"
