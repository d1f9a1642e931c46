"""The must-show of durable turns: a worker process is killed after a refund ran and while the
next model call waits; another worker process finishes the turn; the refund ran once, the session
is saved once with the whole turn, and the client's HTTP request, waiting on the workflow all
along, gets the reply. A caller watching the turn's timeline (``on_timeline``) is handed each
update once, the lost worker's and the resuming one's alike, and ends holding the stored timeline."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from pydantic import TypeAdapter
from refund_flows import RefundFlow

from picoflow import FlowEngine
from picoflow.models import ScriptedModel
from picoflow.server import ServerSettings, create_app
from picoflow.sessions import SQLiteStore
from picoflow.temporal import TemporalExecutor
from picoflow.timeline import TimelineEntry, TimelineSettings, TimelineUpdate

HERE = Path(__file__).parent
PICOFLOW = Path(sys.executable).parent / "picoflow"


def start_worker(address: str, queue: str, folder: Path, name: str) -> subprocess.Popen[bytes]:
    command = [str(PICOFLOW), "worker", "--temporal", address, "--task-queue", queue]
    command += ["--flows", "refund_flows:RefundFlow", "--store", f"sqlite:///{folder / 'sessions.db'}"]
    command += ["--model", "python:refund_flows:crash_model"]
    # The test's own import path after the flows' folder: the worker runs the code under test.
    path = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PICOFLOW_TEST_DIR": str(folder), "PYTHONPATH": path}
    # The worker writes to its own copy of the file; the test's copy is not needed past the start.
    with (folder / f"{name}.log").open("wb") as log:
        return subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)


def read_if_there(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


async def wait_for_file(path: Path, worker: subprocess.Popen[bytes], seconds: float = 300) -> str:
    deadline = time.monotonic() + seconds
    while (text := read_if_there(path)) is None:
        assert worker.poll() is None, f"the worker exited with {worker.returncode}"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.05)
    return text


async def test_a_killed_workers_turn_finishes_on_another_worker_without_repeating_the_refund(
    temporal_address: str, tmp_path: Path
) -> None:
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    engine = FlowEngine(
        [RefundFlow],
        store=SQLiteStore(tmp_path / "sessions.db"),
        model=ScriptedModel([]),
        executor=TemporalExecutor.at(temporal_address, queue),  # as `picoflow serve --temporal` makes it
        timeline=TimelineSettings(),
    )
    app = create_app(engine, settings=ServerSettings(prepare_models=False))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=120)
    first = start_worker(temporal_address, queue, tmp_path, "first")
    second: subprocess.Popen[bytes] | None = None
    try:
        body = {"message": "Please refund order B7"}
        turn = asyncio.create_task(http.post("/v1/flows/refunds/sessions", json=body))
        # The refund ran and the next model call is waiting, in the first worker.
        assert await wait_for_file(tmp_path / "reached", first) == str(first.pid)
        assert (tmp_path / "refunds").read_text() == "B7\n"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        (tmp_path / "reached").unlink()

        second = start_worker(temporal_address, queue, tmp_path, "second")
        # Temporal gives the model call, lost with its worker, to the second worker.
        assert await wait_for_file(tmp_path / "reached", second) == str(second.pid)
        (tmp_path / "release").touch()
        response = await asyncio.wait_for(turn, 90)
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.terminate()
                worker.wait(10)

    assert response.status_code == 201, response.text
    reply = response.json()
    assert reply["message"] == "Refunded B7." and reply["step"] == "Desk"
    assert (tmp_path / "refunds").read_text() == "B7\n"  # the refund ran exactly once
    sid = reply["session_id"]
    stored = await engine.store.load(sid)
    assert stored is not None
    assert stored.revision == 1 and stored.turns == 1  # saved once, with the whole turn
    assert stored.states["Desk"] == {"refunded": ["B7"]}
    transcript = await engine.store.transcript(sid)
    assert [(m.role, m.content, m.name, m.tool_calls) for m in transcript] == [
        ("user", "Please refund order B7", None, ()),
        ("assistant", "", None, transcript[1].tool_calls),
        ("tool", "Refunded B7.", "refund", ()),
        ("assistant", "Refunded B7.", None, ()),
    ]
    assert [
        (c.name, dict(c.args) if not isinstance(c.args, str) else c.args) for c in transcript[1].tool_calls
    ] == [("refund", {"order": "B7"})]

    # The second worker replayed the turn from its history: each entry of its timeline is there
    # once, as the first worker lived it (the workflow's clock), the lost model call once.
    shown = await engine.timeline(sid, principal=stored.principal)
    assert shown is not None
    [turn] = shown.turns
    assert (turn.outcome, turn.turn, turn.reply, turn.usage.model_calls) == ("replied", 1, "Refunded B7.", 2)
    assert [(entry.kind, getattr(entry, "step", None)) for entry in turn.entries] == [
        ("entered", "Desk"),
        ("model", "Desk"),
        ("tool", "Desk"),
        ("model", "Desk"),
        ("state", "Desk"),
    ]
    model_entries = [entry for entry in turn.entries if entry.kind == "model"]
    assert [(m.tool_calls[0].name if m.tool_calls else None, m.text) for m in model_entries] == [
        ("refund", ""),
        (None, "Refunded B7."),
    ]
    times = [entry.at_ms or 0.0 for entry in turn.entries]
    assert times == sorted(times)
    await http.aclose()
    await engine.aclose()


async def test_a_watched_turn_resumed_on_another_worker_hands_over_the_timeline_it_stores(
    temporal_address: str, tmp_path: Path
) -> None:
    queue = f"crash-live-{uuid.uuid4().hex[:8]}"
    engine = FlowEngine(
        [RefundFlow],
        store=SQLiteStore(tmp_path / "sessions.db"),
        model=ScriptedModel([]),
        executor=TemporalExecutor.at(temporal_address, queue),
        timeline=TimelineSettings(),
    )
    updates: list[TimelineUpdate] = []
    asking = asyncio.Event()  # the watcher holds the model request the first worker waits on

    def watch(update: TimelineUpdate) -> None:
        updates.append(update)
        if update.index == 3 and json.loads(update.entry)["kind"] == "model":
            asking.set()

    first = start_worker(temporal_address, queue, tmp_path, "first")
    second: subprocess.Popen[bytes] | None = None
    try:
        turn = asyncio.create_task(engine.run("refunds", "Please refund order B7", on_timeline=watch))
        assert await wait_for_file(tmp_path / "reached", first) == str(first.pid)
        await asyncio.wait_for(asking.wait(), 60)
        lost = len(updates)  # handed over from the first worker's workflow
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        (tmp_path / "reached").unlink()
        second = start_worker(temporal_address, queue, tmp_path, "second")
        assert await wait_for_file(tmp_path / "reached", second) == str(second.pid)
        (tmp_path / "release").touch()
        result = await asyncio.wait_for(turn, 90)
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.terminate()
                worker.wait(10)

    assert (result.ok, result.message) == (True, "Refunded B7."), result.error
    assert (tmp_path / "refunds").read_text() == "B7\n"
    assert result.session_id is not None
    # Each update once, in the order recorded: the replay on the second worker re-derived those
    # the first had recorded, and the client went on from where it was.
    answered = [
        (u.index, entry["kind"], "text" in entry or entry.get("ok") is not None)
        for u in updates
        for entry in [json.loads(u.entry)]
    ]
    assert answered == [
        (0, "entered", False),
        *((1, "model", False), (1, "model", True), (1, "model", True)),
        *((2, "tool", False), (2, "tool", True)),
        *((3, "model", False), (3, "model", True), (3, "model", True)),
        (4, "state", False),
    ]
    assert 7 <= lost < len(updates)
    latest: dict[int, str] = {u.index: u.entry for u in updates}
    shown = await engine.timeline(result.session_id)
    assert shown is not None
    [stored] = shown.turns
    entries: TypeAdapter[Any] = TypeAdapter(TimelineEntry)
    assert [entries.validate_json(latest[index]) for index in sorted(latest)] == stored.entries
    await engine.aclose()
