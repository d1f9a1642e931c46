"""Approvals across OS processes on one SQLite file or PostgreSQL database: a call proposed in one
process is decided in another, two deciding at once run it once, and a process killed while it
carries a decision out never has the call run again.

Each process is ``approval_worker.py`` with a one-step flow on a scripted model; its gated tool
appends a line per run to a file of the test's folder, so runs are counted across processes.
Processes are synchronised through their stdin and stdout, never by sleeping; every wait has a
60-second guard that fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from store_helpers import Backend

from picoflow.sessions import Session
from picoflow.testing import lines as lines_of

WORKER = Path(__file__).with_name("approval_worker.py")
GUARD = 60  # seconds: a hang guard, never a synchronisation
REFUND = 'Desk | assistant: -> refund({"order_id": 7}) #c1'

Spawn = Callable[..., Awaitable[asyncio.subprocess.Process]]


@pytest.fixture
async def spawn(sql_backend: Backend, tmp_path: Path) -> AsyncIterator[Spawn]:
    """Start ``approval_worker.py COMMAND URL FOLDER ...``; any still running when the test ends is
    killed first, so a failed test leaves no worker writing into the next test's database."""
    started: list[asyncio.subprocess.Process] = []

    async def start(command: str, *args: str) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            command,
            str(sql_backend.url),
            str(tmp_path),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def finish(process: asyncio.subprocess.Process) -> dict[str, Any]:
    """The JSON line a worker printed last, once it exited cleanly."""
    async with asyncio.timeout(GUARD):
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    return dict(json.loads(stdout.decode().splitlines()[-1]))


async def expect_line(process: asyncio.subprocess.Process, expected: bytes) -> None:
    """Wait until the worker prints ``expected`` (it dying first fails the test with its stderr)."""
    assert process.stdout is not None and process.stderr is not None
    async with asyncio.timeout(GUARD):
        line = await process.stdout.readline()
        if line != expected:
            raise AssertionError(f"{line!r}: {(await process.stderr.read()).decode()}")


async def run(spawn: Spawn, command: str, *args: str) -> dict[str, Any]:
    return await finish(await spawn(command, *args))


def lines(folder: Path, name: str) -> list[str]:
    path = folder / name
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def runs(folder: Path) -> list[str]:
    """The idempotency key of every run of the tool, in every process."""
    return [line.split()[0] for line in lines(folder, "effects.log")]


async def proposed(spawn: Spawn) -> tuple[str, str]:
    """A session whose refund waits for approval, proposed by a process that then exited."""
    done = await run(spawn, "propose")
    assert done["error"] is None and done["step"] == "Desk"
    [approval] = done["pending"]
    assert (approval["summary"], approval["status"]) == ("Refund order 7", "pending")
    assert done["message"] == "Waiting for approval: Refund order 7 (the customer must approve)"
    return str(done["session_id"]), str(approval["id"])


async def stored(sql_backend: Backend, session_id: str) -> tuple[Session, list[str]]:
    """The session as the database holds it, and its transcript one line per message."""
    store = sql_backend.open()
    session = await store.load(session_id)
    assert session is not None
    return session, lines_of(await store.transcript(session_id), width=1000)


async def test_a_call_proposed_by_one_process_runs_once_when_another_approves_it(
    sql_backend: Backend, spawn: Spawn, tmp_path: Path
) -> None:
    session_id, approval_id = await proposed(spawn)
    session, _ = await stored(sql_backend, session_id)
    assert session.status == "awaiting_approval" and runs(tmp_path) == []

    done = await run(spawn, "decide", session_id, approval_id)
    assert done["error"] is None and done["message"] == "Refunded order 7." and done["pending"] == []
    assert runs(tmp_path) == [approval_id]
    session, transcript = await stored(sql_backend, session_id)
    assert session.status == "running" and session.paused is None
    assert [(a.id, a.status, a.decided_by) for a in session.approvals] == [
        (approval_id, "approved", "cust-1")
    ]
    assert transcript == [
        "Desk | user: refund order 7 please",
        REFUND,
        "Desk | tool refund #c1: refunded order 7",
        "Desk | assistant: Refunded order 7.",
    ]


