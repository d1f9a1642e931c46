"""The Gemini adapter, through the real google-genai SDK, against a scripted Gemini REST server."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from picoflow import Flow, FlowEngine, Step, tool
from picoflow.exceptions import ModelConfigurationError, ModelError, ModelHTTPError, ModelMisbehaved
from picoflow.messages import Message, ModelRequest, OutputSchema, ToolCall, ToolDefinition
from picoflow.models._retry import RetryPolicy
from picoflow.models.base import ResponseDone, TextDelta, ToolCallDelta
from picoflow.models.catalog import ModelSelection, resolve
from picoflow.models.google import GoogleModel

from .fake_gemini import (
    GeminiReply,
    call_part,
    gemini_error,
    gemini_response,
    gemini_serving,
    signature_of,
    text_part,
    usage,
)
from .fake_servers import RecordingSleep, fixed_random

API_KEY = "AIzaSyTEST-0123456789abcdefGHIJ"
# The API version in the path (v1, v1beta) is the SDK's choice.
GENERATE = "/models/gemini-2.5-flash:generateContent"
STREAM = "/models/gemini-2.5-flash:streamGenerateContent"

WEATHER = ToolDefinition(
    "weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
BOOK = ToolDefinition(
    "book",
    "Book a room.",
    {
        "type": "object",
        "properties": {"stay": {"$ref": "#/$defs/Stay", "description": "the stay"}},
        "required": ["stay"],
        "$defs": {"Stay": {"type": "object", "properties": {"nights": {"type": "integer"}}}},
    },
)
PICK = OutputSchema(
    "pick",
    {
        "type": "object",
        "properties": {"choice": {"$ref": "#/$defs/Choice"}},
        "$defs": {"Choice": {"type": "string", "enum": ["a", "b"]}},
    },
)


_opened: list[GoogleModel] = []


@pytest.fixture(autouse=True)
async def _close_models() -> AsyncIterator[None]:
    """Every model a test made lets go of its connections (no unclosed-socket warnings)."""
    yield
    while _opened:
        await _opened.pop().aclose()


def make_model(url: str, name: str = "gemini-2.5-flash", **params: Any) -> tuple[GoogleModel, RecordingSleep]:
    sleep = RecordingSleep()
    policy = RetryPolicy(max_retries=params.pop("retries", 3), sleep=sleep, random=fixed_random())
    spec, checked = resolve(ModelSelection("google", name, params))
    model = GoogleModel(name, api_key=API_KEY, base_url=url, params=checked, retry=policy, spec=spec)
    _opened.append(model)
    return model, sleep


def ask(text: str = "hello", **fields: Any) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[Message.user(text)], **fields)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


def wire(fields: dict[str, Any], snake: str) -> Any:
    """A field as the SDK wrote it: proto JSON takes lowerCamelCase and snake_case alike, and the
    SDK uses both (it encodes some nested values by their Python names)."""
    head, *rest = snake.split("_")
    camel = head + "".join(word.title() for word in rest)
    return fields[camel] if camel in fields else fields[snake]


def decoded(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


async def test_text_reply_with_system_instruction_key_header_and_settings() -> None:
    reply = GeminiReply(body=gemini_response([text_part("Hi.")], usage_metadata=usage(12, 3)))
    with gemini_serving([reply]) as server:
        model, _ = make_model(server.url, temperature=0.3, top_k=20, max_tokens=500, stop_sequences=["END"])
        response = await model.request(ask())
        await model.aclose()
    assert (response.text, response.finish_reason, response.model) == ("Hi.", "stop", "gemini-2.5-flash")
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.model_calls) == (
        12,
        3,
        1,
    )
    received = server.received[0]
    assert received.path.endswith(GENERATE)
    assert received.headers["x-goog-api-key"] == API_KEY
    body = received.body
    assert body["systemInstruction"]["parts"] == [{"text": "You are terse."}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]
    assert body["generationConfig"] == {
        "temperature": 0.3,
        "topK": 20,
        "maxOutputTokens": 500,
        "stopSequences": ["END"],
    }
    assert "tools" not in body


async def test_one_and_several_function_calls() -> None:
    replies = [
        GeminiReply(body=gemini_response([call_part("weather", {"city": "Oslo"}, call_id="fc-1")])),
        GeminiReply(
            body=gemini_response(
                [
                    text_part("Checking both."),
                    call_part("weather", {"city": "Oslo"}),
                    call_part("book", {"stay": {"nights": 2}}),
                ]
            )
        ),
    ]
    with gemini_serving(replies) as server:
        model, _ = make_model(server.url)
        one = await model.request(ask(tools=[WEATHER]))
        several = await model.request(ask(tools=[WEATHER, BOOK]))
    assert one.tool_calls == [ToolCall("weather", {"city": "Oslo"}, "fc-1")]
    assert several.text == "Checking both."
    assert [(call.name, call.args) for call in several.tool_calls] == [
        ("weather", {"city": "Oslo"}),
        ("book", {"stay": {"nights": 2}}),
    ]
    ids = [call.id for call in several.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    declarations = server.bodies[1]["tools"][0]["functionDeclarations"]
    assert [declaration["name"] for declaration in declarations] == ["weather", "book"]
    # Gemini resolves no $ref: the nested model is inlined, its sibling keywords kept.
    book_schema = wire(declarations[1], "parameters_json_schema")
    assert book_schema == {
        "type": "object",
        "properties": {
            "stay": {
                "type": "object",
                "properties": {"nights": {"type": "integer"}},
                "description": "the stay",
            }
        },
        "required": ["stay"],
    }


async def test_function_responses_go_back_matched_to_their_calls_in_order() -> None:
    first = ToolCall("weather", {"city": "Oslo"}, "fc-7")
    second = ToolCall("book", {"stay": {"nights": 2}}, "gemini-call-local")
    history = [
        Message.user("Weather and a room?"),
        Message.assistant("On it.", [first, second]),
        Message.tool(first, "Sunny"),
        Message.tool(second, "No rooms left", is_error=True),
        Message.user("Answer in French.", kind="correction"),
    ]
    with gemini_serving([GeminiReply(body=gemini_response([text_part("Ensoleillé.")]))]) as server:
        model, _ = make_model(server.url)
        await model.request(ModelRequest(system="", messages=history, tools=[WEATHER, BOOK]))
    body = server.bodies[0]
    assert "systemInstruction" not in body
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather and a room?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "On it."},
                {"functionCall": {"id": "fc-7", "name": "weather", "args": {"city": "Oslo"}}},
                # An id picoflow made up is not the API's: it is not sent.
                {"functionCall": {"name": "book", "args": {"stay": {"nights": 2}}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "fc-7", "name": "weather", "response": {"output": "Sunny"}}},
                {"functionResponse": {"name": "book", "response": {"error": "No rooms left"}}},
                {"text": "Answer in French."},
            ],
        },
    ]


async def test_structured_output_is_native_without_tools() -> None:
    with gemini_serving([GeminiReply(body=gemini_response([text_part('{"choice": "a"}')]))]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(output=PICK))
    assert response.text == '{"choice": "a"}'
    config = server.bodies[0]["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == {
        "type": "object",
        "properties": {"choice": {"type": "string", "enum": ["a", "b"]}},
    }


async def test_structured_output_with_tools_is_a_forced_function() -> None:
    reply = GeminiReply(body=gemini_response([call_part("pick", {"choice": "b"})]))
    with gemini_serving([reply]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(tools=[WEATHER], output=PICK))
    assert response.text == '{"choice": "b"}'
    assert response.tool_calls == []
    body = server.bodies[0]
    assert [d["name"] for d in body["tools"][0]["functionDeclarations"]] == ["weather", "pick"]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert "responseMimeType" not in body["generationConfig"]


async def test_thought_signatures_are_kept_and_sent_back_on_the_same_parts() -> None:
    answer = gemini_response(
        [
            text_part("Let me look.", signature=b"text-signature"),
            call_part("weather", {"city": "Oslo"}, signature=b"call-signature"),
            call_part("weather", {"city": "Rome"}),
        ],
        usage_metadata=usage(100, 20, thoughts=50),
    )
    replies = [GeminiReply(body=answer), GeminiReply(body=gemini_response([text_part("Sunny in both.")]))]
    with gemini_serving(replies) as server:
        model, _ = make_model(server.url, thinking_budget=1024)
        response = await model.request(ask(tools=[WEATHER]))
        oslo, rome = response.tool_calls
        assert response.reasoning == [
            {"type": "gemini_thought_signature", "signature": signature_of(b"text-signature")},
            {
                "type": "gemini_thought_signature",
                "signature": signature_of(b"call-signature"),
                "call_id": oslo.id,
            },
        ]
        assert (response.usage.output_tokens, response.usage.reasoning_tokens) == (70, 50)
        kept = Message.assistant(response.text, response.tool_calls, reasoning=response.reasoning)
        history = [Message.user("hello"), kept, Message.tool(oslo, "Sunny"), Message.tool(rome, "Sunny")]
        await model.request(ModelRequest(system="", messages=history, tools=[WEATHER]))
    assert wire(wire(server.bodies[0]["generationConfig"], "thinking_config"), "thinking_budget") == 1024
    parts = server.bodies[1]["contents"][1]["parts"]
    assert [decoded(part["thoughtSignature"]) if "thoughtSignature" in part else None for part in parts] == [
        b"text-signature",
        b"call-signature",
        None,
    ]
    assert [part.get("text") or part["functionCall"]["args"]["city"] for part in parts] == [
        "Let me look.",
        "Oslo",
        "Rome",
    ]


async def test_signatures_of_another_model_are_not_sent() -> None:
    call = ToolCall("weather", {"city": "Oslo"}, "gemini-call-1")
    signed = {"type": "gemini_thought_signature", "signature": signature_of(b"x"), "call_id": call.id}
    from_pro = Message("assistant", "", (call,), reasoning=(signed,), model="google:gemini-2.5-pro")
    history = [Message.user("hi"), from_pro, Message.tool(call, "Sunny")]
    with gemini_serving([GeminiReply(body=gemini_response([text_part("ok")]))]) as server:
        model, _ = make_model(server.url)
        await model.request(ModelRequest(system="", messages=history))
    assert server.bodies[0]["contents"][1] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "weather", "args": {"city": "Oslo"}}}],
    }


async def test_cached_and_thinking_tokens_are_counted() -> None:
    metadata = usage(2000, 40, thoughts=300, cached=1500)
    with gemini_serving(
        [GeminiReply(body=gemini_response([text_part("ok")], usage_metadata=metadata))]
    ) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask())
    assert response.usage.as_dict() == {
        "input_tokens": 2000,
        "output_tokens": 340,
        "reasoning_tokens": 300,
        "cached_input_tokens": 1500,
        "cache_creation_tokens": 0,
        "model_calls": 1,
        "tool_calls": 0,
        "total_tokens": 2340,
    }


async def test_streaming_text_calls_signature_and_usage() -> None:
    chunks = [
        gemini_response([text_part("Let me ")], finish_reason=None),
        gemini_response([text_part("check.")], finish_reason=None),
        gemini_response(
            [call_part("weather", {"city": "Oslo"}, signature=b"streamed")],
            usage_metadata=usage(30, 8, thoughts=4),
        ),
    ]
    with gemini_serving([GeminiReply(chunks=chunks)]) as server:
        model, _ = make_model(server.url)
        events = [event async for event in model.request_stream(ask(tools=[WEATHER]))]
    assert server.received[0].path.endswith(STREAM)
    assert server.received[0].query == {"alt": ["sse"]}
    assert events[:2] == [TextDelta("Let me "), TextDelta("check.")]
    delta = events[2]
    assert isinstance(delta, ToolCallDelta)
    assert (delta.index, delta.name, delta.args_delta) == (0, "weather", '{"city": "Oslo"}')
    done = events[3]
    assert isinstance(done, ResponseDone)
    response = done.response
    assert response.text == "Let me check."
    assert response.tool_calls == [ToolCall("weather", {"city": "Oslo"}, delta.id or "")]
    assert response.reasoning[0]["call_id"] == delta.id
    assert (response.usage.input_tokens, response.usage.output_tokens) == (30, 12)


async def test_a_stream_refused_before_its_first_chunk_is_retried() -> None:
    replies = [
        GeminiReply(503, gemini_error(503, "UNAVAILABLE", "The model is overloaded.")),
        GeminiReply(chunks=[gemini_response([text_part("ok")])]),
    ]
    with gemini_serving(replies) as server:
        model, sleep = make_model(server.url)
        events = [event async for event in model.request_stream(ask())]
    assert len(server.received) == 2
    assert sleep.delays == [0.5]
    assert events[0] == TextDelta("ok")


async def test_a_failure_mid_stream_is_a_model_error_without_the_key() -> None:
    chunks = [
        gemini_response([text_part("Hel")], finish_reason=None),
        gemini_error(503, "UNAVAILABLE", f"overloaded while serving {API_KEY}"),
    ]
    with gemini_serving([GeminiReply(chunks=chunks)]) as server:
        model, sleep = make_model(server.url)
        events: list[object] = []

        async def drain() -> None:
            async for event in model.request_stream(ask()):
                events.append(event)

        with pytest.raises(ModelError, match="stream failed: overloaded") as caught:
            await drain()
    assert events == [TextDelta("Hel")]
    assert sleep.delays == []  # part of the answer was already shown: no retry
    assert API_KEY not in str(caught.value)


async def test_rate_limited_then_success_honours_retry_after() -> None:
    replies = [
        GeminiReply(429, gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded"), {"Retry-After": "2"}),
        GeminiReply(503, gemini_error(503, "UNAVAILABLE", "overloaded")),
        GeminiReply(body=gemini_response([text_part("ok")])),
    ]
    with gemini_serving(replies) as server:
        model, sleep = make_model(server.url)
        response = await model.request(ask())
    assert response.text == "ok"
    assert len(server.received) == 3
    assert sleep.delays == [2.0, 1.0]


async def test_server_errors_until_failure_raise_a_typed_error() -> None:
    replies = [GeminiReply(500, gemini_error(500, "INTERNAL", "internal error")) for _ in range(3)]
    with gemini_serving(replies) as server:
        model, sleep = make_model(server.url, retries=2)
        with pytest.raises(ModelHTTPError) as caught:
            await model.request(ask())
    assert len(server.received) == 3
    assert sleep.delays == [0.5, 1.0]
    assert caught.value.status_code == 500
    assert caught.value.provider == "google:gemini-2.5-flash"
    assert "internal error" in str(caught.value)


async def test_invalid_argument_is_misbehaviour_and_not_retried() -> None:
    refusal = gemini_error(400, "INVALID_ARGUMENT", "Function call is missing a thought_signature")
    with gemini_serving([GeminiReply(400, refusal)]) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelMisbehaved, match="missing a thought_signature"):
            await model.request(ask())
    assert len(server.received) == 1
    assert sleep.delays == []


async def test_a_refused_key_is_a_configuration_error_never_retried_nor_shown() -> None:
    echo = gemini_error(403, "PERMISSION_DENIED", f"API key {API_KEY} is not allowed to use this model")
    with gemini_serving([GeminiReply(403, echo)]) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelConfigurationError) as caught:
            await model.request(ask())
    assert caught.value.status_code == 403
    assert not caught.value.retryable
    assert sleep.delays == []
    assert API_KEY not in str(caught.value)
    assert "[redacted]" in str(caught.value)
    assert str(caught.value).endswith(
        "Set GOOGLE_API_KEY (or GEMINI_API_KEY) to a key allowed to use this model"
    )


async def test_an_invalid_key_and_an_unknown_model_are_configuration_errors() -> None:
    invalid = gemini_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
    invalid["error"]["details"] = [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
    ]
    missing = gemini_error(404, "NOT_FOUND", "models/gemini-2.5-flash is not found for API version v1")
    with gemini_serving([GeminiReply(400, invalid), GeminiReply(404, missing)]) as server:
        model, sleep = make_model(server.url)
        with pytest.raises(ModelConfigurationError, match="GOOGLE_API_KEY") as bad_key:
            await model.request(ask())
        with pytest.raises(ModelConfigurationError, match="is a model of the Gemini API") as unknown:
            await model.request(ask())
    assert (bad_key.value.status_code, unknown.value.status_code) == (400, 404)
    assert len(server.received) == 2
    assert sleep.delays == []


async def test_timeout_is_retried_then_reported() -> None:
    with gemini_serving([GeminiReply(hold=True), GeminiReply(hold=True)]) as server:
        model, sleep = make_model(server.url, timeout=0.2, retries=1)
        with pytest.raises(ModelError, match="did not answer in time after 2 attempts") as caught:
            await model.request(ask())
    assert len(server.received) == 2
    assert sleep.delays == [0.5]
    assert API_KEY not in str(caught.value)


async def test_a_malformed_function_call_is_an_empty_answer_with_a_warning() -> None:
    body = gemini_response([], finish_reason="MALFORMED_FUNCTION_CALL")
    with gemini_serving([GeminiReply(body=body)]) as server:
        model, _ = make_model(server.url)
        response = await model.request(ask(tools=[WEATHER]))
    assert response.is_empty
    assert response.finish_reason == "malformed_function_call"
    assert [warning.code for warning in response.warnings] == ["malformed_tool_call"]


async def test_a_malformed_call_the_runner_answered_goes_back_without_arguments() -> None:
    broken = ToolCall("weather", '{"city": "Os', "fc-1")
    history = [
        Message.user("hi"),
        Message.assistant("", [broken]),
        Message.tool(broken, "bad JSON", is_error=True),
    ]
    with gemini_serving([GeminiReply(body=gemini_response([text_part("ok")]))]) as server:
        model, _ = make_model(server.url)
        await model.request(ModelRequest(system="", messages=history, tools=[WEATHER]))
    assert server.bodies[0]["contents"][1]["parts"] == [
        {"functionCall": {"id": "fc-1", "name": "weather", "args": {}}}
    ]


async def test_the_key_comes_from_either_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    bare = GoogleModel("gemini-2.5-flash", base_url="http://127.0.0.1:9")
    with pytest.raises(ModelConfigurationError, match="GOOGLE_API_KEY"):
        await bare.request(ask())
    monkeypatch.setenv("GEMINI_API_KEY", API_KEY)
    with gemini_serving([GeminiReply(body=gemini_response([text_part("ok")]))]) as server:
        model = GoogleModel("gemini-2.5-flash", base_url=server.url)
        _opened.append(model)
        assert (await model.request(ask())).text == "ok"
        assert API_KEY not in repr(model)
    assert server.received[0].headers["x-goog-api-key"] == API_KEY


async def test_a_tool_turn_through_the_engine() -> None:
    class Forecaster(Step):
        """Tell the weather."""

        @tool
        def weather(self, city: str) -> str:
            """Weather for a city."""
            return f"Sunny in {city}"

    class Weather(Flow):
        name = "weather"
        steps = [Forecaster]

    replies = [
        GeminiReply(body=gemini_response([call_part("weather", {"city": "Oslo"}, signature=b"sig-1")])),
        GeminiReply(body=gemini_response([text_part("It is sunny in Oslo.")])),
    ]
    with gemini_serving(replies) as server:
        model, _ = make_model(server.url)
        engine = FlowEngine([Weather], model=model)
        result = await engine.run("weather", "Weather in Oslo?")
    assert result.ok, result.error
    assert result.message == "It is sunny in Oslo."
    continuation = server.bodies[1]["contents"]
    assert continuation[1] == {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}, "thoughtSignature": b64(b"sig-1")}
        ],
    }
    assert continuation[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "weather", "response": {"output": "Sunny in Oslo"}}}],
    }
    transcript = await engine.transcript(result.session_id)
    assert transcript is not None
    assert [message.role for message in transcript] == ["user", "assistant", "tool", "assistant"]
    assert transcript[1].reasoning[0]["type"] == "gemini_thought_signature"
