"""Anthropic Messages API adapter.

The Messages API is stricter than Chat Completions about conversation shape: roles must alternate,
tool results travel as ``tool_result`` blocks inside a *user* message (before any text), the system
prompt is a separate field, and the conversation must open with a user turn. ``to_anthropic_messages``
folds picoflow's flat memory into that shape.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from picoflow.exceptions import ModelConfigurationError, ModelError
from picoflow.messages import Message, ModelRequest, ModelResponse, OutputSchema, ToolCall, ToolDefinition
from picoflow.models._file_parts import Files, anthropic_blocks
from picoflow.models._network import NetworkModel
from picoflow.models._retry import (
    Failure,
    FailureKind,
    call_with_retries,
    parse_retry_after,
    relay_stream,
)
from picoflow.models.base import ResponseDone, StreamEvent, TextDelta, ToolCallDelta
from picoflow.usage import Usage

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic


DEFAULT_MAX_TOKENS = 4096
#: Placeholder first turn when memory starts with the assistant (e.g. a greeting sent with ``direct()``).
CONVERSATION_START = "(conversation start)"
#: Sampling knobs the installed SDK no longer types; the API still accepts them, so they go in the body.
_SAMPLING = ("temperature", "top_p", "top_k")
#: Content blocks of the model's reasoning, echoed back verbatim while a tool loop goes on.
_THINKING_BLOCKS = ("thinking", "redacted_thinking")


def _sdk() -> Any:
    try:
        import anthropic
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ModelError(
            "the Anthropic adapter needs the anthropic SDK: pip install 'picoflow-ai[anthropic]'"
        ) from error
    return anthropic


def _classify(exc: BaseException) -> Failure | None:
    anthropic = _sdk()
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure("request timed out", timed_out=True)
    if isinstance(exc, anthropic.APIConnectionError):
        return Failure(str(exc) or "connection error")
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        kind: FailureKind | None = None
        advice = None
        if status in (401, 403):
            kind, advice = "configuration", "Set ANTHROPIC_API_KEY to a key Anthropic accepts"
        elif status == 404:
            kind, advice = "configuration", "Check the model's name (picoflow's catalog lists the known ones)"
        return Failure(
            str(getattr(exc, "api_message", None) or exc.message),
            status_code=status,
            retry_after=parse_retry_after(dict(exc.response.headers)),
            kind=kind,
            advice=advice,
        )
    return None


def _tool_input(call: ToolCall) -> dict[str, Any]:
    # The API only takes objects; a malformed call was already answered with an error tool result.
    return dict(call.args) if not isinstance(call.args, str) else {}


def _blocks(message: Message, files: Files) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
                "is_error": message.is_error,
            }
        ]
    # Thinking blocks go back first and untouched: their signatures are checked by the API.
    blocks: list[dict[str, Any]] = [dict(block) for block in message.reasoning if _is_thinking(block)]
    if message.content.strip():
        blocks.append({"type": "text", "text": message.content})
    if message.attachments:
        blocks.extend(anthropic_blocks(message, files))
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)})
    return blocks


def _is_thinking(block: Mapping[str, Any]) -> bool:
    return block.get("type") in _THINKING_BLOCKS


def _thinking_block(block: Any) -> dict[str, Any]:
    """A thinking or redacted-thinking content block as plain data, exactly as it must be echoed."""
    if block.type == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return {"type": "redacted_thinking", "data": block.data}


def _tool_loop_has_thinking(messages: Sequence[Message]) -> bool:
    """Whether the assistant message the pending tool results answer kept its thinking blocks."""
    for message in reversed(messages):
        if message.role == "assistant":
            return any(_is_thinking(block) for block in message.reasoning)
    return False


def to_anthropic_messages(request: ModelRequest) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt and the alternating user/assistant turns of ``request``."""
    system = [request.system] if request.system else []
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            # Only one system prompt exists in this API; later system notes are appended to it.
            system.append(message.content)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, request.files)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # tool_result blocks must open a user turn, ahead of any text.
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    if turns and turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": CONVERSATION_START}]})
    return "\n\n".join(part for part in system if part), turns


def usage_from_anthropic(usage: Any) -> Usage:
    result = Usage(model_calls=1)
    if usage is None:
        return result
    cache_read = getattr(usage, "cache_read_input_tokens", None) or 0
    cache_write = getattr(usage, "cache_creation_input_tokens", None) or 0
    # Anthropic's input_tokens excludes cache reads and writes; picoflow's includes them.
    result.input_tokens = (getattr(usage, "input_tokens", None) or 0) + cache_read + cache_write
    result.output_tokens = getattr(usage, "output_tokens", None) or 0
    result.cached_input_tokens = cache_read
    result.cache_creation_tokens = cache_write
    details = getattr(usage, "output_tokens_details", None)
    result.reasoning_tokens = (getattr(details, "thinking_tokens", None) or 0) if details is not None else 0
    return result


