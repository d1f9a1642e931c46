"""The OpenAI Responses adapter streaming, and a tool turn through the engine with a reasoning model."""

from __future__ import annotations

import pytest

from picoflow import Flow, FlowEngine, Step, tool
from picoflow.exceptions import ModelError
from picoflow.messages import ToolCall
from picoflow.models.base import ResponseDone, TextDelta, ToolCallDelta

from . import fake_responses as fr
from .fake_responses import API_KEY, SEARCH, THOUGHT, WEATHER, ask, make_model
from .fake_servers import Reply, serving


async def test_streaming_yields_text_and_tool_call_deltas_then_the_completed_response() -> None:
    call = fr.function_call("call_9", "search_books", '{"query": "whales"}')
    final = fr.response([fr.message("Let me look."), call], usage_body=fr.usage(7, 3))
    events = [
        fr.created(),
        fr.item_added(0, fr.message("")),
        fr.text_delta(0, "Let me "),
        fr.text_delta(0, "look."),
        fr.item_done(0, fr.message("Let me look.")),
        fr.item_added(1, {**call, "arguments": "", "status": "in_progress"}),
        fr.arguments_delta(1, '{"query": ', item_id="fc_call_9"),
        fr.arguments_delta(1, '"whales"}', item_id="fc_call_9"),
        fr.item_done(1, call),
        fr.completed(final),
    ]
    with serving([Reply(events=fr.sse(events))]) as server:
        model, _ = make_model(server.url)
        got = [event async for event in model.request_stream(ask(tools=[SEARCH]))]
    assert server.bodies[0]["stream"] is True
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["Let me ", "look."]
    deltas = [e for e in got if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "call_9", "search_books", "")
    assert "".join(d.args_delta for d in deltas) == '{"query": "whales"}'
    assert {d.index for d in deltas} == {0}
    done = got[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.text == "Let me look."
    assert done.response.tool_calls == [ToolCall("search_books", {"query": "whales"}, "call_9")]
    assert done.response.finish_reason == "tool_calls"
    assert (done.response.usage.input_tokens, done.response.usage.output_tokens) == (7, 3)


async def test_stream_cut_before_completion_keeps_what_arrived() -> None:
    events = [
        fr.created(),
        fr.item_added(0, fr.function_call("call_1", "weather", "")),
        fr.arguments_delta(0, '{"city": "Os', item_id="fc_call_1"),
    ]
    with serving([Reply(events=fr.sse(events))]) as server:
        model, _ = make_model(server.url)
        got = [event async for event in model.request_stream(ask(tools=[WEATHER]))]
    done = got[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.tool_calls == [ToolCall("weather", '{"city": "Os', "call_1")]
    assert done.response.model == fr.MODEL


async def test_error_event_in_a_stream_is_a_model_error_without_the_key() -> None:
    events = [fr.created(), fr.text_delta(0, "Hal"), fr.error_event(f"overloaded for {API_KEY}")]
    with serving([Reply(events=fr.sse(events))]) as server:
        model, _ = make_model(server.url)
        with pytest.raises(ModelError, match="stream failed") as caught:
            _ = [event async for event in model.request_stream(ask())]
    assert "overloaded" in str(caught.value)
    assert API_KEY not in str(caught.value)


async def test_a_failed_response_event_is_a_model_error() -> None:
    failed = fr.response([], status="failed", error={"code": "server_error", "message": "model crashed"})
    events = [fr.created(), {"type": "response.failed", "response": failed}]
    with serving([Reply(events=fr.sse(events))]) as server:
        model, _ = make_model(server.url)
        with pytest.raises(ModelError, match=r"openai:gpt-4\.1-mini failed: model crashed"):
            _ = [event async for event in model.request_stream(ask())]


async def test_streamed_reasoning_comes_from_the_completed_response() -> None:
    call = fr.function_call("call_1", "weather", '{"city": "Oslo"}')
    events = [
        fr.created("gpt-5-mini"),
        fr.item_added(0, fr.reasoning("rs_1", None)),
        fr.item_done(0, THOUGHT),
        fr.item_added(1, call),
        fr.item_done(1, call),
        fr.completed(fr.response([THOUGHT, call], model="gpt-5-mini")),
    ]
    with serving([Reply(events=fr.sse(events))]) as server:
        model, _ = make_model(server.url, "gpt-5-mini")
        got = [event async for event in model.request_stream(ask(tools=[WEATHER]))]
    done = got[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.reasoning == [THOUGHT]
    assert done.response.tool_calls == [ToolCall("weather", {"city": "Oslo"}, "call_1")]
    assert got[0] == ToolCallDelta(0, "call_1", "weather", '{"city": "Oslo"}')


async def test_a_reasoning_tool_turn_through_the_engine() -> None:
    class Librarian(Step):
        """Find books."""

        @tool
        def search_books(self, query: str) -> str:
            """Search the catalog."""
            return f"Moby-Dick ({query})"

    class Books(Flow):
        name = "books"
        steps = [Librarian]

    call = fr.function_call("call_1", "search_books", '{"query": "whales"}')
    replies = [
        Reply(body=fr.response([THOUGHT, call], usage_body=fr.usage(100, 20, reasoning=12))),
        Reply(body=fr.response([fr.message("Try Moby-Dick.")], usage_body=fr.usage(140, 8, cached=96))),
    ]
    with serving(replies) as server:
        model, _ = make_model(server.url, "gpt-5-mini")
        engine = FlowEngine([Books], model=model)
        result = await engine.run("books", "whales?")
        await model.aclose()
    assert result.ok, result.error
    assert result.message == "Try Moby-Dick."
    assert (result.usage.reasoning_tokens, result.usage.cached_input_tokens) == (12, 96)
    opening, continuation = server.bodies
    assert opening["prompt_cache_key"] == continuation["prompt_cache_key"] == result.session_id
    assert opening["tools"][0]["name"] == "search_books"
    assert continuation["input"][1:] == [
        THOUGHT,
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "search_books",
            "arguments": '{"query": "whales"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "Moby-Dick (whales)"},
    ]
    transcript = await engine.transcript(result.session_id)
    assert transcript is not None
    assert [(m.role, m.reasoning) for m in transcript] == [
        ("user", ()),
        ("assistant", (THOUGHT,)),
        ("tool", ()),
        ("assistant", ()),
    ]
