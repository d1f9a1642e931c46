"""Sessions of any length: does turn 1,000 of a session cost what turn 1 costs, end to end?

Each turn goes through ``FlowEngine.run``: load the session, run the step (a tool call and its
~500-character result, then an answer), save it. Memory would grow by four messages a turn; the
step's model has a 2,048-token window (256 kept for the answer), so the runner trims the oldest
exchanges as the window fills and every turn reads, sends and writes about the same amount. The
model is a ``FunctionModel`` that answers at once: what is timed is picoflow and the store.

For each checkpoint k in 1, 100 and 1,000 a group of sessions is grown (untimed) to turn k - 1;
then turns k .. k+7 of every group are timed, the groups interleaved so that machine noise hits
them alike. ``--unbounded`` plays the same flow without a window, for contrast.

    python bench/long_session.py [--sessions 4] [--skip-postgres] [--unbounded]

PostgreSQL: ``$PICOFLOW_BENCH_POSTGRES`` or ``postgresql://postgres@127.0.0.1:5432/test``; the
benchmark works in a schema of its own and drops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _desk import DeskFlow, agent
from picoflow import FlowEngine
from picoflow._run.tokens import request_tokens
from picoflow.models import FunctionModel
from picoflow.sessions import PostgresStore, SessionStore, SQLiteStore

CHECKPOINTS = (1, 100, 1000)
WINDOW = 8
"""Timed turns per session and checkpoint: turns k .. k + WINDOW - 1."""
CONTEXT_WINDOW = 2048
OUTPUT_RESERVE = 256


class Desks:
    """One engine on one store; grows and times sessions of the desk flow."""

    def __init__(self, store: SessionStore, *, bounded: bool) -> None:
        window = CONTEXT_WINDOW if bounded else None
        self.model = FunctionModel(
            agent, context_window=window, output_reserve=OUTPUT_RESERVE if bounded else 0
        )
        self.engine = FlowEngine([DeskFlow], model=self.model, store=store)
        self.turns: dict[str, int] = {}
        self.trims: dict[str, int] = {}

    async def turn(self, session_id: str | None) -> str:
        number = self.turns.get(session_id or "", 0) + 1
        result = await self.engine.run("desk", f"Where is order {1000 + number}?", session_id)
        if not result.ok or result.session_id is None:
            raise RuntimeError(f"turn {number} failed: {result.error}")
        self.turns[result.session_id] = number
        self.trims[result.session_id] = self.trims.get(result.session_id, 0) + len(result.warnings)
        return result.session_id

    async def timed(self, session_id: str | None) -> tuple[str, float]:
        started = time.perf_counter()
        session_id = await self.turn(session_id)
        return session_id, (time.perf_counter() - started) * 1000


async def measure(store: SessionStore, sessions: int, *, bounded: bool) -> dict[int, Any]:
    desks = Desks(store, bounded=bounded)
    await store.load("warm-up")  # connect and migrate outside the measurements
    groups: dict[int, list[str | None]] = {k: [None] * sessions for k in CHECKPOINTS}
    for checkpoint, group in groups.items():
        for index in range(sessions):
            for _ in range(1, checkpoint):
                group[index] = await desks.turn(group[index])
    samples: dict[int, list[float]] = {k: [] for k in CHECKPOINTS}
    sizes: dict[int, list[int]] = {k: [] for k in CHECKPOINTS}
    for _ in range(WINDOW):
        for index in range(sessions):
            for checkpoint, group in groups.items():
                before = len(desks.model.requests)
                group[index], elapsed = await desks.timed(group[index])
                samples[checkpoint].append(elapsed)
                sizes[checkpoint].extend(request_tokens(r) for r in desks.model.requests[before:])
    last = groups[CHECKPOINTS[-1]][0]
    assert last is not None
    stored = await store.load(last)
    assert stored is not None
    transcript = await store.transcript(last)
    await desks.engine.aclose()
    return {
        "samples": samples,
        "sizes": sizes,
        "live": len(stored.memory["desk"].messages),
        "transcript": len(transcript),
        "turns": stored.turns,
        "trimmed": desks.trims[last],
    }


def report(name: str, figures: dict[int, Any]) -> float:
    samples, sizes = figures["samples"], figures["sizes"]
    print(f"\n{name}")
    print(f"  {'turn':>6}  {'p50 ms':>8}  {'p90 ms':>8}  {'request tokens (max)':>21}  turns timed")
    for checkpoint in CHECKPOINTS:
        values = sorted(samples[checkpoint])
        p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
        print(
            f"  {checkpoint:>6}  {statistics.median(values):>8.2f}  {p90:>8.2f}"
            f"  {max(sizes[checkpoint]):>21,}  {len(values)}"
        )
    ratio = statistics.median(samples[CHECKPOINTS[-1]]) / statistics.median(samples[CHECKPOINTS[0]])
    verdict = "meets" if ratio <= 1.5 else "MISSES"
    print(
        f"  turn {CHECKPOINTS[-1]:,} / turn {CHECKPOINTS[0]}: {ratio:.2f}x at p50 ({verdict} the 1.5x goal)"
    )
    print(
        f"  a session at turn {figures['turns']:,}: {figures['live']} messages in live memory, "
        f"{figures['transcript']:,} in its transcript; memory trimmed {figures['trimmed']} times"
    )
    return ratio


async def bench(name: str, make: Callable[[], SessionStore], sessions: int, bounded: bool) -> None:
    store = make()
    try:
        figures = await measure(store, sessions, bounded=bounded)
    finally:
        await store.close()
    report(name, figures)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=4, help="sessions per checkpoint (default 4)")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--unbounded", action="store_true", help="no window: memory grows without limit")
    args = parser.parse_args()
    bounded = not args.unbounded
    mode = f"{CONTEXT_WINDOW:,}-token window" if bounded else "no window (memory grows)"
    print(f"{args.sessions} sessions per checkpoint, turns k .. k+{WINDOW - 1} timed; {mode}.")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "long.sqlite3"
        await bench("SQLite (synchronous=FULL)", lambda: SQLiteStore(path), args.sessions, bounded)
    if not args.skip_postgres:
        await bench_postgres(args.sessions, bounded)


async def bench_postgres(sessions: int, bounded: bool) -> None:
    import psycopg

    url = os.environ.get("PICOFLOW_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"pf_long_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        print(f"\nPostgreSQL: not reachable at {url} ({str(exc).strip()}); skipped", file=sys.stderr)
        return
    try:
        await bench(
            f"PostgreSQL (schema {schema})", lambda: PostgresStore(url, schema=schema), sessions, bounded
        )
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    asyncio.run(main())
