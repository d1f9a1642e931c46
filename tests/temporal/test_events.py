"""A turn on Temporal streams its step and tool events to the caller while it runs: the same events,
in the same order, as the same turn in process, through ``on_event``, ``run_stream`` and the HTTP
server's Server-Sent Events."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from refund_flows import RefundFlow
from temporalio.client import Client

from picoflow import FlowEngine
from picoflow.events import StepEntered, TextChunk, ToolCalled, ToolReturned, TurnEvent
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel, ScriptedModel
from picoflow.models.base import Model
from picoflow.results import TurnFinished
from picoflow.server import ServerSettings, create_app
from picoflow.sessions import SQLiteStore
from picoflow.temporal import TemporalExecutor, build_worker

MESSAGE = "Can A1 be refunded? Then archive this."

SCRIPT: list[object] = [
    ToolCall("lookup", {"order": "A1"}, "call-lookup"),
    ToolCall("second_opinion", {"order": "A1"}, "call-opinion"),
    "Yes, it may.",  # the Checker sub-step, run by the handler (in the tool activity on Temporal)
    ToolCall("void", {"order": "A1"}, "call-void"),  # refused: a ToolError
    ToolCall("transfer", {}, "call-transfer"),
    "Archived.",  # the Archive step
]

EXPECTED: list[TurnEvent] = [
    StepEntered("Desk", None),
    ToolCalled("Desk", "call-lookup", "lookup", {"order": "A1"}),
    ToolReturned("Desk", "call-lookup", "lookup", "Order A1: delivered, 40 EUR.", False),
    ToolCalled("Desk", "call-opinion", "second_opinion", {"order": "A1"}),
    StepEntered("Checker", None, "call-opinion"),
    ToolReturned("Desk", "call-opinion", "second_opinion", "Yes, it may.", False),
    ToolCalled("Desk", "call-void", "void", {"order": "A1"}),
    ToolReturned("Desk", "call-void", "void", "Order A1 was delivered; it cannot be voided.", True),
    ToolCalled("Desk", "call-transfer", "transfer", {}),
    StepEntered("Archive", "Desk"),
    ToolReturned("Desk", "call-transfer", "transfer", "Accepted.", False),
]
"""The turn's events on Temporal; in process the answer's text follows them (``TextChunk``):
a model activity answers whole, so a turn on Temporal streams no text."""


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address)


@asynccontextmanager
async def on_temporal(client: Client, tmp_path: Path, model: Model) -> AsyncIterator[FlowEngine]:
    """A client engine submitting to Temporal, with a worker (in this loop) running on ``model``."""
    queue = f"events-{uuid.uuid4().hex[:8]}"
    worker_engine = FlowEngine([RefundFlow], store=SQLiteStore(tmp_path / "s.db"), model=model)
    engine = FlowEngine(
        [RefundFlow],
        store=SQLiteStore(tmp_path / "s.db"),
        model=ScriptedModel([]),
        executor=TemporalExecutor(client, task_queue=queue),
    )
    try:
        async with build_worker(client, queue, worker_engine):
            yield engine
    finally:
        await engine.aclose()
        await worker_engine.aclose()


async def in_process(tmp_path: Path) -> list[TurnEvent]:
    local = FlowEngine([RefundFlow], store=SQLiteStore(tmp_path / "local.db"), model=ScriptedModel(SCRIPT))
    events: list[TurnEvent] = []
    result = await local.run("refunds", MESSAGE, on_event=events.append)
    assert result.ok and result.message == "Archived.", result.error
    await local.aclose()
    return events


async def test_on_event_gets_the_same_events_as_in_process(client: Client, tmp_path: Path) -> None:
    here = await in_process(tmp_path)
    assert here == [*EXPECTED, TextChunk("Archive", "Archived.")]
    async with on_temporal(client, tmp_path, ScriptedModel(SCRIPT)) as engine:
        events: list[TurnEvent] = []
        result = await engine.run("refunds", MESSAGE, on_event=events.append)
        assert result.ok and result.message == "Archived.", result.error
        assert events == [event for event in here if not isinstance(event, TextChunk)]


async def test_run_stream_yields_the_events_before_the_result(client: Client, tmp_path: Path) -> None:
    async with on_temporal(client, tmp_path, ScriptedModel(SCRIPT)) as engine:
        items = [item async for item in engine.run_stream("refunds", MESSAGE)]
        *events, last = items
        assert events == EXPECTED
        assert isinstance(last, TurnFinished) and last.result.message == "Archived."


async def test_events_arrive_while_the_turn_runs(client: Client, tmp_path: Path) -> None:
    """The model's second request waits until the caller has seen the lookup's answer: only a
    query of the running turn can have brought it."""
    seen = asyncio.Event()

    async def model(request: ModelRequest) -> object:
        if request.messages[-1].role == "user":
            return ToolCall("lookup", {"order": "A1"}, "call-lookup")
        await asyncio.wait_for(seen.wait(), 30)
        return "Delivered."

    def on_event(event: TurnEvent) -> None:
        events.append(event)
        if isinstance(event, ToolReturned):
            seen.set()

    events: list[TurnEvent] = []
    async with on_temporal(client, tmp_path, FunctionModel(model, name="function:waits")) as engine:
        result = await engine.run("refunds", "Where is A1?", on_event=on_event)
        assert result.ok and result.message == "Delivered.", result.error
    assert events == EXPECTED[:3]


async def test_a_turn_nobody_watches_records_no_events(client: Client, tmp_path: Path) -> None:
    async with on_temporal(client, tmp_path, ScriptedModel(SCRIPT)) as engine:
        result = await engine.run("refunds", MESSAGE)
        assert result.ok and result.message == "Archived."
        handle = client.get_workflow_handle(f"picoflow-{result.session_id}-0", result_type=str)
        assert json.loads(await handle.result())["events"] == []


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = block.split("\n")
        name = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


async def test_the_http_stream_of_a_turn_on_temporal(client: Client, tmp_path: Path) -> None:
    async with on_temporal(client, tmp_path, ScriptedModel(SCRIPT)) as engine:
        app = create_app(engine, settings=ServerSettings(prepare_models=False))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as http:
            reply = await http.post("/v1/flows/refunds/sessions", json={"message": MESSAGE, "stream": True})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = sse_events(reply.text)
    assert [name for name, _ in events] == [
        "step",
        *("tool_call", "tool_result", "tool_call", "step", "tool_result"),
        *("tool_call", "tool_result", "tool_call", "step", "tool_result", "result"),
    ]
    assert events[0][1] == {"step": "Desk", "previous": None}
    assert events[1][1] == {"step": "Desk", "id": "call-lookup", "name": "lookup", "args": {"order": "A1"}}
    assert events[4][1] == {"step": "Checker", "previous": None, "parent": "call-opinion"}
    assert events[7][1]["is_error"] is True
    assert events[9][1] == {"step": "Archive", "previous": "Desk"}
    assert events[-1][1]["message"] == "Archived." and events[-1][1]["completed"] is False
