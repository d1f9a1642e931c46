"""llama.cpp in a child process of its own, spoken to over its HTTP endpoint on 127.0.0.1.

Building ``xllamacpp.Server`` holds the GIL for the whole load (2–12 s on a 2-core machine). In
the process that serves the chat page, that stalled every request meanwhile — ``/healthcheck``,
``/readyz``, the page's own files. In a child process the load runs beside the server, and a
crash in llama.cpp cannot take the server down. The child runs the same llama.cpp server
handlers ``handle_chat_completions`` calls in-process; a key known only to the parent guards it.

Run as ``python -m picoflow.models.local._process``: it reads its settings as one JSON line on
stdin, answers ``{"url": ...}`` (or ``{"error": ...}``) on stdout once loaded, and exits when its
stdin closes — when the parent closes it or exits in any way.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import IO, Any

__all__ = ["LlamaProcess", "LlamaProcessError"]

# A proxy from the environment must never be asked for 127.0.0.1.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_READ_TIMEOUT = 900.0
"""Seconds without a byte from llama.cpp before a request is given up: a long prompt on a slow CPU
is read for minutes before the first byte of an unstreamed answer."""


class LlamaProcessError(Exception):
    """The child process could not load the model, or is gone."""


class LlamaProcess:
    """A started child process with a loaded model, and requests to it."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        """Start the child and wait until the model is loaded (blocking; releases the GIL meanwhile).

        ``settings``: ``path``, ``n_ctx``, ``threads``, ``batch_threads``, ``slot_save_path``, ``verbose``.
        """
        self.api_key = secrets.token_urlsafe(24)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "picoflow.models.local._process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if settings.get("verbose") else subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            # The key goes through the pipe, not the command line other users can read.
            self.process.stdin.write(json.dumps({**settings, "api_key": self.api_key}) + "\n")
            self.process.stdin.flush()
            answer = json.loads(self.process.stdout.readline() or "{}")
        except (OSError, ValueError):
            answer = {}
        if "url" not in answer:
            self.close()
            reason = answer.get("error") or f"it stopped with exit code {self.process.returncode}"
            raise LlamaProcessError(f"llama.cpp could not load the model: {reason}")
        self.url: str = answer["url"].rstrip("/")
        self.version: str = str(answer.get("version") or "unknown")

    def close(self) -> None:
        """Stop the child: closing its stdin tells it to exit."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def _request(self, path: str, body: Mapping[str, Any]) -> urllib.request.Request:
        return urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
            method="POST",
        )

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON; the JSON answer, also for an error status (llama.cpp explains it)."""
        try:
            with _LOCAL.open(self._request(path, body), timeout=_READ_TIMEOUT) as response:
                return _json(response)
        except urllib.error.HTTPError as error:
            return _json(error)
        except (urllib.error.URLError, OSError) as error:
            raise LlamaProcessError(f"the llama.cpp process does not answer ({error})") from error

    @contextlib.contextmanager
    def stream(self, path: str, body: Mapping[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
        """The chunks of a streamed answer; leaving the block early closes the connection, which
        makes llama.cpp stop generating."""
        try:
            response = _LOCAL.open(self._request(path, body), timeout=_READ_TIMEOUT)
        except urllib.error.HTTPError as error:
            yield iter([_json(error)])
            return
        except (urllib.error.URLError, OSError) as error:
            raise LlamaProcessError(f"the llama.cpp process does not answer ({error})") from error
        with response:
            yield _events(response)


def _json(source: IO[bytes]) -> dict[str, Any]:
    try:
        value = json.loads(source.read() or b"{}")
    except ValueError:
        return {"error": {"message": "llama.cpp sent an answer that is not JSON"}}
    return value if isinstance(value, dict) else {"error": {"message": "llama.cpp sent an unexpected answer"}}


def _events(response: IO[bytes]) -> Iterator[dict[str, Any]]:
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line.removeprefix("data:").strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        if isinstance(chunk, dict):
            yield chunk


# --- the child ---------------------------------------------------------------------------------------


def _serve(settings: Mapping[str, Any]) -> Any:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(settings["path"])
    params.n_ctx = int(settings["n_ctx"])
    params.n_parallel = 1
    # llama.cpp tells a prompt's progress after each batch it decodes: a batch of one ubatch (512
    # tokens, its default) tells it every 512 tokens rather than once per 2,048. The ubatches are
    # the same either way, and so are the answers (their logprobs compared equal).
    params.n_batch = params.n_ubatch
    params.cpuparams.n_threads = int(settings["threads"])
    params.cpuparams_batch.n_threads = int(settings["batch_threads"])
    params.warmup = False
    params.verbosity = 3 if settings.get("verbose") else -1
    params.slot_save_path = str(settings.get("slot_save_path") or "")
    params.api_keys = [str(settings["api_key"])]
    return xllamacpp.Server(params), str(getattr(xllamacpp, "__version__", "unknown"))


def main() -> None:
    # Ctrl-C reaches the whole process group: the parent decides, and closes our stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        settings = json.loads(sys.stdin.readline())
        server, version = _serve(settings)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        sys.exit(1)
    print(json.dumps({"url": server.listening_address, "version": version}), flush=True)
    sys.stdin.read()  # until the parent closes the pipe or exits
    os._exit(0)  # llama.cpp's threads need no orderly teardown


if __name__ == "__main__":
    main()
