"""OpenAI-compatible servers as they really behave, against a scripted server: calls written as
text, errors that say what is wrong, and structured output beside tools."""

from __future__ import annotations

import json
from typing import Any

import pytest

from picoflow.exceptions import ModelConfigurationError, ModelError, ModelMisbehaved
from picoflow.messages import Message, ModelRequest, OutputSchema, ToolDefinition
from picoflow.models._retry import RetryPolicy
from picoflow.models.base import ResponseDone, TextDelta, ToolCallDelta
from picoflow.models.openai import OpenAIModel
from picoflow.models.text_calls import RECOVERED

from .fake_servers import (
    RecordingSleep,
    Reply,
    fixed_random,
    openai_chunk,
    openai_completion,
    openai_sse,
    serving,
)

ADD = ToolDefinition(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)
SUM = OutputSchema(
    "sum", {"type": "object", "properties": {"total": {"type": "integer"}}}, description="The result"
)
TEXT_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 17, "b": 25}}\n</tool_call>'


def compatible(url: str, provider: str = "openai-compatible") -> tuple[OpenAIModel, RecordingSleep]:
    sleep = RecordingSleep()
    policy = RetryPolicy(sleep=sleep, random=fixed_random())
    return OpenAIModel("qwen2.5-coder", provider=provider, base_url=url, retry=policy), sleep


def ask(**fields: Any) -> ModelRequest:
    return ModelRequest("Be brief.", [Message.user("What is 17 + 25?")], **fields)


async def test_a_call_written_as_text_is_recovered_with_a_warning() -> None:
    with serving([Reply(body=openai_completion(TEXT_CALL))]) as server:
        model, _ = compatible(server.url)
        response = await model.request(ask(tools=[ADD]))
    (call,) = response.tool_calls
    assert (call.name, call.args) == ("add", {"a": 17, "b": 25})
    assert response.text == ""
    assert [w.code for w in response.warnings] == [RECOVERED]


async def test_without_tools_offered_json_text_stays_the_answer() -> None:
    with serving([Reply(body=openai_completion(TEXT_CALL))]) as server:
        model, _ = compatible(server.url)
        response = await model.request(ask())
    assert response.text == TEXT_CALL
    assert response.tool_calls == [] and response.warnings == []


async def test_a_streamed_call_written_as_text_never_reaches_the_text_stream() -> None:
    pieces = ["<tool", "_call>\n", '{"name": "add", ', '"arguments": {"a": 17, "b": 25}}', "\n</tool_call>"]
    chunks = [openai_chunk({"content": piece}) for piece in pieces] + [openai_chunk({}, "stop")]
    with serving([Reply(events=openai_sse(chunks))]) as server:
        model, _ = compatible(server.url)
        events = [event async for event in model.request_stream(ask(tools=[ADD]))]
    assert [e for e in events if isinstance(e, TextDelta)] == []
    (delta,) = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (delta.name, json.loads(delta.args_delta)) == ("add", {"a": 17, "b": 25})
    done = events[-1]
    assert isinstance(done, ResponseDone)
    assert [c.name for c in done.response.tool_calls] == ["add"]
    assert [w.code for w in done.response.warnings] == [RECOVERED]


async def test_a_streamed_answer_with_braces_is_shown_whole_at_the_end() -> None:
    pieces = ["The total ", "is {42}", "."]
    chunks = [openai_chunk({"content": piece}) for piece in pieces] + [openai_chunk({}, "stop")]
    with serving([Reply(events=openai_sse(chunks))]) as server:
        model, _ = compatible(server.url)
        events = [event async for event in model.request_stream(ask(tools=[ADD]))]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["The total ", "is ", "{42}."]
    done = events[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.text == "The total is {42}." and done.response.tool_calls == []


async def test_a_wrong_key_is_a_configuration_error_after_one_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "wrong-key-0123456789")
    with serving([Reply(401, {"error": {"code": 401, "message": "Invalid API Key"}})]) as server:
        model, sleep = compatible(server.url)
        with pytest.raises(ModelConfigurationError) as caught:
            await model.request(ask())
    error = caught.value
    assert len(server.received) == 1 and sleep.delays == []
    assert not error.retryable and type(error) is ModelConfigurationError and error.status_code == 401
    assert "OPENAI_COMPATIBLE_API_KEY" in str(error) and "Invalid API Key" in str(error)
    assert "wrong-key-0123456789" not in str(error)


async def test_forbidden_at_openai_names_its_own_variable() -> None:
    with serving([Reply(403, {"error": {"message": "not allowed"}})]) as server:
        model = OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-0123456789abcdef")
        with pytest.raises(ModelConfigurationError, match="Set OPENAI_API_KEY"):
            await model.request(ask())


