"""Tool arguments read by the same policy as readings: under the small-model profile, a value the
user never gave does not reach a tool, and a call made again with the same arguments gets a
correction instead of running until the turn's budget is spent. A flow written as getting-started
teaches, with no ``Said`` at all, is protected; a hosted model's calls are not second-guessed.
"""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field

from picoflow import Flow, FlowEngine, Outcome, Step, TerminateStep, direct_to, tool
from picoflow.models import ScriptedModel, ToolCall
from picoflow.slots.arguments import UNBORNE, unborne
from picoflow.testing import transcript_lines
from picoflow.tools import collect_tools

Size = Literal["small", "medium", "large"]
Topping = Literal["cheese", "pepperoni", "mushrooms"]


class Order(Step):
    """You take pizza orders. Choose the pizza the customer asks for."""

    locales = ("en", "es")

    @tool
    def choose_pizza(self, size: Size, toppings: list[Topping]) -> Outcome:
        """The customer's pizza."""
        self.state["pizza"] = {"size": size, "toppings": toppings}
        return direct_to(Done, f"A {size} pizza with {', '.join(toppings)}.")

    @tool(grounded=False)
    def choose_special(self, number: int) -> str:
        """The special of the day, by its number on the menu code showed."""
        return f"special {number}"


class Done(TerminateStep):
    """Ordered."""


class PizzaFlow(Flow):
    name = "pizza"
    steps = [Order, Done]


INVENTED = ToolCall("choose_pizza", {"size": "medium", "toppings": ["cheese", "pepperoni", "mushrooms"]})
CORRECTION = UNBORNE.format(fields="size, toppings", them="them")


@pytest.mark.parametrize(
    ("hello", "question", "answer", "size", "toppings"),
    [
        ("Hi, I'd like to order a pizza", "What size?", "A large one with mushrooms", "large", ["mushrooms"]),
        ("Hola, quiero pedir una pizza", "¿Qué tamaño?", "Una large con mushrooms", "large", ["mushrooms"]),
    ],
)
async def test_values_the_customer_never_gave_never_reach_the_tool(
    hello: str, question: str, answer: str, size: str, toppings: list[str]
) -> None:
    model = ScriptedModel(
        [INVENTED, question, ToolCall("choose_pizza", {"size": size, "toppings": toppings})],
        grounding="small",
    )
    engine = FlowEngine([PizzaFlow], model=model)
    first = await engine.run("pizza", hello)
    assert first.message == question and first.usage.model_calls == 2 and first.usage.tool_calls == 1
    # The model was told which fields the customer never gave, never the values it chose.
    told = model.requests[1].messages[-1]
    assert told.role == "tool" and told.is_error and told.content == CORRECTION
    assert "medium" not in told.content and "pepperoni" not in told.content
    # Nor is it offered the tool again this turn: it answers the customer instead of guessing again.
    offered = ["choose_pizza", "choose_special", "terminate_session"]
    assert [tool.name for tool in model.requests[0].tools] == offered
    assert [tool.name for tool in model.requests[1].tools] == offered[1:]
    session = await engine.store.load(first.session_id or "")
    assert session is not None and "pizza" not in session.state_of("Order")
    assert [(w.code, w.message) for w in session.warnings] == [
        ("arguments_unborne", "choose_pizza: size, toppings not said by the user")
    ]
    last = await engine.run("pizza", answer, first.session_id)
    assert [tool.name for tool in model.requests[2].tools] == offered  # a new turn offers it again
    assert last.message == f"A {size} pizza with {', '.join(toppings)}." and last.completed
    chosen = f'{{"size": "{size}", "toppings": ["{toppings[0]}"]}}'
    assert await transcript_lines(engine, first.session_id or "") == [
        f"Order | user: {hello}",
        f"Order | assistant: -> choose_pizza({INVENTED.args_json()}) #call_1",
        f"Order | tool choose_pizza #call_1 (error): {CORRECTION}",
        f"Order | assistant: {question}",
        f"Order | user: {answer}",
        f"Order | assistant: -> choose_pizza({chosen}) #call_2",
        "Order | tool choose_pizza #call_2: Accepted.",
        f"Done | assistant [direct]: A {size} pizza with {', '.join(toppings)}.",
    ]


