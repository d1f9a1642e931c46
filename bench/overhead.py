"""Per-turn orchestration overhead of picoflow next to a hand-written minimal loop.

The workload of one user turn: the model sends a tool call with a bad argument, then a corrected
call, then a final answer — 3 model calls and 1 tool run. picoflow plays the answers with its
``ScriptedModel``; the hand loop is what a user writes without a framework against a
chat-completions style API — plain dicts for the messages and the tool schema, a Pydantic model
for the tool's arguments, a stand-in client that plays the same answers and keeps every request —
and uses none of picoflow's types, so a change to them cannot move the baseline. Both run in the
same process and event loop, interleaved turn by turn so that machine noise hits both alike.
picoflow additionally does everything a framework must (session create + compare-and-swap save in
a ``MemoryStore``, per-step memory, warnings, usage, hooks); the hand loop keeps a message list in
a dict.

    python bench/overhead.py [--turns 3000] [--context-window 8192] [--old-baseline] [--no-sync]

A third side, "picoflow + timeline", is the same engine recording each turn's timeline
(``FlowEngine(timeline=TimelineSettings())``, kept in its ``MemoryStore``): the cost of recording.
``--old-baseline`` adds the hand loop as it was before, built on picoflow's ``Message``,
``ToolCall``, ``ModelRequest`` and ``ScriptedModel``, to compare the two baselines in one run.

A second measurement compares ``engine.run_sync`` (code without an event loop) with ``await
engine.run`` on the same workload, in alternating blocks of turns.

``--context-window`` gives picoflow's model a window (and 512 tokens of output reserve), as the
catalog does for real models: every request is then estimated and fitted before it is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from picoflow import Caller, Flow, FlowEngine, RunContext, Step, tool
from picoflow.messages import Message, ModelRequest, ToolCall, ToolDefinition
from picoflow.models import ScriptedModel
from picoflow.timeline import TimelineSettings

SYSTEM = "You answer questions about the signed-in customer's orders."
ORDERS = [
    {"id": 2, "customer": "C-1", "status": "refunded", "created": "2026-10-03"},
    {"id": 3, "customer": "C-1", "status": "refunded", "created": "2026-10-20"},
    {"id": 4, "customer": "C-2", "status": "refunded", "created": "2026-10-21"},
]
SCRIPT = [
    ToolCall("search_orders", {"since": "October 1st", "status": "refunded"}),
    ToolCall("search_orders", {"since": "2026-10-01", "status": "refunded"}),
    "Two orders were refunded since October 1st: 3 and 2.",
]


def find_orders(customer: str, since: date, status: str | None, limit: int) -> list[dict[str, Any]]:
    rows = [
        {"id": o["id"], "status": o["status"]}
        for o in ORDERS
        if o["customer"] == customer
        and o["created"] >= since.isoformat()
        and (status is None or o["status"] == status)
    ]
    return rows[:limit]


# --- picoflow ---------------------------------------------------------------------------------


class Support(Step):
    """You answer questions about the signed-in customer's orders."""

    @tool
    def search_orders(
        self,
        since: date,
        ctx: RunContext,
        status: Literal["pending", "shipped", "refunded"] | None = None,
        limit: int = Field(10, ge=1, le=50),
    ) -> list[dict[str, Any]]:
        """Search the customer's orders created on or after `since`."""
        return find_orders(ctx.customer_id or "", since, status, limit)


class SupportFlow(Flow):
    name = "support"
    steps = [Support]


# --- the hand-written loop ----------------------------------------------------------------------
# What a user writes without a framework, against a chat-completions style API: plain dicts for
# the messages and the tool schema, a Pydantic model for the tool's arguments, nothing of picoflow's.


class OrderQuery(BaseModel):
    since: date
    status: Literal["pending", "shipped", "refunded"] | None = None
    limit: int = Field(10, ge=1, le=50)


HAND_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_orders",
            "description": "Search the customer's orders created on or after `since`.",
            "parameters": OrderQuery.model_json_schema(),
        },
    }
]


def wire_script(script: list[Any]) -> list[dict[str, Any]]:
    """The scripted answers as a chat-completions API sends them: arguments as JSON text."""
    answers: list[dict[str, Any]] = []
    for item in script:
        if isinstance(item, str):
            answers.append({"role": "assistant", "content": item, "tool_calls": None})
        else:
            call = {"type": "function", "function": {"name": item.name, "arguments": json.dumps(item.args)}}
            answers.append({"role": "assistant", "content": None, "tool_calls": [call]})
    return answers


