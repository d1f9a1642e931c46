"""HTTP benchmark: turns per second and latency of picoflow's API next to a bare FastAPI endpoint.

Run: ``.venv/bin/python bench/http.py`` (``--requests N`` per level, default 1,000; ``--rounds N``,
default 3; ``--store URL``, default ``memory://``).

Each server runs in its own process (uvicorn, one worker, 127.0.0.1), so the load generator does not
share a GIL with it. All three run for the whole benchmark; in each round the targets are measured
back to back at each level, and the tables show medians over the rounds. Targets:

* ``bare FastAPI``: a POST endpoint that parses the same JSON body and returns a constant: the floor
  any FastAPI service pays for HTTP, routing and JSON.
* ``picoflow turn``: ``POST /v1/sessions/{id}/turns`` with a ``FunctionModel`` answering at once,
  so everything measured is picoflow (auth, validation, session load/save, runner) plus HTTP.
* ``picoflow tool turn``: the same, with the model calling a tool before answering (two model
  calls and one tool per turn).

At 1, 10 and 100 concurrent sessions, each session posts 20 turns (the first creates it), over
and over until the level's request count is reached. Latency is per HTTP request, client side.
Each session has its own keep-alive connection, like a browser tab. Two load generators run: a
minimal HTTP/1.1 client, whose cost is negligible so the figures are the server's, and httpx, whose
per-request CPU cost exceeds a bare FastAPI endpoint's, so its rows mostly measure httpx itself.
Server and load generator share the machine: run it on an otherwise idle one.

The goal (issue 12): a picoflow turn reaches at least half of bare FastAPI's requests/s at every level
with the keep-alive client; the ratio table gives it per level.

Then the protocols (issue 28), each beside the native route it stands for, on one server in the same
run: the native turn streamed (``stream: true``) next to AG-UI, the AI SDK stream, A2A's streaming send
and Chat Completions with ``stream: true``; the native JSON turn next to Chat Completions and A2A's
send without streaming. Each conversation is one thread of 20 turns. The goal: an adapter costs at
most 15 % more per turn than its native route (by the server's CPU time per turn, which other load on
the machine disturbs least, and by the rate measured back to back).
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is called http.py: its folder, first on sys.path, would shadow the standard library.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402
from pydantic import BaseModel  # noqa: E402

TURNS_PER_SESSION = 20
LEVELS = (1, 10, 100)
WARMUP = 50


# --- the servers (run in a child process) ---------------------------------------------------------------


def picoflow_app(store_url: str, *, keys: bool = False) -> Any:
    """The bench flow served; ``keys``: behind an API key (``bench-key``), as the protocols are."""
    from picoflow import Flow, FlowEngine, Step, tool
    from picoflow.messages import ModelRequest
    from picoflow.models import FunctionModel, ToolCall
    from picoflow.server import ServerSettings, create_app
    from picoflow.sessions import open_store

    class Chat(Step):
        """Take notes."""

        @tool
        def note(self, text: str) -> str:
            """Save a note."""
            return "saved"

    class BenchFlow(Flow):
        name = "bench"
        steps = [Chat]

    def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "tool":
            return "Saved."
        if "note" in last.content:
            return ToolCall("note", {"text": last.content})
        return "Noted."

    engine = FlowEngine([BenchFlow], store=open_store(store_url), model=FunctionModel(answer))
    settings = ServerSettings(ui=False, api_keys={"bench-key": "bench"} if keys else {})
    return create_app(engine, settings=settings)


class Body(BaseModel):
    message: str


def bare_app() -> Any:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/bare")
    async def bare(body: Body) -> dict[str, str]:
        return {"message": "Noted."}

    return app


def serve(kind: str, port: int, store_url: str) -> None:
    import uvicorn

    app = bare_app() if kind == "bare" else picoflow_app(store_url, keys=kind == "protocols")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# --- the load ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    label: str
    server: str
    message: str


TARGETS = (
    Target("bare FastAPI", "bare", "hello"),
    Target("picoflow turn", "picoflow", "hello"),
    Target("picoflow tool turn", "picoflow", "please note this"),
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_until_up(url: str) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            try:
                await client.get(url + "/openapi.json")
                return
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"server at {url} did not start")


class RawClient:
    """One keep-alive HTTP/1.1 connection and nothing more: cheap, so the server is what gets measured."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        body = json.dumps(payload).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        length = next(
            int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length:")
        )
        return int(lines[0].split(b" ")[1]), await self.reader.readexactly(length)

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()