def anthropic_tool(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as a Messages API ``tools`` entry."""
    return {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}


_EPHEMERAL = {"type": "ephemeral"}
"""A prompt-cache breakpoint: the request's prefix up to here is cached for a few minutes."""


class AnthropicModel(NetworkModel["AsyncAnthropic"]):
    """A Claude model behind the Anthropic Messages API."""

    default_provider = "anthropic"
    base_url_env = "ANTHROPIC_BASE_URL"

    @property
    def native_output(self) -> bool:
        return self.spec is None or self.spec.structured_output == "native"

    def new_client(self) -> AsyncAnthropic:
        key = self._api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ModelConfigurationError(
                f"{self.name}: set the ANTHROPIC_API_KEY environment variable", provider=self.name
            )
        client: AsyncAnthropic = _sdk().AsyncAnthropic(
            api_key=key, base_url=self._base_url, timeout=self._timeout, max_retries=0
        )
        return client

    def output_tool_name(self, request: ModelRequest) -> str | None:
        """Name of the forced tool standing in for structured output, when native mode is unavailable."""
        if request.output is None or self.native_output:
            return None
        taken = {tool.name for tool in request.tools}
        name = request.output.name.replace(" ", "_")[:64] or "final_answer"
        return f"{name}_output" if name in taken else name

    def build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``."""
        settings = {**self._params, **request.settings}
        system, messages = to_anthropic_messages(request)
        budget: int | None = settings.get("thinking_budget")
        last_is_tool_result = bool(request.messages) and request.messages[-1].role == "tool"
        # A tool loop that goes on with thinking must send back the thinking blocks of the call it
        # answers. When they are missing (the call came from another model, or was made without
        # thinking), that continuation is answered without thinking rather than refused by the API.
        thinking = budget is not None and (
            not last_is_tool_result or _tool_loop_has_thinking(request.messages)
        )
        default = self.spec.default_max_tokens if self.spec is not None else None
        max_tokens = int(settings.get("max_tokens") or default or DEFAULT_MAX_TOKENS)
        if thinking and budget is not None and max_tokens <= budget:
            max_tokens = budget + DEFAULT_MAX_TOKENS
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "messages": messages}
        if system:
            # Prompt caching: the tools and the system prompt are the stable prefix of every call of
            # a step, so they are marked for the provider's cache (a prefix below the model's minimum
            # is simply not cached). Reads cost a tenth of fresh input; the first write a quarter more.
            kwargs["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
        tools = [self._tool_schema(anthropic_tool(tool), tool.strict) for tool in request.tools]
        output_tool = self.output_tool_name(request)
        if request.output is not None and output_tool is None:
            kwargs["output_config"] = {
                "format": {"type": "json_schema", "schema": dict(request.output.schema)}
            }
        elif request.output is not None and output_tool is not None:
            tools.append(self._output_tool(output_tool, request.output))
            if not thinking:
                # Forcing a tool is refused while thinking; the prompt-level instruction must do then.
                kwargs["tool_choice"] = (
                    {"type": "any"} if request.tools else {"type": "tool", "name": output_tool}
                )
        if tools:
            # Its own breakpoint: the tools stay cached when the system prompt (rebuilt on every
            # call, e.g. from the step's state) changes.
            tools[-1] = {**tools[-1], "cache_control": _EPHEMERAL}
            kwargs["tools"] = tools
        if thinking:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if settings.get("stop_sequences"):
            kwargs["stop_sequences"] = list(settings["stop_sequences"])
        sampling = {key: settings[key] for key in _SAMPLING if settings.get(key) is not None}
        if sampling and not thinking:
            kwargs["extra_body"] = sampling
        return kwargs

    def _tool_schema(self, schema: dict[str, Any], strict: bool) -> dict[str, Any]:
        if strict and self.native_output:
            schema["strict"] = True
        return schema

    @staticmethod
    def _output_tool(name: str, output: OutputSchema) -> dict[str, Any]:
        description = output.description or "Give the final answer in this exact structure."
        return {"name": name, "description": description, "input_schema": dict(output.schema)}

    async def _create(self, kwargs: dict[str, Any]) -> Any:
        client = self.client()
        return await call_with_retries(
            lambda: client.messages.create(**kwargs),
            provider=self.name,
            classify=_classify,
            policy=self.retry,
            secrets=[self._api_key, os.environ.get("ANTHROPIC_API_KEY")],
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        message = await self._create(self.build_kwargs(request))
        output_tool = self.output_tool_name(request)
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[dict[str, Any]] = []
        for block in message.content:
            if block.type in _THINKING_BLOCKS:
                reasoning.append(_thinking_block(block))
            elif block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use" and block.name == output_tool:
                texts = [json.dumps(block.input, ensure_ascii=False)]
            elif block.type == "tool_use":
                args = block.input if isinstance(block.input, dict) else json.dumps(block.input)
                calls.append(ToolCall(block.name, args, block.id))
        return ModelResponse(
            text="".join(texts),
            tool_calls=calls,
            usage=usage_from_anthropic(message.usage),
            finish_reason=message.stop_reason,
            model=message.model,
            reasoning=reasoning,
        )

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        kwargs = self.build_kwargs(request)
        kwargs["stream"] = True
        stream = await self._create(kwargs)
        collected = _StreamCollector(self.output_tool_name(request))
        relayed = relay_stream(
            stream, collected.feed, name=self.name, classify=_classify, secrets=[self._api_key]
        )
        async for event in relayed:
            yield event
        yield ResponseDone(collected.response())


class _StreamCollector:
    """Turns Messages API stream events into picoflow stream events and the final response."""

    def __init__(self, output_tool: str | None) -> None:
        self.output_tool = output_tool
        self.text: list[str] = []
        self.output_json: list[str] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.tool_count = 0
        self.usage = Usage(model_calls=1)
        self.finish_reason: str | None = None
        self.model: str | None = None

    def feed(self, event: Any) -> list[StreamEvent]:
        kind = event.type
        if kind == "message_start":
            self.model = event.message.model
            self.usage = usage_from_anthropic(event.message.usage)
        elif kind == "content_block_start":
            return self._start(event.index, event.content_block)
        elif kind == "content_block_delta":
            return self._delta(event.index, event.delta)
        elif kind == "message_delta":
            self.finish_reason = event.delta.stop_reason or self.finish_reason
            self._merge_usage(event.usage)
        return []

    def _start(self, index: int, block: Any) -> list[StreamEvent]:
        if block.type == "tool_use" and block.name == self.output_tool:
            self.output_json = []
            self.blocks[index] = {"kind": "output"}
        elif block.type == "tool_use":
            entry = {
                "kind": "tool",
                "position": self.tool_count,
                "id": block.id,
                "name": block.name,
                "args": [],
            }
            self.blocks[index] = entry
            self.tool_count += 1
            return [ToolCallDelta(entry["position"], block.id, block.name, "")]
        elif block.type in _THINKING_BLOCKS:
            self.blocks[index] = {"kind": "reasoning", "block": _thinking_block(block)}
        elif block.type == "text":
            self.blocks[index] = {"kind": "text"}
            if block.text:
                self.text.append(block.text)
                return [TextDelta(block.text)]
        return []

    def _delta(self, index: int, delta: Any) -> list[StreamEvent]:
        entry = self.blocks.get(index)
        if entry is None:
            return []
        if delta.type in ("thinking_delta", "signature_delta") and entry["kind"] == "reasoning":
            part = "thinking" if delta.type == "thinking_delta" else "signature"
            entry["block"][part] += getattr(delta, part)
            return []
        if delta.type == "text_delta" and entry["kind"] == "text":
            self.text.append(delta.text)
            return [TextDelta(delta.text)]
        if delta.type == "input_json_delta" and entry["kind"] == "output" and self.output_json is not None:
            self.output_json.append(delta.partial_json)
            return [TextDelta(delta.partial_json)]
        if delta.type == "input_json_delta" and entry["kind"] == "tool":
            entry["args"].append(delta.partial_json)
            return [ToolCallDelta(entry["position"], None, None, delta.partial_json)]
        return []

    def _merge_usage(self, usage: Any) -> None:
        if usage is None:
            return
        update = usage_from_anthropic(usage)
        # message_delta counts are cumulative; keep message_start's input figures when it omits them.
        self.usage.output_tokens = update.output_tokens
        self.usage.reasoning_tokens = update.reasoning_tokens or self.usage.reasoning_tokens
        if getattr(usage, "input_tokens", None) is not None:
            self.usage.input_tokens = update.input_tokens
            self.usage.cached_input_tokens = update.cached_input_tokens
            self.usage.cache_creation_tokens = update.cache_creation_tokens

    def response(self) -> ModelResponse:
        ordered = [entry for _, entry in sorted(self.blocks.items())]
        calls = [
            ToolCall(entry["name"], ToolCall.parse_args("".join(entry["args"])), entry["id"])
            for entry in ordered
            if entry["kind"] == "tool"
        ]
        reasoning = [entry["block"] for entry in ordered if entry["kind"] == "reasoning"]
        text = "".join(self.output_json) if self.output_json is not None else "".join(self.text)
        return ModelResponse(text, calls, self.usage, self.finish_reason, self.model, reasoning)
