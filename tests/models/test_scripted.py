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


def step_request(step: str | None) -> ModelRequest:
    return ModelRequest(system="sys", messages=[Message.user("hi")], step=step)


async def test_a_script_per_step_plays_each_steps_list_in_order_whatever_the_interleaving() -> None:
    model = ScriptedModel({"Hotels": ["h1", ToolCall("pick", {"id": 1})], "Events": ["e1", "e2"]})
    assert model.remaining == 4
    assert (await model.request(step_request("Events"))).text == "e1"
    assert (await model.request(step_request("Hotels"))).text == "h1"
    assert (await model.request(step_request("Events"))).text == "e2"
    picked = await model.request(step_request("Hotels"))
    # Ids are numbered per step, so they do not depend on the order the steps asked in either.
    assert picked.tool_calls == [ToolCall("pick", {"id": 1}, "call_Hotels_1")]
    assert [r.step for r in model.requests] == ["Events", "Hotels", "Events", "Hotels"]
    assert model.remaining == 0


async def test_a_script_per_step_names_the_step_that_ran_out_or_has_no_entry() -> None:
    model = ScriptedModel({"Hotels": ["h1"], "Events": []})
    await model.request(step_request("Hotels"))
    with pytest.raises(ScriptExhausted, match="step Hotels asked for response 2, but its script has only 1"):
        await model.request(step_request("Hotels"))
    with pytest.raises(ScriptExhausted, match="step Events asked for response 1, but its script has only 0"):
        await model.request(step_request("Events"))
    with pytest.raises(
        ScriptExhausted,
        match=r"step Weather asked for a response, but the script has no entry for it "
        r"\(steps scripted: Hotels, Events\)",
    ) as caught:
        await model.request(step_request("Weather"))
    assert caught.value.step == "Weather"
    with pytest.raises(ScriptExhausted, match="step None asked for a response"):
        await model.request(step_request(None))
    assert len(model.requests) == 5


async def test_extend_adds_to_the_same_kind_of_script_and_refuses_the_other() -> None:
    per_step = ScriptedModel({"A": ["a1"]})
    per_step.extend({"A": ["a2"], "B": [ToolCall("t")]})
    assert per_step.remaining == 3
    assert (await per_step.request(step_request("A"))).text == "a1"
    assert (await per_step.request(step_request("A"))).text == "a2"
    assert (await per_step.request(step_request("B"))).tool_calls[0].id == "call_B_1"
    with pytest.raises(TypeError, match="has a script per step: extend it with a mapping"):
        per_step.extend(["x"])

    listed = ScriptedModel(["x"])
    listed.extend(["y"])
    assert listed.remaining == 2
    with pytest.raises(TypeError, match="has one script for every step: extend it with a list"):
        listed.extend({"A": ["a"]})
    assert [(await listed.request(request())).text for _ in range(2)] == ["x", "y"]


def test_a_script_per_step_is_keyed_by_names_and_holds_lists() -> None:
    with pytest.raises(TypeError, match="the script of step A is a list of responses, not str"):
        ScriptedModel({"A": "hello"})
    with pytest.raises(TypeError, match="keyed by step names, not ''"):
        ScriptedModel({"": ["x"]})
    with pytest.raises(TypeError, match="the script of step A is a list of responses, not dict"):
        ScriptedModel({"A": {"B": ["x"]}})


async def test_drop_remaining_forgets_what_was_not_played() -> None:
    listed = ScriptedModel(["a", "b", "c"])
    await listed.request(request())
    assert listed.drop_remaining() == 2 and listed.remaining == 0
    listed.extend(["d"])
    assert (await listed.request(request())).text == "d"

    per_step = ScriptedModel({"A": ["a1", "a2"], "B": ["b1"]})
    await per_step.request(step_request("A"))
    assert per_step.drop_remaining() == 2 and per_step.remaining == 0
    per_step.extend({"A": ["a3"], "B": ["b2"]})
    assert (await per_step.request(step_request("A"))).text == "a3"
    assert (await per_step.request(step_request("B"))).text == "b2"


async def test_assert_complete_names_how_many_responses_were_not_played_and_the_first_ones() -> None:
    model = ScriptedModel(["hi", ToolCall("search", {"q": "rooms"}), [ToolCall("a"), ToolCall("b")], "bye"])
    await model.request(request())
    with pytest.raises(AssertionError) as caught:
        model.assert_complete()
    assert str(caught.value) == (
        'scripted:test: 3 scripted responses were not played: search({"q": "rooms"}), [a({}), b({})], ...'
    )
    model.drop_remaining()
    model.assert_complete()


async def test_assert_complete_counts_per_step_for_a_script_per_step() -> None:
    model = ScriptedModel(
        {
            "Hotels": ["h1", ModelResponse(text="h2", tool_calls=[ToolCall("pick")])],
            "Events": [TimeoutError("slow"), "e2"],
            "Weather": ["w1"],
        }
    )
    await model.request(step_request("Hotels"))
    await model.request(step_request("Weather"))
    with pytest.raises(AssertionError) as caught:
        model.assert_complete()
    assert str(caught.value) == (
        "scripted:test: 3 scripted responses were not played: Hotels: 1 (ModelResponse('h2', pick({}))); "
        "Events: 2 (raise TimeoutError('slow'), 'e2')"
    )
    model.drop_remaining()


async def test_assert_complete_passes_once_every_response_was_played_and_shortens_long_items() -> None:
    model = ScriptedModel(["x" * 100])
    with pytest.raises(AssertionError, match=r"1 scripted response was not played: 'x{37}\.\.\.'$"):
        model.assert_complete()
    await model.request(request())
    model.assert_complete()
