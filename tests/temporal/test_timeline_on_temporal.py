"""Timelines of turns and decisions run on Temporal: recorded in the workflow, stored with the
session once the job is over, the same document as the same turns record in process (but for
the clock readings and the session's id), failed turns included; handed to ``on_timeline`` and to
the session's followers while the job runs, entry by entry, as the workflow records them."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from refund_flows import RefundFlow
from temporalio.client import Client

from picoflow import Caller, Flow, FlowEngine, Reject, Step, UsageLimits, tool
from picoflow.engine import LocalExecutor
from picoflow.messages import ModelRequest, ModelResponse, ToolCall
from picoflow.models import FunctionModel, ScriptedModel
from picoflow.sessions import SQLiteStore
from picoflow.temporal import TemporalExecutor, build_worker
from picoflow.timeline import (
    TimelineEntry,
    TimelineSettings,
    TimelineUpdate,
    TurnRecorded,
    TurnTimeline,
)

CLERK = Caller(principal="clerk-1")
ENTRY: TypeAdapter[Any] = TypeAdapter(TimelineEntry)
CLOCKED = {"started_at", "duration_ms", "at_ms", "latency_ms", "session_id", "size"}
"""What differs between two runs of the same turn: the clock's readings, the session's id (made
at random) and the size they take. The approval's id, random too, is replaced (``same``)."""


class Counter(Step):
    """You take payments at the counter. Never hedge."""

    def check_response(self, response: ModelResponse) -> Reject | None:
        if "maybe" in response.text:
            return Reject("Say plainly what you do.")
        return None

    @tool
    def lookup(self, order: str) -> str:
        """Look an order up."""
        self.state["looked_up"] = order
        return f"Order {order}: 40 EUR, unpaid."

    @tool(approval=True, approval_summary="Pay order {order}")
    def pay(self, order: str) -> str:
        """Pay an order (a person approves it first)."""
        self.state["paid"] = order
        return f"Paid {order}."


class CounterFlow(Flow):
    name = "counter"
    steps = [Counter]


PAYING: list[object] = [
    "maybe I will look",  # refused by check_response, asked again
    ToolCall("lookup", {"order": "A1"}, "call-lookup"),
    ToolCall("pay", {"order": "A1"}, "call-pay"),  # waits for a decision: the turn ends
    "Paid A1.",  # after the decision
]
LOOPING: list[object] = [ToolCall("lookup", {"order": f"L{n}"}, f"call-{n}") for n in range(3)]


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address)


@asynccontextmanager
async def engines(
    client: Client,
    folder: Path,
    script: list[object],
    limits: UsageLimits | None = None,
    flow: type[Flow] = CounterFlow,
) -> AsyncIterator[tuple[FlowEngine, FlowEngine]]:
    """``flow`` twice: on Temporal (a client engine recording timelines and a worker here)
    and in process, each on its own store and its own copy of ``script``."""
    queue = f"timeline-{uuid.uuid4().hex[:8]}"
    worker = FlowEngine(
        [flow], store=SQLiteStore(folder / "durable.db"), model=ScriptedModel(script), limits=limits
    )
    durable = FlowEngine(
        [flow],
        store=SQLiteStore(folder / "durable.db"),
        model=ScriptedModel([]),
        executor=TemporalExecutor(client, task_queue=queue),
        timeline=TimelineSettings(),
        limits=limits,
    )
    local = FlowEngine(
        [flow],
        store=SQLiteStore(folder / "local.db"),
        model=ScriptedModel(script),
        executor=LocalExecutor(),
        timeline=TimelineSettings(),
        limits=limits,
    )
    async with build_worker(client, queue, worker):
        yield durable, local
    for engine in (durable, local, worker):
        await engine.aclose()


def unclocked(value: Any) -> Any:
    """``value`` (a timeline as JSON) without what the clock and the session's id put in it."""
    if isinstance(value, dict):
        return {key: unclocked(item) for key, item in value.items() if key not in CLOCKED}
    if isinstance(value, list):
        return [unclocked(item) for item in value]
    return value


def same(turn: TurnTimeline, approval: str | None = None) -> Any:
    """What two runs of ``turn`` have in common: its JSON, unclocked, ``approval`` read as "APR"."""
    text = turn.model_dump_json()
    return unclocked(json.loads(text.replace(approval, "APR") if approval else text))


async def turns_of(engine: FlowEngine, session_id: str) -> list[TurnTimeline]:
    shown = await engine.timeline(session_id, principal=CLERK.principal)
    assert shown is not None
    return shown.turns


def outline(turn: TurnTimeline) -> list[tuple[str, str | None]]:
    return [(entry.kind, getattr(entry, "step", None)) for entry in turn.entries]


