"""The OpenAI Responses adapter, through the official SDK, against a scripted Responses API server."""

from __future__ import annotations

import json

import pytest

from picoflow.exceptions import ModelConfigurationError, ModelError, ModelHTTPError
from picoflow.messages import Message, ModelRequest, OutputSchema, ToolCall
from picoflow.models.base import ResponseDone
from picoflow.models.catalog import ModelSelection
from picoflow.models.openai_responses import OpenAIResponsesModel

from . import fake_responses as fr
from .fake_responses import API_KEY, SEARCH, THOUGHT, WEATHER, ask, make_model
from .fake_servers import Reply, serving


async def test_text_reply_sends_instructions_and_input_and_reads_usage() -> None:
    with serving([Reply(body=fr.response([fr.message("Hi there.")]))]) as server:
        model, _ = make_model(server.url, temperature=0.2, max_tokens=50)
        response = await model.request(ask())
        await model.aclose()
    assert response.text == "Hi there."
    assert response.tool_calls == []
    assert response.reasoning == []
    assert response.finish_reason == "stop"
    assert response.model == fr.MODEL
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.model_calls) == (
        10,
        5,
        1,
    )
    (received,) = server.received
    assert received.path == "/responses"
    assert received.headers["authorization"] == f"Bearer {API_KEY}"
    assert received.body == {
        "model": "gpt-4.1-mini",
        "instructions": "You are terse.",
        "input": [{"role": "user", "content": "hello"}],
        "store": False,
        "temperature": 0.2,
        "max_output_tokens": 50,
    }


async def test_tools_are_flat_functions_with_explicit_strictness() -> None:
    reply = fr.response([fr.function_call("call_1", "search_books", '{"query": "whales", "max_results": 3}')])
    with serving([Reply(body=reply)]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask("whale books", tools=[SEARCH, WEATHER]))
    assert response.text == ""
    assert response.tool_calls == [ToolCall("search_books", {"query": "whales", "max_results": 3}, "call_1")]
    assert response.finish_reason == "tool_calls"
    strict, loose = server.bodies[0]["tools"]
    assert strict == {
        "type": "function",
        "name": "search_books",
        "description": "Search the catalog.",
        "parameters": dict(SEARCH.parameters),
        "strict": True,
    }
    # Left out, the API would make the tool strict and refuse its schema.
    assert loose["strict"] is False


async def test_several_tool_calls_in_one_response() -> None:
    reply = fr.response(
        [
            fr.message("Checking both."),
            fr.function_call("call_a", "search_books", '{"query": "whales", "max_results": 1}'),
            fr.function_call("call_b", "weather", '{"city": "Oslo"}'),
        ]
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
    assert server.bodies[0]["parallel_tool_calls"] is True


async def test_tool_results_go_back_as_function_call_outputs_with_their_ids() -> None:
    first = ToolCall("search_books", {"query": "whales"}, "call_a")
    second = ToolCall("weather", "{bad", "call_b")
    history = [
        Message.user("whales and weather"),
        Message.assistant("Looking.", [first, second]),
        Message.tool(first, '[{"title": "Moby-Dick"}]'),
        Message.tool(second, "arguments are not valid JSON", is_error=True, kind="correction"),
        Message.user("Please answer in French.", kind="nudge"),
    ]
    with serving([Reply(body=fr.response([fr.message("Voilà.")]))]) as server:
        model, _ = make_model(server.url)
        await model.request(ModelRequest(system="sys", messages=history, tools=[SEARCH, WEATHER]))
    body = server.bodies[0]
    assert body["instructions"] == "sys"
    assert body["input"] == [
        {"role": "user", "content": "whales and weather"},
        {"role": "assistant", "content": "Looking."},
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "search_books",
            "arguments": '{"query": "whales"}',
        },
        {"type": "function_call", "call_id": "call_b", "name": "weather", "arguments": "{bad"},
        {"type": "function_call_output", "call_id": "call_a", "output": '[{"title": "Moby-Dick"}]'},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": "Error: arguments are not valid JSON",
        },
        {"role": "user", "content": "Please answer in French."},
    ]
    assert "include" not in body  # not a reasoning model: the API would refuse encrypted reasoning


async def test_structured_output_uses_text_format_json_schema() -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    output = OutputSchema("book pick", schema, description="The chosen book", strict=True)
    with serving([Reply(body=fr.response([fr.message('{"title": "Moby-Dick"}')]))]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(output=output))
    assert json.loads(response.text) == {"title": "Moby-Dick"}
    assert server.bodies[0]["text"] == {
        "format": {
            "type": "json_schema",
            "name": "book_pick",
            "schema": schema,
            "strict": True,
            "description": "The chosen book",
        }
    }


