"""Sub-steps: ``run_step`` runs a step as a nested, bounded sub-turn; ``run_steps`` and ``batch``
run several at once. Usage and limits count across nesting, failures leave nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from picoflow import (
    Flow,
    FlowEngine,
    LogicStep,
    Step,
    SubStepFailed,
    SubStepsFailed,
    TerminateStep,
    ToolError,
    UsageLimits,
    direct,
    go,
    tool,
)
from picoflow.events import StepEntered, ToolCalled, ToolReturned, TurnEvent
from picoflow.exceptions import HookFailure, UsageLimitExceeded
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ScriptedModel, ToolCall
from picoflow.sessions import SQLiteStore
from picoflow.testing import transcript_lines

UPPER_BOUND = 30.0
"""A failing test stops within this instead of hanging; no test waits for it to pass."""


class Verdict(BaseModel):
    ok: bool
    why: str


class Checker(Step):
    """Check the claim you are given."""

    output = Verdict

    def on_enter(self) -> None:
        self.state["runs"] = self.state.get("runs", 0) + 1


class Clock(LogicStep):
    """The time, from code."""

    def run_logic(self) -> Any:
        return direct("12:00")


class Researcher(Step):
    """Look the topic up and answer in one line."""

    @tool
    def search(self, query: str) -> str:
        """Search the notes."""
        self.state[query] = "searched"  # one field per query: runs going on together merge by field
        return f"notes on {query}"

    @tool
    def wander(self) -> Any:
        """Try to move the conversation (a sub-step may not)."""
        return go(Planner)


class Summary(BaseModel):
    title: str


class Planner(Step):
    """Plan with the helpers."""

    @tool
    async def check(self, claim: str) -> str:
        """Check a claim."""
        verdict = await self.run_step(Checker, claim)
        assert isinstance(verdict, Verdict)
        clock = await self.run_step(Clock)
        return f"{verdict.ok} ({verdict.why}) at {clock}"

    @tool
    async def research(self, topic: str) -> str:
        """Research a topic."""
        return str(await self.run_step("Researcher", topic))

    @tool
    async def research_or_not(self, topic: str) -> str:
        """Research, carrying on when the researcher fails."""
        try:
            return str(await self.run_step(Researcher, topic))
        except SubStepFailed as failed:
            raise ToolError(f"research failed in {failed.step}") from None

    @tool
    async def summarize(self, text: str) -> str:
        """Summarize as a title."""
        summary = await self.run_step(Researcher, {"text": text}, output=Summary)
        assert isinstance(summary, Summary)
        return summary.title

    @tool
    async def both(self) -> str:
        """Research two topics at once."""
        answers = await self.run_steps([(Researcher, "tides"), (Checker, "the moon moves them")])
        return f"{answers[0]} / {answers[1].ok}"

    @tool
    async def many(self, topics: list[str]) -> str:
        """Research many topics, keeping what succeeded."""
        try:
            answers = await self.batch(Researcher, topics, concurrency=2)
        except SubStepsFailed as failed:
            answers = [a if a is not None else "(failed)" for a in failed.answers]
        return " | ".join(answers)


class Done(TerminateStep):
    pass


class Lab(Flow):
    name = "lab"
    steps = [Planner, Checker, Clock, Researcher, Done]


async def test_run_step_answers_with_the_output_model_and_keeps_the_runs_out_of_the_callers_memory() -> None:
    model = ScriptedModel(
        {
            "Planner": [ToolCall("check", {"claim": "sky is blue"}, "c1"), "It is true."],
            "Checker": ['{"ok": true, "why": "scattering"}'],
        }
    )
    engine = FlowEngine([Lab], model=model)
    result = await engine.run("lab", "check it")
    assert result.ok and result.message == "It is true."
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 1
    session_id = result.session_id or ""
    assert await transcript_lines(engine, session_id) == [
        "Planner | user: check it",
        'Planner | assistant: -> check({"claim": "sky is blue"}) #c1',
        "Checker@2 | user: sky is blue",
        'Checker@2 | assistant: {"ok":true,"why":"scattering"}',
        "Clock@4 | user: Continue.",
        "Clock@4 | assistant [direct]: 12:00",
        "Planner | tool check #c1: True (scattering) at 12:00",
        "Planner | assistant: It is true.",
    ]
    # The sub-step was asked with its own memory and schema; the planner never sees the run.
    checker, planner_again = model.requests[1], model.requests[2]
    assert checker.step == "Checker" and [m.content for m in checker.messages] == ["sky is blue"]
    assert checker.output is not None and checker.output.name == "Verdict"
    assert checker.tools == ()  # no terminate_session: a sub-step answers, it does not end the chat
    assert [m.content for m in planner_again.messages] == ["check it", "", "True (scattering) at 12:00"]
    stored = await engine.store.load(session_id)
    assert stored is not None
    assert stored.current_step == "Planner" and stored.sequence == ["Planner"]
    assert set(stored.memory) == {"Planner"}
    assert stored.states["Checker"] == {"runs": 1}
    assert stored.models == {"Planner": "scripted:test", "Checker": "scripted:test"}


async def test_a_second_run_starts_fresh_and_the_output_can_be_asked_by_the_caller() -> None:
    model = ScriptedModel(
        {
            "Planner": [
                ToolCall("research", {"topic": "tides"}, "r1"),
                ToolCall("summarize", {"text": "tides rise"}, "s1"),
                "Done.",
            ],
            "Researcher": ["Tides follow the moon.", '{"title": "Rising tides"}'],
        }
    )
    engine = FlowEngine([Lab], model=model)
    result = await engine.run("lab", "go")
    assert result.ok
    first, second = (r for r in model.requests if r.step == "Researcher")
    assert [m.content for m in first.messages] == ["tides"] and first.output is None
    assert [m.content for m in second.messages] == ['{"text":"tides rise"}']
    assert second.output is not None and second.output.name == "Summary"
    assert [t.name for t in second.tools] == ["search", "wander"]
    assert (await transcript_lines(engine, result.session_id or ""))[
        -2
    ] == "Planner | tool summarize #s1: Rising tides"


async def test_usage_and_limits_count_across_nesting_and_a_limit_inside_stops_the_whole_turn() -> None:
    class Capped(Lab):
        name = "capped"
        limits = UsageLimits(model_calls=3)

    model = ScriptedModel(
        {
            "Planner": [ToolCall("research_or_not", {"topic": "tides"}, "r1")],
            "Researcher": [
                ToolCall("search", {"query": "tides"}, "s1"),
                ToolCall("search", {"query": "moon"}, "s2"),
            ],
        }
    )
    engine = FlowEngine([Capped], model=model)
    result = await engine.run("capped", "go")
    # research_or_not catches SubStepFailed, but a spent budget is not a sub-step failure.
    assert result.error is not None and result.error.is_a(UsageLimitExceeded)
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 3
    stored = await engine.store.load(result.session_id or "")  # a first turn: kept as before it
    assert stored is not None and stored.turns == 0 and stored.states == {}
    assert await engine.store.transcript(stored.id) == []


async def test_a_sub_step_failure_fails_the_turn_as_its_cause_and_leaves_the_session_unchanged(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    model = ScriptedModel(
        {
            "Planner": ["Hello.", ToolCall("research", {"topic": "tides"}, "r1")],
            "Researcher": [ToolCall("search", {"query": "tides"}, "s1"), ToolCall("wander", {}, "w1")],
        }
    )
    engine = FlowEngine([Lab], model=model, store=store)
    first = await engine.run("lab", "hi")
    session_id = first.session_id or ""
    before = await store.load(session_id)
    transcript = await transcript_lines(engine, session_id)
    result = await engine.run("lab", "research tides", session_id)
    assert result.error is not None and result.error.is_a(HookFailure)  # the cause, not a wrapper
    assert result.step == "Researcher"  # where it failed
    assert await store.load(session_id) == before
    assert await transcript_lines(engine, session_id) == transcript
    errors = await engine.session_errors(session_id)
    assert len(errors) == 1
    assert errors[0].message.startswith(
        "sub-step Researcher (run by Planner) failed: sub-step Researcher cannot go to Planner"
    )
    await store.close()


async def test_a_caught_failure_keeps_nothing_of_the_failed_run() -> None:
    model = ScriptedModel(
        {
            "Planner": [ToolCall("research_or_not", {"topic": "tides"}, "r1"), "Sorry, no research."],
            "Researcher": [ToolCall("search", {"query": "tides"}, "s1"), ToolCall("wander", {}, "w1")],
        }
    )
    engine = FlowEngine([Lab], model=model)
    result = await engine.run("lab", "go")
    assert result.ok and result.message == "Sorry, no research."
    assert result.warnings == ("sub-step Researcher failed: hook_failed",)
    assert await transcript_lines(engine, result.session_id or "") == [
        "Planner | user: go",
        'Planner | assistant: -> research_or_not({"topic": "tides"}) #r1',
        "Planner | tool research_or_not #r1 (error): research failed in Researcher",
        "Planner | assistant: Sorry, no research.",
    ]
    stored = await engine.store.load(result.session_id or "")
    assert stored is not None and stored.states.get("Researcher", {}) == {}  # its search was undone
    assert "Researcher" not in stored.models
    assert result.usage.model_calls == 4 and result.usage.tool_calls == 3  # spent is spent


class Meeting:
    """Runs that can only all finish if they are in flight at the same time."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.in_flight = 0
        self.most = 0
        self.full = asyncio.Event()

    async def attend(self) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight == self.expected:
            self.full.set()
        await self.full.wait()
        self.in_flight -= 1


