"""Whole conversations through the runner, asserting transcripts, requests and final state."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, model_validator

from picoflow import (
    Caller,
    Flow,
    FlowEngine,
    LogicStep,
    Reject,
    RunContext,
    Step,
    TerminateStep,
    ToolError,
    UsageLimits,
    ValidCall,
    declare_tool,
    direct,
    direct_to,
    go,
    stay,
    tool,
    tools,
)
from picoflow.exceptions import (
    AttemptsExhausted,
    FlowNotFound,
    InvalidInput,
    MessageTooLong,
    RunError,
    ScriptExhausted,
    SessionCompleted,
    SessionConflict,
    SessionNotFound,
    ToolFailure,
    UsageLimitExceeded,
)
from picoflow.messages import ModelResponse
from picoflow.models import FunctionModel, ModelRequest, ScriptedModel, ToolCall
from picoflow.session import session_to_json
from picoflow.sessions import MemoryStore
from picoflow.testing import request_lines, transcript_lines
from picoflow.usage import Usage

ORDERS = [
    {"id": 1, "customer": "C-1", "status": "shipped", "created": "2026-09-28"},
    {"id": 2, "customer": "C-1", "status": "refunded", "created": "2026-10-03"},
    {"id": 3, "customer": "C-1", "status": "refunded", "created": "2026-10-20"},
    {"id": 4, "customer": "C-2", "status": "refunded", "created": "2026-10-21"},
]


class Support(Step):
    """You answer questions about the signed-in customer's orders."""

    @tool
    async def search_orders(
        self,
        since: date,
        ctx: RunContext,
        status: Literal["pending", "shipped", "refunded"] | None = None,
        limit: int = Field(10, ge=1, le=50),
    ) -> list[dict[str, Any]]:
        """Search the customer's orders created on or after `since`."""
        rows = [
            o
            for o in ORDERS
            if o["customer"] == ctx.customer_id
            and o["created"] >= since.isoformat()
            and (status is None or o["status"] == status)
        ]
        return [{"id": o["id"], "status": o["status"]} for o in rows[:limit]]

    @tool
    def cancel_order(self, order_id: int) -> str:
        """Cancel an order."""
        if order_id != 1:
            raise ToolError(f"Order {order_id} cannot be cancelled: only pending or shipped orders can.")
        self.state["cancelled"] = [*self.state.get("cancelled", []), order_id]
        return "Order 1 cancelled."


class SupportFlow(Flow):
    name = "support"
    steps = [Support, TerminateStep]


def engine_with(model: Any, *flows: type[Flow], **kwargs: Any) -> FlowEngine:
    return FlowEngine(flows or [SupportFlow], model=model, **kwargs)


async def test_bad_arguments_then_corrected_call_whole_transcript() -> None:
    model = ScriptedModel(
        [
            ToolCall("search_orders", {"since": "October 1st", "status": "refunded"}),
            ToolCall("search_orders", {"since": "2026-10-01", "status": "refunded"}),
            "Two orders were refunded: 3 and 2.",
        ]
    )
    engine = engine_with(model)
    result = await engine.run("support", "Which orders were refunded?", caller=Caller(principal="C-1"))

    assert result.ok and result.message == "Two orders were refunded: 3 and 2."
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 1
    assert await transcript_lines(engine, result.session_id or "") == [
        "Support | user: Which orders were refunded?",
        'Support | assistant: -> search_orders({"since": "October 1st", "status": "refunded"}) #call_1',
        "Support | tool search_orders #call_1 (error): Invalid arguments for search_orders:\n"
        "- since: Input should be a valid date or datetime, invalid character in year\n"
        "Correct the arguments and call search_orders again.",
        'Support | assistant: -> search_orders({"since": "2026-10-01", "status": "refunded"}) #call_2',
        'Support | tool search_orders #call_2: [{"id":2,"status":"refunded"},{"id":3,"status":"refunded"}]',
        "Support | assistant: Two orders were refunded: 3 and 2.",
    ]
    # The model saw its error before retrying; the submitted value is never echoed back.
    second = model.requests[1]
    assert second.messages[-1].content.startswith("Invalid arguments for search_orders")
    assert "October 1st" not in second.messages[-1].content
    session = await engine.store.load(result.session_id or "")
    assert session is not None
    assert session.revision == 1 and session.turns == 1 and session.status == "running"
    assert session.current_step == "Support" and session.sequence == ["Support"]
    assert session.usage.model_calls == 3


async def test_unknown_tool_gets_a_tool_message_and_a_warning() -> None:
    model = ScriptedModel([ToolCall("delete_everything", {"really": True}), "Sorry, I can't do that."])
    engine = engine_with(model)
    result = await engine.run("support", "Wipe my account", caller=Caller(principal="C-1"))

    assert result.ok and result.message == "Sorry, I can't do that."
    assert result.warnings == ("hallucinated tool: delete_everything",)
    assert await transcript_lines(engine, result.session_id or "") == [
        "Support | user: Wipe my account",
        'Support | assistant: -> delete_everything({"really": true}) #call_1',
        "Support | tool delete_everything #call_1 (error): There is no tool named 'delete_everything' here. "
        "Available tools: cancel_order, search_orders, terminate_session.",
        "Support | assistant: Sorry, I can't do that.",
    ]
    session = await engine.store.load(result.session_id or "")
    assert session is not None
    assert [(w.code, w.step) for w in session.warnings] == [("hallucinated_tool", "Support")]


