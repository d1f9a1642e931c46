"""Sub-steps at their edges: kept memory across turns, steps of another flow, runs started from
hooks and logic steps, nesting, and every wrong request refused clearly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from picoflow import Flow, FlowEngine, LogicStep, Step, TerminateStep, direct, tool
from picoflow.events import TurnEvent
from picoflow.exceptions import HookFailure, ScriptExhausted, ToolFailure
from picoflow.models import ScriptedModel, ToolCall
from picoflow.sessions import SQLiteStore
from picoflow.testing import transcript_lines


class Notebook(Step):
    """Keep notes; answer with everything noted so far."""

    substep_memory = "kept"


class Writer(Step):
    """Write."""

    @tool
    async def note(self, text: str) -> str:
        """Note something."""
        return str(await self.run_step(Notebook, text))


class Guest(Step):
    """A step of another flow, run from this one."""

    @tool
    def remember(self, item: str) -> str:
        """Remember an item."""
        self.state["item"] = item
        return "ok"


class GuestFlow(Flow):
    name = "guests"
    steps = [Guest]


class Host(Step):
    """Run the other flow's step."""

    @tool
    async def visit(self, item: str) -> str:
        """Visit."""
        return str(await self.run_step(Guest, item))


class Notes(Flow):
    name = "notes"
    steps = [Writer, Notebook, Host]


