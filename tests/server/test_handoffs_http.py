"""Handoffs over HTTP, with two server processes sharing one SQLite file: a customer's session is
handed to a person through process A, staff take it and reply through process B, the customer reads
the reply through A, staff hand it back, and the customer's next message is answered by the model
again. Who may act comes from the caller's key only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore

from .handoff_support import KEYS, NOW, support_engine
from .support import client_for, events_of

ROOT = Path(__file__).resolve().parents[2]
CUSTOMER = {"Authorization": "Bearer key-cust"}
ANA = {"Authorization": "Bearer key-ana"}
BEN = {"Authorization": "Bearer key-ben"}
REPLY = "I'm passing this conversation to a member of our team. A person will reply here."
SUMMARY = (
    "Flow: support\nStep: Desk\nReason: the customer asked for a person\nState:\n  Desk.order_id = 40001\n"
    "Last messages from the user:\n  > about order 40001\n  > I want to talk to a person"
)


def _server(database: Path) -> tuple[subprocess.Popen[str], str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "tests.server.handoff_support:make_app",
        "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    env["PICOFLOW_TEST_HANDOFF_DB"] = str(database)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:  # ready when uvicorn says it listens: no time budget
        if "Uvicorn running on" in line:
            return process, f"http://127.0.0.1:{port}"
    raise AssertionError("the server process exited before it listened")


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    database = tmp_path / "sessions.db"
    started: list[subprocess.Popen[str]] = []
    try:
        first, url_a = _server(database)
        started.append(first)
        second, url_b = _server(database)
        started.append(second)
        yield url_a, url_b
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=30)
            assert process.stderr is not None
            process.stderr.close()


def shown(transcript: list[dict[str, Any]]) -> list[tuple[str, str | None, str, str | None]]:
    """What the user saw, message by message: role, kind, text, and the author of a staff message."""
    return [(m["role"], m["kind"], m["content"], m["author"]) for m in transcript if m["shown"]]


async def test_a_handoff_across_two_server_processes(two_servers: tuple[str, str]) -> None:
    url_a, url_b = two_servers
    async with (
        httpx.AsyncClient(base_url=url_a, timeout=60) as a,
        httpx.AsyncClient(base_url=url_b, timeout=60) as b,
    ):
        created = await a.post(
            "/v1/flows/support/sessions", json={"message": "about order 40001"}, headers=CUSTOMER
        )
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]
        handed = await a.post(
            f"/v1/sessions/{session_id}/turns",
            json={"message": "I want to talk to a person"},
            headers=CUSTOMER,
        )
        assert handed.status_code == 200, handed.text
        assert {key: handed.json()[key] for key in ("message", "step", "awaiting_human")} == {
            "message": REPLY,
            "step": "Handoff",
            "awaiting_human": True,
        }

        refused = await b.get("/v1/handoffs", headers=CUSTOMER)
        assert refused.status_code == 403
        assert (
            refused.json()["error"]["message"]
            == "only callers with the 'staff' visibility may act on handoffs"
        )
        queue = await b.get("/v1/handoffs", headers=ANA)
        assert queue.status_code == 200
        assert queue.json() == [
            {
                "session_id": session_id,
                "flow": "support",
                "step": "Desk",
                "reason": "the customer asked for a person",
                "summary": SUMMARY,
                "since": NOW,
                "taken_by": None,
                "principal": "cust-1",
            }
        ]

        waiting = await a.post(
            f"/v1/sessions/{session_id}/turns", json={"message": "hello?"}, headers=CUSTOMER
        )
        assert waiting.status_code == 200
        assert (waiting.json()["message"], waiting.json()["awaiting_human"]) == ("", True)
        assert waiting.json()["usage"]["model_calls"] == 0

        not_taken = await b.post(f"/v1/handoffs/{session_id}/messages", json={"text": "Hi"}, headers=ANA)
        assert (not_taken.status_code, not_taken.json()["error"]["kind"]) == (409, "handoff_not_taken")
        taken = await b.post(f"/v1/handoffs/{session_id}/take", headers=ANA)
        assert taken.status_code == 200 and taken.json()["taken_by"] == "ana"
        second = await a.post(f"/v1/handoffs/{session_id}/take", headers=BEN)
        assert (second.status_code, second.json()["error"]["kind"]) == (409, "handoff_taken")
        empty = await b.post(f"/v1/handoffs/{session_id}/messages", json={"text": " "}, headers=ANA)
        assert empty.status_code == 422
        assert empty.json()["error"]["fields"] == [{"field": "body.text", "problem": "text is empty"}]
        unknown = await b.post("/v1/handoffs/nope/take", headers=ANA)
        assert (unknown.status_code, unknown.json()["error"]["kind"]) == (404, "session_not_found")

        marker = (await a.get(f"/v1/sessions/{session_id}/messages", headers=CUSTOMER)).json()["messages"][
            -1
        ]["seq"]
        wrote = await b.post(
            f"/v1/handoffs/{session_id}/messages", json={"text": "Hi, Ana here. Checking 40001."}, headers=ANA
        )
        assert wrote.status_code == 201
        assert {key: wrote.json()[key] for key in ("role", "kind", "content", "author", "shown")} == {
            "role": "assistant",
            "kind": "staff",
            "content": "Hi, Ana here. Checking 40001.",
            "author": "ana",
            "shown": True,
        }
        polled = await a.get(
            f"/v1/sessions/{session_id}/messages", params={"after": marker}, headers=CUSTOMER
        )
        assert polled.status_code == 200
        body = polled.json()
        assert (body["status"], body["step"]) == ("awaiting_human", "Handoff")
        assert [(m["kind"], m["content"], m["author"]) for m in body["messages"]] == [
            ("staff", "Hi, Ana here. Checking 40001.", "ana")
        ]
        assert (await a.get(f"/v1/sessions/{session_id}/messages", headers=BEN)).status_code == 200  # staff
        stranger = await a.get(
            f"/v1/sessions/{session_id}/messages", headers={"Authorization": "Bearer nope"}
        )
        assert stranger.status_code == 401

        bad_step = await b.post(f"/v1/handoffs/{session_id}/return", json={"step": "Nowhere"}, headers=ANA)
        assert bad_step.status_code == 422
        back = await b.post(f"/v1/handoffs/{session_id}/return", json={}, headers=ANA)
        assert back.status_code == 200
        assert (back.json()["status"], back.json()["step"]) == ("running", "Desk")
        assert (await a.get("/v1/handoffs", headers=BEN)).json() == []

        answered = await a.post(
            f"/v1/sessions/{session_id}/turns", json={"message": "thanks!"}, headers=CUSTOMER
        )
        assert answered.status_code == 200
        assert (answered.json()["message"], answered.json()["awaiting_human"]) == (
            "Model, in Desk: thanks!",
            False,
        )

        stored = (await a.get(f"/v1/sessions/{session_id}", headers=CUSTOMER)).json()
        assert (stored["status"], stored["step"], stored["sequence"]) == (
            "running",
            "Desk",
            ["Desk", "Handoff", "Desk"],
        )
        assert shown(stored["transcript"]) == [
            ("user", None, "about order 40001", None),
            ("assistant", None, "Noted. (noted order 40001)", None),
            ("user", None, "I want to talk to a person", None),
            ("assistant", "direct", REPLY, None),
            ("user", None, "hello?", None),
            ("assistant", "staff", "Hi, Ana here. Checking 40001.", "ana"),
            ("user", None, "thanks!", None),
            ("assistant", None, "Model, in Desk: thanks!", None),
        ]
        gone = await a.get(f"/v1/sessions/{session_id}/messages", headers=BEN)
        assert gone.status_code == 404  # staff read a session only while it awaits a human


async def test_a_streamed_turn_tells_of_the_handoff() -> None:
    engine = support_engine(MemoryStore())
    async with client_for(engine, ServerSettings(api_keys=KEYS)) as client:
        created = await client.post("/v1/flows/support/sessions", json={"message": "hi"}, headers=CUSTOMER)
        session_id = created.json()["session_id"]
        streamed = await client.post(
            f"/v1/sessions/{session_id}/turns",
            json={"message": "a person please", "stream": True},
            headers=CUSTOMER,
        )
    events = events_of(streamed.text)
    assert [name for name, _ in events] == ["tool_call", "step", "tool_result", "handoff", "result"]
    assert events[3][1] == {"step": "Desk", "reason": "the customer asked for a person"}
    result = events[4][1]
    assert (result["message"], result["awaiting_human"], result["step"]) == (REPLY, True, "Handoff")
