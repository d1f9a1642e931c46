"""Flows as MCP tools: the official ``mcp`` client drives ``picoflow mcp serve`` over stdio and over
streamable HTTP through three turns of the hotel conversation (scripted model), and the store holds
the session; in process, failed turns come back as tool errors and an unknown tool as an MCP error."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from tests.cli.support import write_script

from picoflow import FlowEngine
from picoflow.context import Caller
from picoflow.models import ScriptedModel
from picoflow.server.mcp import INPUT_SCHEMA, OUTPUT_SCHEMA, create_mcp_server
from picoflow.sessions import open_store
from picoflow_demos import FLOWS, HotelFlow
from picoflow_demos.hotel.scripted import CONVERSATION, CURRENT_DATE

PICOFLOW = str(Path(sys.executable).with_name("picoflow"))
FIRST_TURNS = CONVERSATION[:3]
# Each turn's responses are the model's whole share of it, so three turns end on a turn boundary.
FIRST_RESPONSES = [response for turn in FIRST_TURNS for response in turn.model]
REPLIES = [
    "Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in the Portland area?",
    "Great. What are your check-in and check-out dates?",
    "Check-in Sunday August 1, 2027, check-out Sunday August 8, 2027: 7 nights. What nightly budget do you "
    "have in mind: a minimum, a maximum or both?",
]


def server_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PICOFLOW_")}
    return {**env, "HOTEL_FLOW_CURRENT_DATE": CURRENT_DATE}


def serve_args(tmp_path: Path, store: str, *extra: str) -> list[str]:
    model = write_script(tmp_path / "hotel.json", FIRST_RESPONSES)
    return ["mcp", "serve", "--flows", "picoflow_demos:FLOWS", "--store", store, "--model", model, *extra]


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return result.content[0].text


async def three_hotel_turns(session: ClientSession) -> str:
    """Check the tools, play the first three turns of the hotel conversation; the session id."""
    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    # The orders and invoice demos have gated tools: the server adds its decide tool beside the flows.
    assert sorted(tools) == sorted([*(flow.name for flow in FLOWS), "decide_approval"])
    hotel = tools["hotel"]
    assert hotel.input_schema == INPUT_SCHEMA and hotel.output_schema == OUTPUT_SCHEMA
    assert hotel.input_schema["required"] == ["message"]
    assert set(hotel.input_schema["properties"]) == {"message", "session_id"}
    assert hotel.description is not None and hotel.description.startswith(HotelFlow.spec().description)

    session_id: str | None = None
    for turn, reply in zip(FIRST_TURNS, REPLIES, strict=True):
        arguments = {"message": turn.user} | ({"session_id": session_id} if session_id else {})
        result = await session.call_tool("hotel", arguments)
        assert isinstance(result, CallToolResult)
        assert not result.is_error, result.content
        assert text_of(result) == reply
        assert result.structured_content == {
            "reply": reply,
            "session_id": session_id or result.structured_content["session_id"],
            "completed": False,
            "step": "Explore",
            "content_type": "text/plain",
            "pending": [],
        }
        session_id = result.structured_content["session_id"]
        assert isinstance(session_id, str) and session_id
    assert session_id is not None
    return session_id


async def assert_stored(store: str, session_id: str, principal: str) -> None:
    opened = open_store(store)
    try:
        stored = await opened.load(session_id)
        assert stored is not None
        assert (stored.flow, stored.turns, stored.status) == ("hotel", 3, "running")
        assert stored.principal == principal
        transcript = [(m.role, m.content) for m in await opened.transcript(session_id)]
    finally:
        await opened.close()
    expected: list[tuple[str, str]] = []
    for turn, reply in zip(FIRST_TURNS, REPLIES, strict=True):
        expected += [("user", turn.user), ("assistant", reply)]
    assert transcript == expected


async def test_an_mcp_client_holds_a_hotel_conversation_over_stdio(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mcp.sqlite3'}"
    params = StdioServerParameters(
        command=PICOFLOW, args=serve_args(tmp_path, store), env=server_env(), cwd=str(tmp_path)
    )
    with (tmp_path / "stderr.txt").open("w", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            session_id = await three_hotel_turns(session)
            # A stored session of another flow is not this tool's to continue.
            wrong = await session.call_tool("orders", {"message": "hi", "session_id": session_id})
            assert isinstance(wrong, CallToolResult) and wrong.is_error
            assert text_of(wrong) == "This conversation belongs to another flow. (flow_mismatch)"
    # What the server said went to stderr (stdout carried the protocol, and the client parsed it all).
    said = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert "serving hotel, orders, products, travel, invoice as MCP tools" in said
    assert "principal  mcp" in said
    await assert_stored(store, session_id, "mcp")


def test_over_stdio_stdout_carries_only_protocol(tmp_path: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    args = serve_args(tmp_path, f"sqlite:///{tmp_path / 'mcp.sqlite3'}")
    done = subprocess.run(
        [PICOFLOW, *args],
        input=json.dumps(initialize) + "\n",
        capture_output=True,
        text=True,
        env=server_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [answer["id"] for answer in answers] == [1]
    assert answers[0]["result"]["serverInfo"]["name"] == "picoflow"
    assert "serving hotel, orders, products, travel, invoice as MCP tools" in done.stderr


@contextmanager
def http_server(tmp_path: Path, store: str) -> Iterator[str]:
    """``picoflow mcp serve --transport http`` on a free loopback port; its URL once it listens."""
    args = serve_args(tmp_path, store, "--transport", "http", "--port", "0", "--principal", "alice")
    process = subprocess.Popen(
        [PICOFLOW, *args],
        env=server_env(),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:  # keeps reading, so the server never blocks on a full pipe
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=60)
            assert line is not None, f"the server stopped: {''.join(seen)}"
            seen.append(line)
            if "serving on http://" in line:
                yield line.split("serving on ", 1)[1].strip()
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
        drainer.join(30)  # the pipe ended with the process, so the drain ends too
        assert process.stderr is not None
        process.stderr.close()


async def test_an_mcp_client_holds_a_hotel_conversation_over_http(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mcp.sqlite3'}"
    with http_server(tmp_path, store) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            session_id = await three_hotel_turns(session)
    await assert_stored(store, session_id, "alice")


@asynccontextmanager
async def in_process(engine: FlowEngine, principal: str = "mcp") -> AsyncIterator[Client]:
    async with Client(create_mcp_server(engine, principal=principal)) as client:
        yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    return result


async def test_failed_turns_are_tool_errors_with_the_public_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    engine = FlowEngine([HotelFlow], model=ScriptedModel(list(FIRST_TURNS[0].model)))
    foreign = await engine.create_session("hotel", caller=Caller(principal="bob"))
    async with in_process(engine) as client:
        unknown = await call(client, "hotel", {"message": "hi", "session_id": "s-nope"})
        assert unknown.is_error
        assert text_of(unknown) == "No such session. (session_not_found)"
        assert unknown.structured_content == {
            "error": {
                "kind": "session_not_found",
                "message": "No such session.",
                "retryable": False,
                "session_id": None,
            }
        }
        # Another principal's session does not exist for this server's callers.
        theirs = await call(client, "hotel", {"message": "hi", "session_id": foreign.id})
        assert theirs.is_error and text_of(theirs) == "No such session. (session_not_found)"

        first = await call(client, "hotel", {"message": "Hi"})
        assert not first.is_error and text_of(first) == REPLIES[0]
        # The script is spent: the model fails, the client hears the public words, not a traceback.
        session_id = first.structured_content["session_id"]
        failed = await call(client, "hotel", {"message": "yes", "session_id": session_id})
        assert failed.is_error and "Traceback" not in text_of(failed)
        assert failed.structured_content["error"]["kind"] in text_of(failed)

        for wrong, rule in [
            ({}, "message is required and must be a string"),
            ({"message": 3}, "message is required and must be a string"),
            ({"message": "hi", "session_id": 7}, "session_id must be a string"),
            ({"message": "hi", "principal": "root"}, "unexpected argument(s): principal"),
        ]:
            refused = await call(client, "hotel", wrong)
            assert refused.is_error and text_of(refused) == f"{rule} (invalid_input)"
        empty = await call(client, "hotel", {"message": "   "})
        assert empty.is_error and "invalid_input" in text_of(empty)

        with pytest.raises(MCPError) as raised:
            await client.call_tool("nope", {"message": "hi"})
        assert raised.value.code == -32602 and "nope" in raised.value.message
    stored = await engine.store.load(session_id)
    assert stored is not None and stored.principal == "mcp" and stored.turns == 1
