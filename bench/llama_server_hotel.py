"""The hotel demo on a real OpenAI-compatible server: llama.cpp's own HTTP server (started from
``xllamacpp`` with the embedded model's GGUF and its own chat template) behind an
``openai-compatible:`` selection, the first turns of the scripted hotel conversation typed in.

It prints, per turn, whether the turn succeeded, the step it ended in, its model calls, its
warnings (a tool call the model wrote as text and that was recovered shows here) and its time.
The run passes when no turn failed.

    HOTEL_FLOW_CURRENT_DATE=2027-07-15 python bench/llama_server_hotel.py [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

# The repository root instead of bench/ (whose http.py would shadow the standard library's): the
# server helper of the test suite is imported from there.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from tests.models.llama_server import llama_server  # noqa: E402

from picoflow import FlowEngine  # noqa: E402
from picoflow.models.catalog import ModelSelection, create_model  # noqa: E402
from picoflow_demos.hotel import HotelFlow  # noqa: E402
from picoflow_demos.hotel.scripted import CONVERSATION, CURRENT_DATE  # noqa: E402

KEY = "bench-llama-key"


async def converse(url: str, turns: int) -> int:
    os.environ["OPENAI_COMPATIBLE_API_KEY"] = KEY
    selection = ModelSelection.parse(f"openai-compatible:qwen2.5-coder@{url}/v1", temperature=0.0, seed=7)
    engine = FlowEngine([HotelFlow], model=create_model(selection))
    session_id: str | None = None
    failures = 0
    for number, turn in enumerate(CONVERSATION[:turns], start=1):
        start = time.perf_counter()
        result = await engine.run("hotel", turn.user, session_id)
        seconds = time.perf_counter() - start
        session_id = result.session_id or session_id
        verdict = "ok" if result.ok else f"FAILED ({result.error.kind if result.error else '?'})"
        failures += not result.ok
        print(f"turn {number}: {turn.user!r}")
        print(f"  {verdict}, step {result.step}, {result.usage.model_calls} model calls, {seconds:.1f} s")
        for warning in result.warnings:
            print(f"  warning: {warning}")
        print(f"  reply: {result.message[:160]!r}")
    await engine.aclose()
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    with llama_server(KEY, n_ctx=8192) as url:
        failures = asyncio.run(converse(url, args.turns))
    print(f"{args.turns - failures} of {args.turns} turns without an error")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
