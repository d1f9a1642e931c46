"""What a request says: the parameters of ``SendMessage`` and ``SendStreamingMessage`` read by light
models of the wire, the message read into a turn's text or a decision, the skill it names, and the
parameters of the rarely called methods read into the SDK's types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeVar

from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message as ProtoMessage
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel

from picoflow.server.protocols._requests import Decision
from picoflow.server.protocols.a2a._wire import _USER, _USER_NUMBER, Wire

SKILL_KEY: Final = "skill"
"""The metadata key (of the message, or of the request) naming the skill, that is the flow."""

# Protobuf's JSON mapping, as the SDK's server applied it: a field by its JSON name or its proto name,
# unknown fields ignored, ``null`` as an unset field.
_WIRE_MODEL = ConfigDict(
    extra="ignore", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True
)


class _PartIn(BaseModel):
    model_config = _WIRE_MODEL

    text: StrictStr | None = None
    raw: StrictStr | None = None
    url: StrictStr | None = None
    data: Any = None
    """Any JSON value, ``null`` too: set when the part has the field (``model_fields_set``)."""
    metadata: dict[str, Any] | None = None
    filename: StrictStr | None = None
    media_type: StrictStr | None = None

    def wire(self) -> Wire:
        """The part as kept in the task's history (a text or data part: others are refused)."""
        part: Wire = {"text": self.text} if self.text is not None else {"data": self.data}
        if self.metadata is not None:
            part["metadata"] = self.metadata
        if self.filename:
            part["filename"] = self.filename
        if self.media_type:
            part["mediaType"] = self.media_type
        return part


class _MessageIn(BaseModel):
    model_config = _WIRE_MODEL

    message_id: StrictStr | None = None
    context_id: StrictStr | None = None
    task_id: StrictStr | None = None
    role: StrictStr | StrictInt | None = None
    parts: list[_PartIn] | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[StrictStr] | None = None
    reference_task_ids: list[StrictStr] | None = None

    def wire(self, task_id: str, context_id: str) -> Wire:
        """The message as kept in the history of task ``task_id``."""
        message: Wire = {
            "messageId": self.message_id,
            "contextId": context_id,
            "taskId": task_id,
            "role": _USER,
            "parts": [part.wire() for part in self.parts or ()],
        }
        if self.metadata is not None:
            message["metadata"] = self.metadata
        if self.extensions:
            message["extensions"] = self.extensions
        if self.reference_task_ids:
            message["referenceTaskIds"] = self.reference_task_ids
        return message


class _ConfigurationIn(BaseModel):
    model_config = _WIRE_MODEL

    accepted_output_modes: list[StrictStr] | None = None
    task_push_notification_config: dict[str, Any] | None = None
    history_length: StrictInt | None = None
    return_immediately: StrictBool | None = None


class _SendIn(BaseModel):
    """The parameters of ``SendMessage`` and ``SendStreamingMessage``."""

    model_config = _WIRE_MODEL

    tenant: StrictStr | None = None
    message: _MessageIn | None = None
    configuration: _ConfigurationIn | None = None
    metadata: dict[str, Any] | None = None

    @property
    def history_length(self) -> int | None:
        return None if self.configuration is None else self.configuration.history_length

    @property
    def immediately(self) -> bool:
        return self.configuration is not None and bool(self.configuration.return_immediately)


def _send_params(params: dict[str, Any] | None) -> tuple[_SendIn, _MessageIn]:
    """The request's parameters read, and its message checked as the protocol requires it."""
    try:
        request = _SendIn.model_validate(params or {})
    except ValidationError as error:
        problems = [
            (_where(item["loc"]), item["msg"])
            for item in error.errors(include_input=False, include_url=False)
        ]
        raise InvalidParamsError(
            "invalid params: " + "; ".join(f"{where}: {rule}" for where, rule in problems),
            data={"errors": [{"field": where, "message": rule} for where, rule in problems]},
        ) from None
    message = request.message or _MessageIn()
    if not message.message_id:
        raise _invalid("message.messageId is required", "message.messageId", "required")
    if message.role not in (_USER, _USER_NUMBER):
        raise _invalid("a client's message has the role ROLE_USER", "message.role", "must be ROLE_USER")
    if not message.parts:
        raise _invalid("message.parts must hold at least one part", "message.parts", "required")
    history = request.history_length
    if history is not None and history < 0:
        raise InvalidParamsError("history length must be non-negative")
    return request, message


