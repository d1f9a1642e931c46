"""Several OS processes on one SQLite file or PostgreSQL database: no lost update, no torn write."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
from store_helpers import BIG_RESULT, Backend, crash_turn, new_session, play_turn, tag_of

from picoflow.sessions import SessionStore

WORKER = Path(__file__).with_name("store_worker.py")


Spawn = Callable[..., Awaitable[asyncio.subprocess.Process]]


@pytest.fixture
async def spawn() -> AsyncIterator[Spawn]:
    """Start ``store_worker.py`` processes; any still running when the test ends is killed first,
    so a failed test leaves no worker writing into the next test's database."""
    started: list[asyncio.subprocess.Process] = []

    async def start(*args: str) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
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


async def release(workers: list[asyncio.subprocess.Process]) -> None:
    """The barrier of ``store_worker.py``: once every worker printed ``ready``, tell them all to go."""
    async with asyncio.timeout(60):
        for worker in workers:
            assert worker.stdout is not None
            line = await worker.stdout.readline()
            if line != b"ready\n":  # it died before the barrier: show why
                assert worker.stderr is not None
                raise AssertionError((await worker.stderr.read()).decode())
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(b"go\n")
        await worker.stdin.drain()


async def finish(process: asyncio.subprocess.Process) -> str:
    async with asyncio.timeout(60):
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    return stdout.decode()


async def test_two_processes_hammering_one_session_lose_no_update(sql_backend: Backend, spawn: Spawn) -> None:
    store = sql_backend.open()
    session = new_session("shared-1")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))

    workers = [await spawn("hammer", str(sql_backend.url), "shared-1", "1.5", f"p{n}") for n in (1, 2)]
    await release(workers)
    results = [json.loads(await finish(worker)) for worker in workers]

    won = [tag for result in results for tag in result["won"]]
    conflicts = sum(result["conflicts"] for result in results)
    assert conflicts > 0, "the two writers never overlapped, so the test proved nothing"
    final = await store.load("shared-1")
    assert final is not None
    assert final.revision == 1 + len(won)
    assert final.turns == 1 + len(won)
    transcript = await store.transcript("shared-1")
    assert sorted(tag_of(m) for m in transcript if m.role == "user") == sorted(["t1", *won])
    assert [m.seq for m in transcript] == list(range(4 * (1 + len(won))))
    # Each process's own wins are in the order it made them.
    for result in results:
        mine = [tag_of(m) for m in transcript if tag_of(m) in set(result["won"])]
        assert mine == result["won"]


async def wait_for_backend_exit(backend: Backend, application_name: str) -> None:
    """A killed client's server backend may still be finishing its statement; wait for it to end."""
    if backend.kind != "postgres":
        return
    assert backend.postgres_url is not None
    deadline = time.time() + 20
    with psycopg.connect(backend.postgres_url, autocommit=True) as conn:
        while time.time() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"the killed worker's PostgreSQL backend {application_name} did not exit")


async def check_committed_state(store: SessionStore, session_id: str) -> int:
    """The stored session is exactly some committed turn N: never a partial write."""
    session = await store.load(session_id)
    assert session is not None
    turns = session.revision
    assert session.turns == turns
    assert session.states["ask"] == {"count": turns, "last": f"t{turns}"}
    assert session.next_seq == 4 * turns
    transcript = await store.transcript(session_id)
    assert [m.seq for m in transcript] == list(range(4 * turns))
    assert [tag_of(m) for m in transcript if m.role == "user"] == [f"t{n}" for n in range(1, turns + 1)]
    assert all(m.content == BIG_RESULT for m in transcript if m.role == "tool")
    # ``crash_turn`` erases memory before every turn that follows a multiple of 7.
    start = 4 * 7 * ((turns - 1) // 7)
    assert session.memory["ask"].start == start
    assert session.memory["ask"].messages == transcript[start:]
    return turns


async def test_a_killed_writer_leaves_exactly_a_committed_turn(sql_backend: Backend, spawn: Spawn) -> None:
    store = sql_backend.open()
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    committed = 0
    for round_ in range(3):
        application_name = f"pf_crash_{uuid.uuid4().hex[:12]}"
        url = (
            sql_backend.url_with(application_name=application_name)
            if sql_backend.kind == "postgres"
            else None
        )
        worker = await spawn("crash", url or str(sql_backend.url), "crash-1")
        assert worker.stdout is not None
        target = committed + rng.randint(2, 12)
        printed = committed
        try:
            while printed < target:
                line = await asyncio.wait_for(worker.stdout.readline(), 60)
                assert line, "the crash worker exited on its own"
                printed = int(line)
            await asyncio.sleep(rng.uniform(0, 0.02))
        finally:
            os.kill(worker.pid, signal.SIGKILL)
            await worker.wait()
        # Every commit the worker reported before it died, not only those read so far.
        printed = max([printed, *(int(line) for line in (await worker.stdout.read()).split())])
        await wait_for_backend_exit(sql_backend, application_name)

        committed = await check_committed_state(store, "crash-1")
        assert committed >= printed, f"seed {seed}, round {round_}: a reported commit was lost"
        # At most one turn committed without the worker living to report it.
        assert committed <= printed + 1, f"seed {seed}, round {round_}"

    # The next turn after the crashes saves normally from the loaded revision.
    session = await store.load("crash-1")
    assert session is not None
    assert (
        await store.save(session, expected_revision=committed, appended=crash_turn(session)) == committed + 1
    )
    assert await check_committed_state(store, "crash-1") == committed + 1


async def test_processes_upgrading_at_once_apply_each_migration_once(
    sql_backend: Backend, spawn: Spawn
) -> None:
    workers = [await spawn("upgrade", str(sql_backend.url)) for _ in range(4)]
    await release(workers)
    applied = sorted([json.loads(await finish(worker)) for worker in workers])

    assert applied == [[], [], [], [1, 2, 3, 4]]
    assert sql_backend.sql("SELECT version FROM {p}picoflow_schema_migrations ORDER BY version") == [
        (1,),
        (2,),
        (3,),
        (4,),
    ]
