"""Turns through ``TemporalExecutor`` against the real dev server, with a worker in the test's
event loop: the same transcript and session as in process, and one execution per turn."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import refund_flows
from refund_flows import TWO_TURNS, RefundFlow
from temporalio.client import Client

from picoflow import FlowEngine
from picoflow.exceptions import ToolFailure
from picoflow.messages import Message, ToolCall
from picoflow.models import ScriptedModel
from picoflow.session import Session
from picoflow.sessions import SQLiteStore
from picoflow.temporal import TemporalExecutor, build_worker
from picoflow.temporal._codec import decode_result


def plain(message: Message) -> Message:
    return dataclasses.replace(message, at=0.0)


def comparable(session: Session) -> dict[str, Any]:
    """A session without its clock readings."""
    return {
        "flow": session.flow,
        "current_step": session.current_step,
        "revision": session.revision,
        "status": session.status,
        "states": session.states,
        "memory": {
            name: ([plain(m) for m in space.messages], space.start, space.summary)
            for name, space in session.memory.items()
        },
        "sequence": session.sequence,
        "usage": session.usage,
        "warnings": [(w.code, w.message, w.step, w.turn) for w in session.warnings],
        "prompts": session.prompts,
        "models": session.models,
        "turns": session.turns,
        "next_seq": session.next_seq,
    }


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address)


@pytest.fixture
async def durable(client: Client, tmp_path: Path) -> AsyncIterator[tuple[FlowEngine, ScriptedModel]]:
    async with durable_engine(client, tmp_path, TWO_TURNS) as pair:
        yield pair


@asynccontextmanager
async def durable_engine(
    client: Client, tmp_path: Path, script: list[object]
) -> AsyncIterator[tuple[FlowEngine, ScriptedModel]]:
    """A client engine submitting to Temporal, and the model of the worker running its turns."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(list(script))
    worker_engine = FlowEngine([RefundFlow], store=SQLiteStore(tmp_path / "s.db"), model=model)
    engine = FlowEngine(
        [RefundFlow],
        store=SQLiteStore(tmp_path / "s.db"),
        model=ScriptedModel([]),
        executor=TemporalExecutor(client, task_queue=queue),
    )
    refund_flows.REFUNDS.clear()
    async with build_worker(client, queue, worker_engine):
        yield engine, model
    await engine.aclose()
    await worker_engine.aclose()


async def test_two_turns_on_temporal_match_the_same_turns_in_process(
    durable: tuple[FlowEngine, ScriptedModel], tmp_path: Path
) -> None:
    engine, _ = durable
    first = await engine.run("refunds", "Refund order A1 please")
    assert first.ok, first.error
    assert first.message == "Refunded A1. Anything else?"
    sid = first.session_id or ""
    second = await engine.run("refunds", "No, thanks", sid)
    assert second.ok and second.message == "Goodbye!"
    assert refund_flows.REFUNDS == ["A1"]

    local = FlowEngine([RefundFlow], store=SQLiteStore(tmp_path / "local.db"), model=ScriptedModel(TWO_TURNS))
    one = await local.run("refunds", "Refund order A1 please")
    two = await local.run("refunds", "No, thanks", one.session_id)
    for remote, here in [(first, one), (second, two)]:
        assert dataclasses.replace(remote, session_id="") == dataclasses.replace(here, session_id="")

    stored, expected = await engine.store.load(sid), await local.store.load(one.session_id or "")
    assert stored is not None and expected is not None
    assert comparable(stored) == comparable(expected)
    transcript = [plain(m) for m in await engine.store.transcript(sid)]
    assert transcript == [plain(m) for m in await local.store.transcript(one.session_id or "")]
    assert [(m.role, m.content, m.name) for m in transcript] == [
        ("user", "Refund order A1 please", None),
        ("assistant", "", None),
        ("tool", "Order A1: delivered, 40 EUR.", "lookup"),
        ("assistant", "", None),
        ("tool", "Refunded A1.", "refund"),
        ("assistant", "Refunded A1. Anything else?", None),
        ("user", "No, thanks", None),
        ("assistant", "", None),
        ("tool", "Accepted.", "finish"),
        ("assistant", "Goodbye!", None),
    ]
    assert stored.states["Desk"] == {"looked_up": ["A1"], "refunded": ["A1"], "closed": True}
    await local.aclose()


