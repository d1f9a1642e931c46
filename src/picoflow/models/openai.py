"""OpenAI Chat Completions adapter, also for OpenAI-compatible servers (Ollama, vLLM, llama.cpp, LM Studio).

One class serves both: an OpenAI-compatible server is the same wire format at another ``base_url``.
The differences are small and explicit (``max_tokens`` naming, where the API key comes from, unknown
parameters passed through) rather than a second adapter that would drift.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from picoflow.exceptions import ModelError
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition
from picoflow.models._retry import (
    ADAPTER_KNOBS,
    Failure,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
    relay_stream,
    split_params,
)
from picoflow.models._specs import ModelSpec
from picoflow.models.base import Model, ResponseDone, StreamEvent, TextDelta, ToolCallDelta
from picoflow.usage import Usage

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.completion_usage import CompletionUsage

    from picoflow.models.catalog import ModelSelection

DEFAULT_TIMEOUT = 60.0
#: Parameters sent to the provider under the same name.
_PASSTHROUGH = (
    "temperature",
    "top_p",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "stop",
    "reasoning_effort",
    "verbosity",
)
_HANDLED = {*_PASSTHROUGH, *ADAPTER_KNOBS, "max_tokens", "parallel_tool_calls"}


def _sdk() -> Any:
    try:
        import openai
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ModelError("the OpenAI adapter needs the openai SDK: pip install 'picoflow[openai]'") from error
    return openai


def _classify(exc: BaseException) -> Failure | None:
    openai = _sdk()
    if isinstance(exc, openai.APITimeoutError):
        return Failure("request timed out", timed_out=True)
    if isinstance(exc, openai.APIConnectionError):
        return Failure(str(exc) or "connection error")
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else None
        return Failure(
            str(message or exc.message),
            status_code=exc.status_code,
            retry_after=parse_retry_after(dict(exc.response.headers)),
        )
    return None


def _arguments(raw: object) -> Mapping[str, Any] | str:
    # The SDK does not validate responses: some compatible servers send an object, not JSON text.
    if isinstance(raw, dict):
        return raw
    if raw is None or isinstance(raw, str):
        return ToolCall.parse_args(raw)
    return json.dumps(raw)


def _new_call_id() -> str:
    # Some compatible servers omit ids; tool results must still be matched to their call.
    return f"call_{uuid.uuid4().hex[:24]}"


def _schema_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"


def openai_tool(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as a Chat Completions ``tools`` entry (``strict`` when its schema allows it)."""
    function: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
    }
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's system prompt and memory in Chat Completions form."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.append(_to_openai_message(message))
    return messages


def _to_openai_message(message: Message) -> dict[str, Any]:
    if message.role == "assistant":
        entry: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.args_json()},
                }
                for call in message.tool_calls
            ]
        return entry
    if message.role == "tool":
        content = message.content
        # Chat Completions has no error flag on tool results; say it in the text the model reads.
        if message.is_error and not content.lower().startswith("error"):
            content = f"Error: {content}"
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": content}
    return {"role": message.role, "content": message.content}


def usage_from_openai(usage: CompletionUsage | None) -> Usage:
    result = Usage(model_calls=1)
    if usage is None:
        return result
    result.input_tokens = usage.prompt_tokens or 0
    result.output_tokens = usage.completion_tokens or 0
    prompt_details = usage.prompt_tokens_details
    if prompt_details is not None:
        result.cached_input_tokens = prompt_details.cached_tokens or 0
        result.cache_creation_tokens = getattr(prompt_details, "cache_write_tokens", None) or 0
    completion_details = usage.completion_tokens_details
    if completion_details is not None:
        result.reasoning_tokens = completion_details.reasoning_tokens or 0
    return result