async def test_two_parallel_calls_one_failing_each_gets_exactly_one_result() -> None:
    model = ScriptedModel(
        [
            [ToolCall("cancel_order", {"order_id": 1}), ToolCall("cancel_order", {"order_id": 3})],
            "Order 1 is cancelled; order 3 could not be.",
        ]
    )
    engine = engine_with(model)
    result = await engine.run("support", "Cancel orders 1 and 3", caller=Caller(principal="C-1"))

    assert result.ok
    assert await transcript_lines(engine, result.session_id or "") == [
        "Support | user: Cancel orders 1 and 3",
        'Support | assistant: -> cancel_order({"order_id": 1}) #call_1, '
        'cancel_order({"order_id": 3}) #call_2',
        "Support | tool cancel_order #call_1: Order 1 cancelled.",
        "Support | tool cancel_order #call_2 (error): Order 3 cannot be cancelled: only pending or shipped "
        "orders can.",
        "Support | assistant: Order 1 is cancelled; order 3 could not be.",
    ]
    ids = [m.tool_call_id for m in model.requests[1].messages if m.role == "tool"]
    assert ids == ["call_1", "call_2"]
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.states["Support"] == {"cancelled": [1]}


async def test_context_injection_model_cannot_choose_the_customer() -> None:
    model = ScriptedModel(
        [
            ToolCall("search_orders", {"since": "2026-10-01", "status": "refunded", "customer_id": "C-2"}),
            "Orders 2 and 3 were refunded.",
        ]
    )
    engine = engine_with(model)
    result = await engine.run("support", "Show refunds of customer C-2", caller=Caller(principal="C-1"))

    assert result.ok
    tool_result = model.requests[1].messages[-1]
    assert tool_result.content == '[{"id":2,"status":"refunded"},{"id":3,"status":"refunded"}]'
    assert "C-2" not in tool_result.content and '"id":4' not in tool_result.content
    assert result.warnings == (
        "the model sent customer_id to search_orders; injected values come from the caller",
    )
    schema = model.requests[0].tools[0].parameters
    assert "ctx" not in schema["properties"] and "customer_id" not in schema["properties"]


class Weather(Step):
    """Report the weather."""

    @tool
    def get_weather(self, city: str) -> str:
        """Weather of one city."""
        raise AssertionError("the group handler owns responses with this tool")

    @tool
    def get_time(self, city: str) -> str:
        """Local time of one city."""
        return f"12:00 in {city}"

    @tools(["get_weather"])
    def weather_batch(self, calls: list[ValidCall]) -> Any:
        cities = [call.args.city for call in calls]  # type: ignore[attr-defined]
        self.state["asked"] = cities
        return stay("Sunny in " + " and ".join(cities) + ".")


class WeatherFlow(Flow):
    name = "weather"
    steps = [Weather]


async def test_tools_group_owns_the_response_and_answers_every_call() -> None:
    model = ScriptedModel(
        [
            [ToolCall("get_weather", {"city": "LA"}), ToolCall("get_weather", {"city": "NYC"})],
            ToolCall("get_time", {"city": "LA"}),
            "Sunny in both; it is noon in LA.",
        ]
    )
    engine = engine_with(model, WeatherFlow)
    result = await engine.run("weather", "Weather in LA and NYC, and the time in LA?")

    assert result.ok
    assert await transcript_lines(engine, result.session_id or "") == [
        "Weather | user: Weather in LA and NYC, and the time in LA?",
        'Weather | assistant: -> get_weather({"city": "LA"}) #call_1, get_weather({"city": "NYC"}) #call_2',
        "Weather | tool get_weather #call_1: Sunny in LA and NYC.",
        "Weather | tool get_weather #call_2: Sunny in LA and NYC.",
        'Weather | assistant: -> get_time({"city": "LA"}) #call_3',
        "Weather | tool get_time #call_3: 12:00 in LA",
        "Weather | assistant: Sunny in both; it is noon in LA.",
    ]
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.states["Weather"] == {"asked": ["LA", "NYC"]}


async def test_group_with_invalid_call_runs_nothing() -> None:
    model = ScriptedModel(
        [[ToolCall("get_weather", {"city": "LA"}), ToolCall("get_weather", {"town": "NYC"})], "Oops."]
    )
    engine = engine_with(model, WeatherFlow)
    result = await engine.run("weather", "Weather?")
    tool_messages = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.is_error) for m in tool_messages] == [("call_1", True), ("call_2", True)]
    assert tool_messages[0].content == "Not run: another call of this response has invalid arguments."
    assert "city: Field required" in tool_messages[1].content
    assert "town: Extra inputs are not permitted" in tool_messages[1].content
    session = await engine.store.load(result.session_id or "")
    assert session is not None and "asked" not in session.states.get("Weather", {})