async def test_the_same_turn_submitted_twice_is_one_execution(
    durable: tuple[FlowEngine, ScriptedModel],
) -> None:
    engine, model = durable
    first = await engine.run("refunds", "Refund order A1 please")
    sid = first.session_id or ""
    asked = len(model.requests)
    again, twice = await asyncio.gather(
        engine.run("refunds", "No, thanks", sid), engine.run("refunds", "No, thanks", sid)
    )
    assert again == twice and again.ok and again.message == "Goodbye!"
    assert len(model.requests) == asked + 1  # one model call for the second turn, not two
    assert refund_flows.REFUNDS == ["A1"]
    # A late duplicate of the finished turn (the same execution id) gets that turn's result and
    # runs nothing again (its payload is not even read).
    executor = engine.executor
    assert isinstance(executor, TemporalExecutor)
    late = await executor._result(f"picoflow-{sid}-1", "not a turn")
    assert decode_result(late) == again
    stored = await engine.store.load(sid)
    assert stored is not None and stored.revision == 2 and stored.turns == 2
    assert len(model.requests) == asked + 1


async def test_refusals_failures_and_a_resubmitted_failed_turn(client: Client, tmp_path: Path) -> None:
    script: list[object] = [
        "Hello, how can I help?",
        ToolCall("void", {"order": "A1"}),
        ToolCall("cancel", {"order": "A1"}),
        "Cancelled A1.",
    ]
    async with durable_engine(client, tmp_path, script) as (engine, model):
        first = await engine.run("refunds", "Hi")
        sid = first.session_id or ""
        failed = await engine.run("refunds", "Cancel A1", sid)
        assert failed.error is not None and failed.error.is_a(ToolFailure)
        assert failed.session_id == sid and failed.step == "Desk"
        stored = await engine.store.load(sid)
        assert stored is not None and stored.revision == 1 and stored.next_seq == 2  # nothing of it kept
        [record] = await engine.store.errors(sid)
        assert record.code == "tool_failed" and "the card service is down" in record.message
        # The same turn (session and revision) may be sent again: a failed execution's id is reused.
        again = await engine.run("refunds", "Cancel A1", sid)
        assert again.ok and again.message == "Cancelled A1."
        assert len(model.requests) == 4
        transcript = await engine.store.transcript(sid)
        assert [(m.role, m.content, m.is_error) for m in transcript[2:]] == [
            ("user", "Cancel A1", False),
            ("assistant", "Cancelled A1.", False),
        ]


async def test_a_handler_runs_its_sub_step_inside_its_activity(client: Client, tmp_path: Path) -> None:
    script: list[object] = [
        ToolCall("second_opinion", {"order": "A1"}),
        "Yes, it may.",  # the Checker sub-step, run by the handler in the tool activity
        "The checker says yes.",
    ]
    async with durable_engine(client, tmp_path, script) as (engine, _):
        result = await engine.run("refunds", "Can A1 be refunded?")
        assert result.ok and result.message == "The checker says yes."
        assert result.usage.model_calls == 3 and result.usage.tool_calls == 1
        transcript = await engine.store.transcript(result.session_id or "")
        assert [(m.role, m.content, m.within) for m in transcript] == [
            ("user", "Can A1 be refunded?", None),
            ("assistant", "", None),
            ("user", "May A1 be refunded?", transcript[2].within),
            ("assistant", "Yes, it may.", transcript[2].within),
            ("tool", "Yes, it may.", None),
            ("assistant", "The checker says yes.", None),
        ]
        assert transcript[2].within is not None