class OpenAIModel(Model):
    """A model behind the OpenAI Chat Completions API, at OpenAI or at any compatible server."""

    def __init__(
        self,
        model: str,
        *,
        provider: str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        params: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        spec: ModelSpec | None = None,
    ) -> None:
        self.model = model
        self.provider = provider
        self.name = f"{provider}:{model}"
        self.spec = spec
        self._params, self._timeout, self.retry = split_params(params, retry, DEFAULT_TIMEOUT)
        self._base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self._api_key = api_key
        self._client: AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_selection(cls, selection: ModelSelection) -> OpenAIModel:
        from picoflow.models.catalog import resolve

        spec, params = resolve(selection)
        return cls(
            selection.name, provider=selection.provider, base_url=selection.base_url, params=params, spec=spec
        )

    def __repr__(self) -> str:
        where = f", base_url={self._base_url!r}" if self._base_url else ""
        return f"OpenAIModel({self.name!r}{where})"

    @property
    def compatible(self) -> bool:
        return self.provider != "openai"

    def _resolve_api_key(self) -> str:
        if self._api_key:
            return self._api_key
        if self.compatible:
            # Never forward an OpenAI key to a third-party server; local servers ignore the header.
            return os.environ.get("OPENAI_COMPATIBLE_API_KEY") or "not-needed"
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise ModelError(f"{self.name}: set the OPENAI_API_KEY environment variable")
        return key

    def client(self) -> AsyncOpenAI:
        """The SDK client for the running event loop (its connection pool is bound to one loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            openai = _sdk()
            self._client = openai.AsyncOpenAI(
                api_key=self._resolve_api_key(),
                base_url=self._base_url,
                timeout=self._timeout,
                max_retries=0,
            )
            self._client_loop = loop
        assert self._client is not None
        return self._client

    def build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        settings = {**self._params, **{k: v for k, v in request.settings.items() if k not in ADAPTER_KNOBS}}
        kwargs: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(request)}
        if request.tools:
            kwargs["tools"] = [openai_tool(tool) for tool in request.tools]
            if settings.get("parallel_tool_calls") is not None:
                kwargs["parallel_tool_calls"] = settings["parallel_tool_calls"]
        if request.output is not None:
            json_schema: dict[str, Any] = {
                "name": _schema_name(request.output.name),
                "schema": dict(request.output.schema),
            }
            if request.output.description:
                json_schema["description"] = request.output.description
            if request.output.strict:
                json_schema["strict"] = True
            kwargs["response_format"] = {"type": "json_schema", "json_schema": json_schema}
        for key in _PASSTHROUGH:
            if settings.get(key) is not None:
                kwargs[key] = settings[key]
        if settings.get("max_tokens") is not None:
            # OpenAI renamed the field (reasoning models refuse the old name); compatible servers use the old.
            kwargs["max_tokens" if self.compatible else "max_completion_tokens"] = settings["max_tokens"]
        extra = {key: value for key, value in settings.items() if key not in _HANDLED}
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    async def _create(self, kwargs: dict[str, Any]) -> Any:
        client = self.client()
        return await call_with_retries(
            lambda: client.chat.completions.create(**kwargs),
            provider=self.name,
            classify=_classify,
            policy=self.retry,
            secrets=[self._api_key, os.environ.get("OPENAI_API_KEY")],
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        completion: ChatCompletion = await self._create(self.build_kwargs(request))
        if not completion.choices:
            raise ModelError(f"{self.name} returned no choices")
        choice = completion.choices[0]
        message = choice.message
        calls = []
        for call in message.tool_calls or ():
            function: Any = getattr(call, "function", None)
            if function is not None:  # custom (free-text) tools are not used by picoflow
                calls.append(
                    ToolCall(function.name, _arguments(function.arguments), call.id or _new_call_id())
                )
        return ModelResponse(
            text=message.content or message.refusal or "",
            tool_calls=calls,
            usage=usage_from_openai(completion.usage),
            finish_reason=choice.finish_reason,
            model=completion.model,
        )

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        kwargs = self.build_kwargs(request)
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
        stream = await self._create(kwargs)
        collected = _StreamCollector()
        relayed = relay_stream(
            stream, collected.feed, name=self.name, classify=_classify, secrets=[self._api_key]
        )
        async for event in relayed:
            yield event
        yield ResponseDone(collected.response())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


class _StreamCollector:
    """Turns Chat Completions chunks into picoflow stream events and the final response."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage = Usage(model_calls=1)
        self.finish_reason: str | None = None
        self.model: str | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = usage_from_openai(chunk.usage)
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                events.append(TextDelta(delta.content))
            for part in delta.tool_calls or ():
                call = self.calls.setdefault(part.index, {"id": "", "name": "", "args": []})
                name = part.function.name if part.function else None
                args = (part.function.arguments if part.function else None) or ""
                call["id"] = part.id or call["id"]
                call["name"] = name or call["name"]
                call["args"].append(args)
                events.append(ToolCallDelta(part.index, part.id, name, args))
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return events

    def response(self) -> ModelResponse:
        calls = [
            ToolCall(call["name"], ToolCall.parse_args("".join(call["args"])), call["id"] or _new_call_id())
            for _, call in sorted(self.calls.items())
        ]
        return ModelResponse("".join(self.text), calls, self.usage, self.finish_reason, self.model)