class Greeter(Step):
    """Collect the user's full name."""

    @tool
    def capture_name(self, name: str) -> Any:
        """Save the user's full name."""
        if " " not in name.strip():
            return stay("Ask the user for their full name: first and last.")
        self.state["name"] = name
        return go(Farewell).with_state(greeted=name)


class Farewell(Step):
    """Thank the user by name."""

    def prompt(self) -> str:
        return f"Thank {self.state.get('greeted')} and say goodbye."


class GreetFlow(Flow):
    name = "greet"
    steps = [Greeter, Farewell]


async def test_stay_feedback_goes_to_the_model_and_the_step_stays() -> None:
    model = ScriptedModel([ToolCall("capture_name", {"name": "Ada"}), "What is your last name, Ada?"])
    engine = engine_with(model, GreetFlow)
    result = await engine.run("greet", "I'm Ada")

    assert result.ok and result.step == "Greeter" and result.message == "What is your last name, Ada?"
    assert request_lines(model.requests[1])[-1] == (
        "tool capture_name #call_1: Ask the user for their full name: first and last."
    )
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.sequence == ["Greeter"] and session.states == {"Greeter": {}}


async def test_go_lands_state_on_destination_and_continues_the_turn() -> None:
    model = ScriptedModel(
        [ToolCall("capture_name", {"name": "Ada Lovelace"}), "Thank you, Ada Lovelace. Goodbye!"]
    )
    engine = engine_with(model, GreetFlow)
    result = await engine.run("greet", "I'm Ada Lovelace")

    assert result.ok and result.step == "Farewell"
    assert model.requests[1].system == "Thank Ada Lovelace and say goodbye."
    assert request_lines(model.requests[1]) == [
        "system: Thank Ada Lovelace and say goodbye.",
        "user [crossing]: Continue.",
    ]
    session = await engine.store.load(result.session_id or "")
    assert session is not None
    assert session.states == {"Greeter": {"name": "Ada Lovelace"}, "Farewell": {"greeted": "Ada Lovelace"}}
    assert session.sequence == ["Greeter", "Farewell"]
    assert await transcript_lines(engine, result.session_id or "") == [
        "Greeter | user: I'm Ada Lovelace",
        'Greeter | assistant: -> capture_name({"name": "Ada Lovelace"}) #call_1',
        "Greeter | tool capture_name #call_1: Accepted.",
        "Farewell | user [crossing]: Continue.",
        "Farewell | assistant: Thank you, Ada Lovelace. Goodbye!",
    ]


class Compare(Step):
    """Compare items."""

    @tool
    def make_table(self, items: list[str] = Field(min_length=2)) -> Any:
        """Render a comparison table of the items."""
        rows = "\n".join(f"| {item} | ✅ |" for item in items)
        self.state["compared"] = items
        return direct(f"| Item | In stock |\n|---|---|\n{rows}\nAnother comparison?")


class CompareFlow(Flow):
    name = "compare"
    steps = [Compare]


async def test_direct_ends_the_turn_without_another_model_call() -> None:
    model = ScriptedModel([ToolCall("make_table", {"items": ["a", "b"]})])
    engine = engine_with(model, CompareFlow)
    result = await engine.run("compare", "compare a and b")

    table = "| Item | In stock |\n|---|---|\n| a | ✅ |\n| b | ✅ |\nAnother comparison?"
    assert result.ok and result.message == table
    assert len(model.requests) == 1 and result.usage.model_calls == 1
    assert await transcript_lines(engine, result.session_id or "") == [
        "Compare | user: compare a and b",
        'Compare | assistant: -> make_table({"items": ["a", "b"]}) #call_1',
        "Compare | tool make_table #call_1: Accepted.",
        f"Compare | assistant [direct]: {table}",
    ]
    # The next turn's model call sees what the user saw.
    model.extend(["Sure."])
    await engine.run("compare", "thanks", result.session_id)
    assert model.requests[1].messages[3].content == table


class Intake(Step):
    """Intake."""

    @tool
    def submit(self, topic: str) -> Any:
        """Submit the topic."""
        return go(Router).with_state(topic=topic).with_message(f"My topic is {topic}")


class Router(LogicStep):
    def on_enter(self) -> None:
        self.state["entered"] = self.state.get("entered", 0) + 1

    def run_logic(self) -> Any:
        topic = self.state["topic"]
        return go(Billing if topic == "billing" else Intake).with_state(routed_from="Router")


class Billing(Step):
    """You handle billing questions."""

    def prompt(self) -> str:
        return f"Billing. Routed from {self.state.get('routed_from')}."


class RoutingFlow(Flow):
    name = "routing"
    steps = [Intake, Router, Billing]