async def test_a_hosted_model_is_not_second_guessed_unless_the_tool_asks() -> None:
    model = ScriptedModel([INVENTED])
    engine = FlowEngine([PizzaFlow], model=model)
    result = await engine.run("pizza", "Hi, I'd like to order a pizza")
    assert result.message == "A medium pizza with cheese, pepperoni, mushrooms." and result.completed

    class Strict(Order):
        """Take pizza orders."""

        @tool(grounded=True)
        def choose_pizza(self, size: Size, toppings: list[Topping]) -> Outcome:
            """The customer's pizza."""
            return direct_to(Done, "ordered")

    class StrictFlow(Flow):
        name = "strict"
        steps = [Strict, Done]

    model = ScriptedModel([INVENTED, "What size?"])
    engine = FlowEngine([StrictFlow], model=model)
    assert (await engine.run("strict", "Hi, a pizza please")).message == "What size?"


async def test_a_tool_marked_ungrounded_takes_values_code_showed() -> None:
    model = ScriptedModel([ToolCall("choose_special", {"number": 3}), "Special 3 it is."], grounding="small")
    engine = FlowEngine([PizzaFlow], model=model)
    result = await engine.run("pizza", "the special of the day please")
    assert result.message == "Special 3 it is." and result.usage.tool_calls == 1
    assert model.requests[1].messages[-1].content == "special 3"


async def test_the_same_call_made_again_in_a_turn_gets_a_correction_not_a_second_run() -> None:
    again = ToolCall("choose_special", {"number": 3})
    model = ScriptedModel([again, again, "Special 3 it is."], grounding="small")
    engine = FlowEngine([PizzaFlow], model=model)
    result = await engine.run("pizza", "the special please")
    assert result.message == "Special 3 it is." and result.usage.model_calls == 3
    second = model.requests[2].messages[-1]
    assert second.is_error and second.content.startswith(
        "choose_special was already called with these arguments"
    )
    session = await engine.store.load(result.session_id or "")
    assert session is not None and [w.code for w in session.warnings] == ["tool_called_again"]


class Coffee(Step):
    """You take orders at a coffee bar."""

    locales = ("en", "es")

    @tool
    def add_drink(
        self, drink: Literal["espresso", "latte", "tea"], count: int = Field(1, ge=1, le=10)
    ) -> str:
        """Add drinks to the order."""
        return f"{count} {drink}"


@pytest.mark.parametrize(
    ("said", "args", "missing"),
    [
        ("Two lattes, please", {"drink": "latte", "count": 2}, []),
        ("Dos lattes, por favor", {"drink": "latte", "count": 2}, []),
        ("A latte", {"drink": "latte"}, []),  # the default count is not the model's choice
        ("A latte", {"drink": "latte", "count": 3}, ["count"]),
        ("Something hot", {"drink": "tea"}, ["drink"]),
        ("Algo caliente", {"drink": "tea", "count": 2}, ["drink", "count"]),
    ],
)
def test_options_are_said_by_their_name_with_an_ending_and_numbers_in_digits_or_words(
    said: str, args: dict[str, object], missing: list[str]
) -> None:
    tools, _ = collect_tools(Coffee, where="Coffee")
    model = tools["add_drink"].args_model
    assert unborne(model.model_validate(args), said, slips=True, locales=("en", "es")) == missing


class Clock(Step):
    """You tell the time."""

    @tool
    def time_in(self, timezone: str, city: str | None = None) -> str:
        """The time in a time zone."""
        return timezone


@pytest.mark.parametrize(
    ("said", "args", "missing"),
    [
        (
            "What time is it in Paris?",
            {"timezone": "Europe/Paris"},
            [],
        ),  # the user's word, in the tool's form
        ("¿Qué hora es en París?", {"timezone": "Europe/Paris"}, []),  # accents aside
        ("Quelle heure est-il à Paris ?", {"timezone": "Europe/Paris", "city": "Paris"}, []),
        ("What time is it?", {"timezone": "Europe/Paris"}, ["timezone"]),  # nobody said where
        ("Wie spät ist es?", {"timezone": "Europe/Berlin", "city": "Berlin"}, ["timezone", "city"]),
    ],
)
def test_a_text_is_borne_out_by_one_of_its_words(
    said: str, args: dict[str, object], missing: list[str]
) -> None:
    tools, _ = collect_tools(Clock, where="Clock")
    model = tools["time_in"].args_model
    assert unborne(model.model_validate(args), said) == missing
