"""The Responses API wire format: picoflow messages as input items, and responses and stream events
back as picoflow values. No SDK import here: the adapter (``openai_responses``) owns the client.

Reasoning items are kept only when they carry ``encrypted_content``: with ``store=False`` nothing
else can be sent back, and an item sent back without it is refused as unknown.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from picoflow.exceptions import ModelError
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition
from picoflow.models._file_parts import Files, responses_content
from picoflow.models._retry import redact
from picoflow.models.base import StreamEvent, TextDelta, ToolCallDelta
from picoflow.usage import Usage

#: The API refuses longer ``prompt_cache_key`` values.
MAX_CACHE_KEY = 64


def _arguments(raw: object) -> Mapping[str, Any] | str:
    # Compatible servers are not validated by the SDK: some send an object rather than JSON text.
    if isinstance(raw, dict):
        return raw
    if raw is None or isinstance(raw, str):
        return ToolCall.parse_args(raw)
    return json.dumps(raw)


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def schema_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"


def cache_key(session_id: str) -> str:
    if len(session_id) <= MAX_CACHE_KEY:
        return session_id
    return hashlib.sha256(session_id.encode()).hexdigest()


def responses_tool(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as a Responses API ``function`` tool. ``strict`` is always explicit: the API makes
    function tools strict when it is left out, which a schema outside strict-mode rules fails."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
        "strict": tool.strict,
    }


def _replayable(item: Mapping[str, Any]) -> bool:
    """An OpenAI reasoning item that can be sent back with ``store=False`` (it carries its content)."""
    return item.get("type") == "reasoning" and bool(item.get("encrypted_content"))


def to_responses_input(request: ModelRequest, *, replay_reasoning: bool = True) -> list[dict[str, Any]]:
    """The request's memory as Responses API input items (the system prompt goes in ``instructions``)."""
    items: list[dict[str, Any]] = []
    for message in request.messages:
        items.extend(_input_items(message, replay_reasoning, request.files))
    return items


def _input_items(message: Message, replay_reasoning: bool, files: Files) -> list[dict[str, Any]]:
    if message.role == "tool":
        output = message.content
        # function_call_output has no error flag; say it in the text the model reads.
        if message.is_error and not output.lower().startswith("error"):
            output = f"Error: {output}"
        return [{"type": "function_call_output", "call_id": message.tool_call_id or "", "output": output}]
    if message.role != "assistant" and message.attachments:
        return [{"role": message.role, "content": responses_content(message, files)}]
    if message.role != "assistant":
        return [{"role": message.role, "content": message.content}]
    items: list[dict[str, Any]] = []
    if replay_reasoning:
        # Reasoning goes back first and untouched, as the model produced it, ahead of its calls.
        items.extend(dict(item) for item in message.reasoning if _replayable(item))
    if message.content:
        items.append({"role": "assistant", "content": message.content})
    for call in message.tool_calls:
        items.append(
            {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.args_json()}
        )
    return items


def usage_from_responses(usage: Any) -> Usage:
    """A Responses ``usage`` object as picoflow ``Usage`` (cached and reasoning tokens included)."""
    result = Usage(model_calls=1)
    if usage is None:
        return result
    result.input_tokens = getattr(usage, "input_tokens", None) or 0
    result.output_tokens = getattr(usage, "output_tokens", None) or 0
    input_details = getattr(usage, "input_tokens_details", None)
    if input_details is not None:
        result.cached_input_tokens = getattr(input_details, "cached_tokens", None) or 0
        result.cache_creation_tokens = getattr(input_details, "cache_write_tokens", None) or 0
    output_details = getattr(usage, "output_tokens_details", None)
    if output_details is not None:
        result.reasoning_tokens = getattr(output_details, "reasoning_tokens", None) or 0
    return result


def _finish_reason(response: Any, has_calls: bool) -> str:
    """The Chat Completions vocabulary (``stop``, ``tool_calls``, ``length``), as other adapters report."""
    details = getattr(response, "incomplete_details", None)
    reason = getattr(details, "reason", None) if details is not None else None
    if reason == "max_output_tokens":
        return "length"
    if reason:
        return str(reason)
    return "tool_calls" if has_calls else "stop"


def parse_response(response: Any, name: str, secrets: list[str | None]) -> ModelResponse:
    """A Responses API ``Response`` as a picoflow ``ModelResponse``."""
    if getattr(response, "status", None) == "failed":
        error = getattr(response, "error", None)
        detail = getattr(error, "message", None) or "the response failed"
        raise ModelError(f"{name} failed: {redact(str(detail), secrets)}")
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[dict[str, Any]] = []
    for item in response.output or ():
        if item.type == "message":
            for part in item.content or ():
                if part.type == "output_text":
                    texts.append(part.text)
                elif part.type == "refusal":
                    texts.append(part.refusal)
        elif item.type == "function_call":
            calls.append(ToolCall(item.name, _arguments(item.arguments), item.call_id or _new_call_id()))
        elif item.type == "reasoning":
            data = item.model_dump(mode="json", exclude_none=True)
            if _replayable(data):
                reasoning.append(data)
    return ModelResponse(
        text="".join(texts),
        tool_calls=calls,
        usage=usage_from_responses(getattr(response, "usage", None)),
        finish_reason=_finish_reason(response, bool(calls)),
        model=getattr(response, "model", None),
        reasoning=reasoning,
    )


class StreamCollector:
    """Turns Responses API stream events into picoflow stream events and the final response."""

    def __init__(self, name: str, secrets: list[str | None]) -> None:
        self.name = name
        self.secrets = secrets
        self.text: list[str] = []
        #: output_index -> the function call being streamed there, in the order calls appeared.
        self.calls: dict[int, dict[str, Any]] = {}
        self.reasoning: list[dict[str, Any]] = []
        self.final: ModelResponse | None = None
        self.model: str | None = None

    def feed(self, event: Any) -> list[StreamEvent]:
        kind = getattr(event, "type", None)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            self.text.append(event.delta)
            return [TextDelta(event.delta)]
        if kind == "response.output_item.added" and event.item.type == "function_call":
            item = event.item
            call = {"position": len(self.calls), "id": item.call_id, "name": item.name, "args": []}
            self.calls[event.output_index] = call
            if item.arguments:
                call["args"].append(item.arguments)
            return [ToolCallDelta(call["position"], item.call_id, item.name, item.arguments or "")]
        if kind == "response.function_call_arguments.delta":
            streaming = self.calls.get(event.output_index)
            if streaming is None:
                return []
            streaming["args"].append(event.delta)
            return [ToolCallDelta(streaming["position"], None, None, event.delta)]
        if kind == "response.output_item.done" and event.item.type == "reasoning":
            data = event.item.model_dump(mode="json", exclude_none=True)
            if _replayable(data):
                self.reasoning.append(data)
        elif kind == "response.created":
            self.model = getattr(event.response, "model", None)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = parse_response(event.response, self.name, self.secrets)
        elif kind == "error":
            raise ModelError(f"{self.name} stream failed: {redact(str(event.message), self.secrets)}")
        return []

    def response(self) -> ModelResponse:
        """The whole answer: the final response event's, or what arrived when the stream ended early."""
        if self.final is not None:
            return self.final
        calls = [
            ToolCall(call["name"], ToolCall.parse_args("".join(call["args"])), call["id"] or _new_call_id())
            for call in self.calls.values()
        ]
        finish = "tool_calls" if calls else None
        usage = Usage(model_calls=1)
        return ModelResponse("".join(self.text), calls, usage, finish, self.model, self.reasoning)