async def test_go_across_three_steps_in_one_turn() -> None:
    model = ScriptedModel([ToolCall("submit", {"topic": "billing"}), "Let's look at your bill."])
    engine = engine_with(model, RoutingFlow)
    result = await engine.run("routing", "I have a question")

    assert result.ok and result.step == "Billing" and result.message == "Let's look at your bill."
    assert len(model.requests) == 2
    assert request_lines(model.requests[1]) == [
        "system: Billing. Routed from Router.",
        "user [crossing]: Continue.",
    ]
    session = await engine.store.load(result.session_id or "")
    assert session is not None
    assert session.sequence == ["Intake", "Router", "Billing"]
    assert session.states == {
        "Intake": {},
        "Router": {"topic": "billing", "entered": 1},
        "Billing": {"routed_from": "Router"},
    }
    assert await transcript_lines(engine, result.session_id or "") == [
        "Intake | user: I have a question",
        'Intake | assistant: -> submit({"topic": "billing"}) #call_1',
        "Intake | tool submit #call_1: Accepted.",
        "Router | user [forwarded]: My topic is billing",
        "Billing | user [crossing]: Continue.",
        "Billing | assistant: Let's look at your bill.",
    ]


class Booker(Step):
    """Book a table."""

    @tool
    def book(self, day: date, people: int = Field(ge=1, le=12)) -> str:
        """Book a table."""
        self.state["booked"] = {"day": day, "people": people}
        return "Booked."

    def check_response(self, response: ModelResponse) -> Reject | None:
        for call in response.tool_calls:
            if (
                call.name == "book"
                and isinstance(call.args, dict)
                and str(call.args.get("day")) < "2027-01-01"
            ):
                return Reject("the booking date must be in 2027 or later; ask the user for a new date")
        return None


class BookingFlow(Flow):
    name = "booking"
    steps = [Booker]


async def test_reject_then_accept_with_the_correction_in_the_next_request() -> None:
    model = ScriptedModel(
        [
            ToolCall("book", {"day": "2026-05-01", "people": 2}),
            ToolCall("book", {"day": "2027-05-01", "people": 2}),
            "Booked for May 1st, 2027.",
        ]
    )
    engine = engine_with(model, BookingFlow)
    result = await engine.run("booking", "Table for two on May 1st")

    assert result.ok and result.message == "Booked for May 1st, 2027."
    assert request_lines(model.requests[1]) == [
        "system: Book a table.",
        "user: Table for two on May 1st",
        'assistant [correction]: -> book({"day": "2026-05-01", "people": 2}) #call_1',
        "tool book #call_1 (error) [correction]: Not run. Your response was not accepted: "
        "the booking date must "
        "be in 2027 or later; ask the user for a new date",
    ]
    # The rejected attempt never ran and never reached memory; its tokens were still counted.
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 1
    assert result.warnings == ("the booking date must be in 2027 or later; ask the user for a new date",)
    assert await transcript_lines(engine, result.session_id or "") == [
        "Booker | user: Table for two on May 1st",
        'Booker | assistant: -> book({"day": "2027-05-01", "people": 2}) #call_2',
        "Booker | tool book #call_2: Booked.",
        "Booker | assistant: Booked for May 1st, 2027.",
    ]
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.states["Booker"] == {"booked": {"day": "2027-05-01", "people": 2}}


async def test_async_gate_rejecting_every_attempt_exhausts_the_budget() -> None:
    class Strict(Step):
        """Never satisfied."""

        max_attempts = 2

        async def check_response(self, response: ModelResponse) -> Reject:
            await asyncio.sleep(0)
            return Reject("say it in French")

    class StrictFlow(Flow):
        name = "strict"
        steps = [Strict]

    model = ScriptedModel(["Hello", "Hi"])
    engine = engine_with(model, StrictFlow)
    result = await engine.run("strict", "hi")
    assert not result.ok and result.error is not None
    assert result.error.is_a(AttemptsExhausted)
    assert result.usage.model_calls == 2
    # A failed first turn keeps its session as it was before the turn, to inspect and to retry.
    stored = await engine.store.load(result.session_id or "")
    assert stored is not None and stored.turns == 0 and stored.sequence == []
    assert await engine.store.transcript(stored.id) == []
    assert request_lines(model.requests[1])[-2:] == [
        "assistant [correction]: Hello",
        "user [correction]: Your response was not accepted: say it in French",
    ]
    errors = await engine.store.errors(result.error.reference or "")
    assert [e.code for e in errors] == ["attempts_exhausted"]


async def test_empty_response_gets_a_nudge() -> None:
    model = ScriptedModel(["", "Hello there."])
    engine = engine_with(model, SupportFlow)
    result = await engine.run("support", "hi")
    assert result.message == "Hello there."
    assert request_lines(model.requests[1])[-1] == (
        "user [nudge]: Your last response was empty. Answer the user, or call one of the available tools."
    )
    assert result.warnings == ("the model returned an empty response",)


