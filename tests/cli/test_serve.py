"""``picoflow serve``: what it prints, how it starts uvicorn, and what it refuses before starting."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from picoflow.models.readiness import Phase
from picoflow.server.protocol import HeaderDeadlineProtocol

from .support import invoke


def test_serve_prints_the_url_and_runs_uvicorn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    started: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: started.update(app=app, **options))
    store = f"sqlite:///{tmp_path / 'serve.sqlite3'}"
    result = invoke(
        "serve", "--host", "127.0.0.1", "--port", "8000", "--store", store, "--model", "local", "--no-warm"
    )
    assert result.exit_code == 0, result.output
    assert "chat page  http://127.0.0.1:8000/" in result.output
    assert "serving hotel, orders, products, travel" in result.output and "model      local" in result.output
    served = [line.strip() for line in result.output.splitlines() if line.strip().startswith("protocol ")]
    assert served == [
        "protocol   OpenAI Chat Completions: GET /v1/models, GET /v1/models/{model}, "
        "POST /v1/chat/completions",
        "protocol   Vercel AI SDK UI message stream: POST /ai-sdk/{flow}",
        "protocol   AG-UI: POST /ag-ui/{flow}",
        "protocol   A2A: GET /.well-known/agent-card.json, POST /a2a",
    ]
    options = {name: value for name, value in started.items() if name != "app"}
    assert options == {
        "host": "127.0.0.1",
        "port": 8000,
        "log_level": "info",
        "timeout_keep_alive": 75,
        "http": HeaderDeadlineProtocol,
        "h11_max_incomplete_event_size": 16 * 1024,
    }
    # Idle connections outlive the clients' own expiry, so a client never reuses one being closed.
    assert options["timeout_keep_alive"] > (httpx.Limits().keepalive_expiry or 0)
    assert started["app"].state.picoflow.settings.default_flow == "hotel"


def test_serve_refuses_a_bad_port_or_log_level_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: pytest.fail("uvicorn must not start"))
    port = invoke("serve", "--port", "99999", "--store", "memory://", "--no-warm")
    assert port.exit_code == 2 and "Invalid value for '--port'" in port.output
    assert "Traceback" not in port.output
    level = invoke("serve", "--log-level", "loud", "--store", "memory://", "--no-warm")
    assert level.exit_code == 2 and "'loud' is not one of 'critical', 'error'" in level.output


def test_serve_names_the_store_it_serves(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)
    path = tmp_path / "serve.sqlite3"
    result = invoke("serve", "--store", f"sqlite:///{path}", "--no-warm")
    assert result.exit_code == 0, result.output
    assert f"  store      SQLiteStore({str(path)!r})" in result.output.splitlines()


def test_serve_refuses_a_bad_store_flows_or_model_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: pytest.fail("uvicorn must not start"))
    for option, problem in [
        ("--store=mysql://x", "unknown session store 'mysql'"),
        ("--store=sqlite:///x.sqlite3?bogus=1", "unknown SQLite option(s) bogus"),
        ("--flows=no_such_module:Flow", "cannot import no_such_module"),
        ("--model=nowhere:model", "unknown model provider 'nowhere'"),
    ]:
        # The last --store given is the one used.
        refused = invoke("serve", "--no-warm", "--store", "memory://", option)
        assert refused.exit_code == 1 and problem in refused.output, refused.output
        assert len(refused.output.splitlines()) == 1


def test_serve_refuses_a_public_address_without_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)
    refused = invoke("serve", "--host", "0.0.0.0", "--store", "memory://")
    assert refused.exit_code == 2 and "refusing to serve on 0.0.0.0 without authentication" in refused.output
    keyed = invoke("serve", "--host", "0.0.0.0", "--store", "memory://", env={"PICOFLOW_API_KEYS": "k=alice"})
    assert keyed.exit_code == 0 and "1 API key(s)" in keyed.output
    opened = invoke("serve", "--host", "0.0.0.0", "--store", "memory://", "--open")
    assert opened.exit_code == 0 and "http://127.0.0.1:8000/" in opened.output


def test_serve_loads_the_local_model_in_the_background_and_says_how_it_goes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import uvicorn

    from picoflow.models.local import tracker_for

    monkeypatch.setenv("PICOFLOW_MODEL_DIR", str(tmp_path))

    def run(app: Any, **options: Any) -> None:
        # What the application's lifespan would report while uvicorn runs.
        assert app.state.picoflow.settings.prepare_models is True
        tracker = tracker_for()
        for done, part in ((0, 1), (30_000_000, 1), (60_000_000, 2)):
            tracker.report(Phase.DOWNLOADING, done=done, total=1_117_320_768, part=part, parts=22)
        tracker.report(Phase.LOADING)
        tracker.report(Phase.WARMING)
        tracker.report(Phase.READY)

    monkeypatch.setattr(uvicorn, "run", run)
    result = invoke("serve", "--store", "memory://", "--model", "local")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("  loading the local model in the background; /readyz says when it is ready")
    assert lines[start + 1 : start + 5] == [
        "  model: Downloading the offline model: 0 of 1,117 MB (part 1 of 22)",
        "  model: Downloading the offline model: 60 of 1,117 MB (part 2 of 22)",
        "  model: Loading the model…",
        "  model: Getting ready…",
    ]
    assert re.fullmatch(r"  model ready after \d+\.\d s", lines[start + 5])
