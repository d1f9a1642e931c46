"""The HTTP contract, checked by a fuzzer: schemathesis, every check and every phase (examples,
coverage, fuzzing, and the stateful phase that follows the document's links from a created session
to the routes that take its id), against a live ``picoflow serve`` of ``contract_app``.

The seed is fixed, so a failure reproduces; the allowances, each a rule a schema cannot state, are
in ``schemathesis.toml`` beside this file. The case count and seed are printed for the record.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
TESTS = HERE.parent
SEED = 29
VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(url: str, server: subprocess.Popen[bytes], log: Path) -> bool:
    """Wait for ``/readyz`` to answer 200 (False when the server exited first, its port taken)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)  # polling a starting process; nothing else waits on this
    raise AssertionError(f"picoflow serve did not get ready:\n{log.read_text()}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    picoflow = shutil.which("picoflow", path=str(VENV_BIN)) or "picoflow"
    log = tmp_path_factory.mktemp("contract") / "serve.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    for _ in range(3):  # a port found free may be taken before the server binds it
        port = _free_port()
        command = [picoflow, "serve", "--port", str(port), "--store", "memory://", "--no-warm"]
        command += [
            "--flows",
            "server.contract_app:ContractFlow",
            "--model",
            "python:server.contract_app:model",
        ]
        with log.open("wb") as out:
            server = subprocess.Popen(
                [*command, "--log-level", "warning"], cwd=TESTS, env=env, stdout=out, stderr=out
            )
        url = f"http://127.0.0.1:{port}"
        try:
            if _ready(url, server, log):
                yield url
                return
        finally:
            server.terminate()
            server.wait(30)
    raise AssertionError(f"picoflow serve could not bind a port:\n{log.read_text()}")


def test_schemathesis_finds_no_fault_in_the_contract(served: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    st = shutil.which("st", path=str(VENV_BIN)) or "st"
    command = [
        st,
        "--no-color",
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "run",
        f"{served}/openapi.json",
    ]
    command += ["--checks", "all", "--seed", str(SEED), "--report", "json", "--report-json-path", str(report)]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    found = json.loads(report.read_text())
    cases = found["test_cases"]
    print(f"schemathesis {found['schemathesis_version']}: seed {found['seed']}, {cases['generated']} cases")
    assert found["seed"] == SEED and found["complete"] and found["stop_reason"] == "completed"
    assert {name: phase["status"] for name, phase in found["phases"].items()} == {
        "examples": "success",
        "coverage": "success",
        "fuzzing": "success",
        "stateful": "success",
    }
    assert found["operations"]["tested"] == found["operations"]["total"] >= 27
    assert cases["with_failures"] == 0 and cases["unique_failures"] == 0 and cases["errored"] == 0
    assert found["failures"] == [] and found["errors"] == []
    assert cases["generated"] > 2000  # a run that tried little proves little
