"""Google Gemini adapter (Gemini Developer API through the official ``google-genai`` SDK).

Gemini's conversation is a list of ``user``/``model`` contents made of parts: text, ``functionCall``
and ``functionResponse``. Tool results travel in a *user* content, one ``functionResponse`` per call,
matched to the call by name and order (and by id when the API gave one). Thinking models attach an
opaque ``thoughtSignature`` to some parts; it must come back on the same part while a tool loop goes
on, so the adapter keeps each one on the assistant message (``Message.reasoning``) and re-attaches it.
"""

from __future__ import annotations

import base64
import functools
import importlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from picoflow.exceptions import ModelConfigurationError, ModelError
from picoflow.messages import ModelRequest, ModelResponse, ResponseWarning, ToolCall, ToolDefinition
from picoflow.models._gemini_wire import GENERATED_ID, SIGNATURE, inline_refs, to_gemini_contents
from picoflow.models._network import NetworkModel
from picoflow.models._retry import (
    Failure,
    call_with_retries,
    parse_retry_after,
    redact,
)
from picoflow.models.base import ResponseDone, StreamEvent, TextDelta, ToolCallDelta
from picoflow.usage import Usage

if TYPE_CHECKING:
    from google.genai import Client


__all__ = ["KEY_VARIABLES", "GoogleModel", "gemini_tool", "usage_from_gemini"]

#: Where the key is read from, in this order (the SDK's own order).
KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY")


def _sdk() -> Any:
    try:
        from google import genai
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ModelError(
            "the Google adapter needs the google-genai SDK: pip install 'picoflow-ai[google]'"
        ) from error
    return genai


def _classify(exc: BaseException, *, model: str = "") -> Failure | None:
    """What a failed call says, read from the API's answer (see ``Failure.kind``)."""
    genai = _sdk()
    if isinstance(exc, genai.errors.APIError):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        message = str(exc.message or exc.status or "request refused")
        status = exc.code or None
        if status in (401, 403) or (status == 400 and _is_key_problem(exc)):
            return Failure(message, status, kind="configuration", advice=_KEY_ADVICE)
        if status == 404:
            advice = f"Check that {model!r} is a model of the Gemini API"
            return Failure(message, status, kind="configuration", advice=advice)
        if status == 400 and exc.status == "FAILED_PRECONDITION":
            return Failure(message, status, kind="configuration")  # billing, region
        if status == 400:
            # INVALID_ARGUMENT: the same request would be refused again; the exchange is unusable.
            return Failure(message, status, kind="misbehaviour")
        retry_after = parse_retry_after(dict(headers) if headers is not None else None)
        return Failure(message, status, retry_after=retry_after)
    timeouts, transport = _transport_errors()
    if isinstance(exc, timeouts):
        return Failure("request timed out", timed_out=True)
    if isinstance(exc, transport):
        return Failure(str(exc) or "connection error")
    return None


_KEY_ADVICE = "Set GOOGLE_API_KEY (or GEMINI_API_KEY) to a key allowed to use this model"


def _is_key_problem(exc: Any) -> bool:
    # The Gemini API answers an invalid key with 400 INVALID_ARGUMENT and reason API_KEY_INVALID.
    return "API_KEY_INVALID" in json.dumps(exc.details, default=str) or "API key" in str(exc.message)


@functools.cache
def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """Timeout and connection error classes of the HTTP clients the SDK may use: httpx, its fork
    httpx2 (newer SDKs), or aiohttp when installed."""
    timeouts: list[type[BaseException]] = [TimeoutError]
    transport: list[type[BaseException]] = [ConnectionError]
    for module_name, timeout_name, transport_name in (
        ("httpx", "TimeoutException", "TransportError"),
        ("httpx2", "TimeoutException", "TransportError"),
        ("aiohttp", "ServerTimeoutError", "ClientError"),
    ):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        timeouts.append(getattr(module, timeout_name))
        transport.append(getattr(module, transport_name))
    return tuple(timeouts), tuple(transport)