async def test_non_strict_output_schema_says_so() -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    with serving([Reply(body=fr.response([fr.message("{}")]))]) as server:
        model, _ = make_model(server.url, "gpt-5-mini", verbosity="low")
        await model.request(ask(output=OutputSchema("pick", schema)))
    assert server.bodies[0]["text"] == {
        "format": {"type": "json_schema", "name": "pick", "schema": schema, "strict": False},
        "verbosity": "low",
    }


async def test_rate_limit_then_success_honours_retry_after() -> None:
    limited = Reply(
        429, {"error": {"message": "slow down", "type": "rate_limit"}}, headers={"Retry-After": "2"}
    )
    busy = Reply(503, {"error": {"message": "overloaded"}})
    with serving([limited, busy, Reply(body=fr.response([fr.message("ok")]))]) as server:
        model, sleep = make_model(server.url)
        response = await model.request(ask())
    assert response.text == "ok"
    assert len(server.received) == 3
    assert sleep.delays == [2.0, 1.0]


async def test_server_errors_until_failure_raise_typed_error() -> None:
    with serving([Reply(500, {"error": {"message": "boom"}}) for _ in range(3)]) as server:
        model, sleep = make_model(server.url, retries=2)
        with pytest.raises(ModelHTTPError) as caught:
            await model.request(ask())
    assert len(server.received) == 3
    assert sleep.delays == [0.5, 1.0]
    assert caught.value.status_code == 500
    assert caught.value.provider == "openai:gpt-4.1-mini"
    assert "after 3 attempts" in str(caught.value)
    assert "boom" in str(caught.value)


@pytest.mark.parametrize("status", [401, 403])
async def test_bad_credentials_are_a_configuration_error_without_the_key(status: int) -> None:
    body = {"error": {"message": f"Incorrect API key provided: {API_KEY}", "type": "invalid_request_error"}}
    with serving([Reply(status, body)]) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelConfigurationError) as caught:
            await model.request(ask())
    assert len(server.received) == 1
    assert sleep.delays == []
    error = caught.value
    assert (error.status_code, error.retryable, error.provider) == (status, False, "openai:gpt-4.1-mini")
    assert "Set OPENAI_API_KEY to a key this server accepts" in str(error)
    assert API_KEY not in str(error)


async def test_an_unknown_model_is_a_configuration_error_tried_once() -> None:
    body = {"error": {"message": "The model 'gpt-9' does not exist", "code": "model_not_found"}}
    with serving([Reply(404, body)]) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelConfigurationError, match="does not exist") as caught:
            await model.request(ask())
    assert (len(server.received), sleep.delays, caught.value.status_code) == (1, [], 404)


async def test_timeout_is_retried_then_reported() -> None:
    slow = [Reply(body=fr.response([fr.message("late")]), delay=1.0) for _ in range(2)]
    with serving(slow) as server:
        model, sleep = make_model(server.url, timeout=0.2, retries=1)
        with pytest.raises(ModelError) as caught:
            await model.request(ask())
    assert not isinstance(caught.value, ModelHTTPError)
    assert "did not answer in time after 2 attempts" in str(caught.value)
    assert len(server.received) == 2
    assert sleep.delays == [0.5]


async def test_malformed_arguments_are_kept_as_raw_text() -> None:
    reply = fr.response(
        [
            fr.function_call("call_1", "search_books", '{"query": "whales",'),
            fr.function_call("call_2", "weather", "[1]"),
        ]
    )
    with serving([Reply(body=reply)]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(tools=[SEARCH, WEATHER]))
    assert response.tool_calls[0].args == '{"query": "whales",'
    assert response.tool_calls[1].args == "[1]"


async def test_usage_reports_cached_and_reasoning_tokens() -> None:
    body = fr.response([fr.message("done")], usage_body=fr.usage(1200, 300, cached=1024, reasoning=256))
    with serving([Reply(body=body)]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask())
    got = response.usage
    assert (got.input_tokens, got.output_tokens, got.total_tokens) == (1200, 300, 1500)
    assert (got.cached_input_tokens, got.reasoning_tokens, got.model_calls) == (1024, 256, 1)


async def test_prompt_cache_key_is_the_session_id() -> None:
    replies = [Reply(body=fr.response([fr.message("ok")])) for _ in range(3)]
    with serving(replies) as server:
        model, _ = make_model(server.url)
        await model.request(ask(session_id="sess-42"))
        await model.request(ask(session_id="s" * 100))
        await model.request(ask())
    first, long, anonymous = server.bodies
    assert first["prompt_cache_key"] == "sess-42"
    assert len(long["prompt_cache_key"]) == 64 and long["prompt_cache_key"] != "s" * 64
    assert "prompt_cache_key" not in anonymous


