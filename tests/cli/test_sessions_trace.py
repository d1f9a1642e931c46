"""``picoflow sessions show ID --trace`` renders the recorded timeline in 80 columns, ``--json``
exports it valid against ``picoflow sessions timeline-schema``; a failed first turn recorded by
``picoflow chat`` is found and shown like any other."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest

from inspect_flow import InspectFlow, play
from picoflow import FlowEngine, cli
from picoflow.models import ScriptedModel
from picoflow.sessions import open_store
from picoflow.timeline import TimelineSettings, timeline_schema

from .support import invoke, write_script


def recorded(url: str) -> str:
    async def record() -> str:
        model = ScriptedModel([])
        engine = FlowEngine([InspectFlow], store=open_store(url), model=model, timeline=TimelineSettings())
        try:
            return await play(engine, model)
        finally:
            await engine.aclose()

    return asyncio.run(record())


def test_trace_renders_every_turn_in_80_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.console, "width", 80)
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    session_id = recorded(url)
    shown = invoke("sessions", "show", session_id[:8], "--trace", "--store", url)
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert all(len(line) <= 80 for line in out.splitlines()), max(out.splitlines(), key=len)
    lines = [line.rstrip() for line in out.splitlines()]
    timeline = lines[
        lines.index(next(line for line in lines if line.startswith("─") and "timeline" in line)) :
    ]
    turns = [line for line in timeline if line.startswith("turn ")]
    assert [line.split(" ─")[0] for line in turns] == [
        "turn 1 · replied", "turn 2 · replied", "turn 3 · replied", "turn 4 · replied",
        "turn 5 · paused", "turn 6 · replied",
    ]  # fmt: skip
    for expected in (
        "› user: Ada",
        "✗ dropped age=30 by quoted",
        "    why: A quote that is not the user's words",
        "✓ kept name=Ada",
        "    evidence (user [0:3]): “Ada”",
        "→ entered Desk (from Interview)",
        '⚠ lookup({"order_id": 7}) error',
        "    order 7 belongs to another customer",
        "↺ rejected by check_response: never promise an outcome",
        "◆ model scripted:test in Desk attempt 2",
        '? approval asked: refund({"order_id": 8, "amount": 20.0})',
        "! approval approved by ada: refund",
        "› decided: approve apr_",
        "Δ state of Desk",
        "    + refunded = [8, 20.0]",
        "‹ reply: Refunded $20.00 on order 8.",
    ):
        assert any(line.startswith(expected) for line in timeline), expected
    assert "transcript" not in out  # the timeline holds the messages instead


def test_json_export_validates_against_the_published_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    session_id = recorded(url)
    exported = invoke("sessions", "show", session_id, "--json", "--store", url)
    assert exported.exit_code == 0, exported.output
    data = json.loads(exported.output)
    schema_file = tmp_path / "timeline.schema.json"
    written = invoke("sessions", "timeline-schema", "--output", str(schema_file))
    assert written.exit_code == 0, written.output
    schema = json.loads(schema_file.read_text())
    assert schema == timeline_schema()
    jsonschema.validate(data, schema)
    assert data["session_id"] == session_id and len(data["turns"]) == 6
    printed = invoke("sessions", "timeline-schema")
    assert json.loads(printed.output) == schema


def test_a_failed_first_turn_of_chat_is_shown_with_its_calls(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    script = write_script(tmp_path / "script.json", ["not json at all"] * 3)
    chatted = invoke(
        "chat",
        "inspect",
        "--flows",
        "inspect_flow:InspectFlow",
        "--store",
        url,
        "--model",
        script,
        input="Hi\n",
    )
    said = " ".join(chatted.output.split())
    assert "what happened: picoflow sessions show " in said and " --trace" in said, chatted.output

    async def ids() -> list[str]:
        store = open_store(url)
        try:
            return [info.id for info in await store.list_sessions()]
        finally:
            await store.close()

    [session_id] = asyncio.run(ids())
    assert f"what happened: picoflow sessions show {session_id} --trace" in said
    assert f"session {session_id} (picoflow sessions show {session_id})" in said
    shown = invoke("sessions", "show", session_id, "--trace", "--store", url)
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "turn 1 · failed" in out
    assert out.count("◆ model scripted:") == 3
    assert out.count("↺ rejected by output") == 3
    assert "✗ failed attempts_exhausted in Interview" in out
    assert "attempts_exhausted" in out.split("errors")[-1]  # the error record, filed with the session
