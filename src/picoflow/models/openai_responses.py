"""OpenAI Responses API adapter (``client.responses.create``).

The Responses API differs from Chat Completions in ways that matter to a tool loop: the conversation
is a list of typed *items* (messages, ``function_call``, ``function_call_output``, ``reasoning``), the
system prompt travels as ``instructions``, and a reasoning model's thinking comes back as reasoning
items. Requests are sent with ``store=False`` so OpenAI keeps no conversation state; reasoning models
are then asked for ``reasoning.encrypted_content``, and those items are sent back verbatim ahead of
the function calls they led to, so the model keeps its reasoning while the tool loop goes on.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from picoflow.exceptions import ModelError
from picoflow.messages import ModelRequest, ModelResponse, ResponseWarning
from picoflow.models._responses_wire import (
    StreamCollector,
    cache_key,
    parse_response,
    responses_tool,
    schema_name,
    to_responses_input,
)
from picoflow.models._retry import (
    ADAPTER_KNOBS,
    Failure,
    call_with_retries,
    relay_stream,
)
from picoflow.models.base import ResponseDone, StreamEvent
from picoflow.models.openai import OpenAIClientModel

if TYPE_CHECKING:
    pass

#: Parameters sent to the provider under the same name.
_PASSTHROUGH = ("temperature", "top_p")
#: Chat Completions parameters the Responses API has no field for.
_NOT_IN_RESPONSES = ("seed", "frequency_penalty", "presence_penalty", "stop")
_HANDLED = {
    *_PASSTHROUGH,
    *ADAPTER_KNOBS,
    "max_tokens",
    "parallel_tool_calls",
    "reasoning_effort",
    "verbosity",
}
#: Models that reason (and accept ``include=["reasoning.encrypted_content"]``) when no spec says so.
_REASONING_NAME = re.compile(r"^(o\d|gpt-5)(?!.*-chat)")
_ENCRYPTED_REASONING = "reasoning.encrypted_content"


def _sdk() -> Any:
    try:
        import openai
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ModelError(
            "the OpenAI adapter needs the openai SDK: pip install 'picoflow-ai[openai]'"
        ) from error
    return openai


class OpenAIResponsesModel(OpenAIClientModel):
    """A model behind the OpenAI Responses API, at OpenAI or at a compatible server that speaks it."""

    first_party = ("openai", "openai-chat")

    @property
    def reasoning(self) -> bool:
        """Whether the model reasons, so its encrypted reasoning is asked for and sent back."""
        if self.spec is not None and self.spec.provider == "openai":
            return self.spec.reasoning
        return bool(_REASONING_NAME.match(self.model)) or self._params.get("reasoning_effort") is not None

    def _secrets(self) -> list[str | None]:
        return [self._api_key, os.environ.get("OPENAI_API_KEY"), os.environ.get("OPENAI_COMPATIBLE_API_KEY")]

    def build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``responses.create`` for ``request``."""
        settings = self._settings(request)
        reasoning = self.reasoning
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": to_responses_input(request, replay_reasoning=reasoning),
            "store": False,
        }
        if request.system:
            kwargs["instructions"] = request.system
        if request.tools:
            kwargs["tools"] = [responses_tool(tool) for tool in request.tools]
            if settings.get("parallel_tool_calls") is not None:
                kwargs["parallel_tool_calls"] = settings["parallel_tool_calls"]
        text: dict[str, Any] = {}
        if request.output is not None:
            text["format"] = {
                "type": "json_schema",
                "name": schema_name(request.output.name),
                "schema": dict(request.output.schema),
                "strict": request.output.strict,
            }
            if request.output.description:
                text["format"]["description"] = request.output.description
        if settings.get("verbosity") is not None:
            text["verbosity"] = settings["verbosity"]
        if text:
            kwargs["text"] = text
        for key in _PASSTHROUGH:
            if settings.get(key) is not None:
                kwargs[key] = settings[key]
        if settings.get("max_tokens") is not None:
            kwargs["max_output_tokens"] = settings["max_tokens"]
        if settings.get("reasoning_effort") is not None:
            kwargs["reasoning"] = {"effort": settings["reasoning_effort"]}
        if reasoning:
            kwargs["include"] = [_ENCRYPTED_REASONING]
        if request.session_id and not self.compatible:
            # One cache key per session: its requests share a prefix, so they land where it is cached.
            kwargs["prompt_cache_key"] = cache_key(request.session_id)
        if self.compatible:
            extra = {key: value for key, value in settings.items() if key not in _HANDLED}
            if extra:
                kwargs["extra_body"] = extra
        return kwargs

    def _settings(self, request: ModelRequest) -> dict[str, Any]:
        return {**self._params, **{k: v for k, v in request.settings.items() if k not in ADAPTER_KNOBS}}

    def _noted(self, response: ModelResponse, request: ModelRequest) -> ModelResponse:
        """``response`` with a warning when the selection holds Chat Completions-only parameters.

        They are left out of the request (the API would refuse it) rather than failing every turn of a
        flow that used them with the Chat Completions adapter; the warning says how to keep them.
        """
        settings = self._settings(request)
        ignored = [key for key in _NOT_IN_RESPONSES if settings.get(key) is not None]
        if ignored and not self.compatible:
            note = (
                f"{self.name}: the Responses API has no {', '.join(ignored)}; ignored "
                f"(select 'openai-chat:{self.model}' to use Chat Completions)"
            )
            response.warnings.append(ResponseWarning("unsupported_parameter", note))
        return response

    def _classify(self, exc: BaseException) -> Failure | None:
        # One reading of the SDK's errors for both OpenAI adapters (a refused key or unknown model
        # is a configuration error tried once; outages are retried).
        failure = super()._classify(exc)
        if failure is None and isinstance(exc, _sdk().APIError):
            # An error payload inside an event stream: the HTTP status was already 200.
            return Failure(exc.message or "stream error")
        return failure

    async def _create(self, kwargs: dict[str, Any]) -> Any:
        client = self.client()
        return await call_with_retries(
            lambda: client.responses.create(**kwargs),
            provider=self.name,
            classify=self._classify,
            policy=self.retry,
            secrets=self._secrets(),
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await self._create(self.build_kwargs(request))
        return self._noted(parse_response(response, self.name, self._secrets()), request)

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        kwargs = self.build_kwargs(request)
        kwargs["stream"] = True
        stream = await self._create(kwargs)
        collected = StreamCollector(self.name, self._secrets())
        relayed = relay_stream(
            stream, collected.feed, name=self.name, classify=self._classify, secrets=self._secrets()
        )
        async for event in relayed:
            yield event
        yield ResponseDone(self._noted(collected.response(), request))