class HttpxClient:
    """An ``httpx.AsyncClient`` per session (one shared pool of 100 connections is far slower)."""

    def __init__(self, port: int) -> None:
        self.client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60)

    async def post(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        response = await self.client.post(path, json=payload)
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self.client.aclose()


CLIENTS: dict[str, type[RawClient] | type[HttpxClient]] = {"raw": RawClient, "httpx": HttpxClient}


async def session_worker(
    client: RawClient | HttpxClient,
    target: Target,
    budget: list[int],
    latencies: list[float],
    errors: list[int],
) -> None:
    """One conversation after another: the first request creates a session, the next 19 continue it."""
    session: str | None = None
    turns = 0
    while budget[0] > 0:
        budget[0] -= 1
        if target.server == "bare":
            path = "/bare"
        elif session is None:
            path = "/v1/flows/bench/sessions"
        else:
            path = f"/v1/sessions/{session}/turns"
        started = time.perf_counter()
        status, body = await client.post(path, {"message": target.message})
        latencies.append(time.perf_counter() - started)
        if status >= 400:
            errors[0] += 1
            session = None
            continue
        if target.server != "bare":
            session = json.loads(body)["session_id"]
            turns += 1
            if turns >= TURNS_PER_SESSION:
                session, turns = None, 0


def cpu_seconds(pid: int) -> float:
    """CPU time a process has used (user and system), from /proc; NaN where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_level(
    port: int, pid: int, kind: str, target: Target, sessions: int, requests: int
) -> dict[str, float]:
    clients = [CLIENTS[kind](port) for _ in range(sessions)]
    try:
        warmup = WARMUP // sessions + 1
        await asyncio.gather(*(session_worker(c, target, [warmup], [], [0]) for c in clients))
        budget, errors = [requests], [0]
        latencies: list[float] = []
        cpu = cpu_seconds(pid)
        started = time.perf_counter()
        await asyncio.gather(*(session_worker(c, target, budget, latencies, errors) for c in clients))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu
    finally:
        for client in clients:
            await client.aclose()
    ordered = sorted(latencies)
    return {
        "rate": len(latencies) / elapsed,
        "p50": statistics.median(ordered) * 1000,
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "errors": errors[0],
        # What the server spent per request: unlike the rate, barely moved by other load.
        "cpu_us": cpu / len(latencies) * 1e6,
    }


Rows = dict[tuple[str, int], dict[str, float]]
"""Per (client, sessions): the rate, latencies and errors of one measurement."""


def measure(requests: int, store_url: str, rounds: int) -> dict[str, list[Rows]]:
    """Every target, client and level, ``rounds`` times, each target in its own server process.

    Within a round the targets are measured back to back at each level, so the figures a ratio
    compares are seconds apart and a disturbance on the machine hits them alike.
    """
    ports = {target.label: free_port() for target in TARGETS}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    children = {
        target.label: subprocess.Popen(
            [sys.executable, __file__, "--serve", target.server, "--port", str(port), "--store", store_url],
            env=env,
        )
        for target in TARGETS
        for port in [ports[target.label]]
    }

    async def load() -> dict[str, list[Rows]]:
        for port in ports.values():
            await wait_until_up(f"http://127.0.0.1:{port}")
        runs: dict[str, list[Rows]] = {target.label: [] for target in TARGETS}
        for _ in range(rounds):
            for target in TARGETS:
                runs[target.label].append({})
            for kind in CLIENTS:
                for level in LEVELS:
                    for target in TARGETS:
                        pid = children[target.label].pid
                        row = await run_level(ports[target.label], pid, kind, target, level, requests)
                        runs[target.label][-1][(kind, level)] = row
        return runs

    try:
        return asyncio.run(load())
    finally:
        for child in children.values():
            child.terminate()
        for child in children.values():
            child.wait(10)


GOAL = 0.5
"""A picoflow turn keeps at least this share of a bare FastAPI endpoint's requests/s, at every level
(keep-alive HTTP/1.1 client): the HTTP layer and the engine together may cost at most as much as
FastAPI's own floor (issue 12)."""


def median_rows(runs: list[Rows]) -> Rows:
    """Per client and level, the round with the median rate (its latencies with it), and the errors
    of every round."""
    merged: Rows = {}
    for key in runs[0]:
        ordered = sorted((run[key] for run in runs), key=lambda row: row["rate"])
        merged[key] = {**ordered[len(ordered) // 2], "errors": sum(row["errors"] for row in ordered)}
    return merged


def median_ratio(runs: dict[str, list[Rows]], label: str, level: int) -> float:
    """The median over rounds of a target's rate over bare FastAPI's, measured in the same round."""
    bare = runs[TARGETS[0].label]
    key = ("raw", level)
    ratios = sorted(run[key]["rate"] / base[key]["rate"] for run, base in zip(runs[label], bare, strict=True))
    return ratios[len(ratios) // 2]


def print_ratios(runs: dict[str, list[Rows]]) -> bool:
    """The share of bare FastAPI's requests/s each picoflow target reaches; whether the goal is met.

    Beside it, the share computed from the servers' CPU time per request, which other load on the
    machine disturbs far less: when the two disagree, the machine was busy."""
    results = {label: median_rows(rounds) for label, rounds in runs.items()}
    bare = results[TARGETS[0].label]
    others = [target.label for target in TARGETS[1:]]
    goal = f"picoflow turn >= {GOAL:.0%} of bare FastAPI at every level"
    print(f"\npicoflow / bare FastAPI, keep-alive HTTP/1.1 client (goal: {goal})")
    print("rates: medians over rounds; ratio: median over rounds of the ratio within a round; by CPU:")
    print("bare FastAPI's server CPU time per request over the target's")
    header = "".join(f" {label + '/s':>22} {'ratio':>6} {'by CPU':>7}" for label in others)
    print(f"{'sessions':>8} {'bare/s':>9}{header}")
    met = True
    for level in LEVELS:
        key = ("raw", level)
        line = f"{level:>8} {bare[key]['rate']:>9.0f}"
        for label in others:
            ratio = median_ratio(runs, label, level)
            by_cpu = bare[key]["cpu_us"] / results[label][key]["cpu_us"]
            line += f" {results[label][key]['rate']:>22.0f} {ratio:>6.0%} {by_cpu:>7.0%}"
            if label == TARGETS[1].label:
                met = met and ratio >= GOAL
        print(line)
    print(f"goal {'met' if met else 'NOT met'}: {goal}")
    return met


# --- the protocols, beside the native route ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Protocol:
    """How one surface runs turn ``n`` of conversation ``thread``: the request, and how a reply tells
    the session to continue (native and Chat Completions return an id; the others take the thread)."""

    label: str
    baseline: str
    """The label of the native target it is compared with."""

    def request(self, thread: str, n: int, session: str | None) -> tuple[str, dict[str, Any], dict[str, str]]:
        text = f"turn {n}"
        if self.label.startswith("native"):
            stream = self.label == "native stream"
            if session is None:
                return "/v1/flows/bench/sessions", {"message": text, "stream": stream}, {}
            return f"/v1/sessions/{session}/turns", {"message": text, "stream": stream}, {}
        if self.label == "AG-UI":
            message = {"id": f"m{n}", "role": "user", "content": text}
            body = {
                "threadId": thread,
                "runId": f"{thread}-{n}",
                "messages": [message],
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
            return "/ag-ui/bench", body, {}
        if self.label == "AI SDK stream":
            parts = [{"type": "text", "text": text}]
            body = {"id": thread, "messages": [{"id": f"m{n}", "role": "user", "parts": parts}]}
            return "/ai-sdk/bench", {**body, "trigger": "submit-message"}, {}
        if self.label.startswith("A2A"):
            method = "SendStreamingMessage" if self.label == "A2A stream" else "SendMessage"
            message = {
                "messageId": f"{thread}-{n}",
                "contextId": thread,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
            body = {"jsonrpc": "2.0", "id": n, "method": method, "params": {"message": message}}
            return A2A_PATH, body, {"A2A-Version": "1.0"}
        stream = self.label == "Chat Completions stream"
        body = {"model": "bench", "messages": [{"role": "user", "content": text}], "stream": stream}
        return "/v1/chat/completions", body, ({} if session is None else {SESSION_HEADER: session})

    def session_of(self, headers: dict[str, str], body: bytes) -> str | None:
        if self.label == "native":
            return str(json.loads(body)["session_id"])
        if self.label == "native stream":
            # The last event is the result: its data holds the session id.
            data = body.rstrip().rsplit(b"\ndata: ", 1)[1]
            return str(json.loads(data)["session_id"])
        if self.label.startswith("Chat Completions"):
            return headers.get(SESSION_HEADER.lower())
        return None


A2A_PATH = "/a2a"
SESSION_HEADER = "X-Picoflow-Session"
PROTOCOLS = (
    Protocol("native", "native"),
    Protocol("Chat Completions", "native"),
    Protocol("A2A send", "native"),
    Protocol("native stream", "native stream"),
    Protocol("AG-UI", "native stream"),
    Protocol("AI SDK stream", "native stream"),
    Protocol("A2A stream", "native stream"),
    Protocol("Chat Completions stream", "native stream"),
)
PROTOCOL_GOAL = 1.15
"""An adapter's server CPU time per turn is at most this many times its native route's."""
PROTOCOL_LEVELS = (1, 10)


class StreamingClient:
    """One keep-alive HTTP/1.1 connection that reads whole responses, chunked ones included (the
    streamed routes), with the benchmark key."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(
        self, path: str, payload: dict[str, Any], extra: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        body = json.dumps(payload).encode()
        lines = [
            f"POST {path} HTTP/1.1",
            "Host: 127.0.0.1",
            "Authorization: Bearer bench-key",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            *(f"{name}: {value}" for name, value in extra.items()),
        ]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self.writer.drain()
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ")[1])
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in head[1:] if line)
        }
        if "content-length" in headers:
            return status, headers, await self.reader.readexactly(int(headers["content-length"]))
        chunks = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                return status, headers, b"".join(chunks)
            chunks.append(chunk[:-2])

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def thread_worker(
    client: StreamingClient, protocol: Protocol, worker: int, budget: list[int], errors: list[int]
) -> int:
    """Conversations of 20 turns each until the budget is spent; returns the turns it ran."""
    done = conversation = 0
    while budget[0] > 0:
        conversation += 1
        thread = f"bench-{worker}-{conversation}-{os.getpid()}-{time.monotonic_ns()}"
        session: str | None = None
        for n in range(1, TURNS_PER_SESSION + 1):
            if budget[0] <= 0:
                break
            budget[0] -= 1
            path, payload, extra = protocol.request(thread, n, session)
            status, headers, body = await client.post(path, payload, extra)
            if status >= 400 or (protocol.label.startswith("A2A") and b'"error"' in body[:200]):
                errors[0] += 1
                break
            done += 1
            session = session or protocol.session_of(headers, body)
    return done


async def run_protocol(
    port: int, pid: int, protocol: Protocol, sessions: int, requests: int
) -> dict[str, float]:
    clients = [StreamingClient(port) for _ in range(sessions)]
    try:
        await asyncio.gather(
            *(thread_worker(c, protocol, i, [WARMUP // sessions + 1], [0]) for i, c in enumerate(clients))
        )
        budget, errors = [requests], [0]
        cpu = cpu_seconds(pid)
        started = time.perf_counter()
        turns = await asyncio.gather(
            *(thread_worker(c, protocol, i, budget, errors) for i, c in enumerate(clients))
        )
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu
    finally:
        for client in clients:
            await client.aclose()
    total = max(1, sum(turns))
    return {"rate": total / elapsed, "cpu_us": cpu / total * 1e6, "errors": errors[0]}


def measure_protocols(
    requests: int, store_url: str, rounds: int
) -> list[dict[tuple[str, int], dict[str, float]]]:
    """Every protocol at each level, ``rounds`` times, all on one picoflow server: within a round
    each adapter is measured right after the native route it is compared with."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, __file__, "--serve", "protocols", "--port", str(port), "--store", store_url]
    child = subprocess.Popen(command, env=env)

    async def load() -> list[dict[tuple[str, int], dict[str, float]]]:
        await wait_until_up(f"http://127.0.0.1:{port}")
        runs = []
        for _ in range(rounds):
            rows: dict[tuple[str, int], dict[str, float]] = {}
            for level in PROTOCOL_LEVELS:
                for protocol in PROTOCOLS:
                    rows[(protocol.label, level)] = await run_protocol(
                        port, child.pid, protocol, level, requests
                    )
            runs.append(rows)
        return runs

    try:
        return asyncio.run(load())
    finally:
        child.terminate()
        child.wait(10)


def print_protocols(runs: list[dict[tuple[str, int], dict[str, float]]]) -> bool:
    """Per protocol and level: turns/s, server CPU per turn, and both against its native route
    (medians over rounds of the ratio within a round); whether every adapter meets the goal."""
    print(f"\nprotocols beside their native route (goal: server CPU per turn <= {PROTOCOL_GOAL:.2f}x native)")
    print(
        f"{'protocol':<24} {'vs':<14} {'sessions':>8} {'turns/s':>8} {'CPU µs':>7} "
        f"{'CPU x':>6} {'rate x':>7} {'errors':>6}"
    )
    met = True
    for level in PROTOCOL_LEVELS:
        for protocol in PROTOCOLS:
            key, base = (protocol.label, level), (protocol.baseline, level)
            cpu_x = statistics.median(run[key]["cpu_us"] / run[base]["cpu_us"] for run in runs)
            rate_x = statistics.median(run[base]["rate"] / run[key]["rate"] for run in runs)
            rate = statistics.median(run[key]["rate"] for run in runs)
            cpu = statistics.median(run[key]["cpu_us"] for run in runs)
            errors = sum(run[key]["errors"] for run in runs)
            print(
                f"{protocol.label:<24} {protocol.baseline:<14} {level:>8} {rate:>8.0f} {cpu:>7.0f} "
                f"{cpu_x:>6.2f} {rate_x:>7.2f} {errors:>6.0f}"
            )
            if protocol.label != protocol.baseline:
                met = met and cpu_x <= PROTOCOL_GOAL and errors == 0
    within = f"every adapter within {PROTOCOL_GOAL - 1:.0%} of its native route"
    print(f"goal {'met' if met else 'NOT met'}: {within}")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1000, help="requests per concurrency level")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all targets; medians are shown")
    parser.add_argument("--store", default="memory://", help="session store URL for the picoflow server")
    parser.add_argument(
        "--only", choices=("http", "protocols"), help="run one part: the HTTP targets or the protocols"
    )
    parser.add_argument("--serve", choices=("bare", "picoflow", "protocols"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.store)
        return

    print(
        f"picoflow HTTP benchmark: {args.requests} requests per level, {args.rounds} round(s), "
        f"store {args.store}, uvicorn 1 worker"
    )
    if args.only != "protocols":
        http_part(args.requests, args.store, max(1, args.rounds))
    if args.only != "http":
        print_protocols(measure_protocols(args.requests, args.store, max(1, args.rounds)))


def http_part(requests: int, store_url: str, rounds: int) -> bool:
    """The HTTP targets' tables and their ratios to bare FastAPI; whether the goal is met."""
    runs = measure(requests, store_url, rounds)
    results = {label: median_rows(measured) for label, measured in runs.items()}
    for kind, title in (
        ("raw", "keep-alive HTTP/1.1 client (server-bound)"),
        ("httpx", "httpx.AsyncClient per session (client-bound: httpx costs more CPU than the server)"),
    ):
        print(f"\n{title}")
        print(
            f"{'target':<20} {'sessions':>8} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} "
            f"{'server CPU µs':>14}"
        )
        for label, rows in results.items():
            for level in LEVELS:
                row = rows[(kind, level)]
                print(
                    f"{label:<20} {level:>8} {row['rate']:>9.0f} {row['p50']:>8.2f} {row['p99']:>8.2f} "
                    f"{row['errors']:>7.0f} {row['cpu_us']:>14.0f}"
                )
    return print_ratios(runs)


if __name__ == "__main__":
    main()
