"""ScriptedModel and FunctionModel: responses from a script or a function, requests recorded."""

from __future__ import annotations

import pytest

from picoflow.exceptions import ScriptExhausted
from picoflow.messages import Message, ModelRequest, ModelResponse
from picoflow.models import FunctionModel, ScriptedModel, ToolCall


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(system="sys", messages=[Message.user(text)], step="S")


async def test_script_items_become_responses_with_ids_and_usage() -> None:
    model = ScriptedModel(["hello", ToolCall("a", {"x": 1}), [ToolCall("b"), ToolCall("c", id="mine")]])
    first = await model.request(request())
    assert first.text == "hello" and first.tool_calls == [] and first.usage.model_calls == 1
    assert first.usage.input_tokens == 2 and first.model == "scripted:test"
    second = await model.request(request())
    assert second.tool_calls == [ToolCall("a", {"x": 1}, "call_1")]
    third = await model.request(request())
    assert third.tool_calls == [ToolCall("b", {}, "call_2"), ToolCall("c", {}, "mine")]
    assert len(model.requests) == 3 and model.remaining == 0
    with pytest.raises(ScriptExhausted, match="step S asked for response 4, but the script has only 3"):
        await model.request(request())


async def test_errors_in_the_script_are_raised() -> None:
    model = ScriptedModel([TimeoutError("slow")])
    with pytest.raises(TimeoutError):
        await model.request(request())


async def test_function_model_sync_and_async() -> None:
    sync = FunctionModel(lambda req: f"echo {req.messages[-1].content}")
    assert (await sync.request(request("x"))).text == "echo x"

    async def answer(req: ModelRequest) -> ModelResponse:
        return ModelResponse(text="async")

    assert (await FunctionModel(answer).request(request())).text == "async"
    with pytest.raises(TypeError, match="cannot turn int into a model response"):
        await FunctionModel(lambda req: 42).request(request())
