"""The 14-turn hotel conversation with a scripted model, then the guest's approval of the booking
it chose: what each turn costs.

For every turn: the model calls it made, the characters sent to the model (system prompt,
messages and tool schemas of every request), the largest single request and how much of it was
memory (the step's messages), the size of the whole transcript so far, and the wall time of the
turn in-process (median over ``--repeat`` runs; framework overhead only, the model answers at once).

Per-step memory is what keeps the requests flat: Present and Compare start clean on every visit
and never carry Explore's questions and answers, so turn 14 sends less than turn 2 did. The hotel
lists, the comparison tables and the booking confirmation are written by code (``direct_to`` and
``direct``): a turn that shows one makes only the model call that picked the tool. The booking the
last message chooses waits for the guest's approval, a decision of its own (``FlowEngine.decide``)
that calls no model.

    python bench/hotel.py [--repeat 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from dataclasses import dataclass, field

from picoflow import FlowEngine
from picoflow.messages import ModelRequest
from picoflow.models import ScriptedModel
from picoflow.sessions import MemoryStore
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel.scripted import CONVERSATION, CURRENT_DATE, model_script

APPROVE = "[the guest approves the booking]"


@dataclass
class TurnFigures:
    user: str
    steps: list[str] = field(default_factory=list)
    model_calls: int = 0
    chars_sent: int = 0
    largest_request: int = 0
    memory_in_largest: int = 0
    transcript: int = 0
    wall_ms: list[float] = field(default_factory=list)


def memory_part(request: ModelRequest) -> int:
    """Characters of a request that come from the step's memory (messages and their tool calls)."""
    tools = sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in request.tools)
    return request.text_size() - len(request.system) - tools


async def play(figures: list[TurnFigures] | None) -> list[float]:
    """One whole conversation; fills ``figures`` (when given) and returns each turn's wall time in ms."""
    model = ScriptedModel(model_script())
    engine = FlowEngine([HotelFlow], store=MemoryStore(), model=model)
    session_id: str | None = None
    times: list[float] = []
    said = [turn.user for turn in CONVERSATION] + [APPROVE]
    waiting = ""  # the approval the last turn left pending
    for number, text in enumerate(said):
        before = len(model.requests)
        started = time.perf_counter()
        if text == APPROVE:
            result = await engine.decide(session_id or "", waiting, "approve")
        else:
            result = await engine.run("hotel", text, session_id)
        times.append((time.perf_counter() - started) * 1000)
        if not result.ok:
            raise SystemExit(f"turn {number + 1} failed: {result.error}")
        session_id = result.session_id
        waiting = result.pending[0].id if result.pending else ""
        if figures is not None:
            requests = model.requests[before:]
            figure = figures[number]
            figure.model_calls = len(requests)
            figure.chars_sent = sum(request.text_size() for request in requests)
            figure.largest_request = max((request.text_size() for request in requests), default=0)
            figure.steps = list(dict.fromkeys(request.step or "?" for request in requests))
            if requests:
                largest = max(requests, key=lambda request: request.text_size())
                figure.memory_in_largest = memory_part(largest)
            transcript = await engine.store.transcript(session_id or "")
            figure.transcript = sum(
                len(message.content)
                + sum(len(call.name) + len(call.args_json()) for call in message.tool_calls)
                for message in transcript
            )
    return times


def table(figures: list[TurnFigures]) -> str:
    header = (
        f"{'turn':>4}  {'user says':<32} {'steps (model called)':<24} {'calls':>5} {'chars sent':>10} "
        f"{'largest':>8} {'of it memory':>12} {'transcript':>10} {'wall ms':>8}"
    )
    lines = [header, "-" * len(header)]
    for number, figure in enumerate(figures, start=1):
        lines.append(
            f"{number:>4}  {figure.user[:32]:<32} {' > '.join(figure.steps)[:24]:<24} "
            f"{figure.model_calls:>5} {figure.chars_sent:>10,} {figure.largest_request:>8,} "
            f"{figure.memory_in_largest:>12,} {figure.transcript:>10,} "
            f"{statistics.median(figure.wall_ms):>8.2f}"
        )
    lines.append("-" * len(header))
    total_ms = sum(statistics.median(figure.wall_ms) for figure in figures)
    lines.append(
        f"{'all':>4}  {'':<32} {'':<24} {sum(f.model_calls for f in figures):>5} "
        f"{sum(f.chars_sent for f in figures):>10,} {max(f.largest_request for f in figures):>8,} "
        f"{max(f.memory_in_largest for f in figures):>12,} {figures[-1].transcript:>10,} {total_ms:>8.2f}"
    )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=50, help="conversations to time (default 50)")
    args = parser.parse_args()
    os.environ["HOTEL_FLOW_CURRENT_DATE"] = CURRENT_DATE
    figures = [TurnFigures(turn.user) for turn in CONVERSATION] + [TurnFigures(APPROVE)]
    await play(figures)
    await play(None)  # warm-up: imports, schema caches, prompt files
    conversation_ms: list[float] = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        times = await play(None)
        conversation_ms.append((time.perf_counter() - started) * 1000)
        for figure, elapsed in zip(figures, times, strict=True):
            figure.wall_ms.append(elapsed)
    print(
        f"HotelFlow, 14-turn scripted conversation and an approval (today = {CURRENT_DATE}), "
        f"{args.repeat} runs\n"
    )
    print(table(figures))
    print(
        f"\nwhole conversation: median {statistics.median(conversation_ms):.1f} ms, "
        f"min {min(conversation_ms):.1f} ms (14 turns and a decision, MemoryStore, scripted model)"
    )
    print(
        "chars sent = every request of the turn (system prompt + messages + tool schemas); largest = the "
        "biggest of them;\nof it memory = its messages (the rest is system prompt and tool schemas); "
        "transcript = every message so far, all steps."
    )


if __name__ == "__main__":
    asyncio.run(main())