class HandModel:
    """The hand loop's stand-in for a chat-completions client: it plays the script and, as
    ``ScriptedModel`` does, keeps every request and numbers the calls."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.requests: list[dict[str, Any]] = []
        self.played = 0

    async def create(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests.append({"messages": messages, "tools": tools})
        answer = self.answers[self.played]
        self.played += 1
        calls = answer["tool_calls"]
        if calls:
            calls = [{**call, "id": f"call_{self.played}_{i}"} for i, call in enumerate(calls)]
        return {**answer, "tool_calls": calls}


async def hand_loop(
    model: HandModel,
    text: str,
    customer: str,
    sessions: dict[int, list[dict[str, Any]]],
    session: int | None = None,
) -> str:
    """One turn: of a new conversation, kept in ``sessions`` under the next number, or of
    conversation ``session``."""
    if session is None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        sessions[len(sessions)] = messages
    else:
        messages = sessions[session]
    messages.append({"role": "user", "content": text})
    for _ in range(8):
        answer = await model.create(list(messages), HAND_TOOLS)
        messages.append(answer)
        if not answer["tool_calls"]:
            return str(answer["content"])
        for call in answer["tool_calls"]:
            function = call["function"]
            if function["name"] != "search_orders":
                content = f"unknown tool {function['name']}"
            else:
                try:
                    query = OrderQuery.model_validate_json(function["arguments"])
                except ValidationError as error:
                    problems = "; ".join(
                        f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()
                    )
                    content = f"Invalid arguments: {problems}"
                else:
                    content = json.dumps(find_orders(customer, query.since, query.status, query.limit))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    raise RuntimeError("no answer")


# --- the old baseline: the same loop on picoflow's own types (--old-baseline) -------------------
# It shared ``Message``, ``ToolCall``, ``ModelRequest`` and ``ScriptedModel`` with picoflow, so a
# change to them moved both sides; kept to compare the two baselines in one run.

OLD_TOOLS = [
    ToolDefinition("search_orders", "Search the customer's orders.", OrderQuery.model_json_schema()),
]


async def old_hand_loop(
    model: ScriptedModel, text: str, customer: str, sessions: dict[int, list[Message]]
) -> str:
    messages = [Message.user(text)]
    for _ in range(8):
        response = await model.request(ModelRequest(system=SYSTEM, messages=list(messages), tools=OLD_TOOLS))
        messages.append(Message.assistant(response.text, response.tool_calls))
        if not response.tool_calls:
            sessions[len(sessions)] = messages
            return response.text
        for call in response.tool_calls:
            if call.name != "search_orders" or isinstance(call.args, str):
                messages.append(Message.tool(call, f"unknown tool {call.name}", is_error=True))
                continue
            try:
                query = OrderQuery.model_validate(call.args)
            except ValidationError as error:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
                messages.append(Message.tool(call, f"Invalid arguments: {problems}", is_error=True))
                continue
            rows = find_orders(customer, query.since, query.status, query.limit)
            messages.append(Message.tool(call, json.dumps(rows)))
    raise RuntimeError("no answer")


# --- measurement ---------------------------------------------------------------------------------


QUESTION = "Which orders were refunded since October 1st?"
HAND = "hand-written loop"
OLD_HAND = "hand loop on picoflow types (old)"


async def measure(
    turns: int, warmup: int, window: int | None = None, old_baseline: bool = False
) -> dict[str, list[float]]:
    total = turns + warmup
    pico_model = ScriptedModel(SCRIPT * total, context_window=window, output_reserve=512 if window else 0)
    engine = FlowEngine([SupportFlow], model=pico_model)
    recorded_model = ScriptedModel(SCRIPT * total, context_window=window, output_reserve=512 if window else 0)
    recording = FlowEngine([SupportFlow], model=recorded_model, timeline=TimelineSettings())
    caller = Caller(principal="C-1")
    hand_model = HandModel(wire_script(SCRIPT * total))
    hand_sessions: dict[int, list[dict[str, Any]]] = {}
    old_model = ScriptedModel(SCRIPT * total)
    old_sessions: dict[int, list[Message]] = {}

    async def pico() -> str:
        result = await engine.run("support", QUESTION, caller=caller)
        if not result.ok:
            raise RuntimeError(result.error)
        return result.message

    async def recorded() -> str:
        result = await recording.run("support", QUESTION, caller=caller)
        if not result.ok:
            raise RuntimeError(result.error)
        return result.message

    async def hand() -> str:
        return await hand_loop(hand_model, QUESTION, "C-1", hand_sessions)

    async def old_hand() -> str:
        return await old_hand_loop(old_model, QUESTION, "C-1", old_sessions)

    runs: dict[str, Callable[[], Awaitable[str]]] = {
        "picoflow": pico,
        "picoflow + timeline": recorded,
        HAND: hand,
    }
    if old_baseline:
        runs[OLD_HAND] = old_hand
    samples: dict[str, list[float]] = {name: [] for name in runs}
    gc.collect()
    for index in range(total):
        order = list(runs.items()) if index % 2 == 0 else list(reversed(runs.items()))
        for name, run in order:
            start = time.perf_counter_ns()
            reply = await run()
            elapsed = (time.perf_counter_ns() - start) / 1000
            assert reply == SCRIPT[2]
            if index >= warmup:
                samples[name].append(elapsed)
    return samples


def measure_sync(turns: int, block: int = 100) -> dict[str, list[float]]:
    """Per-turn times of ``run_sync`` and of ``await run``, alternating blocks of ``block`` turns."""
    engine = FlowEngine([SupportFlow], model=ScriptedModel(SCRIPT * (2 * turns + 2 * block)))
    caller = Caller(principal="C-1")
    question = "Which orders were refunded since October 1st?"
    samples: dict[str, list[float]] = {"run_sync": [], "await run": []}

    async def async_block(count: int) -> list[float]:
        times = []
        for _ in range(count):
            start = time.perf_counter_ns()
            result = await engine.run("support", question, caller=caller)
            times.append((time.perf_counter_ns() - start) / 1000)
            assert result.ok
        return times

    # Warm both paths (the sync path creates its thread's loop on the first call).
    engine.run_sync("support", question, caller=caller)
    runner = asyncio.Runner()
    runner.run(async_block(block))
    gc.collect()
    done = 0
    while done < turns:
        count = min(block, turns - done)
        for _ in range(count):
            start = time.perf_counter_ns()
            result = engine.run_sync("support", question, caller=caller)
            samples["run_sync"].append((time.perf_counter_ns() - start) / 1000)
            assert result.ok
        samples["await run"].extend(runner.run(async_block(count)))
        done += count
    runner.close()
    return samples


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--context-window", type=int, default=None, help="fit requests to this window")
    parser.add_argument(
        "--old-baseline", action="store_true", help="also time the old hand loop built on picoflow's types"
    )
    parser.add_argument("--no-sync", action="store_true", help="skip the run_sync measurement")
    args = parser.parse_args()
    samples = asyncio.run(measure(args.turns, args.warmup, args.context_window, args.old_baseline))
    window = f", requests fitted to {args.context_window:,} tokens" if args.context_window else ""
    print(f"per-turn time over {args.turns} turns (3 model calls, 1 tool run; µs){window}")
    print(f"{'':<36}{'p50':>10}{'p99':>10}{'mean':>10}")
    for name, values in samples.items():
        print(
            f"{name:<36}{percentile(values, 0.5):>10.1f}{percentile(values, 0.99):>10.1f}"
            f"{statistics.mean(values):>10.1f}"
        )
    pico = samples["picoflow"]
    for baseline in (HAND, OLD_HAND):
        if baseline in samples:
            base = samples[baseline]
            print(
                f"ratio picoflow / {baseline}: p50 {percentile(pico, 0.5) / percentile(base, 0.5):.2f}x, "
                f"p99 {percentile(pico, 0.99) / percentile(base, 0.99):.2f}x"
                + (" (goal: <= 2.5x)" if baseline == HAND else "")
            )
    timed = samples["picoflow + timeline"]
    print(
        f"ratio with timeline / without: p50 {percentile(timed, 0.5) / percentile(pico, 0.5):.2f}x, "
        f"mean {statistics.mean(timed) / statistics.mean(pico):.2f}x (goal: <= 1.10x)"
    )
    if args.no_sync:
        return
    sync = measure_sync(args.turns)
    print(f"\nsync vs async turn over {args.turns} turns each (µs)")
    print(f"{'':<36}{'p50':>10}{'p99':>10}{'mean':>10}")
    for name, values in sync.items():
        print(
            f"{name:<36}{percentile(values, 0.5):>10.1f}{percentile(values, 0.99):>10.1f}"
            f"{statistics.mean(values):>10.1f}"
        )
    ratio = percentile(sync["run_sync"], 0.5) / percentile(sync["await run"], 0.5)
    print(f"ratio run_sync / await run: p50 {ratio:.2f}x (goal: <= 1.3x)")


if __name__ == "__main__":
    main()
