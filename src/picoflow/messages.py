"""Messages, tool calls and the request/response values exchanged with a model.

These are plain immutable values: no I/O and no provider types. Adapters translate them to and
from each provider's wire format.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from picoflow._frozen import quick_init
from picoflow.attachments import AttachmentRef
from picoflow.usage import Usage

Role = Literal["system", "user", "assistant", "tool"]

MessageKind = Literal[
    "direct", "crossing", "forwarded", "correction", "nudge", "summary", "output", "staff", "call"
]
"""Why a message is not a plain exchange between the user and the model: the runtime put it there
(``direct``, ``crossing``, ``forwarded``, ``correction``, ``nudge``, ``summary``; ``call``: a tool
call the step's code proposed, ``picoflow.call``, kept as the model's would be), the model wrote
it for code rather than for the user (``output``: an answer parsed as its step's ``output``, which
code read and acted on; the user was sent what code wrote, never this), or a person wrote it while
the conversation was handed off (``staff``: an assistant message, ``author`` says who)."""


_ARGS_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
"""``json.dumps(args, ensure_ascii=False, default=str)`` without building an encoder per call
(stateless between calls, so one serves every thread)."""


@quick_init  # built several times a turn: a third of a frozen dataclass's own __init__
@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's proposal to call a tool. Nothing has run yet.

    ``args`` is the decoded argument object, or the raw text when the model sent arguments that
    are not a JSON object (the runner reports that back to the model as a correctable error).
    """

    name: str
    args: Mapping[str, Any] | str = field(default_factory=dict)
    id: str = ""

    def args_json(self) -> str:
        """The arguments as JSON text, as providers expect them on the wire."""
        if isinstance(self.args, str):
            return self.args
        return _ARGS_ENCODER.encode(self.args)

    @staticmethod
    def parse_args(raw: str | None) -> Mapping[str, Any] | str:
        """Decode wire-format arguments; anything that is not a JSON object is kept as text."""
        if raw is None or not raw.strip():
            return {}
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
        return value if isinstance(value, dict) else raw


@quick_init  # built several times a turn: a third of a frozen dataclass's own __init__
@dataclass(frozen=True, slots=True)
class Message:
    """One entry of a step's memory and of the session transcript."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    """Calls proposed by an assistant message."""
    tool_call_id: str | None = None
    """For a tool message: the id of the call it answers."""
    name: str | None = None
    """For a tool message: the tool's name."""
    is_error: bool = False
    """For a tool message: the call was refused or failed."""
    step: str | None = None
    """The step whose memory holds the message."""
    kind: MessageKind | None = None
    seq: int = -1
    """Session-wide position, assigned when the message is appended to a session."""
    at: float = 0.0
    """Unix time the message was appended."""
    reasoning: tuple[Mapping[str, Any], ...] = ()
    """For an assistant message: the provider's reasoning blocks (e.g. Anthropic thinking blocks with
    their signatures), kept verbatim because the provider wants them back while a tool loop goes on.
    Opaque to picoflow and never shown to users."""
    remembered_as: str | None = None
    """For a long reply the user saw whole (a table, a list): the short note the step's memory keeps
    in its place. Requests send the note to the model; ``content`` stays whole in the transcript."""
    model: str | None = None
    """For an assistant message the model wrote: which model (``provider:name``) answered."""
    within: str | None = None
    """For a message of a sub-step run (``run_step``): which run, such as ``"Hotels@12"`` (the step
    and the seq of the run's first message). None for the conversation's own messages."""
    attachments: tuple[AttachmentRef, ...] = ()
    """For a user message: the files sent with it (their bytes are in ``ModelRequest.files``)."""
    author: str | None = None
    """For a message of kind ``staff``: the principal of the member of staff who wrote it."""

    @property
    def is_from_user(self) -> bool:
        """Written by the user (as typed, or forwarded to another step), not put there by the runtime."""
        return self.role == "user" and self.kind in (None, "forwarded")

    @property
    def is_shown(self) -> bool:
        """The user saw this message: what they typed, or what they were sent (a reply written in
        code or by the model, words the model wrote beside a tool call). Never what the runtime and
        the model said to each other (corrections, crossings, tool results, a structured answer),
        nor a sub-step run's messages."""
        if self.within is not None:
            return False
        if self.role == "user":
            return self.kind is None
        return self.role == "assistant" and bool(self.content) and self.kind in (None, "direct", "staff")

    @staticmethod
    def user(content: str, *, kind: MessageKind | None = None) -> Message:
        return Message("user", content, kind=kind)

    @staticmethod
    def assistant(
        content: str = "",
        tool_calls: Sequence[ToolCall] = (),
        *,
        kind: MessageKind | None = None,
        reasoning: Sequence[Mapping[str, Any]] = (),
    ) -> Message:
        return Message("assistant", content, tuple(tool_calls), kind=kind, reasoning=tuple(reasoning))

    @staticmethod
    def tool(
        call: ToolCall, content: str, *, is_error: bool = False, kind: MessageKind | None = None
    ) -> Message:
        return Message("tool", content, tool_call_id=call.id, name=call.name, is_error=is_error, kind=kind)

    def as_remembered(self) -> Message:
        """This message as the step's memory shows it to a model: the note in place of the content."""
        if self.remembered_as is None:
            return self
        return replace(self, content=self.remembered_as, remembered_as=None)

    def stamped(self, *, step: str, seq: int) -> Message:
        """A copy placed in a session: owning step, position and time set."""
        return Message(
            self.role,
            self.content,
            self.tool_calls,
            self.tool_call_id,
            self.name,
            self.is_error,
            step,
            self.kind,
            seq,
            time.time(),
            self.reasoning,
            self.remembered_as,
            self.model,
            self.within,
            self.attachments,
            self.author,
        )