async def test_kept_memory_goes_on_across_runs_and_turns(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    model = ScriptedModel(
        {
            "Writer": [
                ToolCall("note", {"text": "milk"}, "n1"),
                "Noted.",
                ToolCall("note", {"text": "eggs"}, "n2"),
                "Noted.",
            ],
            "Notebook": ["milk", "milk, eggs"],
        }
    )
    engine = FlowEngine([Notes, GuestFlow], model=model, store=store)
    first = await engine.run("notes", "note milk")
    session_id = first.session_id or ""
    second = await engine.run("notes", "note eggs", session_id)
    assert second.ok
    runs = [r for r in model.requests if r.step == "Notebook"]
    # The second run, a turn later and after a reload from the store, sees the first.
    assert [m.content for m in runs[1].messages] == ["milk", "milk", "eggs"]
    stored = await store.load(session_id)
    assert stored is not None and [m.content for m in stored.memory["Notebook"].messages] == [
        "milk",
        "milk",
        "eggs",
        "milk, eggs",
    ]
    # The writer saw the notebook's answers as tool results, never the notebook's own messages.
    assert [m.content for m in model.requests[-1].messages] == [
        "note milk",
        "",
        "milk",
        "Noted.",
        "note eggs",
        "",
        "milk, eggs",
    ]
    assert [m.content for m in stored.memory["Writer"].messages if m.role == "user"] == [
        "note milk",
        "note eggs",
    ]
    await store.close()


async def test_a_foreign_step_runs_with_its_own_flow_and_stores_state_under_its_flow_name() -> None:
    class HostFirst(Flow):
        name = "host-first"
        steps = [Host]

    model = ScriptedModel(
        {
            "Host": [ToolCall("visit", {"item": "hat"}, "v1"), "Visited."],
            "Guest": [ToolCall("remember", {"item": "hat"}, "r1"), "Kept the hat."],
        }
    )
    engine = FlowEngine([HostFirst, GuestFlow], model=model)
    result = await engine.run("host-first", "visit")
    assert result.ok and result.message == "Visited."
    stored = await engine.store.load(result.session_id or "")
    assert stored is not None
    assert stored.states["guests:Guest"] == {"item": "hat"}
    assert "Guest" not in stored.states
    assert stored.models["guests:Guest"] == "scripted:test"
    assert await transcript_lines(engine, result.session_id or "") == [
        "Host | user: visit",
        'Host | assistant: -> visit({"item": "hat"}) #v1',
        "Guest@2 | user: hat",
        'Guest@2 | assistant: -> remember({"item": "hat"}) #r1',
        "Guest@2 | tool remember #r1: ok",
        "Guest@2 | assistant: Kept the hat.",
        "Host | tool visit #v1: Kept the hat.",
        "Host | assistant: Visited.",
    ]


class Forecast(BaseModel):
    sky: str


class Weather(LogicStep):
    def run_logic(self) -> Any:
        return direct('{"sky": "clear"}')


class Router(LogicStep):
    """Decides from a sub-step's answer, with no model call of its own."""

    async def run_logic(self) -> Any:
        forecast = await self.run_step(Weather, output=Forecast)
        return direct(f"The sky is {forecast.sky}.")


class Greeter(Step):
    """Greet."""

    async def on_enter(self) -> None:
        self.state["greeting"] = await self.run_step(Weather)


class Logic(Flow):
    name = "logic"
    steps = [Router, Weather]


class Hooked(Flow):
    name = "hooked"
    steps = [Greeter, Weather]


async def test_run_logic_and_hooks_run_sub_steps_and_their_events_name_the_calling_step() -> None:
    events: list[TurnEvent] = []
    engine = FlowEngine([Logic, Hooked], model=ScriptedModel({"Greeter": ["Hello."]}))
    result = await engine.run("logic", "weather?", on_event=events.append)
    assert result.ok and result.message == "The sky is clear."
    assert result.usage.model_calls == 0
    assert [(e.step, getattr(e, "parent", None)) for e in events] == [("Router", None), ("Weather", "Router")]
    hooked = await engine.run("hooked", "hi")
    assert hooked.ok and hooked.message == "Hello."
    stored = await engine.store.load(hooked.session_id or "")
    assert stored is not None and stored.states["Greeter"] == {"greeting": '{"sky": "clear"}'}


class Echo(Step):
    """Echo."""

    @tool
    async def deeper(self) -> str:
        """Run yourself again."""
        return str(await self.run_step(Echo, "again"))


class Caller(Step):
    """Calls sub-steps wrongly, one way per tool."""

    @tool
    async def unknown(self) -> str:
        """Name a step that does not exist."""
        return str(await self.run_step("Nobody", "hi"))

    @tool
    async def unregistered(self) -> str:
        """Name a step of no registered flow."""
        return str(await self.run_step(Starter, "hi"))

    @tool
    async def ending(self) -> str:
        """Run the terminate step."""
        return str(await self.run_step(Bye, "hi"))

    @tool
    async def badly(self) -> str:
        """Give an input that is not JSON data."""
        return str(await self.run_step(Echo, object()))

    @tool
    async def unbounded(self) -> str:
        """Ask for no concurrency at all."""
        return str(await self.run_steps([(Echo, "a")], concurrency=0))

    @tool
    async def recursive(self) -> str:
        """Nest without end."""
        return str(await self.run_step(Echo, "go"))


class Bye(TerminateStep):
    pass


class Starter(Step):
    """A step no registered flow lists."""


class Wrong(Flow):
    name = "wrong"
    steps = [Caller, Echo, Bye]


@pytest.mark.parametrize(
    ("tool_name", "message"),
    [
        ("unknown", "LookupError: run_step: flow wrong has no step named 'Nobody'"),
        (
            "unregistered",
            "LookupError: run_step: Starter is not a step of flow wrong or of another registered flow",
        ),
        ("ending", "ValueError: run_step: Bye is a TerminateStep"),
        ("badly", "TypeError: run_step: input must be text, a pydantic model or JSON data, not object"),
        ("unbounded", "ValueError: concurrency must be a whole number of at least 1, not 0"),
    ],
)
async def test_a_wrong_request_fails_the_turn_with_a_clear_reason(tool_name: str, message: str) -> None:
    engine = FlowEngine([Wrong], model=ScriptedModel({"Caller": ["Hello.", ToolCall(tool_name, {}, "x1")]}))
    session_id = (await engine.run("wrong", "hi")).session_id or ""
    result = await engine.run("wrong", "go", session_id)
    assert result.error is not None and result.error.is_a(ToolFailure)
    errors = await engine.session_errors(session_id)
    assert errors is not None and message in errors[0].message
    assert result.usage.model_calls == 1  # refused before any sub-step ran


async def test_nesting_is_bounded() -> None:
    script = {"Caller": ["Hello.", ToolCall("recursive", {}, "r")], "Echo": [ToolCall("deeper", {}, "d")] * 8}
    engine = FlowEngine([Wrong], model=ScriptedModel(script))
    session_id = (await engine.run("wrong", "hi")).session_id or ""
    result = await engine.run("wrong", "go", session_id)
    assert result.error is not None and result.error.is_a(HookFailure)
    errors = await engine.session_errors(session_id)
    assert errors is not None and "sub-steps nest deeper than 8 (step Echo runs Echo)" in errors[0].message
    assert result.usage.model_calls == 9


class Trip(BaseModel):
    city: str
    nights: int


class Nights(LogicStep):
    """Prices a stay in code, from its input."""

    def run_logic(self) -> Any:
        trip = self.input_as(Trip)
        if trip.nights > 14:
            raise ValueError("too long")
        return direct(f"{trip.nights * 100} USD in {trip.city}")


class Picky(Step):
    """Answer with OK only."""

    def check_response(self, response: Any) -> Any:
        from picoflow import Reject

        return Reject("say OK") if response.text != "OK" else None


class Budget(Step):
    """Price trips."""

    @tool
    async def price(self) -> str:
        """Price two trips and a check, keyed."""
        from picoflow import SubStepsFailed

        requests = {
            "short": (Nights, Trip(city="Oslo", nights=2)),
            "long": (Nights, Trip(city="Rome", nights=20)),
            "check": (Picky, "ok?"),
        }
        try:
            answers = await self.run_steps(requests)
        except SubStepsFailed as failed:
            answers = failed.by_key
        return str(answers)

    @tool
    async def plain_input(self) -> str:
        """Read one's own input outside a sub-step (refused)."""
        return str(self.input) + " " + str(self.input_as(Trip))


class Budgets(Flow):
    name = "budgets"
    steps = [Budget, Nights, Picky]


async def test_a_keyed_fan_out_a_logic_steps_typed_input_and_a_failed_runs_warnings() -> None:
    model = ScriptedModel(
        {"Budget": [ToolCall("price", {}, "p1"), "Priced."], "Picky": ["ok", "okay", "fine"]}
    )
    engine = FlowEngine([Budgets], model=model)
    result = await engine.run("budgets", "price it")
    assert result.ok
    lines = await transcript_lines(engine, result.session_id or "")
    assert "Budget | tool price #p1: {'short': '200 USD in Oslo', 'long': None, 'check': None}" in lines
    # The failed runs' own warnings stay, to say why they failed.
    assert result.warnings == (
        "sub-step Nights failed: hook_failed",
        "say OK",
        "say OK",
        "say OK",
        "sub-step Picky failed: attempts_exhausted",
    )


async def test_input_is_none_outside_a_sub_step_and_a_scripts_end_is_never_a_sub_step_failure() -> None:
    engine = FlowEngine(
        [Budgets], model=ScriptedModel({"Budget": ["Hi.", ToolCall("plain_input", {}, "i1")]})
    )
    session_id = (await engine.run("budgets", "hi")).session_id or ""
    result = await engine.run("budgets", "go", session_id)
    assert result.error is not None and result.error.is_a(ToolFailure)
    errors = await engine.session_errors(session_id)
    assert (
        errors is not None
        and "step Budget is not running as a sub-step: it has no input" in errors[0].message
    )

    short = ScriptedModel({"Budget": [ToolCall("price", {}, "p1")], "Picky": []})
    failed = await FlowEngine([Budgets], model=short).run("budgets", "price it")
    assert failed.error is not None and failed.error.is_a(ScriptExhausted)
