"""The OpenAI adapter, through the official SDK, against a scripted Chat Completions server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from picoflow.exceptions import ModelError, ModelHTTPError
from picoflow.messages import Message, ModelRequest, OutputSchema, ToolCall, ToolDefinition
from picoflow.models._retry import RetryPolicy
from picoflow.models.base import ResponseDone, TextDelta, ToolCallDelta
from picoflow.models.catalog import ModelSelection, create_model
from picoflow.models.openai import OpenAIModel

from .fake_servers import (
    RecordingSleep,
    Reply,
    fixed_random,
    openai_chunk,
    openai_completion,
    openai_sse,
    serving,
)

API_KEY = "sk-test-0123456789abcdefghij"

SEARCH = ToolDefinition(
    "search_books",
    "Search the catalog.",
    {
        "type": "object",
        "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
        "required": ["query", "max_results"],
        "additionalProperties": False,
    },
    strict=True,
)
WEATHER = ToolDefinition(
    "weather", "Weather for a city.", {"type": "object", "properties": {"city": {"type": "string"}}}
)


def make_model(url: str, **params: Any) -> tuple[OpenAIModel, RecordingSleep]:
    sleep = RecordingSleep()
    policy = RetryPolicy(max_retries=params.pop("retries", 3), sleep=sleep, random=fixed_random())
    model = OpenAIModel("gpt-4.1-mini", base_url=url, api_key=API_KEY, params=params, retry=policy)
    return model, sleep


def ask(text: str = "hello", **fields: Any) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[Message.user(text)], **fields)


async def test_text_reply_sends_system_first_and_reads_usage() -> None:
    with serving([Reply(body=openai_completion("Hi there."))]) as server:
        model, _ = make_model(server.url, temperature=0.2, max_tokens=50)
        response = await model.request(ask())
        await model.aclose()
    assert response.text == "Hi there."
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.model == "gpt-4.1-mini-2025-04-14"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.model_calls) == (
        10,
        5,
        1,
    )
    (received,) = server.received
    assert received.path == "/chat/completions"
    assert received.headers["authorization"] == f"Bearer {API_KEY}"
    body = received.body
    assert body["model"] == "gpt-4.1-mini"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
    ]
    assert body["temperature"] == 0.2
    assert body["max_completion_tokens"] == 50
    assert "tools" not in body


async def test_one_tool_call_with_strict_schema() -> None:
    reply = openai_completion(None, [("call_1", "search_books", '{"query": "whales", "max_results": 3}')])
    with serving([Reply(body=reply)]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask("whale books", tools=[SEARCH]))
    assert response.text == ""
    assert response.tool_calls == [ToolCall("search_books", {"query": "whales", "max_results": 3}, "call_1")]
    (tool,) = server.bodies[0]["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "search_books"
    assert tool["function"]["strict"] is True
    assert tool["function"]["parameters"] == dict(SEARCH.parameters)


async def test_several_tool_calls_in_one_response() -> None:
    reply = openai_completion(
        "Checking both.",
        [
            ("call_a", "search_books", '{"query": "whales", "max_results": 1}'),
            ("call_b", "weather", '{"city": "Oslo"}'),
        ],
        finish_reason="tool_calls",
    )
    with serving([Reply(body=reply)]) as server:
        model, _ = make_model(server.url, parallel_tool_calls=True)
        response = await model.request(ask(tools=[SEARCH, WEATHER]))
    assert response.text == "Checking both."
    assert [(c.id, c.name) for c in response.tool_calls] == [
        ("call_a", "search_books"),
        ("call_b", "weather"),
    ]
    assert response.tool_calls[1].args == {"city": "Oslo"}
    assert response.finish_reason == "tool_calls"
    body = server.bodies[0]
    assert body["parallel_tool_calls"] is True
    assert "strict" not in body["tools"][1]["function"]


async def test_tool_results_are_sent_back_with_their_ids() -> None:
    first, second = (
        ToolCall("search_books", {"query": "whales"}, "call_a"),
        ToolCall("weather", "{bad", "call_b"),
    )
    history = [
        Message.user("whales and weather"),
        Message.assistant("", [first, second]),
        Message.tool(first, '[{"title": "Moby-Dick"}]'),
        Message.tool(second, "arguments are not valid JSON", is_error=True, kind="correction"),
        Message.user("Please answer in French.", kind="nudge"),
    ]
    with serving([Reply(body=openai_completion("Voilà."))]) as server:
        model, _ = make_model(server.url)
        await model.request(ModelRequest(system="sys", messages=history, tools=[SEARCH, WEATHER]))
    messages = server.bodies[0]["messages"]
    assert messages[0] == {"role": "system", "content": "sys"}
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "search_books", "arguments": '{"query": "whales"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": "{bad"}},
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_a", "content": '[{"title": "Moby-Dick"}]'}
    assert messages[4] == {
        "role": "tool",
        "tool_call_id": "call_b",
        "content": "Error: arguments are not valid JSON",
    }
    assert messages[5] == {"role": "user", "content": "Please answer in French."}


async def test_rate_limit_then_success_honours_retry_after() -> None:
    limited = Reply(
        429, {"error": {"message": "slow down", "type": "rate_limit"}}, headers={"Retry-After": "2"}
    )
    limited_no_header = Reply(429, {"error": {"message": "slow down"}})
    with serving([limited, limited_no_header, Reply(body=openai_completion("ok"))]) as server:
        model, sleep = make_model(server.url)
        response = await model.request(ask())
    assert response.text == "ok"
    assert len(server.received) == 3
    # First wait is the server's Retry-After; the second is the computed backoff for retry #2 (0.5 * 2).
    assert sleep.delays == [2.0, 1.0]


async def test_server_errors_until_failure_raise_typed_error() -> None:
    errors = [Reply(500, {"error": {"message": "boom"}}) for _ in range(3)]
    with serving(errors) as server:
        model, sleep = make_model(server.url, retries=2)
        with pytest.raises(ModelHTTPError) as caught:
            await model.request(ask())
    assert len(server.received) == 3
    assert sleep.delays == [0.5, 1.0]
    error = caught.value
    assert error.status_code == 500
    assert error.provider == "openai:gpt-4.1-mini"
    assert "after 3 attempts" in str(error)
    assert "boom" in str(error)


async def test_unauthorized_fails_at_once_without_leaking_the_key() -> None:
    body = {"error": {"message": f"Incorrect API key provided: {API_KEY}", "type": "invalid_request_error"}}
    with serving([Reply(401, body)]) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelHTTPError) as caught:
            await model.request(ask())
    assert len(server.received) == 1
    assert sleep.delays == []
    assert caught.value.status_code == 401
    assert API_KEY not in str(caught.value)
    assert "authentication failed" in str(caught.value)


async def test_timeout_is_retried_then_reported() -> None:
    slow = [Reply(body=openai_completion("late"), delay=1.0) for _ in range(2)]
    with serving(slow) as server:
        model, sleep = make_model(server.url, timeout=0.2, retries=1)
        with pytest.raises(ModelError) as caught:
            await model.request(ask())
    assert not isinstance(caught.value, ModelHTTPError)
    assert "did not answer in time after 2 attempts" in str(caught.value)
    assert len(server.received) == 2
    assert sleep.delays == [0.5]


async def test_unreachable_server_is_a_model_error() -> None:
    with serving([]) as server:
        url = server.url
    model, sleep = make_model(url, retries=1)
    with pytest.raises(ModelError, match="could not be reached after 2 attempts"):
        await model.request(ask())
    assert sleep.delays == [0.5]


async def test_malformed_arguments_are_kept_as_raw_text() -> None:
    reply = openai_completion(
        None, [("call_1", "search_books", '{"query": "whales",'), ("call_2", "weather", "[1]")]
    )
    with serving([Reply(body=reply)]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(tools=[SEARCH, WEATHER]))
    assert response.tool_calls[0].args == '{"query": "whales",'
    assert response.tool_calls[1].args == "[1]"


async def test_usage_reports_cached_and_reasoning_tokens() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 256},
    }
    with serving([Reply(body=openai_completion("done", usage=usage))]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask())
    got = response.usage
    assert (got.input_tokens, got.output_tokens, got.total_tokens) == (1200, 300, 1500)
    assert (got.cached_input_tokens, got.reasoning_tokens, got.cache_creation_tokens) == (1024, 256, 100)
    assert got.model_calls == 1


async def test_structured_output_uses_native_json_schema() -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    output = OutputSchema("book pick", schema, description="The chosen book", strict=True)
    with serving([Reply(body=openai_completion('{"title": "Moby-Dick"}'))]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(output=output))
    assert json.loads(response.text) == {"title": "Moby-Dick"}
    assert server.bodies[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "book_pick",
            "schema": schema,
            "description": "The chosen book",
            "strict": True,
        },
    }


async def test_streaming_yields_text_and_tool_call_deltas_then_usage() -> None:
    chunks = [
        openai_chunk({"role": "assistant", "content": ""}),
        openai_chunk({"content": "Let me "}),
        openai_chunk({"content": "look."}),
        openai_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "search_books", "arguments": ""},
                    }
                ]
            }
        ),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": '}}]}),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"whales"}'}}]}),
        openai_chunk({}, "tool_calls"),
        {
            **openai_chunk({}),
            "choices": [],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        },
    ]
    with serving([Reply(events=openai_sse(chunks))]) as server:
        model, _ = make_model(server.url)
        events = [event async for event in model.request_stream(ask(tools=[SEARCH]))]
    assert server.bodies[0]["stream"] is True
    assert server.bodies[0]["stream_options"] == {"include_usage": True}
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Let me ", "look."]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "call_9", "search_books", "")
    assert "".join(d.args_delta for d in deltas) == '{"query": "whales"}'
    done = events[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.text == "Let me look."
    assert done.response.tool_calls == [ToolCall("search_books", {"query": "whales"}, "call_9")]
    assert done.response.finish_reason == "tool_calls"
    assert (done.response.usage.input_tokens, done.response.usage.output_tokens) == (7, 3)


async def test_streaming_retries_before_the_first_event() -> None:
    chunks = [openai_chunk({"content": "ok"}, "stop")]
    with serving([Reply(503, {"error": {"message": "busy"}}), Reply(events=openai_sse(chunks))]) as server:
        model, sleep = make_model(server.url)
        events = [event async for event in model.request_stream(ask())]
    assert sleep.delays == [0.5]
    assert isinstance(events[-1], ResponseDone)
    assert events[-1].response.text == "ok"


async def test_reasoning_model_sends_effort_and_completion_budget() -> None:
    with serving([Reply(body=openai_completion("thought"))]) as server:
        model = OpenAIModel.from_selection(
            ModelSelection.parse(
                "openai:gpt-5.1", base_url=server.url, reasoning_effort="low", max_tokens=900
            )
        )
        model._api_key = API_KEY
        await model.request(ask())
    body = server.bodies[0]
    assert body["model"] == "gpt-5.1"
    assert body["reasoning_effort"] == "low"
    assert body["max_completion_tokens"] == 900
    assert "temperature" not in body


async def test_openai_compatible_server_is_the_same_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)
    with serving([Reply(body=openai_completion("hello from llama"))]) as server:
        selection = ModelSelection.parse(
            f"openai-compatible:llama3.1:8b@{server.url}/v1", max_tokens=64, top_k=40
        )
        model = create_model(selection)
        assert isinstance(model, OpenAIModel)
        response = await model.request(ask())
        await model.aclose()
    assert response.text == "hello from llama"
    assert model.name == "openai-compatible:llama3.1:8b"
    received = server.received[0]
    assert received.path == "/v1/chat/completions"
    # The OpenAI key is never forwarded to a third-party server.
    assert received.headers["authorization"] == "Bearer not-needed"
    assert received.body["model"] == "llama3.1:8b"
    assert received.body["max_tokens"] == 64
    assert received.body["top_k"] == 40
    assert "max_completion_tokens" not in received.body


async def test_missing_api_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIModel("gpt-4.1-mini", base_url="http://127.0.0.1:9")
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        await model.request(ask())


async def test_compatible_server_quirks_object_arguments_and_missing_ids() -> None:
    reply = openai_completion(None, [("", "search_books", "")])
    reply["choices"][0]["message"]["tool_calls"] = [
        {"type": "function", "function": {"name": "search_books", "arguments": {"query": "whales"}}},
        {"id": None, "type": "function", "function": {"name": "weather", "arguments": None}},
    ]
    with serving([Reply(body=reply)]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(tools=[SEARCH, WEATHER]))
    first, second = response.tool_calls
    assert (first.name, first.args) == ("search_books", {"query": "whales"})
    assert (second.name, second.args) == ("weather", {})
    assert first.id.startswith("call_")
    assert second.id.startswith("call_")
    assert first.id != second.id