async def test_model_call_budget_is_enforced() -> None:
    model = FunctionModel(lambda request: ToolCall("search_orders", {"since": "bad"}))
    engine = engine_with(model, SupportFlow, limits=UsageLimits(model_calls=4))
    result = await engine.run("support", "loop forever", caller=Caller(principal="C-1"))
    assert result.error is not None and result.error.is_a(UsageLimitExceeded)
    assert result.message == "This request needed more work than one turn allows (model_calls limit of 4)."
    assert len(model.requests) == 4


async def test_tool_call_budget_is_enforced() -> None:
    model = FunctionModel(lambda request: ToolCall("search_orders", {"since": "2026-01-01"}))
    engine = engine_with(model, SupportFlow, limits=UsageLimits(tool_calls=3, model_calls=None))
    result = await engine.run("support", "loop", caller=Caller(principal="C-1"))
    assert result.error is not None and result.error.is_a(UsageLimitExceeded)
    assert result.usage.tool_calls == 3 and result.usage.model_calls == 4


async def test_token_budget_is_enforced() -> None:
    big = ModelResponse(text="x", usage=Usage(input_tokens=900, output_tokens=200, model_calls=1))
    engine = engine_with(ScriptedModel([big]), SupportFlow, limits=UsageLimits(total_tokens=1000))
    result = await engine.run("support", "hi")
    assert result.error is not None and result.error.is_a(UsageLimitExceeded)
    assert "total_tokens limit of 1000" in result.message


class Fragile(Step):
    """Fragile."""

    @tool
    def save_note(self, note: str) -> Any:
        """Save a note."""
        self.state["notes"] = [*self.state.get("notes", []), note]
        return stay("Saved.")

    @tool
    def explode(self) -> str:
        """Fail."""
        self.state["half"] = "written"
        raise RuntimeError("database password is hunter2")


class FragileFlow(Flow):
    name = "fragile"
    steps = [Fragile]


async def test_unexpected_exception_leaves_the_stored_session_unchanged() -> None:
    store = MemoryStore()
    model = ScriptedModel([ToolCall("save_note", {"note": "first"}), "Noted."])
    engine = engine_with(model, FragileFlow, store=store)
    first = await engine.run("fragile", "note: first")
    assert first.ok and first.session_id
    before = await store.load(first.session_id)
    assert before is not None
    transcript_before = await store.transcript(first.session_id)

    model.extend([ToolCall("save_note", {"note": "second"}), ToolCall("explode", {})])
    failed = await engine.run("fragile", "note: second, then explode", first.session_id)

    assert failed.error is not None and failed.error.is_a(ToolFailure)
    assert failed.message == "The assistant could not complete this turn."
    assert "hunter2" not in failed.message and failed.session_id == first.session_id
    after = await store.load(first.session_id)
    assert after is not None
    assert session_to_json(after) == session_to_json(before)
    assert await store.transcript(first.session_id) == transcript_before
    errors = await store.errors(first.session_id)
    assert [(e.code, e.step, e.turn) for e in errors] == [("tool_failed", "Fragile", 2)]
    assert "RuntimeError" in errors[0].message

    # The next turn works from the last committed state.
    model.extend([ToolCall("save_note", {"note": "third"}), "Noted again."])
    again = await engine.run("fragile", "note: third", first.session_id)
    assert again.ok
    final = await store.load(first.session_id)
    assert (
        final is not None and final.states["Fragile"] == {"notes": ["first", "third"]} and final.revision == 2
    )


async def test_several_go_outcomes_first_wins_others_told() -> None:
    class Hub(Step):
        """Hub."""

        @tool
        def to_a(self) -> Any:
            """Go to A."""
            return go(A).with_state(via="to_a")

        @tool
        def to_b(self) -> Any:
            """Go to B."""
            return go(B).with_state(via="to_b")

    class A(Step):
        """A."""

    class B(Step):
        """B."""

    class HubFlow(Flow):
        name = "hub"
        steps = [Hub, A, B]

    model = ScriptedModel([[ToolCall("to_a"), ToolCall("to_b")], "In A."])
    engine = engine_with(model, HubFlow)
    result = await engine.run("hub", "go")
    assert result.step == "A"
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.states.get("A") == {"via": "to_a"} and "B" not in session.states
    assert await transcript_lines(engine, result.session_id or "") == [
        "Hub | user: go",
        "Hub | assistant: -> to_a({}) #call_1, to_b({}) #call_2",
        "Hub | tool to_a #call_1: Accepted.",
        "Hub | tool to_b #call_2 (error): Not applied: an earlier call of this response already "
        "decided where "
        "the conversation goes next, so this call's outcome was ignored.",
        "A | user [crossing]: Continue.",
        "A | assistant: In A.",
    ]