def _where(location: tuple[int | str, ...]) -> str:
    where = ""
    for step in location:
        where += f"[{step}]" if isinstance(step, int) else (f".{step}" if where else step)
    return where


class _DecisionIn(BaseModel):
    """A person's decision on a pending approval, sent as a data part; the engine checks its values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approval_id: str
    decision: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class _Said:
    """A message read: its text (a turn), or its one decision."""

    text: str
    decision: Decision | None = None


def _invalid(message: str, where: str, problem: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"errors": [{"field": where, "message": problem}]})


def _read(message: _MessageIn) -> _Said:
    """The text parts of the message joined, or its decision; anything else is refused."""
    texts: list[str] = []
    decisions: list[Decision] = []
    for index, part in enumerate(message.parts or ()):
        has_data = "data" in part.model_fields_set
        kinds = (part.text is not None) + (part.raw is not None) + (part.url is not None) + has_data
        if kinds == 0:
            raise _invalid(f"message.parts[{index}] is empty", f"message.parts[{index}]", "has no content")
        if kinds > 1:
            problem = "holds more than one of text, raw, url and data"
            raise _invalid(f"message.parts[{index}] {problem}", f"message.parts[{index}]", problem)
        if part.text is not None:
            texts.append(part.text)
        elif has_data:
            decisions.append(_decision(part.data, index))
        else:
            raise ContentTypeNotSupportedError("this agent reads text and decisions; files are not accepted")
    if not decisions:
        return _Said("\n".join(texts))
    if texts or len(decisions) > 1:
        problem = "a decision travels alone: one data part, its reason inside it"
        raise _invalid(problem, "message.parts", problem)
    return _Said("", decisions[0])


def _decision(data: object, index: int) -> Decision:
    where = f"message.parts[{index}].data"
    if not isinstance(data, dict):
        raise _invalid(f"{where} must be a decision object", where, "is not an object")
    try:
        read = _DecisionIn.model_validate(data)
    except ValidationError as error:
        problems = [
            (".".join([where, *(str(step) for step in item["loc"])]), item["msg"])
            for item in error.errors(include_input=False, include_url=False)
        ]
        summary = "; ".join(f"{name}: {rule}" for name, rule in problems)
        raise InvalidParamsError(
            f"a data part must be a decision {{approval_id, decision, reason}}: {summary}",
            data={"errors": [{"field": name, "message": rule} for name, rule in problems]},
        ) from None
    return Decision(read.approval_id, read.decision, read.reason, where)


def _skill(request: _SendIn, message: _MessageIn) -> str | None:
    """The skill the message (or else the request) names in its metadata."""
    for metadata in (message.metadata, request.metadata):
        if metadata and SKILL_KEY in metadata:
            value = metadata[SKILL_KEY]
            if not isinstance(value, str) or not value:
                raise _invalid("metadata.skill must name a skill", "metadata.skill", "is not a skill name")
            return value
    return None


_Proto = TypeVar("_Proto", bound=ProtoMessage)


def _proto(params: dict[str, Any] | None, kind: type[_Proto]) -> _Proto:
    """The parameters of a rarely called method, read into the SDK's type as its server read them."""
    try:
        return ParseDict(params or {}, kind(), ignore_unknown_fields=True)
    except Exception as error:  # the parser's errors are of several kinds: each is the caller's fault
        raise InvalidParamsError(data={"parseError": str(error)}) from None
