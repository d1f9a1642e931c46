"""llama.cpp's own HTTP server, started from ``xllamacpp`` on a free loopback port, for tests that
need a real OpenAI-compatible server.

It serves the embedded model's GGUF (no other weights) with the model's own chat template (jinja
on), as a user running ``llama-server --jinja`` would. It runs in a child process: loading holds the
GIL for seconds, and a crash in llama.cpp must not take the test run with it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from picoflow.models.local import choose_threads
from picoflow.models.local._weights import MODEL_FILENAME, model_dir

_CHILD = """
import json, os, sys
import xllamacpp

settings = json.loads(sys.stdin.readline())
params = xllamacpp.CommonParams()
params.model.path = settings["path"]
params.n_ctx = settings["n_ctx"]
params.n_parallel = 1
params.cpuparams.n_threads = settings["threads"]
params.cpuparams_batch.n_threads = max(2, settings["threads"])
params.warmup = False
params.verbosity = -1
params.use_jinja = True
params.hostnames = ["127.0.0.1"]
params.port = settings["port"]
params.api_keys = [settings["api_key"]]
try:
    server = xllamacpp.Server(params)
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    sys.exit(1)
print(json.dumps({"url": server.listening_address}), flush=True)
sys.stdin.read()  # until the test run closes the pipe or exits
os._exit(0)
"""

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
READY_WITHIN = 120.0
"""Seconds llama.cpp may take to load the model and answer its health check on a busy 2-core machine."""


def gguf_path() -> Path:
    """The embedded model's weights; the test fails (never skips) when they are not there."""
    path = model_dir() / MODEL_FILENAME
    if not path.is_file():
        pytest.fail(
            f"the embedded model's weights are not at {path}: fetch them once with "
            "`python -m picoflow.models.local` (or set PICOFLOW_MODEL_DIR to where they are)"
        )
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with _NO_PROXY.open(f"{url}/health", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False  # 503 while loading, or not listening yet


@contextlib.contextmanager
def llama_server(api_key: str, *, n_ctx: int = 4096) -> Iterator[str]:
    """A running llama.cpp server; yields its base URL (``http://127.0.0.1:PORT``)."""
    settings = {
        "path": str(gguf_path()),
        "n_ctx": n_ctx,
        "threads": choose_threads(),
        "port": _free_port(),
        "api_key": api_key,
    }
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        # The key goes through the pipe, not the command line.
        child.stdin.write(json.dumps(settings) + "\n")
        child.stdin.flush()
        answer = json.loads(child.stdout.readline() or "{}")  # written once the model is loaded
        if "url" not in answer:
            pytest.fail(f"llama.cpp's server did not start: {answer.get('error') or child.poll()}")
        url = f"http://127.0.0.1:{settings['port']}"
        deadline = time.monotonic() + READY_WITHIN
        while not _healthy(url):  # readiness as llama.cpp reports it
            if time.monotonic() > deadline:
                pytest.fail(f"llama.cpp's server at {url} never became healthy")
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(0.2)  # between polls, notice at once if the server died
                pytest.fail(f"llama.cpp's server stopped with exit code {child.returncode}")
        yield url
    finally:
        with contextlib.suppress(OSError):
            child.stdin.close()  # the child exits when its stdin closes
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()
