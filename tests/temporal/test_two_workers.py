"""Two worker processes and two ``picoflow serve --temporal`` processes on one Temporal and one
PostgreSQL: 50 sessions x 5 turns, each turn sent to either server; nothing is lost or
duplicated and every transcript is complete."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import free_port
from picoflow.sessions import open_store

pytestmark = pytest.mark.postgres

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
SESSIONS, TURNS = 50, 5
POSTGRES_CANDIDATES = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://root@127.0.0.1:5432/test",
)


@pytest.fixture
def postgres_store_url() -> Iterator[str]:
    import psycopg

    env = os.environ.get("PICOFLOW_TEST_POSTGRES")
    schema = f"pf_test_{uuid.uuid4().hex[:16]}"
    for url in [env] if env else POSTGRES_CANDIDATES:
        try:
            with psycopg.connect(url, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            continue
        yield f"{url}{'&' if '?' in url else '?'}schema={schema}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        return
    pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432 (start it, or set PICOFLOW_TEST_POSTGRES)")


def start(args: list[str], folder: Path, name: str) -> subprocess.Popen[bytes]:
    # The test's own import path after the flows' folder: the worker runs the code under test.
    path = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PICOFLOW_TEST_DIR": str(folder), "PYTHONPATH": path}
    env.pop("PICOFLOW_API_KEYS", None)
    # The process writes to its own copy of the file; the test's copy is not needed past the start.
    with (folder / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            [str(BIN / "picoflow"), *args], cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT
        )


async def wait_until_serving(http: httpx.AsyncClient, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, f"the server exited with {process.returncode}"
        assert time.monotonic() < deadline, "the server did not start"
        try:
            if (await http.get("/healthcheck")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)


async def test_fifty_sessions_of_five_turns_through_two_servers_and_two_workers(
    temporal_address: str, postgres_store_url: str, tmp_path: Path
) -> None:
    store = open_store(postgres_store_url)
    await store.list_sessions(limit=1)  # the schema made once, before four processes open it
    queue = f"many-{uuid.uuid4().hex[:8]}"
    common = ["--flows", "refund_flows:NoteFlow", "--store", postgres_store_url]
    common += ["--model", "python:refund_flows:note_model"]
    worker = ["worker", "--temporal", temporal_address, "--task-queue", queue, *common]
    ports = [free_port(), free_port()]
    processes = [start(worker, tmp_path, "worker1"), start(worker, tmp_path, "worker2")]
    serve = ["serve", "--host", "127.0.0.1", "--no-warm", "--log-level", "warning", *common]
    serve += ["--temporal", temporal_address, "--task-queue", queue]
    processes += [start([*serve, "--port", str(port)], tmp_path, f"serve{port}") for port in ports]
    servers = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=180) for port in ports]
    try:
        for http, process in zip(servers, processes[2:], strict=True):
            await wait_until_serving(http, process)

        async def conversation(index: int) -> tuple[str, list[str]]:
            replies = []
            first = await servers[index % 2].post(
                "/v1/flows/notes/sessions", json={"message": f"s{index} t0"}
            )
            assert first.status_code == 201, first.text
            sid = first.json()["session_id"]
            replies.append(first.json()["message"])
            for turn in range(1, TURNS):
                response = await servers[(index + turn) % 2].post(
                    f"/v1/sessions/{sid}/turns", json={"message": f"s{index} t{turn}"}
                )
                assert response.status_code == 200, response.text
                replies.append(response.json()["message"])
            return sid, replies

        started = time.monotonic()
        results = await asyncio.gather(*(conversation(i) for i in range(SESSIONS)))
        elapsed = time.monotonic() - started
    finally:
        for http in servers:
            await http.aclose()
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(20)
    print(f"{SESSIONS * TURNS} turns in {elapsed:.1f} s")

    notes = Counter((tmp_path / "notes").read_text().splitlines())
    assert len(notes) == SESSIONS * TURNS and set(notes.values()) == {1}  # every tool ran once
    for index, (sid, replies) in enumerate(results):
        said = [f"s{index} t{turn}" for turn in range(TURNS)]
        assert replies == [f"Noted: {text}" for text in said]
        session = await store.load(sid)
        assert session is not None and session.revision == TURNS and session.turns == TURNS
        assert session.states["Notes"] == {"notes": said}
        transcript = await store.transcript(sid)
        assert [(m.role, m.content) for m in transcript] == [
            pair
            for text in said
            for pair in [
                ("user", text),
                ("assistant", ""),
                ("tool", "Noted."),
                ("assistant", f"Noted: {text}"),
            ]
        ]
        assert {f"{sid} {text}" for text in said} <= set(notes)
    await store.close()
