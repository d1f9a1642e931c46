"""``FallbackModel`` and model lists: the next model answers when one fails after its retries."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from picoflow import Flow, FlowDefinitionError, FlowEngine, Step
from picoflow.exceptions import ModelError, ModelHTTPError, ModelMisbehaved
from picoflow.messages import Message, ModelRequest
from picoflow.models import FallbackModel, FunctionModel, ModelSelection, ScriptedModel
from picoflow.models.base import ResponseDone, TextDelta
from picoflow.models.fallback import as_model
from picoflow.testing import transcript_lines

from .fake_servers import Reply, anthropic_message, serving

REQUEST = ModelRequest(system="Be brief.", messages=[Message.user("hi")], step="Desk")


def failing(error: ModelError, name: str) -> FunctionModel:
    def fail(request: ModelRequest) -> Any:
        raise error

    return FunctionModel(fail, name=name)


async def test_the_next_model_answers_when_one_is_unavailable_and_says_so() -> None:
    down = failing(ModelHTTPError("busy", status_code=503), "first:down")
    model = FallbackModel(down, ScriptedModel(["Hello."], name="second:up"))
    response = await model.request(REQUEST)
    assert response.text == "Hello." and response.answered_by == "second:up"
    assert [(w.code, w.message) for w in response.warnings] == [
        ("model_fallback", "first:down failed (model_unavailable); second:up answered")
    ]
    assert model.name == "fallback(first:down, second:up)"


async def test_a_misbehaving_model_is_not_skipped_unless_asked() -> None:
    odd = failing(ModelMisbehaved("garbage"), "first:odd")
    untouched = ScriptedModel([])
    with pytest.raises(ModelMisbehaved):
        await FallbackModel(odd, untouched).request(REQUEST)
    assert untouched.requests == []
    lenient = FallbackModel(odd, ScriptedModel(["Hello."], name="second:up"), on_misbehaviour=True)
    assert (await lenient.request(REQUEST)).answered_by == "second:up"


async def test_when_every_model_fails_the_last_error_tells_the_whole_story() -> None:
    model = FallbackModel(
        failing(ModelHTTPError("busy", status_code=503), "a:one"),
        failing(ModelError("set the ANTHROPIC_API_KEY environment variable"), "b:two"),
    )
    with pytest.raises(ModelError) as raised:
        await model.request(REQUEST)
    assert type(raised.value) is ModelError
    assert str(raised.value) == (
        "every model failed — a:one: busy; b:two: set the ANTHROPIC_API_KEY environment variable"
    )


async def test_a_stream_falls_back_only_before_its_first_event() -> None:
    down = failing(ModelHTTPError("busy", status_code=503), "a:down")
    model = FallbackModel(down, ScriptedModel(["Hello."], name="b:up"))
    events = [event async for event in model.request_stream(REQUEST)]
    assert events[0] == TextDelta("Hello.")
    done = events[-1]
    assert isinstance(done, ResponseDone) and done.response.answered_by == "b:up"
    assert done.response.warnings[0].code == "model_fallback"

    class Breaks(ScriptedModel):
        async def request_stream(self, request: ModelRequest) -> Any:
            yield TextDelta("Hel")
            raise ModelHTTPError("connection reset", status_code=None)

    untouched = ScriptedModel([], name="b:up")
    half = FallbackModel(Breaks([], name="a:breaks"), untouched)
    with pytest.raises(ModelHTTPError):
        async for _event in half.request_stream(REQUEST):
            pass
    assert untouched.requests == []


def test_members_window_names_and_what_comes_after() -> None:
    a = ScriptedModel([], name="a:x", context_window=8000, output_reserve=100)
    b = ScriptedModel([], name="b:y", context_window=4000, output_reserve=500)
    c = ScriptedModel([], name="c:z")
    model = FallbackModel([a, b, c])
    assert model.context_window == 4000 and model.output_reserve == 500
    rest = model.after("a:x")
    assert isinstance(rest, FallbackModel) and [m.name for m in rest.models] == ["b:y", "c:z"]
    assert model.after("b:y") is c and model.after("c:z") is None and model.after("nobody") is None
    assert as_model([a]) is a and isinstance(as_model([a, b]), FallbackModel)
    with pytest.raises(ValueError, match="at least two models"):
        FallbackModel(a)


class Desk(Step):
    """Answer the customer."""


def desk_flow(models: list[Any]) -> type[Flow]:
    class DeskFlow(Flow):
        name = "desk"
        steps = [Desk]
        model = models

    return DeskFlow


async def test_a_selection_list_falls_back_in_the_same_turn_and_the_session_shows_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy = Reply(503, {"error": {"message": "overloaded"}}, headers={"retry-after": "0"})
    answer = anthropic_message(
        [{"type": "text", "text": "Happy to help."}], model="claude-haiku-4-5-20251001"
    )
    with serving([busy, busy]) as openai, serving([Reply(body=answer)]) as anthropic:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-key")
        monkeypatch.setenv("OPENAI_BASE_URL", openai.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic.url)
        flow = desk_flow(
            [
                ModelSelection.parse("openai:gpt-4.1-mini", max_retries=1),
                ModelSelection.parse("anthropic:claude-haiku-4-5", max_retries=0),
            ]
        )
        engine = FlowEngine([flow])
        result = await asyncio.wait_for(engine.run("desk", "Can you help?"), 30)
        assert result.ok and result.message == "Happy to help."
        assert len(openai.received) == 2  # the first try and its one retry, both 503
        assert len(anthropic.received) == 1
        session = await engine.store.load(result.session_id or "")
        assert session is not None
        assert session.models == {"Desk": "anthropic:claude-haiku-4-5"}
        [warning] = session.warnings
        assert warning.code == "model_fallback"
        assert warning.message.startswith("openai:gpt-4.1-mini failed (model_unavailable)")
        assert warning.message.endswith("anthropic:claude-haiku-4-5 answered")
        transcript = await engine.store.transcript(result.session_id or "")
        assert [(m.role, m.model) for m in transcript] == [
            ("user", None),
            ("assistant", "anthropic:claude-haiku-4-5"),
        ]
        assert await transcript_lines(engine, result.session_id or "") == [
            "Desk | user: Can you help?",
            "Desk | assistant: Happy to help.",
        ]
        for text in [warning.message, str(session.models)]:
            assert "sk-test" not in text and "sk-ant" not in text
        await engine.aclose()


def test_each_model_of_a_list_is_checked_when_the_flow_is_registered() -> None:
    flow = desk_flow(["openai:gpt-4.1-mini", "anthropic:claude-nonexistent-9"])
    with pytest.raises(FlowDefinitionError, match="claude-nonexistent-9"):
        FlowEngine([flow])