async def test_effect_order_hooks_see_transition_before_state_and_prompt() -> None:
    seen: list[str] = []

    class Source(Step):
        """Source."""

        def on_exit(self) -> None:
            seen.append("exit Source")

        @tool
        def move(self) -> Any:
            """Move."""
            return (
                go(Target).with_state(k=1).with_prompt("Special prompt.").with_content_type("text/markdown")
            )

    class Target(Step):
        """Target."""

        def on_enter(self) -> None:
            seen.append(f"enter Target state={dict(self.state)}")

        def prompt(self) -> str:
            raise AssertionError("the with_prompt override replaces prompt()")

    class OrderFlow(Flow):
        name = "order"
        steps = [Source, Target]

    model = ScriptedModel([ToolCall("move"), "**here**"])
    engine = engine_with(model, OrderFlow)
    result = await engine.run("order", "move")
    assert result.ok and result.content_type == "text/markdown"
    assert seen == ["exit Source", "enter Target state={}"]
    assert model.requests[1].system == "Special prompt."
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.prompts == {"Target": "Special prompt."}


class Answer(BaseModel):
    city: str
    population: int = Field(gt=0)


class Structured(Step):
    """Answer with JSON."""

    output = Answer

    def on_response(self, response: Any) -> Any:
        assert isinstance(response, Answer)
        return f"{response.city} has {response.population:,} people."


class StructuredFlow(Flow):
    name = "structured"
    steps = [Structured]


async def test_structured_output_is_validated_and_corrected() -> None:
    model = ScriptedModel(
        ['{"city": "Oslo", "population": -3}', '```json\n{"city": "Oslo", "population": 717710}\n```']
    )
    engine = engine_with(model, StructuredFlow)
    result = await engine.run("structured", "Population of Oslo?")
    assert result.ok and result.message == "Oslo has 717,710 people."
    correction = model.requests[1].messages[-1]
    assert correction.kind == "correction"
    assert "population: Input should be greater than 0" in correction.content
    assert model.requests[0].output is not None and model.requests[0].output.name == "Answer"


async def test_on_response_can_route_and_the_turn_continues() -> None:
    class Ask(Step):
        """Ask."""

        def on_response(self, response: Any) -> Any:
            if "DONE" in response:
                return go(Wrap).with_message("Summarize, please.")
            return response

    class Wrap(Step):
        """Wrap up."""

    class AskFlow(Flow):
        name = "ask"
        steps = [Ask, Wrap]

    model = ScriptedModel(["All set. DONE", "Summary: all set."])
    engine = engine_with(model, AskFlow)
    result = await engine.run("ask", "finish")
    assert result.message == "Summary: all set." and result.step == "Wrap"
    assert request_lines(model.requests[1]) == ["system: Wrap up.", "user [forwarded]: Summarize, please."]


async def test_terminate_session_completes_and_the_session_is_not_resumed() -> None:
    model = ScriptedModel([ToolCall("terminate_session"), "Goodbye!"])
    engine = engine_with(model, SupportFlow)
    result = await engine.run("support", "bye")
    assert result.ok and result.completed and result.step == "TerminateStep" and result.message == "Goodbye!"
    again = await engine.run("support", "hello again", result.session_id)
    assert again.error is not None and again.error.is_a(SessionCompleted) and again.completed
    assert len(model.requests) == 2


async def test_declared_tool_without_handler_warns() -> None:
    class Args(BaseModel):
        q: str

    class Lookup(Step):
        """Lookup."""

        declared_tools = (declare_tool("lookup", Args, "Look something up."),)

    class LookupFlow(Flow):
        name = "lookup"
        steps = [Lookup]

    model = ScriptedModel([ToolCall("lookup", {"q": "x"}), "Could not."])
    engine = engine_with(model, LookupFlow)
    result = await engine.run("lookup", "find x")
    assert result.warnings == ("missing tool handler: lookup",)
    assert model.requests[1].messages[-1].content == "lookup cannot be used on its own here; nothing was run."


async def test_malformed_json_arguments_are_correctable() -> None:
    model = ScriptedModel(
        [ToolCall("cancel_order", '{"order_id": 1'), ToolCall("cancel_order", {"order_id": 1}), "ok"]
    )
    engine = engine_with(model, SupportFlow)
    result = await engine.run("support", "cancel 1")
    assert result.ok
    assert model.requests[1].messages[-1].content == (
        "Invalid arguments for cancel_order: they are not a JSON object. "
        "Send the arguments as one JSON object matching the schema of cancel_order."
    )


class Stay2(BaseModel):
    check_in: date
    check_out: date

    @model_validator(mode="after")
    def _order(self) -> Stay2:
        if self.check_out <= self.check_in:
            raise ValueError("check_out must be after check_in")
        return self


async def test_cross_field_validator_message_reaches_the_model() -> None:
    class Dates(Step):
        """Dates."""

        @tool
        def capture(self, stay: Stay2) -> str:
            """Capture the stay."""
            return "ok"

    class DatesFlow(Flow):
        name = "dates"
        steps = [Dates]

    model = ScriptedModel(
        [ToolCall("capture", {"stay": {"check_in": "2027-08-08", "check_out": "2027-08-01"}}), "x"]
    )
    engine = engine_with(model, DatesFlow)
    await engine.run("dates", "book")
    assert model.requests[1].messages[-1].content == (
        "Invalid arguments for capture:\n- stay: Value error, check_out must be after check_in\n"
        "Correct the arguments and call capture again."
    )


