"""``on_model_error`` on steps and flows, and fallback models taking over from a misbehaving one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from picoflow import Flow, FlowEngine, Step, direct, go, retry_with, stay, tool
from picoflow.exceptions import AttemptsExhausted, HookFailure, ModelHTTPError, RunError
from picoflow.messages import ModelRequest
from picoflow.models import FallbackModel, FunctionModel, ScriptedModel
from picoflow.testing import transcript_lines


def down(name: str = "primary:down") -> FunctionModel:
    def fail(request: ModelRequest) -> Any:
        raise ModelHTTPError("provider overloaded", status_code=503)

    return FunctionModel(fail, name=name)


class Apologise(Step):
    """Answer the customer."""

    seen: list[str] = []

    def on_model_error(self, error: RunError) -> Any:
        Apologise.seen.append(f"{type(error).__name__}: {error.step}")
        return direct("Our assistant is busy; please try again in a minute.")


class Desk(Flow):
    name = "desk"
    steps = [Apologise]


async def test_a_direct_answer_from_on_model_error_ends_the_turn_and_changes_nothing_else() -> None:
    Apologise.seen = []
    model = ScriptedModel(["Hello."])
    engine = FlowEngine([Desk], model=model)
    first = await engine.run("desk", "hi")
    session_id = first.session_id or ""
    before = await engine.store.load(session_id)
    assert before is not None
    engine_down = FlowEngine([Desk], model=down(), store=engine.store)
    result = await engine_down.run("desk", "are you there?", session_id)
    assert result.ok and result.message == "Our assistant is busy; please try again in a minute."
    assert Apologise.seen == ["ModelHTTPError: Apologise"]
    assert result.warnings == ("model_unavailable: on_model_error took over",)
    after = await engine.store.load(session_id)
    assert after is not None
    assert (after.current_step, after.states, after.status) == (
        before.current_step,
        before.states,
        before.status,
    )
    assert await engine.session_errors(session_id) == []
    assert await transcript_lines(engine, session_id) == [
        "Apologise | user: hi",
        "Apologise | assistant: Hello.",
        "Apologise | user: are you there?",
        "Apologise | assistant [direct]: Our assistant is busy; please try again in a minute.",
    ]


class Answer(BaseModel):
    value: int


class Strict(Step):
    """Answer with a number."""

    output = Answer
    max_attempts = 2

    def on_model_error(self, error: RunError) -> Any:
        if isinstance(error, AttemptsExhausted):
            return stay('Answer with JSON like {"value": 3}, nothing else.')
        return None


class Manual(Step):
    """Where the flow's hook sends the conversation when the model is gone."""

    def on_enter(self) -> None:
        self.state["entered"] = True


class Numbers(Flow):
    name = "numbers"
    steps = [Strict, Manual]

    def on_model_error(self, error: RunError) -> Any:
        return go(Manual) if error.step == "Strict" else None


async def test_stay_asks_once_more_with_the_correction_then_the_flows_hook_decides() -> None:
    model = ScriptedModel(["three", "3", '{"value": 3}'])
    engine = FlowEngine([Numbers], model=model)
    result = await engine.run("numbers", "how many?")
    assert result.ok and result.message == '{"value":3}'
    assert model.requests[2].messages[-1].content == 'Answer with JSON like {"value": 3}, nothing else.'

    # Misbehaving again after the correction: the step's hook is not asked twice, the flow's is.
    stuck = ScriptedModel(["three", "3", "three again", "still three", "Manual speaking."])
    engine = FlowEngine([Numbers], model=stuck)
    result = await engine.run("numbers", "how many?")
    assert result.ok and result.step == "Manual" and result.message == "Manual speaking."
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.states["Manual"] == {"entered": True}


class Switcher(Step):
    """Answer."""

    backup: Any = None

    def on_model_error(self, error: RunError) -> Any:
        return retry_with(Switcher.backup)