async def test_a_turn_and_its_decision_record_the_timeline_they_record_in_process(
    client: Client, tmp_path: Path
) -> None:
    async with engines(client, tmp_path, PAYING) as (durable, local):
        timelines, approvals = [], []
        for engine in (durable, local):
            asked = await engine.run("counter", "Pay order A1", caller=CLERK)
            assert asked.ok and asked.session_id is not None
            (approval,) = asked.pending
            approvals.append(approval.id)
            done = await engine.decide(asked.session_id, approval.id, "approve", caller=CLERK)
            assert (done.ok, done.message) == (True, "Paid A1.")
            timelines.append(await turns_of(engine, asked.session_id))
        remote, here = timelines

    assert [outline(turn) for turn in remote] == [
        [
            ("entered", "Counter"),
            ("model", "Counter"),
            ("rejected", "Counter"),
            ("model", "Counter"),
            ("tool", "Counter"),
            ("model", "Counter"),
            ("approval_requested", "Counter"),
            ("state", "Counter"),
        ],
        [
            ("approval_decided", "Counter"),
            ("tool", "Counter"),
            ("model", "Counter"),
            ("state", "Counter"),
        ],
    ]
    assert [(t.trigger, t.outcome, t.turn, t.flow) for t in remote] == [
        ("message", "paused", 1, "counter"),
        ("decision", "replied", 2, "counter"),
    ]
    requested, decided = remote[0].entries[-2], remote[1].entries[0]
    assert requested.kind == "approval_requested" and requested.approval == approvals[0]
    assert decided.kind == "approval_decided" and (decided.decision, decided.by) == ("approved", "clerk-1")
    # The whole documents are the same, but for what varies from run to run.
    for durable_turn, local_turn in zip(remote, here, strict=True):
        assert same(durable_turn, approvals[0]) == same(local_turn, approvals[1])
    # Timed by the workflow's clock: in order, from the turn's start.
    for turn in remote:
        times = [entry.at_ms for entry in turn.entries]
        assert all(at is not None and at >= 0 for at in times)
        assert times == sorted(times)  # type: ignore[type-var]


async def test_a_failed_first_turn_records_every_model_call(client: Client, tmp_path: Path) -> None:
    async with engines(client, tmp_path, LOOPING, limits=UsageLimits(model_calls=3)) as (durable, local):
        timelines = []
        for engine in (durable, local):
            failed = await engine.run("counter", "Look everything up", caller=CLERK)
            assert failed.error is not None and failed.error.kind == "usage_limit"
            assert failed.session_id is not None  # stored as it was before the turn
            timelines.append(await turns_of(engine, failed.session_id))
        [remote], [here] = timelines

    assert (remote.outcome, remote.turn, remote.reply) == ("failed", 1, "")
    assert remote.error is not None and remote.error.kind == "usage_limit"
    # Three model calls, each one's tool run; a fourth call was not allowed; the state as the
    # failed turn left it (never stored).
    assert [entry.kind for entry in remote.entries] == ["entered", *["model", "tool"] * 3, "state"]
    models = [entry for entry in remote.entries if entry.kind == "model"]
    assert len(models) == 3 == remote.usage.model_calls
    assert [entry.tool_calls[0].args for entry in models] == [
        {"order": "L0"},
        {"order": "L1"},
        {"order": "L2"},
    ]
    assert same(remote) == same(here)


async def test_the_sub_step_a_tool_handler_runs_in_its_activity_is_recorded_with_its_model_calls(
    client: Client, tmp_path: Path
) -> None:
    script: list[object] = [
        ToolCall("second_opinion", {"order": "A1"}, "call-check"),
        "Yes, it may.",  # the Checker sub-step, run by the handler inside the tool activity
        "The checker says yes.",
    ]
    async with engines(client, tmp_path, script, flow=RefundFlow) as (durable, local):
        timelines = []
        for engine in (durable, local):
            result = await engine.run("refunds", "Can A1 be refunded?", caller=CLERK)
            assert (result.ok, result.message) == (True, "The checker says yes.")
            assert result.session_id is not None
            timelines.append(await turns_of(engine, result.session_id))
        [remote], [here] = timelines

    assert [(entry.kind, getattr(entry, "step", None), entry.parent) for entry in remote.entries] == [
        ("entered", "Desk", None),
        ("model", "Desk", None),
        ("tool", "Desk", None),
        ("entered", "Checker", "call-check"),
        ("model", "Checker", "call-check"),  # asked inside the activity, recorded there
        ("model", "Desk", None),
    ]
    times = [entry.at_ms or 0.0 for entry in remote.entries]
    assert times == sorted(times)
    assert same(remote) == same(here)


# --- live ---------------------------------------------------------------------------------------


def final_view(updates: list[TimelineUpdate]) -> list[Any]:
    """The entries as a watcher holds them once the job is over: each index's latest update."""
    latest: dict[int, str] = {}
    for update in updates:
        latest[update.index] = update.entry
    assert sorted(latest) == list(range(len(latest)))  # no index skipped
    return [ENTRY.validate_json(latest[index]) for index in sorted(latest)]


def handed(updates: list[TimelineUpdate], approval: str) -> list[tuple[int, Any]]:
    """The updates as two runs of the same job hand them: indices, entries unclocked."""
    return [(u.index, unclocked(json.loads(u.entry.replace(approval, "APR")))) for u in updates]


