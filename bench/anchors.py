"""picoflow beside the agent frameworks people reach for, on the same turn: LangGraph, PydanticAI and
the OpenAI Agents SDK, with the hand-written loop of ``bench/overhead.py`` as the floor.

The workload is ``bench/overhead.py``'s: the model calls ``search_orders`` with a date it cannot
read, is told what is wrong, calls it again correctly, then answers — 3 model calls and 1 tool run
a turn. Each side is written as its own documentation shows, with its own stand-in for the model
(no network anywhere):

- picoflow: a ``Step`` with an ``@tool`` method, ``FlowEngine`` with its ``MemoryStore``, a
  ``FunctionModel``;
- LangGraph: a ``StateGraph`` over ``MessagesState`` (model node, ``ToolNode``, ``tools_condition``)
  compiled with an ``InMemorySaver`` checkpointer, one thread per conversation, and a
  ``BaseChatModel`` that plays the answers;
- PydanticAI: an ``Agent`` with an ``@agent.tool`` and its ``FunctionModel``, the conversation kept
  as ``message_history``;
- OpenAI Agents SDK: an ``Agent`` with a ``@function_tool`` and a ``Model`` that plays the answers,
  ``Runner.run`` with the conversation kept as ``to_input_list()``, tracing turned off;
- the hand-written loop: plain dicts, a Pydantic model for the arguments (``bench/overhead.py``).

Every stand-in model answers from the conversation it is sent (after the user's message: the call
with the bad date; after one tool result: the corrected call; after two: the answer), so sessions
may run concurrently. Model and tool are ``async`` everywhere: some frameworks hand a plain
function to a worker thread, and none should pay for that here. The tool's customer comes from
each framework's own context (deps, ``RunContext``, ``RunnableConfig``), never from the model.

Three measurements, all in one run:

1. per-turn time, p50 and p90, each turn a new conversation, the sides taking turns by blocks;
2. turns per second with ``--sessions`` conversations at once (each of ``--concurrent-turns`` turns;
   every model call yields to the event loop once, as a network call would);
3. growth: per-turn time over a ``--session-turns``-turn conversation, its last turn against its first.

    pip install -r bench/requirements-anchors.txt   # in a venv of its own, beside picoflow
    python bench/anchors.py [--turns 500] [--sessions 50] [--concurrent-turns 8] [--session-turns 20]

The rival frameworks are not picoflow's dependencies: a side whose package is missing is skipped
with a one-line message naming the requirements file.
"""

import argparse
import asyncio
import gc
import importlib.util
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import date
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

# No ``from __future__ import annotations``: the frameworks read the tools' annotations, which name
# types imported inside the functions that define the tools.

BENCH = Path(__file__).resolve().parent
# bench/ holds an http.py, which would shadow the standard library's once this folder is first on
# sys.path (the frameworks' HTTP clients import it even when nothing goes over the network).
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]

from pydantic import Field  # noqa: E402

from picoflow import Caller, FlowEngine  # noqa: E402
from picoflow.messages import ModelRequest  # noqa: E402
from picoflow.models import FunctionModel  # noqa: E402