def meeting_model(meeting: Meeting, answer: Callable[[ModelRequest], Any]) -> FunctionModel:
    async def respond(request: ModelRequest) -> Any:
        if request.step != "Planner":
            await meeting.attend()
        return answer(request)

    return FunctionModel(respond)


async def test_run_steps_runs_together_and_answers_in_order() -> None:
    meeting = Meeting(expected=2)
    planner = iter([ToolCall("both", {}, "b1"), "Both done."])

    def answer(request: ModelRequest) -> Any:
        if request.step == "Researcher":
            return "Tides follow the moon."
        if request.step == "Checker":
            return '{"ok": true, "why": "gravity"}'
        return next(planner)

    events: list[TurnEvent] = []
    engine = FlowEngine([Lab], model=meeting_model(meeting, answer))
    async with asyncio.timeout(UPPER_BOUND):
        result = await engine.run("lab", "go", on_event=events.append)
    assert result.ok and meeting.most == 2
    lines = await transcript_lines(engine, result.session_id or "")
    assert lines[-2:] == [
        "Planner | tool both #b1: Tides follow the moon. / True",
        "Planner | assistant: Both done.",
    ]
    # Each run's messages carry its label; the runs' seqs interleave but are all stored in order.
    runs = sorted(line for line in lines if "@" in line.split(" | ")[0])
    assert runs == [
        'Checker@3 | assistant: {"ok":true,"why":"gravity"}',
        "Checker@3 | user: the moon moves them",
        "Researcher@2 | assistant: Tides follow the moon.",
        "Researcher@2 | user: tides",
    ]
    nested = [e for e in events if getattr(e, "parent", None) == "b1"]
    assert {(type(e).__name__, e.step) for e in nested} == {
        ("StepEntered", "Researcher"),
        ("StepEntered", "Checker"),
    }