async def test_two_processes_approving_at_once_run_the_call_once(
    sql_backend: Backend, spawn: Spawn, tmp_path: Path
) -> None:
    session_id, approval_id = await proposed(spawn)
    deciders = [await spawn("decide", session_id, approval_id, "--barrier") for _ in range(2)]
    # Both have loaded the session, still pending, before either takes the decision.
    for decider in deciders:
        await expect_line(decider, b"loaded\n")
    for decider in deciders:
        assert decider.stdin is not None
        decider.stdin.write(b"go\n")
        await decider.stdin.drain()
    results = [await finish(decider) for decider in deciders]

    winners = [r for r in results if r["error"] is None]
    losers = [r for r in results if r["error"] is not None]
    assert len(winners) == 1 and len(losers) == 1
    assert winners[0]["message"] == "Refunded order 7."
    # Both loaded the same revision: the loser's compare-and-swap claim failed, and it ran nothing.
    assert losers[0]["error"] == "ApprovalConflict"
    assert runs(tmp_path) == [approval_id]
    session, transcript = await stored(sql_backend, session_id)
    assert session.status == "running" and [a.status for a in session.approvals] == ["approved"]
    assert transcript[2:] == [
        "Desk | tool refund #c1: refunded order 7",
        "Desk | assistant: Refunded order 7.",
    ]


async def test_a_process_killed_while_carrying_out_a_decision_never_has_the_call_run_again(
    sql_backend: Backend, spawn: Spawn, tmp_path: Path
) -> None:
    session_id, approval_id = await proposed(spawn)
    decider = await spawn("decide", session_id, approval_id, "--hang")
    await expect_line(decider, b"started\n")  # the claim is saved and the tool is running
    os.kill(decider.pid, signal.SIGKILL)
    async with asyncio.timeout(GUARD):
        await decider.wait()
    assert decider.returncode == -signal.SIGKILL
    assert lines(tmp_path, "started.log") == [f"{approval_id} {decider.pid}"] and runs(tmp_path) == []

    # What the killed process left: the decision taken and claimed, its result unknown.
    session, transcript = await stored(sql_backend, session_id)
    assert session.status == "awaiting_approval" and session.paused is not None
    assert session.paused.resuming_since is not None
    assert [(a.status, a.decided_by) for a in session.approvals] == [("approved", "cust-1")]
    assert transcript == ["Desk | user: refund order 7 please", REFUND]

    # Within the lease a new message is refused, and deciding again runs nothing.
    waiting = await run(spawn, "message", session_id, "did it work?", "300")
    assert waiting["error"] == "ApprovalPending"
    again = await run(spawn, "decide", session_id, approval_id)
    assert again["error"] == "ApprovalDecided"
    assert len(lines(tmp_path, "started.log")) == 1 and runs(tmp_path) == []

    # Once the lease is over, the call is answered as of unknown result and never run.
    answered = await run(spawn, "message", session_id, "did it work?", "0")
    assert answered["error"] is None and answered["pending"] == []
    assert answered["message"] == "I cannot tell whether order 7 was refunded; let me check."
    session, transcript = await stored(sql_backend, session_id)
    assert session.status == "running" and session.paused is None
    assert [(a.id, a.status, a.decided_by) for a in session.approvals] == [
        (approval_id, "approved", "cust-1")
    ]
    assert transcript == [
        "Desk | user: refund order 7 please",
        REFUND,
        "Desk | tool refund #c1 (error): The result of refund is unknown: the process running it stopped "
        "before it answered. It was not run again; check whether it had its effect before calling it again.",
        "Desk | user: did it work?",
        "Desk | assistant: I cannot tell whether order 7 was refunded; let me check.",
    ]
    after = await run(spawn, "decide", session_id, approval_id)
    assert after["error"] == "ApprovalDecided"
    assert len(lines(tmp_path, "started.log")) == 1 and runs(tmp_path) == []
