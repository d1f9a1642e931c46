"""The HTTP contract, checked by a fuzzer: schemathesis, every check and every phase (examples,
coverage, fuzzing, and the stateful phase that follows the document's links from a created session
to the routes that take its id), against a live ``picoflow serve`` of each application of
``contract_app``:

* ``desk``: a flow whose model answers every turn, so the server's own answers are under test.
  Its seed is fixed (29): the same cases on every run.
* ``demos``: the demos' flows with a model that fails some turns (no acceptable answer, an unusable
  one, an outage), so every way a turn can end is met on every route that runs one. Its seed is
  fresh on each run, to try cases no earlier run tried; it is printed with the result and in a
  failure, and ``PICOFLOW_CONTRACT_SEED=N`` replays that run.

The allowances, each a rule a schema cannot state, are in ``schemathesis.toml`` beside this file,
and what the fuzzer cannot tell by itself in ``contract_hooks.py``.
``PICOFLOW_CONTRACT_EXAMPLES`` sets the examples per operation (default 100), for a longer run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
TESTS = HERE.parent
VENV_BIN = Path(sys.executable).parent
EXAMPLES = int(os.environ.get("PICOFLOW_CONTRACT_EXAMPLES", "100"))
MIN_OPERATIONS = 27
ALLOWANCES = tomllib.loads((HERE / "schemathesis.toml").read_text(encoding="utf-8"))
MIN_CASES = 2000
"""A run that tried fewer cases proves little."""
DEMOS_DATE = "2027-07-15"
"""Today, for every demo flow that reads one: the same answers on any day the test runs."""


@dataclass(frozen=True)
class Application:
    """What ``picoflow serve`` serves for one run of the fuzzer."""

    flows: list[str]
    model: str
    seed: int | None
    """None: a fresh one each run (``PICOFLOW_CONTRACT_SEED`` replays one)."""
    env: dict[str, str] = field(default_factory=dict)
    meets: tuple[str, ...] = ()
    """The kinds of failed turn the run must meet (the server logs each), so it tried what it is for."""


APPLICATIONS = {
    "desk": Application(
        ["--flows", "server.contract_app:ContractFlow"],
        "python:server.contract_app:model",
        seed=29,
    ),
    "demos": Application(
        [],  # picoflow serve's default: the demos' flows
        "python:server.contract_app:unreliable_model",
        seed=None,
        meets=("attempts_exhausted", "model_error", "model_unavailable"),  # 502, 502, 503
        env={
            **{f"{flow}_FLOW_CURRENT_DATE": DEMOS_DATE for flow in ("HOTEL", "ORDERS", "TRAVEL", "INVOICE")},
            "PICOFLOW_ORDERS_DB": "orders.sqlite3",  # in the run's own folder
            "PICOFLOW_INVOICE_DB": "invoices.sqlite3",
        },
    ),
}


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


def _python_path() -> str:
    """The tests' folder, then the caller's PYTHONPATH made absolute (the server runs elsewhere)."""
    given = [
        str(Path(entry).resolve()) for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry
    ]
    return os.pathsep.join([str(TESTS), *given])


@pytest.fixture(scope="module", params=sorted(APPLICATIONS))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Application, Path]]:
    application = APPLICATIONS[request.param]
    picoflow = shutil.which("picoflow", path=str(VENV_BIN)) or "picoflow"
    folder = tmp_path_factory.mktemp(f"contract-{request.param}")
    log = folder / "serve.log"
    env = {**os.environ, **application.env, "PYTHONPATH": _python_path()}
    for _ in range(3):  # a port found free may be taken before the server binds it
        port = _free_port()
        command = [picoflow, "serve", "--port", str(port), "--store", "memory://", "--no-warm"]
        command += [*application.flows, "--model", application.model, "--log-level", "warning"]
        with log.open("wb") as out:
            server = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=out)
        url = f"http://127.0.0.1:{port}"
        try:
            if _ready(url, server, log):
                yield url, application, log
                return
        finally:
            server.terminate()
            server.wait(30)
    raise AssertionError(f"picoflow serve could not bind a port:\n{log.read_text()}")


def test_schemathesis_finds_no_fault_in_the_contract(
    served: tuple[str, Application, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, application, log = served
    if application.seed is not None:
        seed = application.seed
        replay = f"seed {seed}"
    else:
        chosen = os.environ.get("PICOFLOW_CONTRACT_SEED")
        seed = int(chosen) if chosen else secrets.randbelow(2**31)
        replay = f"seed {seed} (replay: PICOFLOW_CONTRACT_SEED={seed} pytest '{request.node.nodeid}')"
    report = tmp_path / "report.json"
    st = shutil.which("st", path=str(VENV_BIN)) or "st"
    command = [
        st,
        "--no-color",
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "run",
        f"{url}/openapi.json",
    ]
    command += ["--checks", "all", "--seed", str(seed), "--max-examples", str(EXAMPLES)]
    command += ["--report", "json", "--report-json-path", str(report)]
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": _python_path(), "SCHEMATHESIS_HOOKS": "server.contract_hooks"}
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    took = time.monotonic() - started
    assert run.returncode == 0, f"{replay}\n{run.stdout[-20000:]}{run.stderr[-5000:]}"
    found = json.loads(report.read_text())
    cases = found["test_cases"]
    print(
        f"schemathesis {found['schemathesis_version']}: {replay}, {EXAMPLES} examples per operation, "
        f"{cases['generated']} cases in {took:.0f} s"
    )
    assert found["seed"] == seed and found["complete"] and found["stop_reason"] == "completed", replay
    assert {name: phase["status"] for name, phase in found["phases"].items()} == {
        "examples": "success",
        "coverage": "success",
        "fuzzing": "success",
        "stateful": "success",
    }, replay
    # Every operation but those schemathesis.toml leaves out, each with its reason.
    left_out = sum(1 for operation in ALLOWANCES.get("operations", []) if operation.get("enabled") is False)
    assert found["operations"]["tested"] == found["operations"]["total"] - left_out >= MIN_OPERATIONS
    assert cases["with_failures"] == 0 and cases["unique_failures"] == 0 and cases["errored"] == 0, replay
    assert found["failures"] == [] and found["errors"] == [], replay
    assert cases["generated"] > MIN_CASES, replay
    met = set(re.findall(r"picoflow turn failed \[(\w+)\]", log.read_text(errors="replace")))
    assert set(application.meets) <= met, (replay, met)