async def test_batch_bounds_concurrency_keeps_successes_and_merges_state_fields() -> None:
    meeting = Meeting(expected=2)
    planner = iter([ToolCall("many", {"topics": ["a", "b", "c"]}, "m1"), "Done."])

    def answer(request: ModelRequest) -> Any:
        if request.step == "Planner":
            return next(planner)
        topic = request.messages[0].content
        if len(request.messages) == 1:  # every run searches first
            return ToolCall("search", {"query": topic}, "s")
        return ToolCall("wander", {}, "w") if topic == "b" else f"found {topic}"

    engine = FlowEngine([Lab], model=meeting_model(meeting, answer))
    async with asyncio.timeout(UPPER_BOUND):
        result = await engine.run("lab", "go")
    assert result.ok, result.error
    assert meeting.most == 2  # three runs, never more than two at once
    lines = await transcript_lines(engine, result.session_id or "")
    assert "Planner | tool many #m1: found a | (failed) | found c" in lines
    stored = await engine.store.load(result.session_id or "")
    assert stored is not None
    # The two runs that answered each added a field; the failed run's search left nothing.
    assert stored.states["Researcher"] == {"a": "searched", "c": "searched"}
    assert not any('"query": "b"' in line for line in lines)  # the failed run's messages are gone
    assert result.warnings == ("sub-step Researcher failed: hook_failed",)


