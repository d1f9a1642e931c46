"""Speed of the embedded local model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M on llama.cpp, CPU).

Measures, on this machine:

* load: fetching (first run only), verifying the sha256 and loading the GGUF file;
* prompt and generation throughput (tokens/s, as llama.cpp times them) of a plain answer;
* one tool-calling model call: the schema-constrained answer that proposes ``search_books``;
* one whole tool-calling turn through ``FlowEngine``: tool call, tool run, step change, final answer.

Each measured case runs ``--runs`` times with a different user message, so the prompt cache only
helps with the shared system prompt, as in a real conversation. Threads follow the machine load
(1 when busy, 2 otherwise) unless ``PICOFLOW_LOCAL_THREADS`` is set.

    python bench/local_model.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

from pydantic import Field

from picoflow import Flow, FlowEngine, Step, go, tool
from picoflow.messages import Message, ModelRequest, ToolDefinition
from picoflow.models.local import LocalModel, load_engine
from picoflow.outcomes import Outcome

CATALOG = [
    {"title": "Moby-Dick", "author": "Herman Melville", "topic": "whales"},
    {"title": "Leviathan", "author": "Philip Hoare", "topic": "whales"},
    {"title": "Dune", "author": "Frank Herbert", "topic": "desert"},
    {"title": "The Old Man and the Sea", "author": "Ernest Hemingway", "topic": "fishing"},
]
QUERIES = [
    "find books about whales",
    "I'd like a novel set in the desert",
    "any books on fishing?",
    "whale stories",
]
SEARCH = ToolDefinition(
    "search_books",
    "Search the library catalog for books about a topic.",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
SYSTEM = "You are a librarian. Look up the catalog with search_books before answering."
TOPICS = ["what is a hash map", "what is a binary heap", "what is a trie", "what is a B-tree"]
#: Varied per call in the prompt test so the prompt cache cannot skip the prefill being measured.
PREAMBLE = (
    "Explain data structures to a programmer who knows Python but not algorithms. Prefer concrete "
    "examples over definitions, mention the typical cost of the main operations in big-O notation, "
    "and end with one situation where the structure is the wrong choice. Avoid code unless asked."
)


class Search(Step):
    def prompt(self) -> str:
        return SYSTEM

    @tool
    async def search_books(self, query: str, max_results: int = Field(5, ge=1, le=10)) -> Outcome:
        """Search the library catalog for books about a topic."""
        words = query.lower().split()
        hits = [
            book for book in CATALOG if any(word.rstrip("s") in json.dumps(book).lower() for word in words)
        ]
        return go(Answer).with_state(books=hits[:max_results])


class Answer(Step):
    def prompt(self) -> str:
        found = json.dumps(self.state.get("books", []))
        return f"Tell the user, in one short sentence, which books the catalog search found: {found}"


class Books(Flow):
    name = "books"
    steps = [Search, Answer]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def main(runs: int) -> None:
    started = time.perf_counter()
    engine = await asyncio.to_thread(load_engine)
    load_seconds = time.perf_counter() - started
    model = LocalModel(params={"temperature": 0.0, "seed": 1})
    print(f"model file : {engine.path}")
    print(f"threads    : {engine.threads} (cpus {os.cpu_count()}, load avg {os.getloadavg()[0]:.2f})")
    print(f"load       : {load_seconds:.2f} s (sha256 check + llama.cpp load)")

    totals = {"prompt_n": 0.0, "prompt_ms": 0.0, "predicted_n": 0.0, "predicted_ms": 0.0}
    for index in range(runs):
        topic = TOPICS[index % len(TOPICS)]
        system = f"Lesson {index + 1}. You are a concise teacher. {PREAMBLE}"
        request = ModelRequest(system, [Message.user(f"In 80 words: {topic}?")])
        await model.request(request)
        for key in totals:
            totals[key] += float(model.last_timings.get(key, 0.0))
    prompt_rate = totals["prompt_n"] / max(totals["prompt_ms"], 1e-9) * 1000
    generation_rate = totals["predicted_n"] / max(totals["predicted_ms"], 1e-9) * 1000
    print(
        f"prompt     : {prompt_rate:.1f} tokens/s ({totals['prompt_n']:.0f} prompt tokens over {runs} calls)"
    )
    print(
        f"generation : {generation_rate:.1f} tokens/s ({totals['predicted_n']:.0f} tokens over {runs} calls)"
    )

    call_seconds: list[float] = []
    valid = 0
    for index in range(runs):
        request = ModelRequest(SYSTEM, [Message.user(QUERIES[index % len(QUERIES)])], tools=[SEARCH])
        started = time.perf_counter()
        response = await model.request(request)
        call_seconds.append(time.perf_counter() - started)
        valid += any(
            call.name == "search_books" and isinstance(call.args, dict) for call in response.tool_calls
        )
    print(f"tool call  : {median(call_seconds):.2f} s per model call proposing a tool ({valid}/{runs} valid)")

    turn_seconds: list[float] = []
    details: list[dict[str, Any]] = []
    flow_engine = FlowEngine([Books], model=model)
    for index in range(runs):
        started = time.perf_counter()
        result = await flow_engine.run("books", QUERIES[index % len(QUERIES)])
        turn_seconds.append(time.perf_counter() - started)
        details.append({"ok": result.ok, "step": result.step, "calls": result.usage.model_calls})
    finished = sum(1 for item in details if item["ok"] and item["step"] == "Answer")
    print(
        f"turn       : {median(turn_seconds):.2f} s per tool-calling turn "
        f"(tool call + tool + final answer; {finished}/{runs} reached the answer step)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each measurement")
    asyncio.run(main(parser.parse_args().runs))
