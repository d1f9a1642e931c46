"""The Anthropic adapter, through the official SDK, against a scripted Messages API server."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from picoflow import Flow, FlowEngine, Step, tool
from picoflow.exceptions import ModelConfigurationError, ModelError, ModelHTTPError
from picoflow.messages import Message, ModelRequest, OutputSchema, ToolCall, ToolDefinition
from picoflow.models._retry import RetryPolicy
from picoflow.models.anthropic import AnthropicModel, anthropic_tool
from picoflow.models.base import ResponseDone, TextDelta, ToolCallDelta
from picoflow.models.catalog import ModelSelection, resolve
from picoflow.sessions.factory import open_store

from .fake_servers import (
    RecordingSleep,
    Reply,
    anthropic_error,
    anthropic_message,
    anthropic_sse,
    fixed_random,
    serving,
)

API_KEY = "sk-ant-test-0123456789abcdef"

SEARCH = ToolDefinition(
    "search_books",
    "Search the catalog.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    strict=True,
)
WEATHER = ToolDefinition(
    "weather", "Weather for a city.", {"type": "object", "properties": {"city": {"type": "string"}}}
)
PICK = OutputSchema(
    "pick", {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
)


def make_model(
    url: str, name: str = "claude-haiku-4-5", **params: Any
) -> tuple[AnthropicModel, RecordingSleep]:
    sleep = RecordingSleep()
    policy = RetryPolicy(max_retries=params.pop("retries", 3), sleep=sleep, random=fixed_random())
    spec, checked = resolve(ModelSelection("anthropic", name, params))
    model = AnthropicModel(name, api_key=API_KEY, base_url=url, params=checked, retry=policy, spec=spec)
    return model, sleep


def ask(text: str = "hello", **fields: Any) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[Message.user(text)], **fields)


def tool_use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


async def test_text_reply_with_system_field() -> None:
    with serving([Reply(body=anthropic_message([{"type": "text", "text": "Hi."}]))]) as server:
        model, _ = make_model(server.url, temperature=0.3)
        response = await model.request(ask())
        await model.aclose()
    assert response.text == "Hi."
    assert response.finish_reason == "end_turn"
    assert response.model == "claude-sonnet-4-5-20250929"
    received = server.received[0]
    assert received.path == "/v1/messages"
    assert API_KEY in (
        received.headers.get("x-api-key"),
        received.headers.get("authorization", "").removeprefix("Bearer "),
    )
    body = received.body
    # The system prompt is a cache breakpoint: with the tools, the stable prefix of every call.
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert body["max_tokens"] == 8192
    assert body["temperature"] == 0.3


async def test_one_and_several_tool_calls() -> None:
    content = [{"type": "text", "text": "Looking."}, tool_use("toolu_1", "search_books", {"query": "whales"})]
    several = [
        tool_use("toolu_2", "search_books", {"query": "orcas"}),
        tool_use("toolu_3", "weather", {"city": "Oslo"}),
    ]
    replies = [
        Reply(body=anthropic_message(content, stop_reason="tool_use")),
        Reply(body=anthropic_message(several, stop_reason="tool_use")),
    ]
    with serving(replies) as server:
        model, _ = make_model(server.url)
        one = await model.request(ask(tools=[SEARCH, WEATHER]))
        two = await model.request(ask(tools=[SEARCH, WEATHER]))
    assert one.text == "Looking."
    assert one.tool_calls == [ToolCall("search_books", {"query": "whales"}, "toolu_1")]
    assert one.finish_reason == "tool_use"
    assert [(c.id, c.name, c.args) for c in two.tool_calls] == [
        ("toolu_2", "search_books", {"query": "orcas"}),
        ("toolu_3", "weather", {"city": "Oslo"}),
    ]
    tools = server.bodies[0]["tools"]
    assert tools[0] == {**anthropic_tool(SEARCH), "strict": True}
    assert tools[1] == {**anthropic_tool(WEATHER), "cache_control": {"type": "ephemeral"}}  # the last tool


async def test_tool_results_merge_into_one_alternating_user_turn() -> None:
    first, second = (
        ToolCall("search_books", {"query": "whales"}, "toolu_a"),
        ToolCall("weather", "{bad", "toolu_b"),
    )
    history = [
        Message.assistant("Welcome! What are you looking for?", kind="direct"),
        Message.user("whales and weather"),
        Message.assistant("On it.", [first, second]),
        Message.tool(first, "Moby-Dick"),
        Message.tool(second, "arguments are not valid JSON", is_error=True, kind="correction"),
        Message.user("Answer in French.", kind="nudge"),
        Message("system", "Summary: the user likes the sea.", kind="summary"),
    ]
    with serving([Reply(body=anthropic_message([{"type": "text", "text": "Voilà."}]))]) as server:
        model, _ = make_model(server.url)
        await model.request(ModelRequest(system="sys", messages=history, tools=[SEARCH, WEATHER]))
    body = server.bodies[0]
    assert [block["text"] for block in body["system"]] == ["sys\n\nSummary: the user likes the sea."]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "(conversation start)"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Welcome! What are you looking for?"}]},
        {"role": "user", "content": [{"type": "text", "text": "whales and weather"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "toolu_a", "name": "search_books", "input": {"query": "whales"}},
                {"type": "tool_use", "id": "toolu_b", "name": "weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "Moby-Dick", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "arguments are not valid JSON",
                    "is_error": True,
                },
                {"type": "text", "text": "Answer in French."},
            ],
        },
    ]


async def test_overloaded_then_success_honours_retry_after() -> None:
    replies = [
        Reply(529, anthropic_error("overloaded_error", "Overloaded"), headers={"retry-after": "3"}),
        Reply(429, anthropic_error("rate_limit_error", "slow down")),
        Reply(body=anthropic_message([{"type": "text", "text": "ok"}])),
    ]
    with serving(replies) as server:
        model, sleep = make_model(server.url)
        response = await model.request(ask())
    assert response.text == "ok"
    assert len(server.received) == 3
    assert sleep.delays == [3.0, 1.0]


async def test_server_errors_until_failure_raise_typed_error() -> None:
    with serving([Reply(500, anthropic_error("api_error", "internal")) for _ in range(2)]) as server:
        model, sleep = make_model(server.url, retries=1)
        with pytest.raises(ModelHTTPError) as caught:
            await model.request(ask())
    assert len(server.received) == 2
    assert sleep.delays == [0.5]
    assert caught.value.status_code == 500
    assert caught.value.provider == "anthropic:claude-haiku-4-5"
    assert "internal" in str(caught.value)


async def test_bad_request_is_not_retried() -> None:
    with serving(
        [Reply(400, anthropic_error("invalid_request_error", "messages: roles must alternate"))]
    ) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelHTTPError, match="roles must alternate") as caught:
            await model.request(ask())
    assert caught.value.status_code == 400
    assert sleep.delays == []
    assert API_KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("status", "kind", "says"),
    [
        (401, "authentication_error", "Set ANTHROPIC_API_KEY to a key Anthropic accepts"),
        (403, "permission_error", "Set ANTHROPIC_API_KEY to a key Anthropic accepts"),
        (404, "not_found_error", "Check the model's name"),
    ],
)
async def test_a_refused_key_or_unknown_model_is_a_configuration_error_tried_once(
    status: int, kind: str, says: str
) -> None:
    with serving([Reply(status, anthropic_error(kind, "refused"))]) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelConfigurationError) as caught:
            await model.request(ask())
    assert len(server.received) == 1 and sleep.delays == []
    assert says in str(caught.value) and not caught.value.retryable
    assert API_KEY not in str(caught.value)


async def test_timeout_is_retried_then_reported() -> None:
    slow = [Reply(body=anthropic_message([{"type": "text", "text": "late"}]), delay=1.0) for _ in range(2)]
    with serving(slow) as server:
        model, sleep = make_model(server.url, timeout=0.2, retries=1)
        with pytest.raises(ModelError, match="did not answer in time after 2 attempts"):
            await model.request(ask())
    assert len(server.received) == 2
    assert sleep.delays == [0.5]


async def test_usage_includes_cache_and_thinking_tokens() -> None:
    usage = {
        "input_tokens": 50,
        "output_tokens": 400,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 300,
        "output_tokens_details": {"thinking_tokens": 120},
    }
    with serving([Reply(body=anthropic_message([{"type": "text", "text": "ok"}], usage=usage))]) as server:
        model, _ = make_model(server.url)
        got = (await model.request(ask())).usage
    assert got.input_tokens == 2350
    assert (got.cached_input_tokens, got.cache_creation_tokens) == (2000, 300)
    assert (got.output_tokens, got.reasoning_tokens, got.model_calls) == (400, 120, 1)


async def test_native_structured_output() -> None:
    with serving(
        [Reply(body=anthropic_message([{"type": "text", "text": '{"title": "Moby-Dick"}'}]))]
    ) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(output=PICK))
    assert json.loads(response.text) == {"title": "Moby-Dick"}
    body = server.bodies[0]
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": dict(PICK.schema)}}
    assert "tool_choice" not in body


async def test_structured_output_falls_back_to_a_forced_tool() -> None:
    answer = [tool_use("toolu_9", "pick", {"title": "Moby-Dick"})]
    with serving([Reply(body=anthropic_message(answer, stop_reason="tool_use"))] * 2) as server:
        model, _ = make_model(server.url, name="claude-sonnet-4-0")
        alone = await model.request(ask(output=PICK))
        with_tools = await model.request(ask(output=PICK, tools=[SEARCH]))
    assert json.loads(alone.text) == {"title": "Moby-Dick"}
    assert alone.tool_calls == []
    assert with_tools.text == alone.text
    first, second = server.bodies
    assert first["tools"] == [
        {
            "name": "pick",
            "description": "Give the final answer in this exact structure.",
            "input_schema": dict(PICK.schema),
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert first["tool_choice"] == {"type": "tool", "name": "pick"}
    assert [tool["name"] for tool in second["tools"]] == ["search_books", "pick"]
    assert second["tool_choice"] == {"type": "any"}
    assert "output_config" not in first
    assert "strict" not in second["tools"][0]


THOUGHT = {"type": "thinking", "thinking": "The user wants whales.", "signature": "EqQBCkYIBxgCKkB="}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}


async def test_thinking_blocks_go_back_verbatim_while_the_tool_loop_goes_on() -> None:
    call = tool_use("toolu_1", "search_books", {"query": "whales"})
    replies = [
        Reply(body=anthropic_message([THOUGHT, REDACTED, call], stop_reason="tool_use")),
        Reply(body=anthropic_message([{"type": "text", "text": "Moby-Dick."}])),
    ]
    with serving(replies) as server:
        model, _ = make_model(server.url, thinking_budget=2048)
        first = await model.request(ask("whales?", tools=[SEARCH]))
        assert first.reasoning == [THOUGHT, REDACTED]
        assert first.tool_calls == [ToolCall("search_books", {"query": "whales"}, "toolu_1")]
        (proposed,) = first.tool_calls
        follow_up = ModelRequest(
            "sys",
            [
                Message.user("whales?"),
                Message.assistant(first.text, first.tool_calls, reasoning=first.reasoning),
                Message.tool(proposed, "Moby-Dick"),
            ],
            tools=[SEARCH],
        )
        await model.request(follow_up)
    opening, continuation = server.bodies
    assert opening["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert opening["max_tokens"] == 8192
    assert continuation["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert continuation["messages"][1] == {"role": "assistant", "content": [THOUGHT, REDACTED, call]}


async def test_a_tool_loop_without_thinking_blocks_continues_without_thinking() -> None:
    # The call was made by another model (or before thinking was switched on): the API would refuse
    # a thinking continuation that lacks the blocks, so this one answers without thinking.
    call = ToolCall("search_books", {"query": "whales"}, "toolu_1")
    follow_up = ModelRequest(
        "sys", [Message.user("hi"), Message.assistant("", [call]), Message.tool(call, "none")]
    )
    with serving([Reply(body=anthropic_message([{"type": "text", "text": "x"}]))]) as server:
        model, _ = make_model(server.url, thinking_budget=2048)
        await model.request(follow_up)
    (body,) = server.bodies
    assert "thinking" not in body
    assert body["messages"][1]["content"] == [tool_use("toolu_1", "search_books", {"query": "whales"})]


async def test_streamed_thinking_is_collected_with_its_signature() -> None:
    events = [
        {"type": "message_start", "message": anthropic_message([])},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "The user "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "wants whales."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "EqQBCkYIBxgCKkB="},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": REDACTED},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "search_books", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "whales"}'},
        },
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
    ]
    with serving([Reply(events=anthropic_sse(events))]) as server:
        model, _ = make_model(server.url, thinking_budget=2048)
        got = [event async for event in model.request_stream(ask(tools=[SEARCH]))]
    assert not [e for e in got if isinstance(e, TextDelta)], "thinking is never shown as reply text"
    done = got[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.reasoning == [THOUGHT, REDACTED]
    assert done.response.tool_calls == [ToolCall("search_books", {"query": "whales"}, "toolu_1")]


async def test_streaming_text_and_tool_deltas_with_usage() -> None:
    events = [
        {
            "type": "message_start",
            "message": {
                **anthropic_message([]),
                "usage": {"input_tokens": 20, "output_tokens": 1, "cache_read_input_tokens": 5},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_7", "name": "search_books", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": '},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '"whales"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 33},
        },
        {"type": "message_stop"},
    ]
    with serving([Reply(events=anthropic_sse(events))]) as server:
        model, _ = make_model(server.url)
        got = [event async for event in model.request_stream(ask(tools=[SEARCH]))]
    assert server.bodies[0]["stream"] is True
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["Let me ", "look."]
    deltas = [e for e in got if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "toolu_7", "search_books", "")
    assert "".join(d.args_delta for d in deltas) == '{"query": "whales"}'
    done = got[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.text == "Let me look."
    assert done.response.tool_calls == [ToolCall("search_books", {"query": "whales"}, "toolu_7")]
    assert done.response.finish_reason == "tool_use"
    usage = done.response.usage
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (25, 5, 33)


async def test_streaming_malformed_tool_json_is_kept_raw() -> None:
    events = [
        {"type": "message_start", "message": anthropic_message([])},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"city": "Os'},
        },
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    ]
    with serving([Reply(events=anthropic_sse(events))]) as server:
        model, _ = make_model(server.url)
        got = [event async for event in model.request_stream(ask(tools=[WEATHER]))]
    done = got[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.tool_calls == [ToolCall("weather", '{"city": "Os', "toolu_1")]


async def test_missing_api_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    model = AnthropicModel("claude-haiku-4-5", base_url="http://127.0.0.1:9")
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        await model.request(ask())


async def test_a_thinking_tool_turn_through_the_engine_keeps_and_stores_the_blocks(
    tmp_path: pathlib.Path,
) -> None:
    class Librarian(Step):
        """Find books."""

        @tool
        def search_books(self, query: str) -> str:
            """Search the catalog."""
            return f"Moby-Dick ({query})"

    class Books(Flow):
        name = "books"
        steps = [Librarian]

    call = tool_use("toolu_1", "search_books", {"query": "whales"})
    replies = [
        Reply(body=anthropic_message([THOUGHT, call], stop_reason="tool_use")),
        Reply(body=anthropic_message([{"type": "text", "text": "Try Moby-Dick."}])),
    ]
    store = open_store(f"sqlite:///{tmp_path / 'sessions.sqlite3'}")
    with serving(replies) as server:
        model, _ = make_model(server.url, thinking_budget=2048)
        engine = FlowEngine([Books], model=model, store=store)
        result = await engine.run("books", "whales?")
    assert result.ok, result.error
    assert result.message == "Try Moby-Dick."
    continuation = server.bodies[1]
    assert continuation["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert continuation["messages"][1:] == [
        {"role": "assistant", "content": [THOUGHT, call]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "Moby-Dick (whales)",
                    "is_error": False,
                }
            ],
        },
    ]
    transcript = await engine.transcript(result.session_id)
    assert transcript is not None
    assert [(m.role, m.reasoning) for m in transcript] == [
        ("user", ()),
        ("assistant", (THOUGHT,)),
        ("tool", ()),
        ("assistant", ()),
    ]