async def test_a_runs_events_name_the_tool_call_it_runs_under() -> None:
    model = ScriptedModel(
        {
            "Planner": [ToolCall("research", {"topic": "tides"}, "r1"), "Done."],
            "Researcher": [ToolCall("search", {"query": "tides"}, "s1"), "Tides follow the moon."],
        }
    )
    events: list[TurnEvent] = []
    engine = FlowEngine([Lab], model=model)
    result = await engine.run("lab", "go", on_event=events.append)
    assert result.ok
    assert [e for e in events if not hasattr(e, "text")] == [
        StepEntered("Planner", None),
        ToolCalled("Planner", "r1", "research", {"topic": "tides"}),
        StepEntered("Researcher", None, parent="r1"),
        ToolCalled("Researcher", "s1", "search", {"query": "tides"}, parent="r1"),
        ToolReturned("Researcher", "s1", "search", "notes on tides", False, parent="r1"),
        ToolReturned("Planner", "r1", "research", "Tides follow the moon.", False),
    ]
    # Only the turn's own answer is streamed as text; the run's answer went to the planner.
    assert [e.text for e in events if hasattr(e, "text")] == ["Done."]


class Slow(Step):
    """Never answers in time."""

    @tool
    def mark(self) -> str:
        """Leave a mark in the state."""
        self.state["marked"] = True
        return "marked"


class Impatient(Step):
    """Asks the slow step, but waits only so long."""

    @tool(timeout=0.05)
    async def ask_slow(self) -> str:
        """Ask the slow step."""
        return str(await self.run_step(Slow, "take your time"))


class Waiting(Flow):
    name = "waiting"
    steps = [Impatient, Slow]


async def test_a_timed_out_tool_stops_its_sub_step_and_keeps_nothing_of_it() -> None:
    never = asyncio.Event()
    cancelled: list[str] = []

    async def answer(request: ModelRequest) -> Any:
        if request.step == "Impatient":
            return ToolCall("ask_slow", {}, "a1") if len(request.messages) == 1 else "It took too long."
        if len(request.messages) == 1:
            return ToolCall("mark", {}, "m1")
        try:
            await never.wait()  # the sub-step's second model call hangs until cancelled
        except asyncio.CancelledError:
            cancelled.append(request.step or "")
            raise
        return "never"

    engine = FlowEngine([Waiting], model=FunctionModel(answer))
    async with asyncio.timeout(UPPER_BOUND):
        result = await engine.run("waiting", "go")
    assert result.ok and result.message == "It took too long."
    assert cancelled == ["Slow"]  # really stopped, not left running
    assert await transcript_lines(engine, result.session_id or "") == [
        "Impatient | user: go",
        "Impatient | assistant: -> ask_slow({}) #a1",
        "Impatient | tool ask_slow #a1 (error): ask_slow did not finish within 0.05 seconds and was stopped; "
        "it gave no result.",
        "Impatient | assistant: It took too long.",
    ]
    stored = await engine.store.load(result.session_id or "")
    assert stored is not None and stored.states.get("Slow", {}) == {}