async def test_concurrent_turns_on_one_session_are_serialized_in_process() -> None:
    async def slow(request: ModelRequest) -> str:
        await asyncio.sleep(0.01)
        return f"reply to {request.messages[-1].content}"

    engine = engine_with(FunctionModel(slow), SupportFlow)
    first = await engine.run("support", "one")
    assert first.session_id
    results = await asyncio.gather(*(engine.run("support", f"msg {i}", first.session_id) for i in range(5)))
    assert all(r.ok for r in results)
    session = await engine.store.load(first.session_id)
    assert session is not None and session.revision == 6 and session.turns == 6
    assert len(await engine.store.transcript(first.session_id)) == 12


async def test_concurrent_saves_conflict_across_engines_sharing_a_store() -> None:
    store = MemoryStore()
    gate = asyncio.Event()
    both_waiting = asyncio.Event()
    waiting = 0

    async def blocked(request: ModelRequest) -> str:
        nonlocal waiting
        waiting += 1
        if waiting == 2:
            both_waiting.set()
        await gate.wait()
        return "done"

    first_engine = engine_with(ScriptedModel(["hi"]), SupportFlow, store=store)
    opened = await first_engine.run("support", "start")
    assert opened.session_id
    # Two engines model two server processes: their locks do not see each other, the CAS does.
    a = engine_with(FunctionModel(blocked), SupportFlow, store=store)
    b = engine_with(FunctionModel(blocked), SupportFlow, store=store)
    task_a = asyncio.create_task(a.run("support", "from a", opened.session_id))
    task_b = asyncio.create_task(b.run("support", "from b", opened.session_id))
    await both_waiting.wait()  # both turns loaded the session and wait in their model
    gate.set()
    results = await asyncio.gather(task_a, task_b)
    [lost] = [r for r in results if not r.ok]
    assert lost.error is not None and lost.error.is_a(SessionConflict)
    session = await store.load(opened.session_id)
    assert session is not None and session.revision == 2
    assert [m.content for m in await store.transcript(opened.session_id)][-2:] in (
        ["from a", "done"],
        ["from b", "done"],
    )


async def test_streaming_reports_steps_tools_and_the_result() -> None:
    from picoflow import TurnFinished
    from picoflow.events import StepEntered, TextChunk, ToolCalled, ToolReturned

    model = ScriptedModel([ToolCall("capture_name", {"name": "Ada Lovelace"}), "Bye Ada."])
    engine = engine_with(model, GreetFlow)
    events = [event async for event in engine.run_stream("greet", "I'm Ada Lovelace")]
    assert events[:-1] == [
        StepEntered("Greeter", None),
        ToolCalled("Greeter", "call_1", "capture_name", {"name": "Ada Lovelace"}),
        StepEntered("Farewell", "Greeter"),
        ToolReturned("Greeter", "call_1", "capture_name", "Accepted.", False),
        TextChunk("Farewell", "Bye Ada."),
    ]
    assert isinstance(events[-1], TurnFinished) and events[-1].result.message == "Bye Ada."


def test_run_sync_wrapper() -> None:
    engine = engine_with(ScriptedModel(["Hello!"]), SupportFlow)
    assert engine.run_sync("support", "hi").message == "Hello!"


@pytest.mark.parametrize(
    ("message", "refusal"), [("", InvalidInput), ("   ", InvalidInput), ("x" * 40, MessageTooLong)]
)
async def test_bad_input_is_refused_before_anything_runs(message: str, refusal: type[RunError]) -> None:
    model = ScriptedModel([])
    engine = engine_with(model, SupportFlow, max_message_chars=32)
    result = await engine.run("support", message)
    # Exactly the class: an empty message is not "too long", though MessageTooLong is an InvalidInput.
    assert result.error is not None and result.error.error_class is refusal and not model.requests
    assert await engine.store.list_sessions() == []


async def test_unknown_flow_and_session_and_foreign_principal() -> None:
    engine = engine_with(ScriptedModel(["hi"]), SupportFlow)
    assert (await engine.run("nope", "hi")).error.is_a(FlowNotFound)  # type: ignore[union-attr]
    assert (await engine.run("support", "hi", "missing")).error.is_a(SessionNotFound)  # type: ignore[union-attr]
    bad_id = (await engine.run("support", "hi", "bad id!")).error
    assert bad_id is not None and bad_id.is_a(InvalidInput) and bad_id.field == "session_id"
    mine = await engine.run("support", "hi", caller=Caller(principal="alice"))
    theirs = await engine.run("support", "hi", mine.session_id, caller=Caller(principal="mallory"))
    assert theirs.error is not None and theirs.error.is_a(SessionNotFound)
    assert await engine.get_session(mine.session_id or "", principal="mallory") is None
    assert await engine.delete_session(mine.session_id or "", principal="mallory") is False
    assert await engine.delete_session(mine.session_id or "", principal="alice") is True


async def test_script_exhausted_is_a_clear_failure() -> None:
    engine = engine_with(ScriptedModel([]), SupportFlow)
    result = await engine.run("support", "hi")
    assert result.error is not None and result.error.is_a(ScriptExhausted)
    errors = await engine.store.errors(result.error.reference or "")
    assert "asked for response 1, but the script has only 0" in errors[0].message


