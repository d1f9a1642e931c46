"""Composition: sub-steps in parallel, concurrent tools, and what one ``run_step`` costs.

Three measurements, each against a baseline taken in the same run:

1. **Parallel sub-steps.** A planner's tool runs 8 sub-steps with ``run_steps`` (concurrency 8);
   each sub-step's model takes 50 ms per call (an ``asyncio.sleep``, as a network call would).
   Goal: the turn takes at most 1.5x the turn whose tool runs one such sub-step.
2. **Concurrent tools.** One response calls two ``@tool(concurrent=True)`` tools that each wait
   0.3 s. Goal: the turn takes at most 0.4 s (the same two tools without ``concurrent`` take 0.6 s,
   printed beside it).
3. **The cost of a run_step.** With an instant scripted model: a turn whose tool runs one sub-step
   (one model call) minus the same turn whose tool answers at once, next to a plain turn (one model
   call answering in text). Goal: at most 2x.

    python bench/compose.py [--turns 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from picoflow import Flow, FlowEngine, Step, tool
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel

MODEL_SECONDS = 0.05
TOOL_SECONDS = 0.3
FAN_OUT = 8


class Scout(Step):
    """Report on the district you are given, in one line."""


class Planner(Step):
    """Plan the trip with the scouts' reports."""

    @tool
    async def scout_all(self) -> str:
        """Send a scout to every district at once."""
        answers = await self.run_steps(
            [(Scout, f"district {n}") for n in range(FAN_OUT)], concurrency=FAN_OUT
        )
        return " ".join(answers)

    @tool
    async def scout_one(self) -> str:
        """Send one scout."""
        return str(await self.run_step(Scout, "district 0"))

    @tool
    async def answer_at_once(self) -> str:
        """The same tool without a sub-step (the baseline of a run_step's cost)."""
        return "district 0 is quiet"

    @tool(concurrent=True)
    async def weather(self) -> str:
        """Read the weather (slow, read-only)."""
        await asyncio.sleep(TOOL_SECONDS)
        return "sunny"

    @tool(concurrent=True)
    async def traffic(self) -> str:
        """Read the traffic (slow, read-only)."""
        await asyncio.sleep(TOOL_SECONDS)
        return "light"

    @tool
    async def weather_in_turn(self) -> str:
        """Read the weather, one call after the other."""
        await asyncio.sleep(TOOL_SECONDS)
        return "sunny"

    @tool
    async def traffic_in_turn(self) -> str:
        """Read the traffic, one call after the other."""
        await asyncio.sleep(TOOL_SECONDS)
        return "light"


class Trips(Flow):
    name = "trips"
    steps = [Planner, Scout]


def model(*, scout_delay: float) -> FunctionModel:
    """The planner calls the tools its message names, then answers; a scout answers after ``scout_delay``."""

    async def answer(request: ModelRequest) -> Any:
        if request.step == "Scout":
            if scout_delay:
                await asyncio.sleep(scout_delay)
            return f"{request.messages[0].content}: quiet."
        last = request.messages[-1]
        if last.role == "tool":
            return "Here is the plan."
        names = last.content.split()
        if names == ["plain"]:
            return "Hello."
        return [ToolCall(name, {}, f"call_{index}") for index, name in enumerate(names)]

    return FunctionModel(answer)


async def timed(engine: FlowEngine, message: str) -> float:
    start = time.perf_counter()
    result = await engine.run("trips", message)
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise RuntimeError(f"{message}: {result.error}")
    return elapsed


async def parallel_sub_steps(rounds: int) -> tuple[float, float]:
    engine = FlowEngine([Trips], model=model(scout_delay=MODEL_SECONDS))
    eight: list[float] = []
    one: list[float] = []
    await timed(engine, "scout_one")  # warm up
    for _ in range(rounds):
        eight.append(await timed(engine, "scout_all"))
        one.append(await timed(engine, "scout_one"))
    return statistics.median(eight), statistics.median(one)


async def concurrent_tools(rounds: int) -> tuple[float, float]:
    engine = FlowEngine([Trips], model=model(scout_delay=0))
    together = [await timed(engine, "weather traffic") for _ in range(rounds)]
    in_turn = [await timed(engine, "weather_in_turn traffic_in_turn") for _ in range(max(1, rounds // 2))]
    return statistics.median(together), statistics.median(in_turn)


async def run_step_cost(turns: int, warmup: int) -> dict[str, list[float]]:
    engine = FlowEngine([Trips], model=model(scout_delay=0))

    def turn(message: str) -> Callable[[], Awaitable[float]]:
        return lambda: timed(engine, message)

    runs = {
        "plain turn": turn("plain"),
        "tool with run_step": turn("scout_one"),
        "tool alone": turn("answer_at_once"),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    gc.collect()
    for index in range(turns + warmup):
        order = list(runs.items())
        if index % 2:
            order.reverse()
        for name, run in order:
            elapsed = await run()
            if index >= warmup:
                samples[name].append(elapsed * 1e6)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=2000, help="turns of each kind for the run_step cost")
    parser.add_argument("--rounds", type=int, default=5, help="timed turns of each kind for 1 and 2")
    args = parser.parse_args()

    eight, one = asyncio.run(parallel_sub_steps(args.rounds))
    ratio = eight / one
    print(f"1. {FAN_OUT} parallel sub-steps, {MODEL_SECONDS * 1000:.0f} ms a call (median of {args.rounds})")
    print(f"   one sub-step {one * 1000:7.1f} ms   {FAN_OUT} sub-steps {eight * 1000:7.1f} ms")
    print(f"   ratio {FAN_OUT} / one: {ratio:.2f}x (goal: <= 1.5x)  {'ok' if ratio <= 1.5 else 'MISSED'}")

    together, in_turn = asyncio.run(concurrent_tools(args.rounds))
    print(f"2. two {TOOL_SECONDS:g} s tools in one response (median of {args.rounds})")
    print(f"   concurrent=True {together:6.3f} s   one after the other {in_turn:6.3f} s")
    print(f"   goal: concurrent <= 0.4 s  {'ok' if together <= 0.4 else 'MISSED'}")

    samples = asyncio.run(run_step_cost(args.turns, warmup=max(50, args.turns // 10)))
    p50 = {name: statistics.median(values) for name, values in samples.items()}
    cost = p50["tool with run_step"] - p50["tool alone"]
    print(f"3. the cost of a run_step, instant model, {args.turns} turns of each (p50, µs)")
    for name, value in p50.items():
        print(f"   {name:<20} {value:8.1f}")
    share = cost / p50["plain turn"]
    verdict = "ok" if share <= 2 else "MISSED"
    print(f"   run_step = {cost:.1f} µs = {share:.2f}x a plain turn (goal: <= 2x)  {verdict}")


if __name__ == "__main__":
    main()