def gemini_tool(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as a Gemini function declaration (JSON Schema with ``$ref``s inlined)."""
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters_json_schema": inline_refs(tool.parameters),
    }


def usage_from_gemini(metadata: Any) -> Usage:
    result = Usage(model_calls=1)
    if metadata is None:
        return result
    thoughts = getattr(metadata, "thoughts_token_count", None) or 0
    # Gemini counts thinking apart from the answer; picoflow's output tokens include reasoning.
    result.input_tokens = (getattr(metadata, "prompt_token_count", None) or 0) + (
        getattr(metadata, "tool_use_prompt_token_count", None) or 0
    )
    result.output_tokens = (getattr(metadata, "candidates_token_count", None) or 0) + thoughts
    result.reasoning_tokens = thoughts
    result.cached_input_tokens = getattr(metadata, "cached_content_token_count", None) or 0
    return result


def _signature(part: Any, call_id: str | None = None) -> dict[str, Any] | None:
    raw = getattr(part, "thought_signature", None)
    if not raw:
        return None
    block: dict[str, Any] = {"type": SIGNATURE, "signature": base64.b64encode(raw).decode("ascii")}
    if call_id is not None:
        block["call_id"] = call_id
    return block


class _Answer:
    """Collects the parts of one answer (whole, or chunk by chunk) into a ``ModelResponse``."""

    def __init__(self, output_tool: str | None) -> None:
        self.output_tool = output_tool
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.reasoning: list[dict[str, Any]] = []
        self.usage = Usage(model_calls=1)
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.warnings: list[ResponseWarning] = []

    def feed(self, response: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        self.model = getattr(response, "model_version", None) or self.model
        if getattr(response, "usage_metadata", None) is not None:
            self.usage = usage_from_gemini(response.usage_metadata)
        candidates = getattr(response, "candidates", None) or []
        if not candidates:
            feedback = getattr(response, "prompt_feedback", None)
            reason = getattr(feedback, "block_reason", None)
            if reason is not None:
                self.finish_reason = f"blocked: {getattr(reason, 'value', reason)}".lower()
            return events
        candidate = candidates[0]
        if candidate.finish_reason is not None:
            self.finish_reason = str(
                getattr(candidate.finish_reason, "value", candidate.finish_reason)
            ).lower()
            if self.finish_reason == "malformed_function_call":
                # The model wrote a call the API could not parse; an empty answer gets a nudge.
                detail = "Gemini could not parse the function call the model wrote"
                self.warnings.append(ResponseWarning("malformed_tool_call", detail))
        content = candidate.content
        for part in (content.parts if content is not None else None) or ():
            events.extend(self._part(part))
        return events

    def _part(self, part: Any) -> list[StreamEvent]:
        call = part.function_call
        if call is not None:
            call_id = call.id or f"{GENERATED_ID}{uuid.uuid4().hex[:16]}"
            args = dict(call.args or {})
            if call.name == self.output_tool and self.output_tool is not None:
                # The structured answer becomes the text; so does its signature's place.
                if (block := _signature(part)) is not None:
                    self.reasoning.append(block)
                text = json.dumps(args, ensure_ascii=False)
                self.text = [text]
                return [TextDelta(text)]
            if (block := _signature(part, call_id)) is not None:
                self.reasoning.append(block)
            index = len(self.calls)
            self.calls.append(ToolCall(call.name or "", args, call_id))
            return [ToolCallDelta(index, call_id, call.name, json.dumps(args, ensure_ascii=False))]
        if (block := _signature(part)) is not None:
            self.reasoning.append(block)
        if part.thought or not part.text:
            return []  # thought summaries are the model's notes, not its answer
        self.text.append(part.text)
        return [TextDelta(part.text)]

    def response(self) -> ModelResponse:
        return ModelResponse(
            text="".join(self.text),
            tool_calls=self.calls,
            usage=self.usage,
            finish_reason=self.finish_reason,
            model=self.model,
            reasoning=self.reasoning,
            warnings=self.warnings,
        )


class _Stream:
    """An SDK stream whose first chunk was already read (so that retries cover the connection)."""

    def __init__(self, first: Any, rest: AsyncIterator[Any]) -> None:
        self.first = first
        self.rest = rest

    async def chunks(self) -> AsyncIterator[Any]:
        if self.first is None:
            return
        yield self.first
        async for chunk in self.rest:
            yield chunk

    async def close(self) -> None:
        closer = getattr(self.rest, "aclose", None)
        if closer is not None:
            await closer()


class GoogleModel(NetworkModel["Client"]):
    """A Gemini model behind the Gemini Developer API."""

    default_provider = "google"
    base_url_env = "GOOGLE_GEMINI_BASE_URL"

    def _secrets(self) -> list[str | None]:
        return [self._api_key, *(os.environ.get(name) for name in KEY_VARIABLES)]

    def new_client(self) -> Client:
        key = self._api_key or next(
            (value for name in KEY_VARIABLES if (value := os.environ.get(name))), None
        )
        if not key:
            raise ModelConfigurationError(
                f"{self.name}: set the GOOGLE_API_KEY (or GEMINI_API_KEY) environment variable",
                provider=self.name,
            )
        genai = _sdk()
        options: dict[str, Any] = {"timeout": int(self._timeout * 1000)}
        if self._base_url:
            options["base_url"] = self._base_url
        # No retry_options: the SDK then makes one attempt, and _retry decides about the next.
        client: Client = genai.Client(
            vertexai=False, api_key=key, http_options=genai.types.HttpOptions(**options)
        )
        return client

    def output_tool_name(self, request: ModelRequest) -> str | None:
        """Gemini 2.5 cannot constrain the answer to a schema while tools are on offer: then a
        forced function of that schema stands in for the structured answer."""
        if request.output is None or not request.tools:
            return None
        taken = {tool.name for tool in request.tools}
        name = "".join(c if c.isalnum() or c in "_-" else "_" for c in request.output.name)[:60] or "answer"
        return f"{name}_output" if name in taken else name

    def build_config(self, request: ModelRequest) -> Any:
        """The ``GenerateContentConfig`` of ``request`` (see ``config_fields``)."""
        return _sdk().types.GenerateContentConfig.model_validate(self.config_fields(request))

    def config_fields(self, request: ModelRequest) -> dict[str, Any]:
        """The fields of the ``GenerateContentConfig`` of ``request``."""
        settings = {**self._params, **request.settings}
        system, _ = to_gemini_contents(request, self.name)
        config: dict[str, Any] = {"automatic_function_calling": {"disable": True}}
        if system:
            config["system_instruction"] = system
        declarations = [gemini_tool(tool) for tool in request.tools]
        output_tool = self.output_tool_name(request)
        if request.output is not None and output_tool is not None:
            description = request.output.description or "Give the final answer in this exact structure."
            declarations.append(
                {
                    "name": output_tool,
                    "description": description,
                    "parameters_json_schema": inline_refs(request.output.schema),
                }
            )
            config["tool_config"] = {"function_calling_config": {"mode": "ANY"}}
        elif request.output is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = inline_refs(request.output.schema)
        if declarations:
            config["tools"] = [{"function_declarations": declarations}]
        for ours, theirs in _SAMPLING.items():
            if settings.get(ours) is not None:
                config[theirs] = settings[ours]
        thinking = {key: settings[key] for key in ("thinking_budget", "thinking_level") if key in settings}
        if thinking:
            config["thinking_config"] = thinking
        return config

    async def _attempt(self, call: Any) -> Any:
        return await call_with_retries(
            call,
            provider=self.name,
            classify=functools.partial(_classify, model=self.model),
            policy=self.retry,
            secrets=self._secrets(),
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        client = self.client()
        contents = _contents(request, self.name)
        config = self.build_config(request)
        reply = await self._attempt(
            lambda: client.aio.models.generate_content(model=self.model, contents=contents, config=config)
        )
        answer = _Answer(self.output_tool_name(request))
        answer.feed(reply)
        return answer.response()

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        client = self.client()
        contents = _contents(request, self.name)
        config = self.build_config(request)

        async def open_stream() -> _Stream:
            chunks = await client.aio.models.generate_content_stream(
                model=self.model, contents=contents, config=config
            )
            iterator = chunks.__aiter__()
            try:
                first = await iterator.__anext__()
            except StopAsyncIteration:
                first = None
            return _Stream(first, iterator)

        stream = await self._attempt(open_stream)
        answer = _Answer(self.output_tool_name(request))
        try:
            async for chunk in stream.chunks():
                for event in answer.feed(chunk):
                    yield event
        except Exception as exc:
            failure = _classify(exc, model=self.model)
            if failure is None:
                raise
            message = redact(failure.message, self._secrets())
            raise ModelError(f"{self.name} stream failed: {message}") from exc
        finally:
            await stream.close()
        yield ResponseDone(answer.response())

    async def close_client(self, client: Client) -> None:
        await client.aio.aclose()


#: picoflow parameter -> ``GenerateContentConfig`` field.
_SAMPLING = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_tokens": "max_output_tokens",
    "stop_sequences": "stop_sequences",
    "seed": "seed",
}


def _contents(request: ModelRequest, model_name: str) -> list[Any]:
    """The request's turns as the SDK takes them: plain dicts, which it reads as ``ContentDict``
    (typed ``Any`` here, since the SDK's own unions change from release to release)."""
    return to_gemini_contents(request, model_name)[1]
