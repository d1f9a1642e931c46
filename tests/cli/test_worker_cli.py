"""``picoflow worker`` and ``picoflow serve --temporal``, as far as they go without a server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .support import invoke


def test_worker_ends_in_one_line_when_temporal_is_not_there(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text("[]")  # the worker stops before any turn
    store = f"sqlite:///{tmp_path / 'w.sqlite3'}"
    result = invoke("worker", "--temporal", "127.0.0.1:1", "--model", f"scripted:{script}", "--store", store)
    assert result.exit_code == 1
    assert "cannot reach Temporal at 127.0.0.1:1" in result.output
    assert "Traceback" not in result.output


def test_serve_with_temporal_runs_turns_there(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    from picoflow.temporal import TemporalExecutor

    started: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: started.update(app=app, **options))
    store = f"sqlite:///{tmp_path / 'serve.sqlite3'}"
    args = ["--store", store, "--model", "local", "--temporal", "127.0.0.1:7233", "--task-queue", "q1"]
    result = invoke("serve", *args)
    assert result.exit_code == 0, result.output
    assert "turns      on Temporal at 127.0.0.1:7233, task queue q1" in result.output
    executor = started["app"].state.picoflow.engine.executor
    assert isinstance(executor, TemporalExecutor) and executor.task_queue == "q1"