def load_overhead() -> ModuleType:
    """``bench/overhead.py``, whose workload, flow and hand-written loop this benchmark shares."""
    spec = importlib.util.spec_from_file_location("overhead", BENCH / "overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["overhead"] = module
    spec.loader.exec_module(module)
    return module


overhead = load_overhead()
QUESTION: str = overhead.QUESTION
SCRIPT: list[Any] = overhead.SCRIPT
SYSTEM: str = overhead.SYSTEM
HandModel = overhead.HandModel
find_orders = overhead.find_orders
hand_loop = overhead.hand_loop
percentile = overhead.percentile
REQUIREMENTS = "bench/requirements-anchors.txt"
ANSWER = SCRIPT[2]
assert isinstance(ANSWER, str)
BAD_ARGS: dict[str, Any] = {"since": "October 1st", "status": "refunded"}
GOOD_ARGS: dict[str, Any] = {"since": "2026-10-01", "status": "refunded"}
Status = Literal["pending", "shipped", "refunded"]
Limit = Annotated[int, Field(ge=1, le=50)]


class Yielding:
    """Whether every stand-in model yields to the event loop once per call (the concurrent runs)."""

    on = False


async def model_latency() -> None:
    if Yielding.on:
        await asyncio.sleep(0)


def stage(tool_results_since_user: int) -> int:
    """Which of the three answers comes next: 0 the bad call, 1 the corrected call, 2 the answer."""
    return min(tool_results_since_user, 2)


def counted(kinds: Iterable[str]) -> int:
    """Tool results after the newest user message, reading the conversation's kinds from the end."""
    results = 0
    for kind in kinds:
        if kind == "user":
            break
        if kind == "tool":
            results += 1
    return stage(results)


TurnFn = Callable[[str | None], Awaitable[tuple[str, str]]]
"""One turn of a side: of a new conversation (None) or of the one named; returns (reply, name)."""


# --- the hand-written loop -------------------------------------------------------------------------


class HandStand(HandModel):
    """``bench/overhead.py``'s stand-in client, answering from the conversation it is sent."""

    def __init__(self) -> None:
        super().__init__(overhead.wire_script(SCRIPT))
        self.calls = 0

    async def create(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        await model_latency()
        self.requests.append({"messages": messages, "tools": tools})
        answer = self.answers[counted(message["role"] for message in reversed(messages))]
        calls = answer["tool_calls"]
        if calls:
            self.calls += 1
            calls = [{**call, "id": f"call_{self.calls}_{i}"} for i, call in enumerate(calls)]
        return {**answer, "tool_calls": calls}


def hand_side() -> TurnFn:
    model = HandStand()
    sessions: dict[int, list[dict[str, Any]]] = {}

    async def turn(session: str | None) -> tuple[str, str]:
        key = None if session is None else int(session)
        reply = await hand_loop(model, QUESTION, "C-1", sessions, key)
        return reply, str(len(sessions) - 1 if key is None else key)

    return turn


# --- picoflow -------------------------------------------------------------------------------------


async def picoflow_answer(request: ModelRequest) -> Any:
    await model_latency()
    return SCRIPT[counted(message.role for message in reversed(request.messages))]


def picoflow_side() -> TurnFn:
    engine = FlowEngine([overhead.SupportFlow], model=FunctionModel(picoflow_answer))
    caller = Caller(principal="C-1")

    async def turn(session: str | None) -> tuple[str, str]:
        result = await engine.run("support", QUESTION, session, caller=caller)
        if not result.ok:
            raise RuntimeError(result.error)
        return result.message, result.session_id

    return turn


# --- LangGraph ------------------------------------------------------------------------------------


def langgraph_side() -> TurnFn:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    class ScriptedChat(BaseChatModel):
        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            raise NotImplementedError("the graph runs asynchronously")

        async def _agenerate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            await model_latency()
            kinds = ("user" if m.type == "human" else m.type for m in reversed(messages))
            which = counted(kinds)
            if which == 2:
                message = AIMessage(ANSWER)
            else:
                self.calls += 1
                args = BAD_ARGS if which == 0 else GOOD_ARGS
                message = AIMessage(
                    "", tool_calls=[{"name": "search_orders", "args": args, "id": f"c{self.calls}"}]
                )
            return ChatResult(generations=[ChatGeneration(message=message)])

    @tool
    async def search_orders(
        since: date, config: RunnableConfig, status: Status | None = None, limit: Limit = 10
    ) -> list[dict[str, Any]]:
        """Search the customer's orders created on or after `since`."""
        return find_orders(config["configurable"]["customer"], since, status, limit)

    model = ScriptedChat().bind_tools([search_orders])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke([SystemMessage(SYSTEM), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([search_orders]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=InMemorySaver())
    threads = 0

    async def turn(session: str | None) -> tuple[str, str]:
        nonlocal threads
        if session is None:
            threads += 1
            session = f"thread-{threads}"
        config: RunnableConfig = {"configurable": {"thread_id": session, "customer": "C-1"}}
        state = await app.ainvoke({"messages": [{"role": "user", "content": QUESTION}]}, config)
        return str(state["messages"][-1].content), session

    return turn


# --- PydanticAI -----------------------------------------------------------------------------------


def pydantic_ai_side() -> TurnFn:
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo
    from pydantic_ai.models.function import FunctionModel as PydanticFunctionModel

    def kinds(messages: list[ModelMessage]) -> Iterable[str]:
        for message in reversed(messages):
            for part in reversed(message.parts):
                kind = part.part_kind
                yield (
                    "user"
                    if kind == "user-prompt"
                    else "tool"
                    if kind in ("tool-return", "retry-prompt")
                    else kind
                )

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await model_latency()
        which = counted(kinds(messages))
        if which == 2:
            return ModelResponse(parts=[TextPart(ANSWER)])
        return ModelResponse(parts=[ToolCallPart("search_orders", BAD_ARGS if which == 0 else GOOD_ARGS)])

    agent = Agent(PydanticFunctionModel(answer), deps_type=str, instructions=SYSTEM)

    @agent.tool
    async def search_orders(
        ctx: RunContext[str], since: date, status: Status | None = None, limit: Limit = 10
    ) -> list[dict[str, Any]]:
        """Search the customer's orders created on or after `since`."""
        return find_orders(ctx.deps, since, status, limit)

    histories: dict[str, list[ModelMessage]] = {}

    async def turn(session: str | None) -> tuple[str, str]:
        history = None if session is None else histories[session]
        result = await agent.run(QUESTION, deps="C-1", message_history=history)
        if session is None:
            session = str(len(histories))
        histories[session] = result.all_messages()
        return result.output, session

    return turn


# --- OpenAI Agents SDK ----------------------------------------------------------------------------


def openai_agents_side() -> TurnFn:
    from agents import Agent, RunContextWrapper, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)  # its default exporter would send traces over the network

    def kinds(items: Any) -> Iterable[str]:
        if isinstance(items, str):
            return ("user",)
        return (
            "user"
            if item.get("role") == "user"
            else "tool"
            if item.get("type") == "function_call_output"
            else "other"
            for item in reversed(items)
        )

    class ScriptedModel(Model):
        calls = 0

        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            await model_latency()
            which = counted(kinds(input))
            if which == 2:
                text = ResponseOutputText(type="output_text", text=ANSWER, annotations=[])
                output: Any = ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed", content=[text]
                )
            else:
                ScriptedModel.calls += 1
                output = ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"c{ScriptedModel.calls}",
                    name="search_orders",
                    arguments=json.dumps(BAD_ARGS if which == 0 else GOOD_ARGS),
                )
            return ModelResponse(output=[output], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the runs are not streamed")

    @function_tool
    async def search_orders(
        ctx: RunContextWrapper[str], since: date, status: Status | None = None, limit: Limit = 10
    ) -> list[dict[str, Any]]:
        """Search the customer's orders created on or after `since`."""
        return find_orders(ctx.context, since, status, limit)

    agent = Agent[str](name="support", instructions=SYSTEM, model=ScriptedModel(), tools=[search_orders])
    histories: dict[str, list[Any]] = {}

    async def turn(session: str | None) -> tuple[str, str]:
        question = {"role": "user", "content": QUESTION}
        given: Any = [question] if session is None else [*histories[session], question]
        result = await Runner.run(agent, given, context="C-1")
        if session is None:
            session = str(len(histories))
        histories[session] = result.to_input_list()
        return str(result.final_output), session

    return turn


# --- measurement ----------------------------------------------------------------------------------

HAND = "hand-written loop"
SIDES: dict[str, tuple[Callable[[], TurnFn], str | None]] = {
    HAND: (hand_side, None),
    "picoflow": (picoflow_side, "picoflow-ai"),
    "PydanticAI": (pydantic_ai_side, "pydantic-ai-slim"),
    "OpenAI Agents SDK": (openai_agents_side, "openai-agents"),
    "LangGraph": (langgraph_side, "langgraph"),
}


def build_sides() -> tuple[dict[str, TurnFn], dict[str, str]]:
    """Every side whose framework is installed, and its version."""
    sides: dict[str, TurnFn] = {}
    versions: dict[str, str] = {}
    for name, (build, distribution) in SIDES.items():
        try:
            sides[name] = build()
        except ImportError as error:
            print(f"{name} skipped ({error.name} is not installed): pip install -r {REQUIREMENTS}")
            continue
        if distribution is not None:
            try:
                versions[name] = metadata.version(distribution)
            except metadata.PackageNotFoundError:
                versions[name] = "from source"
    return sides, versions


def settle() -> None:
    """Before a side runs: collect the garbage so far, then freeze what survives, so that no side's
    collections scan the objects the others keep (their checkpoints and histories)."""
    gc.collect()
    gc.freeze()


async def timed(turn: TurnFn, session: str | None) -> tuple[float, str]:
    start = time.perf_counter_ns()
    reply, session = await turn(session)
    elapsed = (time.perf_counter_ns() - start) / 1000
    if reply != ANSWER:
        raise AssertionError(f"unexpected reply {reply!r}")
    return elapsed, session


async def per_turn(sides: dict[str, TurnFn], turns: int, block: int) -> dict[str, list[float]]:
    """Each turn a new conversation. The sides take turns by blocks of ``block`` turns, in
    alternating order, the first block of each untimed: a framework that allocates a thousand
    times more than another would otherwise leave it a cold cache and its garbage to collect."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(1 + -(-turns // block)):
        order = list(sides.items()) if index % 2 == 0 else list(reversed(sides.items()))
        for name, turn in order:
            settle()
            for _ in range(block):
                elapsed, _ = await timed(turn, None)
                if index:
                    samples[name].append(elapsed)
    return samples


async def concurrent(turn: TurnFn, sessions: int, turns_each: int) -> float:
    """Turns per second with ``sessions`` conversations running at once, ``turns_each`` turns each."""

    async def conversation() -> None:
        session: str | None = None
        for _ in range(turns_each):
            _, session = await timed(turn, session)

    Yielding.on = True
    try:
        settle()
        start = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for _ in range(sessions):
                group.create_task(conversation())
        return sessions * turns_each / (time.perf_counter() - start)
    finally:
        Yielding.on = False


async def throughput(
    sides: dict[str, TurnFn], sessions: int, turns_each: int, rounds: int
) -> dict[str, float]:
    """The median of ``rounds`` concurrent runs per side, the sides alternating round by round."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(rounds):
        order = list(sides.items()) if index % 2 == 0 else list(reversed(sides.items()))
        for name, turn in order:
            rates[name].append(await concurrent(turn, sessions, turns_each))
    return {name: statistics.median(values) for name, values in rates.items()}


async def growth(sides: dict[str, TurnFn], conversations: int, length: int) -> dict[str, list[float]]:
    """The median time of each turn of a ``length``-turn conversation, over ``conversations``; each
    side runs its conversations one after the other, after one untimed, so that its first turns
    are as warm as its last."""
    medians: dict[str, list[float]] = {}
    for name, turn in sides.items():
        times: list[list[float]] = [[] for _ in range(length)]
        settle()
        for index in range(1 + conversations):
            session: str | None = None
            for number in range(length):
                elapsed, session = await timed(turn, session)
                if index:
                    times[number].append(elapsed)
        medians[name] = [statistics.median(values) for values in times]
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=500, help="timed turns per side (new conversations)")
    parser.add_argument("--block", type=int, default=50, help="turns a side runs before the next takes over")
    parser.add_argument("--sessions", type=int, default=50, help="conversations at once")
    parser.add_argument(
        "--concurrent-turns", type=int, default=8, help="turns of each concurrent conversation"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="concurrent runs per side (the median is shown)"
    )
    parser.add_argument("--session-turns", type=int, default=20, help="turns of the growth conversation")
    parser.add_argument("--conversations", type=int, default=15, help="growth conversations per side")
    args = parser.parse_args()

    sides, versions = build_sides()
    samples = asyncio.run(per_turn(sides, args.turns, args.block))
    rates = asyncio.run(throughput(sides, args.sessions, args.concurrent_turns, args.rounds))
    grown = asyncio.run(growth(sides, args.conversations, args.session_turns))

    last = args.session_turns
    print(
        f"\nthe overhead workload (3 model calls, 1 tool run a turn); Python {platform.python_version()}, "
        f"{args.turns} turns per side"
    )
    header = (
        f"{'':<20}{'p50 µs':>9}{'p90 µs':>9}{'× hand':>8}{'× picoflow':>11}{'turns/s':>10}"
        f"{f'turn {last} µs':>13}{f'turn {last}/1':>11}"
    )
    print(header)
    hand = percentile(samples[HAND], 0.5)
    pico = percentile(samples["picoflow"], 0.5)
    for name, values in samples.items():
        p50 = percentile(values, 0.5)
        series = grown[name]
        print(
            f"{name:<20}{p50:>9.0f}{percentile(values, 0.9):>9.0f}{p50 / hand:>7.1f}x{p50 / pico:>10.1f}x"
            f"{rates[name]:>10.0f}{series[-1]:>13.0f}{series[-1] / series[0]:>10.2f}x"
        )
    print(
        f"turns/s: {args.sessions} conversations at once, {args.concurrent_turns} turns each "
        f"(median of {args.rounds} runs); turn {last} µs: median over {args.conversations} "
        f"conversations of {last} turns"
    )
    print("versions: " + ", ".join(f"{name} {version}" for name, version in versions.items()))


if __name__ == "__main__":
    main()