class Finder(Step):
    """Find items."""

    @tool
    def search(self, term: str) -> Any:
        """Search the catalog."""
        found = [f"{term} {n}" for n in (1, 2)]
        listing = "\n".join(f"{i}. {item}" for i, item in enumerate(found, start=1))
        return direct_to(Chooser, f"{listing}\nWhich one?").with_state(found=found)

    @tool(exclusive=True)
    def buy(self, item: str) -> str:
        """Buy an item (a side effect)."""
        self.state["bought"] = [*self.state.get("bought", []), item]
        return f"Bought {item}."


class Chooser(Step):
    """Let the user pick one of the listed items."""

    def on_enter(self) -> None:
        self.erase_memory()


class ShopFlow(Flow):
    name = "shop"
    steps = [Finder, Chooser]


async def test_direct_to_moves_and_answers_with_exact_content_without_a_model_call() -> None:
    model = ScriptedModel([ToolCall("search", {"term": "lamp"}), "You picked lamp 2."])
    engine = engine_with(model, ShopFlow)
    first = await engine.run("shop", "find lamps")
    assert first.ok and first.step == "Chooser" and first.message == "1. lamp 1\n2. lamp 2\nWhich one?"
    assert len(model.requests) == 1
    assert ("Finder", "Chooser", "search") in {
        (t.source, t.target, t.via) for t in ShopFlow.spec().transitions
    }
    await engine.run("shop", "2", first.session_id)
    # The next turn continues in Chooser, whose memory holds exactly what the user saw.
    assert request_lines(model.requests[1]) == [
        "system: Let the user pick one of the listed items.",
        "assistant [direct]: 1. lamp 1\n2. lamp 2\nWhich one?",
        "user: 2",
    ]
    session = await engine.store.load(first.session_id or "")
    assert session is not None and session.states["Chooser"] == {"found": ["lamp 1", "lamp 2"]}


async def test_an_exclusive_tool_mixed_with_other_calls_runs_nothing() -> None:
    model = ScriptedModel(
        [
            [ToolCall("search", {"term": "lamp"}), ToolCall("buy", {"item": "lamp 1"})],
            ToolCall("buy", {"item": "lamp 1"}),
            "Bought.",
        ]
    )
    engine = engine_with(model, ShopFlow)
    result = await engine.run("shop", "buy lamp 1")
    assert result.ok and result.warnings == ("buy was called together with other tools",)
    refused = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [(m.name, m.is_error) for m in refused] == [("search", True), ("buy", True)]
    assert refused[0].content == (
        "Not run: buy must be the only tool call of a response, so nothing in this response ran. "
        "Call buy alone, in a response of its own."
    )
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.states["Finder"] == {"bought": ["lamp 1"]}
    assert "Chooser" not in session.sequence


async def test_hooks_see_the_run_context_and_the_attempt_number() -> None:
    seen: list[tuple[int, object, str | None]] = []

    class Polite(Step):
        """Always end with a question."""

        def check_response(self, response: ModelResponse) -> Reject | None:
            seen.append((self.attempt, self.context.deps, self.context.customer_id))
            # Correct once, then accept what comes: steering must never fail the turn.
            if "?" not in response.text and self.attempt < self.max_attempts:
                return Reject("end with a question")
            return None

    class PoliteFlow(Flow):
        name = "polite"
        steps = [Polite]

    engine = engine_with(ScriptedModel(["Hello.", "Hi.", "Hey."]), PoliteFlow, deps="db-handle")
    result = await engine.run("polite", "hi", caller=Caller(principal="ann"))
    assert result.ok and result.message == "Hey."
    assert seen == [(1, "db-handle", "ann"), (2, "db-handle", "ann"), (3, "db-handle", "ann")]


class Recorder(Step):
    """Records what its tool is given."""

    seen: list[RunContext] = []

    @tool
    def record(self, ctx: RunContext) -> str:
        """Record the context."""
        Recorder.seen.append(ctx)
        return "noted"


class RecordFlow(Flow):
    name = "record"
    steps = [Recorder]


async def test_a_tool_gets_every_field_of_its_context_from_the_caller_and_the_turn() -> None:
    Recorder.seen = []
    deps = object()
    engine = FlowEngine([RecordFlow], model=ScriptedModel([ToolCall("record", {}), "ok"]), deps=deps)
    caller = Caller(principal="ann", visibilities=frozenset({"staff"}), config={"tone": "brief"})
    result = await engine.run("record", "hi", caller=caller)
    assert result.ok
    [ctx] = Recorder.seen
    assert (ctx.principal, ctx.customer_id, ctx.visibilities, ctx.deps) == ("ann", "ann", {"staff"}, deps)
    assert (ctx.session_id, ctx.step, dict(ctx.config)) == (result.session_id, "Recorder", {"tone": "brief"})
    assert ctx.usage == result.usage
