"""OpenTelemetry spans for turns, steps, model requests and tool calls (GenAI conventions).

Tracing is one observer of a turn (``TracingObserver``). It costs nothing unless an OpenTelemetry
SDK tracer provider is configured (or a tracer is passed to the engine): without one the engine
adds no observer. Message contents (prompts, replies, tool arguments and results) are left out
unless ``capture_content`` is enabled, because they may hold personal data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from picoflow._run.observers import TurnObserver

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from picoflow.approvals import Approval
    from picoflow.messages import ModelRequest, ModelResponse, ToolCall
    from picoflow.results import TurnResult
    from picoflow.slots.grounding import Verdict

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


class TracingObserver(TurnObserver):
    """The spans of one turn: the turn, a span per step run, and model and tool spans inside it."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing
        self._turn: Span | None = None
        self._session_id = ""
        self._step: Span | None = None
        self._step_name: str | None = None
        self._model: Span | None = None
        self._tools: dict[str, Span] = {}

    def turn_started(self, flow: str, session_id: str | None, message: str) -> None:
        self._turn = self.tracing.turn(flow, session_id, message)
        self._session_id = session_id or ""

    def session_opened(self, session_id: str) -> None:
        self._session_id = session_id

    def step_started(self, step: str) -> None:
        if self._step_name == step:
            return
        if self._step is not None:
            self._step.end()
        self._step_name = step
        self._step = self.tracing.step(self._turn, step, self._session_id)  # type: ignore[arg-type]

    def model_started(self, step: str, model: str, request: ModelRequest) -> None:
        self._model = self.tracing.model(self._step, model, request)

    def model_finished(self, step: str, response: ModelResponse) -> None:
        if self._model is not None:
            self.tracing.model_done(self._model, response)
            self._model = None

    def model_failed(self, step: str, error: BaseException) -> None:
        if self._model is not None:
            self.tracing.fail(self._model, error)
            self._model = None

    def tool_started(self, step: str, call: ToolCall) -> None:
        self._tools[call.id] = self.tracing.tool(self._step, call, step, self._session_id)

    def tool_finished(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        span = self._tools.pop(call.id, None)
        if span is not None:
            self.tracing.tool_done(span, content, is_error)

    def tool_failed(self, step: str, call: ToolCall, error: BaseException) -> None:
        span = self._tools.pop(call.id, None)
        if span is not None:
            self.tracing.fail(span, error)

    def approval_requested(self, step: str, approval: Approval) -> None:
        span = self._step or self._turn
        if span is not None:
            span.add_event("picoflow.approval.requested", _audit(approval))

    def approval_decided(self, approval: Approval) -> None:
        """The audit record of a decision, on the span of the turn it resumes: who, when, what,
        the arguments' hash and the reason."""
        if self._turn is not None:
            self._turn.add_event("picoflow.approval.decided", _audit(approval))
            self._turn.set_attribute("picoflow.approval.id", approval.id)
            self._turn.set_attribute("picoflow.approval.decision", approval.status)

    def reading_judged(self, step: str, verdicts: tuple[Verdict, ...]) -> None:
        """The verdicts of a reading on the step's span: the fields kept, and each field dropped or
        repaired with its rule (never a value: it may hold private text)."""
        span = self._step or self._turn
        if span is None:
            return
        for action in ("kept", "dropped", "repaired"):
            named = [
                v.field if v.rule is None or action == "kept" else f"{v.field}:{v.rule}"
                for v in verdicts
                if v.action == action
            ]
            if named:
                span.set_attribute(f"picoflow.reading.{action}", named)

    def pattern_fired(self, step: str, pattern: str, detail: str | None) -> None:
        """A repair pattern on the step's span: ``picoflow.pattern`` (the last one, as a value to
        filter on) and an event per pattern, in order."""
        span = self._step or self._turn
        if span is None:
            return
        span.set_attribute("picoflow.pattern", pattern)
        span.add_event("picoflow.pattern", {"picoflow.pattern": pattern, "picoflow.step": step})

    def handed_off(self, step: str, reason: str | None, summary: str) -> None:
        """The handoff on the turn's span: the step the user was in and the reason (never the
        summary: it quotes the user)."""
        if self._turn is not None:
            self._turn.set_attribute("picoflow.handoff.step", step)
            if reason is not None:
                self._turn.set_attribute("picoflow.handoff.reason", reason)
            self._turn.add_event("picoflow.handoff", {"step": step, "reason": reason or ""})

    def sub_turn(self, step: str, call: ToolCall | None) -> TurnObserver:
        """A sub-step run's spans nest under the calling tool's span (or the calling step's)."""
        child = TracingObserver(self.tracing)
        child._turn = self._tools.get(call.id) if call is not None else None
        child._turn = child._turn or self._step
        child._session_id = self._session_id
        return child

    def turn_ended(self, error: BaseException | None) -> None:
        if self._step is not None:
            if error is None:
                self._step.end()
            else:
                self.tracing.fail(self._step, error)
            self._step = None
            self._step_name = None

    def turn_aborted(self, error: BaseException) -> None:
        self.turn_ended(error)
        if self._turn is not None:
            self.tracing.fail(self._turn, error)
            self._turn = None

    def turn_finished(self, result: TurnResult) -> None:
        span = self._turn
        if span is None:
            return
        self._turn = None
        if result.session_id:
            span.set_attribute("gen_ai.conversation.id", result.session_id)
        span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
        if result.error is not None:
            self.tracing.fail(span, result.error.kind)
            return
        if self.tracing.capture_content:
            span.set_attribute(
                "gen_ai.output.messages", json.dumps([{"role": "assistant", "content": result.message}])
            )
        span.end()


def _audit(approval: Approval) -> dict[str, Any]:
    record: dict[str, Any] = {
        "picoflow.approval.id": approval.id,
        "picoflow.approval.tool": approval.tool,
        "picoflow.approval.status": approval.status,
        "picoflow.approval.args_sha256": approval.args_sha256,
        "picoflow.step": approval.step,
    }
    if approval.decided_by is not None:
        record["picoflow.approval.decided_by"] = approval.decided_by
    if approval.decided_at is not None:
        record["picoflow.approval.decided_at"] = approval.decided_at
    if approval.reason is not None:
        record["picoflow.approval.reason"] = approval.reason
    return record


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
            raise RuntimeError("tracing needs the OpenTelemetry API: install picoflow-ai[otel]") from None
        return None
    provider = trace.get_tracer_provider()
    if setting is None and isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return Tracing(provider.get_tracer(SYSTEM), capture_content=capture_content)


class TracingSetting:
    """An engine's ``tracing=`` setting, resolved to a ``Tracing`` (or None) when a turn starts.

    With None the globally configured OpenTelemetry provider is followed: configuring one after the
    engine was built turns tracing on, and the lookup is cached per provider.
    """

    def __init__(self, setting: Any, *, capture_content: bool) -> None:
        self.setting = setting
        self.capture_content = capture_content
        self._cache: tuple[object, Tracing | None] | None = None
        self._api: Any = None

    def current(self) -> Tracing | None:
        setting = self.setting
        if setting is False:
            return None
        if setting is not None:
            if self._cache is None:
                self._cache = (setting, resolve(setting, capture_content=self.capture_content))
            return self._cache[1]
        if self._api is None:
            try:
                from opentelemetry import trace
            except ImportError:
                self.setting = False
                return None
            self._api = trace
        provider = self._api.get_tracer_provider()
        cache = self._cache
        if cache is None or cache[0] is not provider:
            cache = self._cache = (provider, resolve(None, capture_content=self.capture_content))
        return cache[1]

    def observer(self) -> TracingObserver | None:
        """A new observer for one turn, or None when nothing traces."""
        tracing = self.current()
        return None if tracing is None else TracingObserver(tracing)
