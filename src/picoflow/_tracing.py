"""OpenTelemetry spans for turns, steps, model requests and tool calls (GenAI conventions).

Tracing costs nothing unless an OpenTelemetry SDK tracer provider is configured (or a tracer is
passed to the engine): the runner then holds ``None`` and skips every tracing branch. Message
contents (prompts, replies, tool arguments and results) are left out unless ``capture_content``
is enabled, because they may hold personal data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from picoflow.messages import ModelRequest, ModelResponse, ToolCall

SYSTEM = "picoflow"


def _provider_name(model_name: str) -> str:
    provider, _, _ = model_name.partition(":")
    return provider or model_name


class Tracing:
    """Creates the spans of one engine. Spans are parented explicitly, never via globals."""

    def __init__(self, tracer: Tracer, *, capture_content: bool = False) -> None:
        self.tracer = tracer
        self.capture_content = capture_content

    def _start(self, name: str, parent: Span | None, attributes: Mapping[str, Any]) -> Span:
        from opentelemetry import trace

        context = trace.set_span_in_context(parent) if parent is not None else None
        kind = trace.SpanKind.CLIENT if name.startswith("chat ") else trace.SpanKind.INTERNAL
        return self.tracer.start_span(name, context=context, kind=kind, attributes=dict(attributes))

    def turn(self, flow: str, session_id: str | None, message: str) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": flow,
            "picoflow.flow": flow,
        }
        if session_id:
            attributes["gen_ai.conversation.id"] = session_id
        if self.capture_content:
            attributes["gen_ai.input.messages"] = json.dumps([{"role": "user", "content": message}])
        return self._start(f"invoke_agent {flow}", None, attributes)

    def step(self, parent: Span, step: str, session_id: str) -> Span:
        return self._start(
            f"step {step}",
            parent,
            {"picoflow.step": step, "gen_ai.conversation.id": session_id, "gen_ai.agent.name": step},
        )

    def model(self, parent: Span | None, model_name: str, request: ModelRequest) -> Span:
        _, _, name = model_name.partition(":")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _provider_name(model_name),
            "gen_ai.request.model": name or model_name,
            "picoflow.step": request.step or "",
        }
        if request.session_id:
            attributes["gen_ai.conversation.id"] = request.session_id
        if self.capture_content:
            attributes["gen_ai.system_instructions"] = request.system
            attributes["gen_ai.input.messages"] = json.dumps(
                [{"role": m.role, "content": m.content} for m in request.messages]
            )
        return self._start(f"chat {name or model_name}", parent, attributes)

    def model_done(self, span: Span, response: ModelResponse) -> None:
        usage = response.usage
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        if usage.cached_input_tokens:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
        if usage.cache_creation_tokens:
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_tokens)
        if usage.reasoning_tokens:
            span.set_attribute("gen_ai.usage.reasoning_tokens", usage.reasoning_tokens)
        if response.model:
            span.set_attribute("gen_ai.response.model", response.model)
        finish = response.finish_reason or ("tool_calls" if response.tool_calls else "stop")
        span.set_attribute("gen_ai.response.finish_reasons", [finish])
        if self.capture_content:
            output = {"role": "assistant", "content": response.text, "tool_calls": response.tool_names()}
            span.set_attribute("gen_ai.output.messages", json.dumps([output]))
        span.end()

    def tool(self, parent: Span | None, call: ToolCall, step: str, session_id: str) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": session_id,
            "picoflow.step": step,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = call.args_json()
        return self._start(f"execute_tool {call.name}", parent, attributes)

    def tool_done(self, span: Span, content: str, is_error: bool) -> None:
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", content)
        if is_error:
            span.set_attribute("picoflow.tool.refused", True)
        span.end()

    @staticmethod
    def fail(span: Span, error: BaseException | str) -> None:
        from opentelemetry.trace import Status, StatusCode

        kind = error if isinstance(error, str) else getattr(error, "kind", type(error).__name__)
        span.set_attribute("error.type", str(kind))
        span.set_status(Status(StatusCode.ERROR, str(kind)))
        span.end()


def resolve(setting: Any, *, capture_content: bool) -> Tracing | None:
    """``None``: trace only when an OpenTelemetry SDK provider is installed; ``False``: never;
    a ``Tracer``: use it."""
    if setting is False:
        return None
    if setting is not None and setting is not True:
        return Tracing(setting, capture_content=capture_content)
    try:
        from opentelemetry import trace
    except ImportError:
        if setting is True:
            raise RuntimeError("tracing needs the OpenTelemetry API: install picoflow[otel]") from None
        return None
    provider = trace.get_tracer_provider()
    if setting is None and isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return Tracing(provider.get_tracer(SYSTEM), capture_content=capture_content)
