"""Scale-out load test: ``picoflow serve`` processes on one PostgreSQL, many sessions over HTTP.

Each session sends its turns one after another, alternating between the servers, so every
session is continued by both processes. A few sessions also send two turns at once to different
servers; only those may see a 409. Afterwards the stored sessions are checked: every turn is in
the transcript exactly once, in order, and the tool state saw each message exactly once.

    python bench/load.py [--sessions 200] [--turns 10]      # 1 and then 2 server processes
"""

# ruff: noqa: E402 - the sys.path fix below must run before the imports it protects
from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py would shadow the standard library's http package that httpx imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import httpx

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get("PICOFLOW_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Report:
    processes: int
    sessions: int
    turns: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    conflicts: dict[str, int] = field(default_factory=dict)
    """Session id -> 409 answers it got."""
    doubled: set[str] = field(default_factory=set)
    """Sessions that sent two turns at once."""
    extra: dict[str, list[int]] = field(default_factory=dict)
    """Session id -> numbers of doubled turns that were accepted as well."""
    problems: list[str] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return len(self.latencies)

    def line(self) -> str:
        ordered = sorted(self.latencies)
        p50 = ordered[len(ordered) // 2] * 1000 if ordered else 0.0
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else 0.0
        errors = sum(self.errors.values())
        return (
            f"{self.processes:>9} {self.completed / self.seconds:>9.0f} {p50:>9.1f} {p99:>9.1f} "
            f"{statistics.mean(self.latencies) * 1000 if self.latencies else 0:>9.1f} {errors:>7} "
            f"{sum(self.conflicts.values()):>9}"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(store_url: str, port: int) -> subprocess.Popen[bytes]:
    command = [
        str(Path(sys.executable).with_name("picoflow")),
        "serve",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--store", store_url,
        "--flows", "bench.load_app:FLOWS",
        "--model", "python:bench.load_app:model",
        "--no-warm",
        "--log-level", "warning",
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def wait_ready(base: str, server: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient(base_url=base) as client:
        for _ in range(300):
            if server.poll() is not None:
                raise RuntimeError(f"server exited: {server.stderr.read().decode() if server.stderr else ''}")
            try:
                if (await client.get("/healthcheck")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"server {base} did not start")


async def drive(report: Report, bases: list[str], doubled_sessions: int) -> list[str]:
    # One small client per session and server, as separate users would have: a single httpx pool
    # shared by hundreds of connections costs more CPU than the servers under test.
    clients = [
        [
            httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=2))
            for base in bases
        ]
        for _ in range(report.sessions + 1)
    ]

    async def send(index: int, session: str | None, n: int, tag: str = "") -> tuple[int, str | None]:
        client = clients[index][(index + n) % len(bases)]
        body = {"message": f"message {n}{tag}"}
        started = time.perf_counter()
        try:
            if session is None:
                response = await client.post("/v1/flows/load/sessions", json=body)
            else:
                response = await client.post(f"/v1/sessions/{session}/turns", json=body)
        except httpx.HTTPError as exc:
            report.errors[type(exc).__name__] = report.errors.get(type(exc).__name__, 0) + 1
            return 0, None
        if response.status_code in (200, 201):
            report.latencies.append(time.perf_counter() - started)
            return response.status_code, response.json()["session_id"]
        key = str(response.status_code)
        if response.status_code != 409:
            report.errors[key] = report.errors.get(key, 0) + 1
        return response.status_code, None

    async def conversation(index: int) -> str:
        status, session = await send(index, None, 1)
        if session is None:
            report.problems.append(f"session {index} could not start ({status})")
            return ""
        for n in range(2, report.turns + 1):
            if index < doubled_sessions and n == report.turns // 2:
                report.doubled.add(session)
                # Same number on both servers at once: at most one may be refused.
                pair = await asyncio.gather(send(index, session, n), send(index + 1, session, n, " again"))
                refused = [s for s, _ in pair if s == 409]
                report.conflicts[session] = report.conflicts.get(session, 0) + len(refused)
                if len(refused) == 2:
                    report.problems.append(f"both doubled turns of {session} were refused")
                if not refused:
                    report.extra.setdefault(session, []).append(n)
                continue
            for _attempt in range(3):
                status, _ = await send(index, session, n)
                if status == 200:
                    break
                if status == 409:
                    report.conflicts[session] = report.conflicts.get(session, 0) + 1
            else:
                report.problems.append(f"turn {n} of {session} failed with {status}")
        return session

    started = time.perf_counter()
    try:
        sessions = await asyncio.gather(*(conversation(i) for i in range(report.sessions)))
    finally:
        report.seconds = time.perf_counter() - started
        for pair in clients:
            for client in pair:
                await client.aclose()
    return [s for s in sessions if s]


async def verify(report: Report, store_url: str, sessions: list[str]) -> None:
    from picoflow.sessions import open_store

    store = open_store(store_url)
    try:
        for session_id in sessions:
            session = await store.load(session_id)
            if session is None:
                report.problems.append(f"session {session_id} is missing")
                continue
            extra = report.extra.get(session_id, [])
            expected = sorted([*range(1, report.turns + 1), *extra])
            seen = session.states.get("Ledger", {}).get("seen", [])
            if sorted(seen) != expected:
                report.problems.append(f"{session_id}: tool saw {seen}, expected {expected}")
            if session.turns != report.turns + len(extra) or session.revision != session.turns:
                report.problems.append(f"{session_id}: {session.turns} turns at revision {session.revision}")
            said = [m.content for m in await store.transcript(session_id) if m.role == "user"]
            numbers = sorted(int(text.split()[1]) for text in said)
            if numbers != expected:
                report.problems.append(f"{session_id}: transcript has user turns {numbers}")
            if session_id in report.conflicts and session_id not in report.doubled:
                report.problems.append(f"{session_id} got a 409 without sending two turns at once")
    finally:
        await store.close()


async def drop_schema(schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def run_load(processes: int, sessions: int, turns: int, doubled: int = 10) -> Report:
    schema = f"load_{uuid.uuid4().hex[:10]}"
    separator = "&" if "?" in POSTGRES else "?"
    store_url = f"{POSTGRES}{separator}schema={schema}"
    report = Report(processes, sessions, turns)
    ports = [free_port() for _ in range(processes)]
    servers = [start_server(store_url, port) for port in ports[:1]]
    try:
        await wait_ready(f"http://127.0.0.1:{ports[0]}", servers[0])  # the first one creates the schema
        servers += [start_server(store_url, port) for port in ports[1:]]
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        for base, server in zip(bases, servers, strict=True):
            await wait_ready(base, server)
        finished = await drive(report, bases, doubled)
        await verify(report, store_url, finished)
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            if server.stderr is not None:
                server.stderr.close()
        await drop_schema(schema)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    print(f"{args.sessions} sessions x {args.turns} turns over HTTP, PostgreSQL store, FunctionModel")
    columns = ("processes", "turns/s", "p50 ms", "p99 ms", "mean ms", "errors", "conflicts")
    print(" ".join(f"{name:>9}" if name != "errors" else f"{name:>7}" for name in columns))
    failed = False
    for processes in (1, 2):
        report = asyncio.run(run_load(processes, args.sessions, args.turns))
        print(report.line())
        for problem in report.problems[:10]:
            print(f"  PROBLEM: {problem}")
        failed = failed or bool(report.problems or report.errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