async def test_incomplete_response_reports_length() -> None:
    body = fr.response(
        [fr.message("Half an ans")], status="incomplete", incomplete_reason="max_output_tokens"
    )
    with serving([Reply(body=body)]) as server:
        model, _ = make_model(server.url, max_tokens=5)
        response = await model.request(ask())
    assert (response.text, response.finish_reason) == ("Half an ans", "length")


async def test_reasoning_items_are_kept_and_sent_back_before_their_calls() -> None:
    call = fr.function_call("call_1", "search_books", '{"query": "whales", "max_results": 2}')
    no_content = fr.reasoning("rs_0", None)
    replies = [
        Reply(body=fr.response([no_content, THOUGHT, call], usage_body=fr.usage(50, 40, reasoning=32))),
        Reply(body=fr.response([fr.message("Try Moby-Dick.")])),
    ]
    with serving(replies) as server:
        model, _ = make_model(server.url, "gpt-5-mini", reasoning_effort="low", max_tokens=900)
        first = await model.request(ask("whales?", tools=[SEARCH]))
        (proposed,) = first.tool_calls
        history = [
            Message.user("whales?"),
            Message.assistant(first.text, first.tool_calls, reasoning=first.reasoning),
            Message.tool(proposed, "Moby-Dick"),
        ]
        await model.request(ModelRequest(system="sys", messages=history, tools=[SEARCH]))
    # Only an item that carries its encrypted content can be sent back with store=False.
    assert first.reasoning == [THOUGHT]
    assert first.usage.reasoning_tokens == 32
    opening, continuation = server.bodies
    for body in (opening, continuation):
        assert body["store"] is False
        assert body["include"] == ["reasoning.encrypted_content"]
        assert body["reasoning"] == {"effort": "low"}
        assert body["max_output_tokens"] == 900
        assert "temperature" not in body
    assert continuation["input"] == [
        {"role": "user", "content": "whales?"},
        THOUGHT,
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "search_books",
            "arguments": '{"query": "whales", "max_results": 2}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "Moby-Dick"},
    ]


async def test_foreign_reasoning_blocks_are_not_sent() -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    call = ToolCall("weather", {"city": "Oslo"}, "toolu_1")
    history = [
        Message.user("weather?"),
        Message.assistant("", [call], reasoning=[thinking]),
        Message.tool(call, "sun"),
    ]
    with serving([Reply(body=fr.response([fr.message("Sunny.")]))]) as server:
        model, _ = make_model(server.url, "gpt-5-mini")
        await model.request(ModelRequest(system="", messages=history, tools=[WEATHER]))
    body = server.bodies[0]
    assert "instructions" not in body
    assert [item.get("type", item.get("role")) for item in body["input"]] == [
        "user",
        "function_call",
        "function_call_output",
    ]


async def test_chat_only_parameters_are_left_out_with_a_warning() -> None:
    events = fr.sse([fr.created(), fr.text_delta(0, "ok"), fr.completed(fr.response([fr.message("ok")]))])
    with serving([Reply(body=fr.response([fr.message("ok")])), Reply(events=events)]) as server:
        params = {"seed": 7, "stop": ["END"], "temperature": 0.5}
        model = OpenAIResponsesModel("gpt-4.1-mini", base_url=server.url, api_key=API_KEY, params=params)
        response = await model.request(ask())
        streamed = [event async for event in model.request_stream(ask())][-1]
    assert isinstance(streamed, ResponseDone)
    for answer in (response, streamed.response):
        assert answer.text == "ok"
        (warning,) = answer.warnings
        assert warning.code == "unsupported_parameter"
        assert "no seed, stop; ignored (select 'openai-chat:gpt-4.1-mini'" in warning.message
    for body in server.bodies:
        assert "seed" not in body and "stop" not in body
        assert body["temperature"] == 0.5


async def test_missing_api_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIResponsesModel("gpt-4.1-mini", base_url="http://127.0.0.1:9")
    with pytest.raises(ModelConfigurationError, match="OPENAI_API_KEY") as caught:
        await model.request(ask())
    assert not caught.value.retryable


async def test_a_compatible_server_gets_its_own_key_and_extra_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)
    with serving([Reply(body=fr.response([fr.message("hello from vllm")]))]) as server:
        selection = ModelSelection.parse(f"openai-compatible:qwen3@{server.url}/v1", seed=3, top_k=40)
        model = OpenAIResponsesModel.from_selection(selection)
        response = await model.request(ask(session_id="sess-1"))
        await model.aclose()
    assert response.text == "hello from vllm"
    received = server.received[0]
    assert received.path == "/v1/responses"
    assert received.headers["authorization"] == "Bearer not-needed"
    assert (received.body["seed"], received.body["top_k"]) == (3, 40)
    assert "prompt_cache_key" not in received.body
    assert "include" not in received.body
