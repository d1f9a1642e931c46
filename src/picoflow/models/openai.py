"""OpenAI Chat Completions adapter, also for OpenAI-compatible servers (Ollama, vLLM, llama.cpp, LM Studio).

One class serves both: an OpenAI-compatible server is the same wire format at another ``base_url``.
The differences are small and explicit (``max_tokens`` naming, where the API key comes from, unknown
parameters passed through) rather than a second adapter that would drift.

What real compatible servers and small models do is handled here too:

* a tool call the model wrote as text (llama.cpp with a model's own template returns it as the
  answer) is read back as a call, with a warning (``text_calls``);
* errors are classified from what the server says: a refused key or an unknown model is a
  configuration error, tried once; a server that could not parse the model's output reports a
  misbehaving model, not an outage retried with the same request;
* a request with tools and a structured ``output`` does not send ``response_format`` to a
  compatible server: its schema grammar would win over the tools, which would never be called.
  The request goes with the tools alone; once the model answers instead of calling one, that
  answer is asked for once more as JSON, with ``response_format`` and no tools, so the final
  answer still comes schema-shaped (two model calls for it, both counted in the usage).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from picoflow.exceptions import ModelConfigurationError, ModelError
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition
from picoflow.models._file_parts import Files, chat_content
from picoflow.models._network import NetworkModel
from picoflow.models._retry import (
    ADAPTER_KNOBS,
    Failure,
    call_with_retries,
    parse_retry_after,
    relay_stream,
)
from picoflow.models.base import ResponseDone, StreamEvent, TextDelta, ToolCallDelta
from picoflow.models.text_calls import HeldText, new_call_id, recover_tool_calls
from picoflow.usage import Usage

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.completion_usage import CompletionUsage


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
        raise ModelError(
            "the OpenAI adapter needs the openai SDK: pip install 'picoflow-ai[openai]'"
        ) from error
    return openai


#: What servers say when they could not read the model's own output (llama.cpp's tool-call parser,
#: Ollama's): the model misbehaved; the same request would most likely fail the same way.
_FORMAT_COMPLAINT = re.compile(
    r"does not match the expected|model produced output|error parsing tool call|failed to parse tool call"
    r"|failed to parse (?:the )?model(?:'s)? (?:output|response)",
    re.IGNORECASE,
)
_FORMAT_STATUSES = frozenset({400, 422, 500})


def classify(exc: BaseException, *, model: str, key_variable: str) -> Failure | None:
    """What a failed call says, read from the server's answer (see ``Failure.kind``)."""
    openai = _sdk()
    if isinstance(exc, openai.APITimeoutError):
        return Failure("request timed out", timed_out=True)
    if isinstance(exc, openai.APIConnectionError):
        return Failure(str(exc) or "connection error")
    if not isinstance(exc, openai.APIStatusError):
        return None
    body = exc.body
    message = str((body.get("message") if isinstance(body, dict) else None) or exc.message)
    status = exc.status_code
    if status in (401, 403):
        advice = f"Set {key_variable} to a key this server accepts"
        return Failure(message, status, kind="configuration", advice=advice)
    if status == 404:
        advice = f"Check that the server at this base URL serves the model {model!r}"
        return Failure(message, status, kind="configuration", advice=advice)
    complaint = _FORMAT_COMPLAINT.search(message) if status in _FORMAT_STATUSES else None
    if complaint is not None:
        # What follows a colon is the model's raw output (Ollama's "raw='...'"): it may quote the user.
        cut = message.find(":", complaint.end())
        said = message if cut < 0 else message[:cut]
        return Failure(said, status, kind="misbehaviour")
    return Failure(message, status, retry_after=parse_retry_after(dict(exc.response.headers)))


def _arguments(raw: object) -> Mapping[str, Any] | str:
    # The SDK does not validate responses: some compatible servers send an object, not JSON text.
    if isinstance(raw, dict):
        return raw
    if raw is None or isinstance(raw, str):
        return ToolCall.parse_args(raw)
    return json.dumps(raw)


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


