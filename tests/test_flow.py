"""Build-time validation of flows and the transition graph read from the code."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from picoflow import (
    Flow,
    FlowDefinitionError,
    FlowEngine,
    LogicStep,
    RunContext,
    Step,
    TerminateStep,
    go,
    tool,
    tools,
)
from picoflow.flow import Transition


class Start(Step):
    """Start."""

    @tool
    def next(self) -> Any:
        """Go on."""
        return go(Middle)


class Middle(Step):
    """Middle."""

    @tool("finish_up")
    def finish(self) -> Any:
        """Finish."""
        return go("End")

    def on_response(self, response: Any) -> Any:
        return go(Start) if response == "again" else response


class End(TerminateStep):
    pass


class GoodFlow(Flow):
    name = "good"
    steps = [Start, Middle, End]


def test_transitions_are_read_from_the_code() -> None:
    spec = GoodFlow.spec()
    assert spec.start == "Start" and spec.terminate == "End"
    assert set(spec.transitions) == {
        Transition("Start", "Middle", "next"),
        Transition("Middle", "End", "finish_up"),
        Transition("Middle", "Start", "on_response"),
        Transition("Start", "End", "terminate_session"),
        Transition("Middle", "End", "terminate_session"),
    }
    assert sorted(spec.steps["Middle"].exposed) == ["finish_up", "terminate_session"]
    assert spec.steps["End"].exposed == frozenset()


class Orphan(Step):
    """Not in the flow."""


class Wanders(Step):
    """Wanders off."""

    @tool
    def leave(self) -> Any:
        """Leave."""
        return go(Orphan)


def build(*steps: type[Step], **attrs: Any) -> Any:
    flow = type("Tmp", (Flow,), {"name": "tmp", "steps": list(steps), **attrs})
    return FlowEngine([flow])


def test_unknown_go_target_is_refused_naming_step_and_tool() -> None:
    with pytest.raises(FlowDefinitionError) as error:
        build(Wanders)
    assert str(error.value) == (
        "flow Tmp, step Wanders: leave calls go(Orphan), but 'Orphan' is not a step of this flow "
        "(steps: Wanders)"
    )


def test_duplicate_tool_names_are_refused() -> None:
    class Dupe(Step):
        """Dupe."""

        @tool("search")
        def one(self) -> str:
            """One."""
            return ""

        @tool("search")
        def two(self) -> str:
            """Two."""
            return ""

    with pytest.raises(
        FlowDefinitionError, match=r"step Dupe tool 'search': two methods \(.+\) define the same"
    ):
        build(Dupe)


def test_schema_exposing_an_injected_parameter_is_refused() -> None:
    class Leaky(Step):
        """Leaky."""

        @tool
        def orders(self, customer_id: str) -> str:
            """Orders of a customer."""
            return customer_id

    with pytest.raises(FlowDefinitionError) as error:
        build(Leaky)
    assert "step Leaky, tool 'orders': argument 'customer_id' is injected by the runtime" in str(error.value)


def test_nested_injected_name_is_refused_too() -> None:
    class Query(BaseModel):
        principal: str

    class Nested(Step):
        """Nested."""

        @tool
        def find(self, query: Query, ctx: RunContext) -> str:
            """Find."""
            return ""

    with pytest.raises(FlowDefinitionError, match="argument 'principal' is injected"):
        build(Nested)


def test_tool_needs_a_description() -> None:
    class Mute(Step):
        """Mute."""

        @tool
        def quiet(self) -> str:
            return ""

    with pytest.raises(FlowDefinitionError, match="give the tool a docstring"):
        build(Mute)


def test_group_must_name_known_tools() -> None:
    class Grouped(Step):
        """Grouped."""

        @tools(["nope"])
        def group(self, calls: list[Any]) -> Any:
            return None

    with pytest.raises(FlowDefinitionError, match=r"names unknown tools \['nope'\]"):
        build(Grouped)


def test_logic_steps_cannot_have_tools_and_other_shape_errors() -> None:
    class Thinker(LogicStep):
        @tool
        def think(self) -> str:
            """Think."""
            return ""

    with pytest.raises(FlowDefinitionError, match="a LogicStep never calls a model"):
        build(Thinker)
    with pytest.raises(FlowDefinitionError, match="list its steps"):
        build()
    with pytest.raises(FlowDefinitionError, match="two steps are named 'Start'"):
        build(Start, Start)
    with pytest.raises(FlowDefinitionError, match="start step 'Nowhere' is not one of its steps"):
        build(Start, Middle, End, start="Nowhere")
    with pytest.raises(FlowDefinitionError, match="is not a Step subclass"):
        build(Start, dict)  # type: ignore[arg-type]

    class BadNamespace(Step):
        """Bad."""

        memory = "1-starts-with-digit"

    with pytest.raises(FlowDefinitionError, match="memory namespace '1-starts-with-digit' must match"):
        build(BadNamespace)


def test_a_hook_given_a_value_instead_of_a_method_is_refused_at_build_time() -> None:
    class Greeter(Step):
        prompt = "Greet the user."  # type: ignore[assignment]

    with pytest.raises(FlowDefinitionError) as error:
        build(Greeter)
    assert str(error.value) == (
        "flow Tmp, step Greeter: `prompt` must be a method, not str 'Greet the user.': write "
        "`def prompt(self) -> str:` returning the text, or put a fixed prompt in the class docstring"
    )

    class Checker(Step):
        """Check."""

        check_response = True  # type: ignore[assignment]

    with pytest.raises(
        FlowDefinitionError, match=r"step Checker: `check_response` must be a method, not bool True$"
    ):
        build(Checker)


def test_two_flows_with_one_name_and_unknown_provider() -> None:
    class Other(Flow):
        name = "good"
        steps = [Start, Middle, End]

    with pytest.raises(FlowDefinitionError, match="two flows are named 'good'"):
        FlowEngine([GoodFlow, Other])

    class Typo(Flow):
        name = "typo"
        steps = [Orphan]
        model = "opneai:gpt-4.1"

    with pytest.raises(FlowDefinitionError, match="opneai"):
        FlowEngine([Typo])


def test_flow_without_terminate_step_does_not_expose_terminate_session() -> None:
    class Lone(Flow):
        name = "lone"
        steps = [Start, Middle]

    # go("End") names a step this flow lacks.
    with pytest.raises(FlowDefinitionError, match="'End' is not a step of this flow"):
        Lone.spec()

    class Solo(Flow):
        name = "solo"
        steps = [Wanders, Orphan]

    assert Solo.spec().steps["Wanders"].exposed == frozenset({"leave"})
