"""A long hotel session on the embedded model: 60 comparison turns after the interview.

Prints each turn's step, error, prompt tokens (as llama.cpp counted them) and time, then the
prompt tokens at turns 10, 30 and 60. Needs the `local` extra and the model's weights; slow (a few
seconds a turn on 2 CPUs), so it is measured by hand, never in CI:

    HOTEL_FLOW_CURRENT_DATE=2027-07-15 python bench/local_long_session.py
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from picoflow import FlowEngine
from picoflow.sessions import MemoryStore
from picoflow_demos.hotel import HotelFlow

INTERVIEW = ["Hi", "yes", "8/1/2027 to 8/8/2027", "max 700", "two beds", "free wifi, parking", "none"]
ASKS = [
    "compare hotel 1,2,3,4,5,6 on price",
    "compare on amenities",
    "compare hotels 2,5,8 on distance",
    "compare on room type",
]
TURNS = 60


async def main() -> None:
    os.environ.setdefault("HOTEL_FLOW_CURRENT_DATE", "2027-07-15")
    engine = FlowEngine([HotelFlow], store=MemoryStore(), model="local")
    session_id = None
    for text in INTERVIEW:
        result = await engine.run("hotel", text, session_id)
        session_id = result.session_id
        print(f"interview {text!r} -> {result.step} {result.error.kind if result.error else 'ok'}")
    rows = []
    for turn in range(1, TURNS + 1):
        text = ASKS[(turn - 1) % len(ASKS)]
        started = time.perf_counter()
        result = await engine.run("hotel", text, session_id)
        row = {
            "turn": turn,
            "step": result.step,
            "error": result.error.kind if result.error else None,
            "prompt_tokens": result.usage.input_tokens,
            "seconds": round(time.perf_counter() - started, 2),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"failed turns: {sum(1 for row in rows if row['error'])} of {TURNS}")
    for turn in (10, 30, 60):
        print(f"turn {turn}: {rows[turn - 1]['prompt_tokens']} prompt tokens")
    print(f"transcript: {len(await engine.store.transcript(session_id or ''))} messages")


if __name__ == "__main__":
    asyncio.run(main())
