"""Tool dispatch: concurrent calls of read-only tools, and time limits on tool handlers."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

from picoflow import Flow, FlowDefinitionError, FlowEngine, Step, tool
from picoflow._run.ask import VETOED
from picoflow.events import ToolCalled, ToolReturned, TurnEvent
from picoflow.exceptions import ToolFailure
from picoflow.messages import ModelResponse
from picoflow.models import ScriptedModel, ToolCall
from picoflow.testing import transcript_lines

UPPER_BOUND = 30.0
"""A failing test stops within this instead of hanging; no test waits for it to pass."""


class Meeting:
    """Two handlers that can only both finish if they run at the same time."""

    def __init__(self) -> None:
        self.arrived: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}
        self.log: list[str] = []

    async def meet(self, me: str, other: str) -> str:
        self.log.append(f"{me} starts")
        self.arrived[me].set()
        await self.arrived[other].wait()
        self.log.append(f"{me} ends")
        return f"{me} met {other}"


class Desk(Step):
    """Answer from the tools."""

    meeting: ClassVar[Meeting]

    @tool(concurrent=True)
    async def read_a(self) -> str:
        """Read A."""
        return await Desk.meeting.meet("a", "b")

    @tool(concurrent=True)
    async def read_b(self) -> str:
        """Read B."""
        return await Desk.meeting.meet("b", "a")

    @tool
    async def write(self, note: str) -> str:
        """Write a note (not concurrent)."""
        Desk.meeting.log.append(f"write {note}")
        return "written"


class DeskFlow(Flow):
    name = "desk"
    steps = [Desk]


async def test_concurrent_tools_of_one_response_run_at_the_same_time() -> None:
    Desk.meeting = Meeting()
    model = ScriptedModel([[ToolCall("read_a", {}, "c1"), ToolCall("read_b", {}, "c2")], "Both read."])
    engine = FlowEngine([DeskFlow], model=model)
    events: list[TurnEvent] = []
    async with asyncio.timeout(UPPER_BOUND):  # run one after the other, they would wait forever
        result = await engine.run("desk", "read both", on_event=events.append)
    assert result.ok and result.message == "Both read."
    assert Desk.meeting.log[:2] == ["a starts", "b starts"]
    assert sorted(Desk.meeting.log[2:]) == ["a ends", "b ends"]
    # One result per call, in the response's order, whichever finished first.
    assert [(e.id, e.content) for e in events if isinstance(e, ToolReturned)] == [
        ("c1", "a met b"),
        ("c2", "b met a"),
    ]
    assert [e.id for e in events if isinstance(e, ToolCalled)] == ["c1", "c2"]
    assert result.usage.tool_calls == 2


async def test_a_call_that_is_not_concurrent_keeps_its_place_in_the_order() -> None:
    Desk.meeting = Meeting()
    Desk.meeting.arrived["b"].set()  # read_a may finish alone
    calls = [
        ToolCall("write", {"note": "first"}, "w1"),
        ToolCall("read_a", {}, "r1"),
        ToolCall("write", {"note": "last"}, "w2"),
    ]
    engine = FlowEngine([DeskFlow], model=ScriptedModel([calls, "Done."]))
    result = await engine.run("desk", "go")
    assert result.ok
    assert Desk.meeting.log == ["write first", "a starts", "a ends", "write last"]
    session = await engine.get_session(result.session_id or "")
    assert session is not None
    assert [m.tool_call_id for m in session.memory["Desk"].messages if m.role == "tool"] == ["w1", "r1", "w2"]


class Failing(Step):
    """Answer from the tools."""

    stopped: ClassVar[list[str]] = []

    @tool(concurrent=True)
    async def slow(self) -> str:
        """Wait forever."""
        try:
            await asyncio.Event().wait()
        finally:
            Failing.stopped.append("slow")
        return "never"

    @tool(concurrent=True)
    async def broken(self) -> str:
        """Fail."""
        await asyncio.sleep(0)
        raise KeyError("bug")


class FailingFlow(Flow):
    name = "failing"
    steps = [Failing]


async def test_a_failing_concurrent_call_stops_the_others_and_fails_the_turn_cleanly() -> None:
    Failing.stopped = []
    model = ScriptedModel([[ToolCall("slow", {}, "s"), ToolCall("broken", {}, "b")]])
    engine = FlowEngine([FailingFlow], model=model)
    async with asyncio.timeout(UPPER_BOUND):
        result = await engine.run("failing", "go")
    assert result.error is not None and result.error.is_a(ToolFailure)
    assert Failing.stopped == ["slow"]
    # Nothing of the turn is stored: its session is kept as it was before it (to read its error).
    [kept] = await engine.list_sessions(principal=None)
    assert kept.id == result.session_id and kept.turns == 0
    assert await engine.transcript(kept.id) == []


class Timed(Step):
    """Answer from the tools."""

    stopped: ClassVar[list[str]] = []
    tool_timeout = 0.05

    @tool
    async def hang(self, secret: str) -> str:
        """Never finishes (the step's default limit applies)."""
        try:
            await asyncio.Event().wait()
        finally:
            Timed.stopped.append("hang")
        return "never"

    @tool(timeout=60)
    async def own_limit(self) -> str:
        """Raises its own TimeoutError, which is its failure, not the limit's."""
        raise TimeoutError("upstream timed out")

    @tool
    def plain(self) -> str:
        """A plain def: the default limit does not apply to it."""
        return "plain"


STOPPED = "hang did not finish within 0.05 seconds and was stopped; it gave no result."


class TimedFlow(Flow):
    name = "timed"
    steps = [Timed]


async def test_a_slow_handler_is_stopped_and_the_model_told_without_its_arguments() -> None:
    Timed.stopped = []
    model = ScriptedModel(
        [ToolCall("hang", {"secret": "s3cr3t-value"}, "h1"), ToolCall("plain", {}, "p1"), "Sorry."]
    )
    engine = FlowEngine([TimedFlow], model=model)
    async with asyncio.timeout(UPPER_BOUND):
        result = await engine.run("timed", "go")
    assert result.ok and result.message == "Sorry."
    assert Timed.stopped == ["hang"]  # really cancelled, not left running
    assert result.warnings == ("tool hang did not finish within 0.05 s and was stopped",)
    shown = model.requests[1].messages[-1]
    assert (
        shown.is_error
        and shown.content == "hang did not finish within 0.05 seconds and was stopped; it gave no result."
    )
    assert all("s3cr3t" not in m.content for m in model.requests[1].messages if m.role == "tool")
    # The plain def ran on: the step's default limit is for async handlers only.
    assert await transcript_lines(engine, result.session_id or "") == [
        "Timed | user: go",
        'Timed | assistant: -> hang({"secret": "s3cr3t-value"}) #h1',
        "Timed | tool hang #h1 (error): " + STOPPED,
        "Timed | assistant: -> plain({}) #p1",
        "Timed | tool plain #p1: plain",
        "Timed | assistant: Sorry.",
    ]


async def test_a_handlers_own_timeout_error_is_a_tool_failure() -> None:
    engine = FlowEngine([TimedFlow], model=ScriptedModel([ToolCall("own_limit", {}, "o1")]))
    result = await engine.run("timed", "go")
    assert result.error is not None and result.error.is_a(ToolFailure)


def test_timeouts_are_checked_when_the_flow_is_built() -> None:
    with pytest.raises(FlowDefinitionError, match="positive number of seconds"):
        tool(timeout=0)

    class Sync(Step):
        """Sync."""

        @tool(timeout=1.0)
        def work(self) -> str:
            """A plain def cannot be stopped."""
            return "done"

    class SyncFlow(Flow):
        name = "sync"
        steps = [Sync]

    with pytest.raises(FlowDefinitionError, match="timeout= needs an async handler"):
        FlowEngine([SyncFlow], model=ScriptedModel([]))

    class BadDefault(Flow):
        name = "bad_default"
        steps = [Sync]
        tool_timeout = -1

    with pytest.raises(FlowDefinitionError, match="tool_timeout takes a positive number of seconds"):
        FlowEngine([BadDefault], model=ScriptedModel([]))


# --- PicoFlow-compatible returns ---------------------------------------------------------------


class Done(Step):
    """Say goodbye."""


class Ask(Step):
    """Ask, then move on."""

    @tool
    def by_class(self) -> type[Step]:
        """Move on by returning the step class."""
        return Done

    @tool
    def by_name(self) -> str:
        """Move on by returning the step's name."""
        return "Done"

    @tool
    def just_text(self) -> str:
        """Return text that names no step."""
        return "Done, thanks."

    def check_response(self, response: ModelResponse) -> bool:
        # PicoFlow's veto: True rejects, False accepts.
        return "forbidden" in response.text


class PicoFlowStyle(Flow):
    name = "picoflow_style"
    steps = [Ask, Done]


@pytest.mark.parametrize("name", ["by_class", "by_name"])
async def test_a_tool_returning_a_step_or_its_name_routes_like_go(name: str) -> None:
    model = ScriptedModel([ToolCall(name, {}, "t1"), "Goodbye!"])
    engine = FlowEngine([PicoFlowStyle], model=model)
    result = await engine.run("picoflow_style", "next")
    assert result.ok and result.step == "Done" and result.message == "Goodbye!"
    assert await transcript_lines(engine, result.session_id or "") == [
        "Ask | user: next",
        f"Ask | assistant: -> {name}({{}}) #t1",
        f"Ask | tool {name} #t1: Accepted.",
        "Done | user [crossing]: Continue.",
        "Done | assistant: Goodbye!",
    ]


async def test_text_that_names_no_step_stays_a_tool_result() -> None:
    engine = FlowEngine([PicoFlowStyle], model=ScriptedModel([ToolCall("just_text", {}, "t1"), "Ok."]))
    result = await engine.run("picoflow_style", "go")
    assert result.ok and result.step == "Ask"


async def test_check_response_true_vetoes_and_false_accepts() -> None:
    model = ScriptedModel(["a forbidden answer", "a fine answer"])
    engine = FlowEngine([PicoFlowStyle], model=model)
    result = await engine.run("picoflow_style", "hi")
    assert result.ok and result.message == "a fine answer"
    assert result.warnings == (VETOED,)
    assert model.requests[1].messages[-1].content == f"Your response was not accepted: {VETOED}"


def test_a_returned_step_class_outside_the_flow_is_refused_at_build() -> None:
    class Elsewhere(Step):
        """Not in the flow."""

    class Leaves(Step):
        """Leaves."""

        @tool
        def leave(self) -> type[Step]:
            """Go elsewhere."""
            return Elsewhere

    class Broken(Flow):
        name = "broken_returns"
        steps = [Leaves]

    with pytest.raises(FlowDefinitionError, match="'Elsewhere' is not a step of this flow"):
        FlowEngine([Broken], model=ScriptedModel([]))
    assert ("Ask", "Done") in {(t.source, t.target) for t in PicoFlowStyle.spec().transitions}
