"""The ``picoflow`` command, through typer's CliRunner (no terminal, no network, no real model)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from picoflow import cli
from picoflow.messages import ToolCall
from picoflow.models import ScriptedModel
from picoflow.models._readiness import LoadStatus, LoadTracker, Phase
from picoflow.server.protocol import HeaderDeadlineProtocol
from picoflow_demos.hotel.scripted import CONVERSATION, CURRENT_DATE, SHERWOOD, model_script

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tables and rules wrap at the console width; keep every line whole for the assertions.
    monkeypatch.setattr(cli.console, "width", 200)
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    for name in (
        "PICOFLOW_FLOWS",
        "PICOFLOW_STORE",
        "PICOFLOW_MODEL",
        "PICOFLOW_API_KEYS",
        "PICOFLOW_API_KEYS_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(cli.app, list(args), input=input, env=env)


def write_script(path: Path, items: list[Any]) -> str:
    def encode(item: Any) -> Any:
        if isinstance(item, ToolCall):
            return {"tool": item.name, "args": dict(item.args) if not isinstance(item.args, str) else {}}
        if isinstance(item, list):
            return [encode(call) for call in item]
        return item

    path.write_text(json.dumps([encode(item) for item in items]), encoding="utf-8")
    return f"scripted:{path}"


def test_flows_lists_the_demo_flows() -> None:
    result = invoke("flows")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("│ hotel ") and "Explore, Present, Compare, Goodbye" in line for line in lines)
    assert any(line.startswith("│ orders ") for line in lines)
    assert any(line.startswith("│ products ") for line in lines)


def test_flows_option_loads_your_own_and_explains_mistakes() -> None:
    own = invoke("flows", "--flows", "picoflow_demos.hotel:HotelFlow")
    assert own.exit_code == 0 and "│ hotel " in own.output and "orders" not in own.output
    from_env = invoke("flows", env={"PICOFLOW_FLOWS": "picoflow_demos:FLOWS"})
    assert from_env.exit_code == 0 and "orders" in from_env.output
    for spec, problem in [
        ("picoflow_demos.hotel", "name flows as module:Class"),
        ("no_such_module:Flow", "cannot import no_such_module"),
        ("picoflow_demos.hotel:Criteria", "is not a Flow subclass"),
    ]:
        bad = invoke("flows", "--flows", spec)
        assert bad.exit_code == 1 and problem in bad.output, bad.output


def test_graph_prints_mermaid_derived_from_the_code() -> None:
    result = invoke("graph", "hotel", "--step", "Compare")
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        "flowchart TD",
        "    start((start))",
        '    Explore["Explore"]',
        '    Present["Present"]',
        '    Compare["Compare"]',
        '    Goodbye(["Goodbye"])',
        "    start --> Explore",
        "    Explore -->|on_complete| Present",
        "    Present -->|change_search| Explore",
        "    Present -->|goodbye, book| Goodbye",
        "    Present -->|show_list| Present",
        "    Present -->|compare| Compare",
        "    Compare -->|change_search| Explore",
        "    Compare -->|goodbye, book| Goodbye",
        "    Compare -->|show_list| Present",
        "    Compare -->|compare| Compare",
        "    classDef current fill:#fde68a,stroke:#b45309,stroke-width:2px",
        "    class Compare current",
    ]
    unknown = invoke("graph", "nope")
    assert unknown.exit_code == 1 and "no flow named 'nope'; known: hotel, orders, products" in unknown.output


def test_chat_plays_the_hotel_conversation_then_sessions_show_it(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'chat.sqlite3'}"
    model = write_script(tmp_path / "hotel.json", model_script())
    said = "\n".join(turn.user for turn in CONVERSATION) + "\n"
    chat = invoke("chat", "hotel", "--store", store, "--model", model, input=said)
    assert chat.exit_code == 0, chat.output
    out = chat.output
    assert "Is your stay in the Portland area?" in out
    assert "Hampton Inn Portland-Airport" in out and "$440.50" in out  # the price comparison table
    assert "Your booking is confirmed." in out and SHERWOOD in out
    assert "The conversation is complete." in out
    session_id = out.split("picoflow sessions show ")[1].split(")")[0]

    listed = invoke("sessions", "list", "--store", store)
    assert listed.exit_code == 0
    row = next(line for line in listed.output.splitlines() if session_id in line)
    assert "hotel" in row and "completed" in row and "Goodbye" in row and "14" in row and "local" in row

    shown = invoke("sessions", "show", session_id, "--store", store)
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert (
        "steps visited  Explore → Present → Explore → Present → Explore → Present → Compare → Present"
        " → Goodbye" in text
    )
    assert "status         completed" in text
    assert "14 (revision 14)" in text
    assert "model calls" in text and "tool calls" in text
    assert "user: Hi" in text and "Your booking is confirmed." in text and '"action": "change_search"' in text

    assert invoke("sessions", "list", "--store", store, "--status", "running").output.strip() == "no sessions"
    missing = invoke("sessions", "show", "nope", "--store", store)
    assert missing.exit_code == 1 and "no session nope" in missing.output


def test_chat_new_quit_and_failures(tmp_path: Path) -> None:
    # The hotel flow's model only reads each message; code writes the greeting.
    greetings = ['{"found": []}', '{"found": []}']
    model = write_script(tmp_path / "script.json", greetings)
    result = invoke(
        "chat", "hotel", "--store", "memory://", "--model", model, input="hi\n/new\nhello\nmore\n/quit\n"
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("Hello! I can help you find a hotel") == 2
    assert "new conversation" in result.output
    # The script ran out on the third message: a clear error, and the chat goes on until /quit.
    assert "could not" in result.output.lower() or "unavailable" in result.output.lower()
    assert invoke("chat", "nope", "--store", "memory://").exit_code == 1
    bad = invoke("chat", "hotel", "--store", "memory://", "--model", f"scripted:{tmp_path / 'none.json'}")
    assert bad.exit_code == 1 and "cannot read the model script" in bad.output


def test_db_upgrade(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    first = invoke("db", "upgrade", "--store", store)
    assert first.exit_code == 0 and "applied migration(s) 1" in first.output
    again = invoke("db", "upgrade", env={"PICOFLOW_STORE": store})
    assert again.exit_code == 0 and "already up to date" in again.output
    memory = invoke("db", "upgrade", "--store", "memory://")
    assert memory.exit_code == 0 and "nothing to upgrade" in memory.output
    wrong = invoke("db", "upgrade", "--store", "mysql://x")
    assert wrong.exit_code == 1 and "unknown session store" in wrong.output


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
    assert "serving hotel, orders, products" in result.output and "model      local" in result.output
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


def test_serve_refuses_a_public_address_without_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)
    refused = invoke("serve", "--host", "0.0.0.0", "--store", "memory://")
    assert refused.exit_code == 2 and "refusing to serve on 0.0.0.0 without authentication" in refused.output
    keyed = invoke("serve", "--host", "0.0.0.0", "--store", "memory://", env={"PICOFLOW_API_KEYS": "k=alice"})
    assert keyed.exit_code == 0 and "1 API key(s)" in keyed.output
    opened = invoke("serve", "--host", "0.0.0.0", "--store", "memory://", "--open")
    assert opened.exit_code == 0 and "http://127.0.0.1:8000/" in opened.output


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.output.startswith("picoflow 0.")


# --- the embedded model's load, shown before it is needed ----------------------------------------


class LoadingScript(ScriptedModel):
    """A scripted model behind a load that goes through every phase when prepared."""

    def __init__(self, script: list[Any], fail: str | None = None) -> None:
        super().__init__(script, name="scripted:loading")
        self.tracker = LoadTracker()
        self.fail = fail
        self.prepared: list[tuple[bool, str | None]] = []

    @property
    def load_status(self) -> LoadTracker:
        return self.tracker

    async def prepare(self, warm: Any = None, *, cache_name: str | None = None) -> LoadStatus:
        self.prepared.append((warm is not None, cache_name))
        total = 1_117_320_768
        self.tracker.report(Phase.DOWNLOADING, done=0, total=total, part=1, parts=22)
        self.tracker.report(Phase.DOWNLOADING, done=40_000_000, total=total, part=1, parts=22)
        self.tracker.report(Phase.DOWNLOADING, done=312_400_000, total=total, part=7, parts=22)
        self.tracker.report(Phase.CHECKING, done=0, total=total)
        if self.fail:
            self.tracker.report(Phase.FAILED, reason=self.fail)
            return self.tracker.status
        self.tracker.report(Phase.LOADING)
        self.tracker.report(Phase.WARMING)
        self.tracker.report(Phase.READY)
        return self.tracker.status


def test_chat_shows_the_model_loading_before_the_first_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    model = LoadingScript(['{"found": []}'])
    monkeypatch.setattr(cli, "build_model", lambda choice: model)
    result = invoke("chat", "hotel", "--store", "memory://", input="hi\n/quit\n")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    first_prompt = lines.index("model ready") + 1
    assert lines[first_prompt - 6 : first_prompt] == [
        "Downloading the offline model: 0 of 1,117 MB (part 1 of 22)",
        "Downloading the offline model: 312 of 1,117 MB (part 7 of 22)",
        "Checking the model file…",
        "Loading the model…",
        "Getting ready…",
        "model ready",
    ]
    assert lines[first_prompt].startswith("you › ")
    assert "Hello! I can help you find a hotel" in result.output
    # The start step's prompt was read ahead, under the flow's name.
    assert model.prepared == [(True, "hotel")]


def test_chat_ends_when_the_model_cannot_be_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    model = LoadingScript([], fail="no network")
    monkeypatch.setattr(cli, "build_model", lambda choice: model)
    result = invoke("chat", "hotel", "--store", "memory://", input="hi\n")
    assert result.exit_code == 1
    assert result.output.splitlines()[-4:] == [
        "Downloading the offline model: 0 of 1,117 MB (part 1 of 22)",
        "Downloading the offline model: 312 of 1,117 MB (part 7 of 22)",
        "Checking the model file…",
        "error: The offline model could not be loaded: no network",
    ]
    assert "you ›" not in result.output


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
