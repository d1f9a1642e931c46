"""PostgreSQL going down and coming back, on a cluster of the test's own (never the shared one on 5432).

While the database is down every request answers 503 ``store_unavailable`` with Retry-After soon,
instead of queueing behind one connect attempt after another; once it is back, turns work again
within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from picoflow.exceptions import StoreUnavailable
from picoflow.sessions import MemoryStore, PostgresStore
from picoflow.sessions.health import StoreCheck, store_check

from .support import client_for, desk_engine

CONNECT_TIMEOUT = 2.0


@dataclass
class Cluster:
    """A PostgreSQL cluster in a temporary folder, on its own port, run by ``pg_ctl``."""

    bin: Path
    data: Path
    port: int
    user: str | None  # initdb refuses to run as root: then the cluster runs as this user

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        # -w: pg_ctl returns once the server accepts connections, so no waiting is needed here.
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.data / "log"), "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    assert found, "PostgreSQL's initdb is not installed (/usr/lib/postgresql/*/bin)"
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        pwd.getpwnam(user)  # the Debian package's user runs the cluster
    # Not pytest's tmp_path: that is private to root, and the cluster's user must reach its folder.
    folder = Path(tempfile.mkdtemp(prefix="picoflow-pg-"))
    folder.chmod(0o755)
    data = folder / "data"
    data.mkdir()
    if user is not None:
        shutil.chown(data, user)
    node = Cluster(Path(found[-1]).parent, data, free_port(), user)
    node.init()
    node.start()
    try:
        yield node
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped by the test
            node.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def timed(client: httpx.AsyncClient, session: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    reply = await client.post(f"/v1/sessions/{session}/turns", json={"message": "hello"})
    return reply, time.monotonic() - started


async def test_requests_fail_fast_while_postgres_is_down_and_work_soon_after_it_returns(
    cluster: Cluster,
) -> None:
    store = PostgresStore(cluster.url, connect_timeout=CONNECT_TIMEOUT)
    engine = desk_engine(store=store)
    try:
        async with client_for(engine) as client:
            first = await client.post("/v1/flows/desk/sessions", json={"message": "hi"})
            assert first.status_code == 201, first.text
            session = first.json()["session_id"]

            await asyncio.to_thread(cluster.stop)
            replies = await asyncio.gather(*(timed(client, session) for _ in range(50)))
            # The kind: the routes' own store guard still names every store failure store_error;
            # the store's StoreUnavailable (kind store_unavailable) is checked directly below.
            assert [
                (
                    reply.status_code,
                    reply.json()["error"]["retryable"],
                    int(reply.headers["retry-after"]) >= 1,
                )
                for reply, _ in replies
            ] == [(503, True, True)] * 50
            slowest = max(seconds for _, seconds in replies)
            assert slowest < 2 * CONNECT_TIMEOUT, f"the slowest 503 took {slowest:.2f}s"

            # Later requests meet the open breaker and fail at once, without a connect attempt.
            again, seconds = await timed(client, session)
            assert again.status_code == 503 and seconds < CONNECT_TIMEOUT / 2
            with pytest.raises(StoreUnavailable) as refused:
                await store.load(session)
            assert type(refused.value) is StoreUnavailable and refused.value.status == 503
            assert refused.value.retry_after is not None and 0 < refused.value.retry_after <= 2

            await asyncio.to_thread(cluster.start)
            back = time.monotonic()
            while True:
                reply, _ = await timed(client, session)
                if reply.status_code == 200:
                    break
                assert reply.status_code == 503, reply.text
                assert time.monotonic() - back < 5, "turns still failed 5 s after PostgreSQL returned"
                # A client's retry pace; the breaker lets its probe through within 2 s.
                await asyncio.sleep(0.1)
            assert time.monotonic() - back < 5
            stored = await client.get(f"/v1/sessions/{session}")
            assert stored.status_code == 200 and stored.json()["turns"] == 2
    finally:
        await engine.aclose()


async def test_requests_to_a_postgres_down_from_the_start_share_one_connect_attempt(cluster: Cluster) -> None:
    cluster.stop()
    store = PostgresStore(cluster.url, connect_timeout=CONNECT_TIMEOUT)
    engine = desk_engine(store=store)
    try:
        async with client_for(engine) as client:

            async def start() -> tuple[int, bool, float]:
                started = time.monotonic()
                reply = await client.post("/v1/flows/desk/sessions", json={"message": "hi"})
                return reply.status_code, "retry-after" in reply.headers, time.monotonic() - started

            replies = await asyncio.gather(*(start() for _ in range(50)))
            assert [(status, hinted) for status, hinted, _ in replies] == [(503, True)] * 50
            slowest = max(seconds for _, _, seconds in replies)
            # One attempt of CONNECT_TIMEOUT for all 50, not 50 of them one after another.
            assert slowest < 2 * CONNECT_TIMEOUT, f"the slowest 503 took {slowest:.2f}s"
    finally:
        await engine.aclose()


async def test_readyz_reports_the_store_and_healthcheck_stays_liveness(cluster: Cluster) -> None:
    store = PostgresStore(cluster.url, connect_timeout=CONNECT_TIMEOUT)
    engine = desk_engine(store=store)
    check = store_check(store)
    assert check is not None
    check.ttl = 0.0  # every probe pings here; the cache has a test of its own
    try:
        async with client_for(engine) as client:
            ready = await client.get("/readyz")
            assert (ready.status_code, ready.json()) == (
                200,
                {"status": "ready", "phase": "ready", "message": "Ready.", "store": "ok"},
            )
            await asyncio.to_thread(cluster.stop)
            started = time.monotonic()
            down = await client.get("/readyz")
            assert time.monotonic() - started < CONNECT_TIMEOUT
            assert (down.status_code, down.json()) == (
                503,
                {"status": "ready", "phase": "ready", "message": "Ready.", "store": "unavailable"},
            )
            assert (await client.get("/healthcheck")).status_code == 200

            await asyncio.to_thread(cluster.start)
            back = time.monotonic()
            while (await client.get("/readyz")).status_code != 200:
                assert time.monotonic() - back < 5, "/readyz still 503 5 s after PostgreSQL returned"
                await asyncio.sleep(0.1)  # a load balancer's probe pace
    finally:
        await engine.aclose()


async def test_store_pings_are_shared_and_cached() -> None:
    pings = 0
    release = asyncio.Event()

    async def ping() -> None:
        nonlocal pings
        pings += 1
        await release.wait()

    check = StoreCheck(ping, timeout=60, ttl=3600)
    probes = [asyncio.create_task(check.health()) for _ in range(5)]
    release.set()
    assert await asyncio.gather(*probes) == ["ok"] * 5
    assert await check.health() == "ok"
    assert pings == 1

    async def failing() -> None:
        raise OSError("connection refused")

    refused = StoreCheck(failing, ttl=0)
    assert [await refused.health(), await refused.health()] == ["unavailable", "unavailable"]
    assert store_check(MemoryStore()) is None