def with_outputs_marked(transcript: Sequence[Message]) -> list[Message]:
    """``transcript`` with the structured answers stored before ``kind="output"`` existed marked
    ``"output"`` too, so every reader tells them from replies the same way.

    Such an answer was stored as a plain assistant message. Two things tell it, and only together:
    it opens like JSON (an object or an array, maybe in a code fence), and it does not end its turn.
    Code acted on it, so something always follows it within the turn (a correction, the next step's
    messages, the reply code wrote), while a reply, JSON or not, is the last message of its turn:
    what follows it, sub-step runs aside, is the user's next message or nothing. The rule needs
    neither the flow nor the step, so it holds for steps renamed or removed since, and in any tool
    that reads a store without the flows. Answers stored with their kind are left as they are.
    """
    marked: list[Message] | None = None
    following: Message | None = None  # the next message outside sub-step runs
    for index in range(len(transcript) - 1, -1, -1):
        message = transcript[index]
        if message.within is not None:
            continue
        if following is not None and not following.is_from_user and _stored_answer(message):
            if marked is None:
                marked = list(transcript)
            marked[index] = replace(message, kind="output")
        following = message
    return list(transcript) if marked is None else marked


def _stored_answer(message: Message) -> bool:
    """An assistant message without a kind or calls whose text opens like JSON."""
    if message.role != "assistant" or message.kind is not None or message.tool_calls:
        return False
    text = message.content.lstrip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1].lstrip() if "\n" in text else ""
    return text[:1] in ("{", "[")


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What a model is told about a tool: its name, what it is for, and its argument schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the argument object."""
    strict: bool = False
    """The schema satisfies OpenAI's strict-mode rules, so constrained decoding may be asked for."""


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """A structured final answer the step requires, as a JSON Schema."""

    name: str
    schema: Mapping[str, Any]
    description: str = ""
    strict: bool = False


@quick_init  # built several times a turn: a third of a frozen dataclass's own __init__
@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a model adapter needs for one call. Built fresh for every call."""

    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolDefinition] = ()
    output: OutputSchema | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Provider parameters of the step's model selection (temperature, reasoning effort, ...)."""
    step: str | None = None
    session_id: str | None = None
    files: Mapping[str, bytes] = field(default_factory=dict)
    """The bytes of the files the messages refer to (``Message.attachments``), by SHA-256."""

    def text_size(self) -> int:
        """Characters of prompt text in this request (system, messages, tool schemas)."""
        size = len(self.system)
        for message in self.messages:
            size += len(message.content)
            for call in message.tool_calls:
                size += len(call.name) + len(call.args_json())
        for tool in self.tools:
            size += len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
        return size


@dataclass(frozen=True, slots=True)
class ResponseWarning:
    """Something the adapter had to repair or work around to produce an answer (a tool call written
    as text, a model that fell back to another); the runner records it as a session warning."""

    code: str
    message: str


@dataclass(slots=True)
class ModelResponse:
    """One answer of a model: text, tool calls, or both."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str | None = None
    """The model that answered, as the provider reported it."""
    reasoning: list[dict[str, Any]] = field(default_factory=list)
    """Reasoning blocks to send back verbatim with the assistant message (see ``Message.reasoning``)."""
    warnings: list[ResponseWarning] = field(default_factory=list)
    """What the adapter repaired on the way (recorded as session warnings)."""
    answered_by: str | None = None
    """``provider:name`` of the model that answered (set by ``FallbackModel`` to the member that did;
    the runner fills it in otherwise) — recorded on the assistant message as ``Message.model``."""

    @property
    def is_empty(self) -> bool:
        return not self.tool_calls and not self.text.strip()

    def tool_names(self) -> list[str]:
        return [call.name for call in self.tool_calls]