def as_json_request(request: ModelRequest, draft: str) -> ModelRequest:
    """``request`` asking for ``draft``, the model's final answer, again as the structured output
    (no tools, so that ``response_format`` can be sent)."""
    assert request.output is not None
    described = f" ({request.output.description.strip()})" if request.output.description.strip() else ""
    ask = Message.user(
        f"Now give that final answer{described} as one JSON object matching the required schema, "
        "and nothing else.",
        kind="correction",
    )
    messages = [*request.messages, Message.assistant(draft), ask]
    return replace(request, messages=messages, tools=())


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def to_openai_messages(request: ModelRequest, *, reads_pdf: bool = True) -> list[dict[str, Any]]:
    """The request's system prompt and memory in Chat Completions form (``reads_pdf``: PDFs go as
    ``file`` parts, else as their text)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.append(_to_openai_message(message, request.files, reads_pdf))
    return messages


def _to_openai_message(message: Message, files: Files, reads_pdf: bool) -> dict[str, Any]:
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
    if message.attachments:
        return {"role": message.role, "content": chat_content(message, files, reads_pdf=reads_pdf)}
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


class OpenAIClientModel(NetworkModel["AsyncOpenAI"]):
    """What the Chat Completions and the Responses adapters share: OpenAI's SDK client, and where
    its key comes from (OpenAI's key never goes to another service)."""

    default_provider = "openai"
    base_url_env = "OPENAI_BASE_URL"
    #: Providers that are OpenAI itself; every other one is a compatible server.
    first_party: ClassVar[tuple[str, ...]] = ("openai",)

    def __init__(self, model: str, *, key_variable: str | None = None, **options: Any) -> None:
        super().__init__(model, **options)
        self._key_variable = key_variable

    @property
    def compatible(self) -> bool:
        return self.provider not in self.first_party

    @property
    def key_variable(self) -> str:
        """The environment variable the API key of this model comes from."""
        if self._key_variable is not None:
            return self._key_variable
        return "OPENAI_COMPATIBLE_API_KEY" if self.compatible else "OPENAI_API_KEY"

    def _resolve_api_key(self) -> str:
        if self._api_key:
            return self._api_key
        if self._key_variable is None and self.compatible:
            # Never forward an OpenAI key to a third-party server; local servers ignore the header.
            return os.environ.get("OPENAI_COMPATIBLE_API_KEY") or "not-needed"
        key = os.environ.get(self.key_variable, "").strip()
        if not key:
            raise ModelConfigurationError(
                f"{self.name}: set the {self.key_variable} environment variable", provider=self.name
            )
        return key

    def _classify(self, exc: BaseException) -> Failure | None:
        return classify(exc, model=self.model, key_variable=self.key_variable)

    def new_client(self) -> AsyncOpenAI:
        client: AsyncOpenAI = _sdk().AsyncOpenAI(
            api_key=self._resolve_api_key(), base_url=self._base_url, timeout=self._timeout, max_retries=0
        )
        return client


class OpenAIModel(OpenAIClientModel):
    """A model behind the OpenAI Chat Completions API, at OpenAI or at any compatible server."""

    def native_output(self, request: ModelRequest) -> bool:
        """Whether ``request.output`` is asked for with ``response_format``: not beside tools on a
        compatible server, whose schema grammar would keep the model from ever calling them."""
        return request.output is not None and not (request.tools and self.compatible)

    def _wants_json_again(self, request: ModelRequest, response: ModelResponse) -> bool:
        # The model answered a tools-only request with prose: ask for it as the structured output.
        return (
            request.output is not None
            and not self.native_output(request)
            and not response.tool_calls
            and not _is_json_object(response.text.strip())
        )

    def build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        settings = {**self._params, **{k: v for k, v in request.settings.items() if k not in ADAPTER_KNOBS}}
        # OpenAI reads PDFs itself; compatible servers rarely take file parts, so they get the text.
        messages = to_openai_messages(request, reads_pdf=not self.compatible)
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.tools:
            kwargs["tools"] = [openai_tool(tool) for tool in request.tools]
            if settings.get("parallel_tool_calls") is not None:
                kwargs["parallel_tool_calls"] = settings["parallel_tool_calls"]
        if request.output is not None and self.native_output(request):
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
            classify=self._classify,
            policy=self.retry,
            secrets=[self._api_key, os.environ.get(self.key_variable), os.environ.get("OPENAI_API_KEY")],
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await self._request_once(request)
        if not self._wants_json_again(request, response):
            return response
        final = await self._request_once(as_json_request(request, response.text))
        final.usage = response.usage + final.usage
        final.warnings[:0] = response.warnings
        return final

    async def _request_once(self, request: ModelRequest) -> ModelResponse:
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
                    ToolCall(function.name, _arguments(function.arguments), call.id or new_call_id())
                )
        response = ModelResponse(
            text=message.content or message.refusal or "",
            tool_calls=calls,
            usage=usage_from_openai(completion.usage),
            finish_reason=choice.finish_reason,
            model=completion.model,
        )
        recover_tool_calls(response, request, model=self.name)
        return response

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.output is not None and not self.native_output(request):
            # The answer may take two calls, and the first one's prose is not the answer: stream none.
            response = await self.request(request)
            for index, call in enumerate(response.tool_calls):
                yield ToolCallDelta(index, call.id, call.name, call.args_json())
            yield ResponseDone(response)
            return
        kwargs = self.build_kwargs(request)
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
        stream = await self._create(kwargs)
        collected = _StreamCollector(HeldText() if request.tools else None)
        relayed = relay_stream(
            stream, collected.feed, name=self.name, classify=self._classify, secrets=[self._api_key]
        )
        async for event in relayed:
            yield event
        response = collected.response()
        if recover_tool_calls(response, request, model=self.name):
            for index, call in enumerate(response.tool_calls):
                yield ToolCallDelta(index, call.id, call.name, call.args_json())
        elif collected.held is not None and (rest := collected.held.release()):
            yield TextDelta(rest)
        yield ResponseDone(response)


class _StreamCollector:
    """Turns Chat Completions chunks into picoflow stream events and the final response.

    With ``held``, text that may be a tool call written as text is held back until the end.
    """

    def __init__(self, held: HeldText | None = None) -> None:
        self.held = held
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
                visible = delta.content if self.held is None else self.held.feed(delta.content)
                if visible:
                    events.append(TextDelta(visible))
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
            ToolCall(call["name"], ToolCall.parse_args("".join(call["args"])), call["id"] or new_call_id())
            for _, call in sorted(self.calls.items())
        ]
        return ModelResponse("".join(self.text), calls, self.usage, self.finish_reason, self.model)
