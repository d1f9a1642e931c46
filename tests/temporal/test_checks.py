"""What a worker refuses before it takes a turn: flows whose turns could not be replayed faithfully
(MCP servers, a sub-step with tools started from a hook, a hook reading a clock, randomness or a
file). No Temporal server is needed: the check runs first."""

from __future__ import annotations

import random
import re
import time
from datetime import datetime
from typing import Any

import pytest

from picoflow import Flow, FlowEngine, LogicStep, Outcome, Step, direct, tool
from picoflow.exceptions import FlowDefinitionError
from picoflow.mcp import MCPServer
from picoflow.temporal import build_worker
from picoflow.temporal._checks import check_durable
from picoflow_demos import FLOWS


class Helper(Step):
    """Look things up."""

    @tool
    def look_up(self, what: str) -> str:
        """Look something up."""
        return what


class Quiet(Step):
    """Answer from what you are given."""


class FromHook(Step):
    """Delegate."""

    async def on_response(self, response: Any) -> Outcome:
        return direct(await self.run_step(Helper, "x"))


class QuietFromHook(Step):
    """Delegate to a step without tools."""

    async def on_response(self, response: Any) -> Outcome:
        return direct(await self.run_step(Quiet, "x"))


class FromTool(Step):
    """Delegate from a tool."""

    @tool
    async def delegate(self, what: str) -> str:
        """Ask the helper."""
        answer: str = await self.run_step(Helper, what)
        return answer


class Clock(LogicStep):
    def run_logic(self) -> Outcome:
        return direct(f"{time.time():.0f}")


class Dice(Step):
    """Roll."""

    def prompt(self) -> str:
        return f"Say {random.randint(1, 6)}."


class Stamp(Step):
    """Stamp."""

    def on_enter(self) -> None:
        self.state["at"] = datetime.now().isoformat()


class Reader(Step):
    """Read a file."""

    def prompt(self) -> str:
        with open("/etc/hostname") as handle:
            return handle.read()


class TimedTool(Step):
    """Tools may read clocks: their results are recorded."""

    @tool
    def now(self) -> str:
        """The time."""
        return f"{time.time():.0f}"


def spec_of(*steps: type[Step], servers: tuple[MCPServer, ...] = ()) -> Any:
    class Checked(Flow):
        name = "checked"

    Checked.steps = list(steps)
    Checked.mcp_servers = list(servers)
    return FlowEngine([Checked]).flow("checked")


@pytest.mark.parametrize(
    ("steps", "refusal"),
    [
        ((FromHook, Helper), "on_response starts sub-step Helper, whose tools would run again"),
        ((Clock,), "step Clock: run_logic calls time.time()"),
        ((Dice,), "step Dice: prompt calls random.randint()"),
        ((Stamp,), "step Stamp: on_enter calls datetime.now()"),
        ((Reader,), "step Reader: prompt calls open()"),
    ],
    ids=["sub-step-from-hook", "clock", "random", "datetime", "file"],
)
def test_what_a_replay_would_change_is_refused(steps: tuple[type[Step], ...], refusal: str) -> None:
    with pytest.raises(FlowDefinitionError, match=re.escape(refusal)):
        check_durable(spec_of(*steps))


def test_what_a_replay_reproduces_is_accepted() -> None:
    for steps in ((FromTool, Helper), (QuietFromHook, Quiet), (TimedTool,)):
        check_durable(spec_of(*steps))
    for flow in FLOWS:
        check_durable(FlowEngine([flow]).flow(flow.name))


def test_mcp_servers_are_refused_and_a_worker_checks_before_it_is_built() -> None:
    spec = spec_of(Quiet, servers=(MCPServer.stdio("mcp-server-time"),))
    with pytest.raises(FlowDefinitionError, match="MCP servers are not supported on Temporal yet"):
        check_durable(spec)

    class Ticking(Flow):
        name = "ticking"
        steps = [Clock]

    with pytest.raises(FlowDefinitionError, match=re.escape("run_logic calls time.time()")):
        build_worker(None, "checks", FlowEngine([Ticking]))  # type: ignore[arg-type]