class Switching(Flow):
    name = "switching"
    steps = [Switcher]


async def test_retry_with_asks_another_model_once_and_the_message_names_it() -> None:
    Switcher.backup = ScriptedModel(["From the backup."], name="backup:model")
    engine = FlowEngine([Switching], model=down())
    result = await engine.run("switching", "hi")
    assert result.ok and result.message == "From the backup."
    transcript = await engine.store.transcript(result.session_id or "")
    assert transcript[-1].model == "backup:model"

    Switcher.backup = down("backup:down")  # the retry fails too: the error stands
    failed = await FlowEngine([Switching], model=down()).run("switching", "hi")
    assert failed.error is not None and failed.error.is_a(ModelHTTPError) and failed.error.retryable


class Bad(Step):
    """Answer."""

    def on_model_error(self, error: RunError) -> Any:
        return "sorry"


class BadFlow(Flow):
    name = "bad"
    steps = [Bad]


async def test_a_hook_returning_something_else_fails_the_turn_clearly() -> None:
    result = await FlowEngine([BadFlow], model=down()).run("bad", "hi")
    assert result.error is not None and result.error.is_a(HookFailure)


class Plain(Step):
    """Answer with a number."""

    output = Answer
    max_attempts = 2


class PlainFlow(Flow):
    name = "plain"
    steps = [Plain]


async def test_a_fallback_model_takes_over_from_a_member_that_keeps_misbehaving() -> None:
    rambling = ScriptedModel(["three", "about three"], name="small:model")
    careful = ScriptedModel(['{"value": 3}'], name="big:model")
    engine = FlowEngine([PlainFlow], model=FallbackModel(rambling, careful, on_misbehaviour=True))
    result = await engine.run("plain", "how many?")
    assert result.ok and result.message == '{"value":3}'
    assert "small:model kept answering unusably; big:model takes over" in result.warnings
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.models == {"Plain": "big:model"}
    # Without on_misbehaviour the step's attempts are all there is.
    never_asked = ScriptedModel([])
    strict = FallbackModel(ScriptedModel(["three", "about three"]), never_asked)
    failed = await FlowEngine([PlainFlow], model=strict).run("plain", "how many?")
    assert failed.error is not None and failed.error.is_a(AttemptsExhausted)
    assert never_asked.requests == []


class Adder(Step):
    """Add numbers with the tool, then tell the user the result."""

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two numbers."""
        return a + b


class Adding(Flow):
    name = "adding"
    steps = [Adder]


async def test_an_unreadable_answer_is_a_failed_attempt_asked_again_with_a_correction() -> None:
    from picoflow.exceptions import ModelMisbehaved

    answers = iter([ModelMisbehaved("server could not parse the model's output"), "42."])

    def answer(request: ModelRequest) -> Any:
        item = next(answers)
        if isinstance(item, Exception):
            raise item
        return item

    model = FunctionModel(answer)
    result = await FlowEngine([Adding], model=model).run("adding", "17 + 25?")
    assert result.ok and result.message == "42."
    assert result.warnings == ("the model's answer could not be read; it was asked again",)
    assert model.requests[1].messages[-1].content.startswith("Your last answer could not be read.")


async def test_a_tool_call_written_as_text_is_read_as_a_call_by_every_adapter() -> None:
    written = '<tool_call>{"name": "add", "arguments": {"a": 17, "b": 25}}</tool_call>'
    model = ScriptedModel([written, "The sum is 42."], name="plain:model")
    engine = FlowEngine([Adding], model=model)
    result = await engine.run("adding", "17 + 25?")
    assert result.ok and result.message == "The sum is 42."
    assert result.warnings == ("plain:model wrote its tool call (add) as text; it was read as a call",)
    lines = await transcript_lines(engine, result.session_id or "")
    assert lines[1].startswith('Adder | assistant: -> add({"a": 17, "b": 25}) #')
    assert lines[2].endswith(": 42")
    assert "tool_call" not in result.message