async def test_an_unknown_model_is_a_configuration_error_naming_it() -> None:
    body = {"error": {"message": 'model "qwen2.5-coder" not found, try pulling it first'}}
    with serving([Reply(404, body)]) as server:
        model, sleep = compatible(server.url)
        with pytest.raises(ModelConfigurationError) as caught:
            await model.request(ask())
    assert len(server.received) == 1 and sleep.delays == []
    assert "serves the model 'qwen2.5-coder'" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (500, "The model produced output that does not match the expected peg-native format"),
        (500, 'error parsing tool call: raw=\'{"name": "add"\', err=unexpected end of JSON input'),
        (400, "Failed to parse tool call arguments as JSON"),
    ],
)
async def test_a_server_that_cannot_read_the_models_output_reports_a_misbehaving_model(
    status: int, message: str
) -> None:
    with serving([Reply(status, {"error": {"message": message}})]) as server:
        model, sleep = compatible(server.url)
        with pytest.raises(ModelMisbehaved) as caught:
            await model.request(ask(tools=[ADD]))
    assert len(server.received) == 1 and sleep.delays == []
    assert not caught.value.retryable
    assert f"HTTP {status}" in str(caught.value)
    assert "raw=" not in str(caught.value)  # the model's raw output may quote the user


async def test_outages_are_still_retried_with_backoff() -> None:
    replies = [
        Reply(503, {"error": {"message": "Loading model"}}),
        Reply(429, {"error": {"message": "busy"}}),
        Reply(500, {"error": {"message": "out of memory"}}),
        Reply(body=openai_completion("42")),
    ]
    with serving(replies) as server:
        model, sleep = compatible(server.url)
        response = await model.request(ask())
    assert response.text == "42"
    assert sleep.delays == [0.5, 1.0, 2.0]


async def test_an_unreachable_server_stays_retryable() -> None:
    with serving([]) as server:
        url = server.url
    model, sleep = compatible(url)
    with pytest.raises(ModelError) as caught:
        await model.request(ask())
    assert caught.value.retryable and not isinstance(caught.value, ModelConfigurationError)
    assert len(sleep.delays) == 3


async def test_output_beside_tools_is_asked_for_as_json_once_the_model_answers() -> None:
    replies = [
        Reply(body=openai_completion("The total is 42.")),
        Reply(body=openai_completion('{"total": 42}')),
    ]
    with serving(replies) as server:
        model, _ = compatible(server.url)
        response = await model.request(ask(tools=[ADD], output=SUM))
    first, second = server.bodies
    assert "response_format" not in first
    assert [tool["function"]["name"] for tool in first["tools"]] == ["add"]
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert "tools" not in second
    assert second["response_format"]["json_schema"]["name"] == "sum"
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": "The total is 42."},
        {
            "role": "user",
            "content": "Now give that final answer (The result) as one JSON object matching the required "
            "schema, and nothing else.",
        },
    ]
    assert response.text == '{"total": 42}' and response.tool_calls == []
    assert (response.usage.model_calls, response.usage.input_tokens) == (2, 20)


@pytest.mark.parametrize(
    "reply",
    [openai_completion('{"total": 42}'), openai_completion(None, [("call_1", "add", '{"a": 17, "b": 25}')])],
)
async def test_a_json_answer_or_a_call_beside_output_takes_one_request(reply: dict[str, Any]) -> None:
    with serving([Reply(body=reply)]) as server:
        model, _ = compatible(server.url)
        response = await model.request(ask(tools=[ADD], output=SUM))
    assert len(server.received) == 1
    assert response.text == '{"total": 42}' or [c.name for c in response.tool_calls] == ["add"]


async def test_a_streamed_request_with_output_beside_tools_streams_no_prose() -> None:
    replies = [
        Reply(body=openai_completion("The total is 42.")),
        Reply(body=openai_completion('{"total": 42}')),
    ]
    with serving(replies) as server:
        model, _ = compatible(server.url)
        events = [event async for event in model.request_stream(ask(tools=[ADD], output=SUM))]
    assert len(events) == 1
    done = events[0]
    assert isinstance(done, ResponseDone) and done.response.text == '{"total": 42}'


async def test_output_alone_and_openai_itself_keep_response_format() -> None:
    replies = [Reply(body=openai_completion('{"total": 42}')) for _ in range(2)]
    with serving(replies) as server:
        model, _ = compatible(server.url)
        await model.request(ask(output=SUM))
        hosted = OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-0123456789abcdef")
        await hosted.request(ask(tools=[ADD], output=SUM))
    for body in server.bodies:
        assert body["response_format"]["json_schema"]["name"] == "sum"
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
