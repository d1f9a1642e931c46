"""OpenTelemetry spans with the GenAI attributes, checked with an in-memory exporter."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from picoflow import Flow, FlowEngine, Step, go, tool
from picoflow.models import ScriptedModel, ToolCall

SECRET = "my passport number is X1234567"


class Ask(Step):
    """Ask."""

    @tool
    def lookup(self, query: str) -> str:
        """Look something up."""
        return f"found {len(query)} chars"

    @tool
    def hand_over(self) -> Any:
        """Hand over."""
        return go(Answer)


class Answer(Step):
    """Answer."""


class TracedFlow(Flow):
    name = "traced"
    steps = [Ask, Answer]


def script() -> ScriptedModel:
    return ScriptedModel([ToolCall("lookup", {"query": SECRET}), ToolCall("hand_over"), "Here you go."])


@pytest.fixture
def exporter() -> tuple[InMemorySpanExporter, TracerProvider]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory, provider


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


async def test_turn_step_model_and_tool_spans_with_genai_attributes(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    engine = FlowEngine([TracedFlow], model=script(), tracing=provider.get_tracer("test"))
    result = await engine.run("traced", SECRET)
    assert result.ok

    spans = memory.get_finished_spans()
    names = [span.name for span in spans]
    assert sorted(names) == sorted(
        [
            "invoke_agent traced",
            "step Ask",
            "step Answer",
            "chat test",
            "chat test",
            "chat test",
            "execute_tool lookup",
            "execute_tool hand_over",
        ]
    )
    named = by_name(spans)
    turn = named["invoke_agent traced"]
    assert turn.parent is None
    assert turn.attributes is not None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == result.session_id
    step_ask, step_answer = named["step Ask"], named["step Answer"]
    assert step_ask.parent is not None and step_ask.parent.span_id == turn.context.span_id
    assert step_answer.parent is not None and step_answer.parent.span_id == turn.context.span_id

    chats = [span for span in spans if span.name == "chat test"]
    assert [c.parent.span_id for c in chats if c.parent] == [
        step_ask.context.span_id,
        step_ask.context.span_id,
        step_answer.context.span_id,
    ]
    first = chats[0].attributes or {}
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "scripted"
    assert first["gen_ai.request.model"] == "test"
    assert first["gen_ai.response.model"] == "scripted:test"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["gen_ai.usage.input_tokens"] > 0
    assert first["gen_ai.conversation.id"] == result.session_id

    tool_span = named["execute_tool lookup"]
    attributes = tool_span.attributes or {}
    assert attributes["gen_ai.tool.name"] == "lookup"
    assert attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool_span.parent is not None and tool_span.parent.span_id == step_ask.context.span_id

    # Contents stay out of traces unless enabled.
    for span in spans:
        for value in (span.attributes or {}).values():
            assert SECRET not in str(value)


async def test_contents_are_recorded_only_when_enabled(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    engine = FlowEngine([TracedFlow], model=script(), tracing=provider.get_tracer("test"), trace_content=True)
    await engine.run("traced", "question")
    named = by_name(memory.get_finished_spans())
    assert SECRET in str((named["execute_tool lookup"].attributes or {})["gen_ai.tool.call.arguments"])
    assert (named["execute_tool lookup"].attributes or {})["gen_ai.tool.call.result"] == "found 30 chars"
    assert "Here you go." in str((named["invoke_agent traced"].attributes or {})["gen_ai.output.messages"])


async def test_failed_turn_marks_spans_as_errors(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    engine = FlowEngine([TracedFlow], model=ScriptedModel([]), tracing=provider.get_tracer("test"))
    result = await engine.run("traced", "hi")
    assert result.error is not None
    named = by_name(memory.get_finished_spans())
    assert (named["invoke_agent traced"].attributes or {})["error.type"] == "script_exhausted"
    assert (named["chat test"].attributes or {})["error.type"] == "script_exhausted"
    assert not named["step Ask"].status.is_ok


async def test_no_spans_and_no_tracer_work_without_a_configured_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []

    class Spy(trace.ProxyTracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
            started.append("tracer")
            return super().get_tracer(*args, **kwargs)

    monkeypatch.setattr(trace, "get_tracer_provider", lambda: Spy())
    engine = FlowEngine([TracedFlow], model=script())
    result = await engine.run("traced", "hi")
    assert result.ok and started == []
    assert engine._tracing.current() is None


async def test_auto_detects_a_configured_sdk_provider(
    monkeypatch: pytest.MonkeyPatch, exporter: tuple[InMemorySpanExporter, TracerProvider]
) -> None:
    memory, provider = exporter
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    engine = FlowEngine([TracedFlow], model=script())
    await engine.run("traced", "hi")
    assert "invoke_agent traced" in [span.name for span in memory.get_finished_spans()]


class Helper(Step):
    """Answer the planner."""

    @tool
    def fetch(self) -> str:
        """Fetch."""
        return "fetched"


class Lead(Step):
    """Lead."""

    @tool
    async def delegate(self) -> str:
        """Delegate to the helper."""
        return str(await self.run_step(Helper, "please"))


class NestedFlow(Flow):
    name = "nested"
    steps = [Lead, Helper]


async def test_a_sub_steps_spans_nest_under_the_calling_tool(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    model = ScriptedModel([ToolCall("delegate", {}, "d1"), ToolCall("fetch", {}, "f1"), "Helped.", "Done."])
    engine = FlowEngine([NestedFlow], model=model, tracing=provider.get_tracer("test"))
    result = await engine.run("nested", "go")
    assert result.ok
    spans = memory.get_finished_spans()
    named = by_name(spans)
    turn, lead, delegate = named["invoke_agent nested"], named["step Lead"], named["execute_tool delegate"]
    helper, fetch = named["step Helper"], named["execute_tool fetch"]

    def parent_of(span: ReadableSpan) -> int | None:
        return span.parent.span_id if span.parent else None

    assert parent_of(lead) == turn.context.span_id
    assert parent_of(delegate) == lead.context.span_id
    assert parent_of(helper) == delegate.context.span_id  # the run nests under the tool that ran it
    assert parent_of(fetch) == helper.context.span_id
    chats = [span for span in spans if span.name == "chat test"]
    assert sorted(parent_of(c) or 0 for c in chats) == sorted(
        [lead.context.span_id, helper.context.span_id, helper.context.span_id, lead.context.span_id]
    )
    assert (
        helper.end_time is not None and delegate.end_time is not None and helper.end_time <= delegate.end_time
    )