async def test_a_watched_turn_and_decision_hand_each_entry_over_as_in_process(
    client: Client, tmp_path: Path
) -> None:
    async with engines(client, tmp_path, PAYING) as (durable, local):
        runs = []
        for engine in (durable, local):
            asking: list[TimelineUpdate] = []
            deciding: list[TimelineUpdate] = []
            asked = await engine.run("counter", "Pay order A1", caller=CLERK, on_timeline=asking.append)
            assert asked.ok and asked.session_id is not None
            (approval,) = asked.pending
            done = await engine.decide(
                asked.session_id, approval.id, "approve", caller=CLERK, on_timeline=deciding.append
            )
            assert (done.ok, done.message) == (True, "Paid A1.")
            stored = await turns_of(engine, asked.session_id)
            # Once the job is over, the watcher holds the stored timeline, entry for entry.
            for updates, turn in zip((asking, deciding), stored, strict=True):
                assert {(u.session_id, u.turn) for u in updates} == {(asked.session_id, turn.turn)}
                assert final_view(updates) == turn.entries
            runs.append((handed(asking, approval.id), handed(deciding, approval.id)))
        remote, here = runs

    # The same updates as in process, in the same order: the model requests (sent, answered,
    # accepted), the refused answer, the tool call (called, returned), the state at the end.
    assert remote == here
    answered = [
        (index, entry["kind"], "text" in entry or entry.get("ok") is not None) for index, entry in remote[0]
    ]
    assert answered == [
        (0, "entered", False),
        *((1, "model", False), (1, "model", True)),
        (2, "rejected", False),
        *((3, "model", False), (3, "model", True), (3, "model", True)),
        *((4, "tool", False), (4, "tool", True)),
        *((5, "model", False), (5, "model", True), (5, "model", True)),
        (6, "approval_requested", False),
        (7, "state", False),
    ]


async def test_entries_reach_the_watcher_while_the_turn_runs(client: Client, tmp_path: Path) -> None:
    """The model's second request waits until the watcher holds the first one answered: only the
    workflow's ``timeline`` query, polled while the turn runs, can have brought it."""
    seen = asyncio.Event()

    async def model(request: ModelRequest) -> object:
        if request.messages[-1].role == "user":
            return ToolCall("lookup", {"order": "A1"}, "call-lookup")
        await asyncio.wait_for(seen.wait(), 30)
        return "Unpaid."

    def watch(update: TimelineUpdate) -> None:
        updates.append(update)
        entry = json.loads(update.entry)
        if entry["kind"] == "model" and entry.get("tool_calls"):
            seen.set()

    updates: list[TimelineUpdate] = []
    function = FunctionModel(model, name="function:waits")
    queue = f"live-{uuid.uuid4().hex[:8]}"
    worker = FlowEngine([CounterFlow], store=SQLiteStore(tmp_path / "live.db"), model=function)
    engine = FlowEngine(
        [CounterFlow],
        store=SQLiteStore(tmp_path / "live.db"),
        model=ScriptedModel([]),
        executor=TemporalExecutor(client, task_queue=queue),
        timeline=TimelineSettings(),
    )
    async with build_worker(client, queue, worker):
        result = await engine.run("counter", "Is A1 paid?", caller=CLERK, on_timeline=watch)
    assert (result.ok, result.message) == (True, "Unpaid."), result.error
    assert result.session_id is not None
    [turn] = await turns_of(engine, result.session_id)
    assert final_view(updates) == turn.entries
    assert [entry.kind for entry in turn.entries] == ["entered", "model", "tool", "model", "state"]
    await engine.aclose()
    await worker.aclose()


async def test_a_follower_sees_a_job_run_on_temporal_live_then_its_stored_turn(
    client: Client, tmp_path: Path
) -> None:
    async with engines(client, tmp_path, PAYING) as (durable, local):
        runs = []
        for engine in (durable, local):
            asked = await engine.run("counter", "Pay order A1", caller=CLERK)
            assert asked.session_id is not None
            session_id = asked.session_id
            (approval,) = asked.pending
            follower = await engine.follow_timeline(session_id, principal=CLERK.principal)
            assert follower is not None and follower.turn == 1
            # Someone decides (no watcher of their own): the follower gets each entry, then the turn.
            done = await engine.decide(session_id, approval.id, "approve", caller=CLERK)
            assert done.ok
            updates: list[TimelineUpdate] = []
            while not isinstance(item := await follower.next(within=0), TurnRecorded):
                assert isinstance(item, TimelineUpdate), "TurnRecorded never came"
                updates.append(item)
            assert item == TurnRecorded(session_id, 2, "replied")
            assert await follower.next(within=0) is None
            follower.close()
            [_, decided] = await turns_of(engine, session_id)
            assert {(u.session_id, u.turn) for u in updates} == {(session_id, 2)}
            assert final_view(updates) == decided.entries
            assert [entry.kind for entry in decided.entries] == ["approval_decided", "tool", "model", "state"]
            runs.append(handed(updates, approval.id))
        remote, here = runs
    assert remote == here
