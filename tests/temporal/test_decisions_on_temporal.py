"""Approvals through ``TemporalExecutor``: a proposing turn ends pending on a worker, and the
decision is an execution of its own that any worker takes — also after the proposing worker was
killed. An approved call runs once (its approval id as ``ctx.idempotency_key``), never again when
its worker dies; a refused decision runs nothing.

The tools (``refund_flows.Till``) append a line ``tool order key pid`` to ``payments`` for every
run of a handler: the file is the count."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from refund_flows import TillFlow, till_model
from temporalio.client import Client

from picoflow import Caller, FlowEngine
from picoflow.approvals import Approval
from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    StepEntered,
    ToolCalled,
    ToolReturned,
    TurnEvent,
)
from picoflow.exceptions import ApprovalConflict, ToolFailure
from picoflow.exceptions import ApprovalDecided as Decided
from picoflow.models import ScriptedModel
from picoflow.results import TurnError, TurnResult
from picoflow.sessions import SQLiteStore
from picoflow.temporal import TemporalExecutor, build_worker
from picoflow.temporal._workflow import WORKFLOW_NAME
from picoflow.testing import transcript_lines
from picoflow.usage import Usage

HERE = Path(__file__).parent
CUSTOMER = Caller(principal="cust-1")


@pytest.fixture
async def client(temporal_address: str) -> Client:
    return await Client.connect(temporal_address)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PICOFLOW_TEST_DIR", str(tmp_path))  # for a worker in the test's process
    return tmp_path


class Submissions(TemporalExecutor):
    """Records each decision's execution id as it is submitted (after the revision was read)."""

    def __init__(self, client: Client, task_queue: str) -> None:
        super().__init__(client, task_queue)
        self.ids: list[str] = []

    async def _result(
        self, workflow_id: str, payload: str, delivery: Any = None, workflow: str = WORKFLOW_NAME
    ) -> str:
        if workflow != WORKFLOW_NAME:
            self.ids.append(workflow_id)
        return await super()._result(workflow_id, payload, delivery, workflow)


def client_engine(
    client: Client, folder: Path, queue: str, clock: Callable[[], float] = time.time
) -> FlowEngine:
    """The engine that submits (its own model is never asked); it dates decisions by ``clock``."""
    return FlowEngine(
        [TillFlow],
        store=SQLiteStore(folder / "sessions.db"),
        model=ScriptedModel([]),
        executor=Submissions(client, queue),
        clock=clock,
    )


@asynccontextmanager
async def worker_here(
    client: Client, folder: Path, queue: str, lease: float = 300.0
) -> AsyncIterator[FlowEngine]:
    """A worker in the test's event loop."""
    engine = FlowEngine(
        [TillFlow], store=SQLiteStore(folder / "sessions.db"), model=till_model(), approval_lease=lease
    )
    async with build_worker(client, queue, engine):
        yield engine
    await engine.aclose()


def replied(message: str, sid: str, usage: Usage) -> TurnResult:
    """The result of a turn of the till that replied ``message``."""
    return TurnResult(message, sid, False, "text/plain", "Till", usage, flow="till")


def used(input_tokens: int, output_tokens: int, tool_calls: int = 0) -> Usage:
    """A turn's usage: one model call (the scripted model's token estimates)."""
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, model_calls=1, tool_calls=tool_calls)


def payments(folder: Path) -> list[str]:
    path = folder / "payments"
    return path.read_text().splitlines() if path.exists() else []


PROPOSED = {"pay A1": used(17, 4), "pay B2": used(17, 4), "pay slow1": used(18, 5), "hold slow2": used(18, 5)}
SUMMARIES = {"pay": "Pay order {}", "hold": "Hold a seat for order {}"}


async def propose(engine: FlowEngine, order: str = "A1", tool: str = "pay") -> tuple[str, Approval]:
    """A pending call: the turn's whole result, with the approval stored in the session."""
    events: list[TurnEvent] = []
    text = f"{tool} {order}"
    result = await engine.run("till", text, caller=CUSTOMER, on_event=events.append)
    sid = result.session_id or ""
    stored = await engine.store.load(sid)
    assert stored is not None and stored.status == "awaiting_approval" and stored.paused is not None
    (approval,) = stored.approvals
    summary = SUMMARIES[tool].format(order)
    waiting = f"Waiting for approval: {summary} (the customer must approve)"
    assert result == dataclasses.replace(replied(waiting, sid, PROPOSED[text]), pending=(approval,))
    assert (approval.tool, dict(approval.args), approval.summary, approval.status, approval.call_id) == (
        tool,
        {"order": order},
        summary,
        "pending",
        f"call-{tool}",
    )
    assert events == [StepEntered("Till", None), ApprovalRequested("Till", approval)]
    assert stored.paused.approvals == (approval.id,) and stored.paused.resuming_since is None
    return sid, approval


async def test_an_approved_call_runs_once_with_its_approval_id_as_key(client: Client, folder: Path) -> None:
    queue = f"approve-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    async with worker_here(client, folder, queue):
        sid, approval = await propose(engine)
        assert payments(folder) == []
        events: list[TurnEvent] = []
        result = await engine.decide(sid, approval.id, "approve", caller=CUSTOMER, on_event=events.append)
    assert result == replied("Done: Paid A1.", sid, used(19, 4, tool_calls=1))
    assert payments(folder) == [f"pay A1 {approval.id} {os.getpid()}"]  # once, keyed by its approval
    stored = await engine.store.load(sid)
    assert stored is not None and stored.status == "running" and stored.paused is None
    (decided,) = stored.approvals
    assert decided == dataclasses.replace(
        approval, status="approved", decided_by="cust-1", decided_at=decided.decided_at
    )
    assert decided.decided_at is not None and decided.decided_at > approval.created_at
    assert events == [
        ApprovalDecided(decided),
        ToolCalled("Till", "call-pay", "pay", {"order": "A1"}),
        ToolReturned("Till", "call-pay", "pay", "Paid A1.", False),
    ]
    assert stored.states["Till"] == {"paid": ["A1"]}
    assert await transcript_lines(engine, sid) == [
        "Till | user: pay A1",
        'Till | assistant: -> pay({"order": "A1"}) #call-pay',
        "Till | tool pay #call-pay: Paid A1.",
        "Till | assistant: Done: Paid A1.",
    ]
    await engine.aclose()


async def test_a_denied_call_is_not_run_and_the_model_is_told(client: Client, folder: Path) -> None:
    queue = f"deny-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    async with worker_here(client, folder, queue):
        sid, approval = await propose(engine)
        result = await engine.decide(sid, approval.id, "deny", "not today", caller=CUSTOMER)
    told = "Not run: pay was denied: not today"
    assert result == replied(f"Done: {told}", sid, used(26, 10))  # the call did not run
    assert payments(folder) == []
    stored = await engine.store.load(sid)
    assert stored is not None and stored.status == "running" and stored.paused is None
    assert [(a.status, a.reason, a.decided_by) for a in stored.approvals] == [
        ("denied", "not today", "cust-1")
    ]
    assert await transcript_lines(engine, sid) == [
        "Till | user: pay A1",
        'Till | assistant: -> pay({"order": "A1"}) #call-pay',
        f"Till | tool pay #call-pay (error): {told}",
        f"Till | assistant: Done: {told}",
    ]
    await engine.aclose()


async def test_a_second_decision_is_refused_and_two_at_once_run_the_call_at_most_once(
    client: Client, folder: Path
) -> None:
    queue = f"again-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    async with worker_here(client, folder, queue):
        sid, approval = await propose(engine)
        assert (await engine.decide(sid, approval.id, "approve", caller=CUSTOMER)).ok
        stored = await engine.store.load(sid)
        for decision in ("approve", "deny"):
            again = await engine.decide(sid, approval.id, decision, caller=CUSTOMER)
            message = f"approval {approval.id} was approved already"
            refusal = TurnError(Decided, message, None, sid, None)
            assert again == TurnResult(message, sid, False, error=refusal)
            assert again.error is not None and again.error.status == 409
        assert await engine.store.load(sid) == stored  # nothing changed, nothing run
        assert payments(folder) == [f"pay A1 {approval.id} {os.getpid()}"]

        # Two different decisions at once: two executions, and the claim lets one through.
        other, second = await propose(engine, "B2")
        approve, deny = await asyncio.gather(
            engine.decide(other, second.id, "approve", caller=CUSTOMER),
            engine.decide(other, second.id, "deny", "no", caller=CUSTOMER),
        )
    winner, loser = (approve, deny) if approve.ok else (deny, approve)
    assert winner.ok and loser.error is not None
    assert loser.error.error_class in (Decided, ApprovalConflict) and loser.error.status == 409
    paid = [line for line in payments(folder) if line.startswith("pay B2 ")]
    assert paid == ([f"pay B2 {second.id} {os.getpid()}"] if winner is approve else [])
    executor = engine.executor
    assert isinstance(executor, Submissions) and len(set(executor.ids)) == len(executor.ids)
    await engine.aclose()


async def test_a_retried_decision_joins_the_one_execution(client: Client, folder: Path) -> None:
    queue = f"join-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    async with worker_here(client, folder, queue):
        sid, approval = await propose(engine)
    executor = engine.executor
    assert isinstance(executor, Submissions)
    # No worker now: both requests read the same revision and are submitted before anything runs.
    both = asyncio.gather(
        engine.decide(sid, approval.id, "approve", caller=CUSTOMER),
        engine.decide(sid, approval.id, "approve", caller=CUSTOMER),
    )
    deadline = time.monotonic() + 30
    while len(executor.ids) < 2:
        assert time.monotonic() < deadline, "the decisions were never submitted"
        await asyncio.sleep(0.01)
    assert executor.ids[0] == executor.ids[1]
    async with worker_here(client, folder, queue):
        first, retried = await asyncio.wait_for(both, 60)
    assert first == retried == replied("Done: Paid A1.", sid, used(19, 4, tool_calls=1))
    assert payments(folder) == [f"pay A1 {approval.id} {os.getpid()}"]
    await engine.aclose()


async def test_a_decision_that_waited_past_the_lease_for_a_worker_is_refused_then_taken_again(
    client: Client, folder: Path
) -> None:
    queue = f"late-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    late = client_engine(client, folder, queue, clock=lambda: time.time() - 10)  # as if queued 10 s
    async with worker_here(client, folder, queue, lease=1.0):
        sid, approval = await propose(engine)
        stored = await engine.store.load(sid)
        refused = await late.decide(sid, approval.id, "approve", caller=CUSTOMER)
        assert refused.error is not None and refused.error.is_a(ApprovalConflict)
        message = refused.error.message
        assert message.startswith(f"the decision on approval {approval.id} waited ")
        assert message.endswith(
            " s for a worker, longer than the approval lease; nothing was run: send it again"
        )
        assert refused == TurnResult(
            message, sid, False, error=TurnError(ApprovalConflict, message, None, sid, None)
        )
        assert await engine.store.load(sid) == stored and payments(folder) == []
        # Sent again now: the same execution id (a failed one is reused), taken at the new time.
        result = await engine.decide(sid, approval.id, "approve", caller=CUSTOMER)
    assert result == replied("Done: Paid A1.", sid, used(19, 4, tool_calls=1))
    assert payments(folder) == [f"pay A1 {approval.id} {os.getpid()}"]
    executor, again = late.executor, engine.executor
    assert isinstance(executor, Submissions) and isinstance(again, Submissions)
    assert executor.ids == again.ids
    await late.aclose()
    await engine.aclose()


# --- worker processes ---------------------------------------------------------------------------


@pytest.fixture
def workers(temporal_address: str, folder: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    (folder / "release").touch()
    for worker in started:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(10)


def start_worker(
    address: str, queue: str, folder: Path, name: str, lease: float = 300.0
) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(HERE / "approval_worker.py"), address, queue]
    command += [str(folder / "sessions.db"), str(lease)]
    # The test's own import path after the flows' folder: the worker runs the code under test.
    path = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PICOFLOW_TEST_DIR": str(folder), "PYTHONPATH": path}
    with (folder / f"{name}.log").open("wb") as log:
        return subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)


def kill(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)


def read_if_there(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


async def wait_for_file(path: Path, worker: subprocess.Popen[bytes], seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while (text := read_if_there(path)) is None:
        assert worker.poll() is None, f"the worker exited with {worker.returncode}"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.05)
    return text


async def test_the_decision_completes_on_another_worker_after_the_proposing_one_was_killed(
    temporal_address: str, client: Client, folder: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    queue = f"killed-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    first = start_worker(temporal_address, queue, folder, "first")
    workers.append(first)
    sid, approval = await asyncio.wait_for(propose(engine), 90)  # only the first worker runs
    kill(first)

    second = start_worker(temporal_address, queue, folder, "second")
    workers.append(second)
    result = await asyncio.wait_for(engine.decide(sid, approval.id, "approve", caller=CUSTOMER), 90)
    assert result == replied("Done: Paid A1.", sid, used(19, 4, tool_calls=1))
    assert payments(folder) == [f"pay A1 {approval.id} {second.pid}"]  # once, on the second worker
    stored = await engine.store.load(sid)
    assert stored is not None and stored.status == "running" and stored.paused is None
    assert [(a.id, a.status) for a in stored.approvals] == [(approval.id, "approved")]
    assert stored.states["Till"] == {"paid": ["A1"]}
    await engine.aclose()


async def test_an_approved_call_whose_worker_dies_is_not_run_again(
    temporal_address: str, client: Client, folder: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """The worker is killed while the approved call runs: the call is not retried (it may have had
    its effect), the decision fails with ``ToolFailure``, and the session keeps the claim — the
    decision recorded, the response taken up — which a message after the lease answers as of
    unknown result."""
    queue = f"mid-tool-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    first = start_worker(temporal_address, queue, folder, "first")
    workers.append(first)
    sid, approval = await asyncio.wait_for(propose(engine, "slow1"), 90)
    deciding = asyncio.ensure_future(engine.decide(sid, approval.id, "approve", caller=CUSTOMER))
    assert await wait_for_file(folder / "paying", first) == str(first.pid)
    kill(first)

    # The second worker's lease (1 s) is shorter than the 5 s heartbeat timeout that must pass
    # before Temporal gives up on the lost call: by the decision's end, it has run out.
    second = start_worker(temporal_address, queue, folder, "second", lease=1.0)
    workers.append(second)
    result = await asyncio.wait_for(deciding, 120)
    failure = TurnError(ToolFailure, ToolFailure.public_message, None, sid, None)
    # Nothing of the decided turn is kept (the call's usage died with its worker).
    assert result == TurnResult(
        ToolFailure.public_message, sid, False, step="Till", error=failure, flow="till"
    )
    assert payments(folder) == [f"pay slow1 {approval.id} {first.pid}"]  # run once, never again
    stored = await engine.store.load(sid)
    assert stored is not None and stored.status == "awaiting_approval" and stored.paused is not None
    (decided,) = stored.approvals
    assert (decided.status, decided.decided_by) == ("approved", "cust-1")
    assert stored.paused.resuming_since == decided.decided_at
    [record] = await engine.store.errors(sid)
    assert record.code == "tool_failed" and "picoflow.tool" in record.message

    later = await asyncio.wait_for(engine.run(None, "anything?", sid, caller=CUSTOMER), 90)
    unknown = (
        "The result of pay is unknown: the process running it stopped before it answered. It was not "
        "run again; check whether it had its effect before calling it again."
    )
    assert later == replied(f"Last I heard: {unknown}", sid, used(60, 44))
    assert payments(folder) == [f"pay slow1 {approval.id} {first.pid}"]
    stored = await engine.store.load(sid)
    assert stored is not None and stored.status == "running" and stored.paused is None
    assert (await transcript_lines(engine, sid))[2:] == [
        f"Till | tool pay #call-pay (error): {unknown}",
        "Till | user: anything?",
        f"Till | assistant: Last I heard: {unknown}",
    ]
    await engine.aclose()


async def test_an_approved_idempotent_call_whose_worker_dies_runs_again_under_its_key(
    temporal_address: str, client: Client, folder: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """``@tool(idempotent=True)``: the one kind of approved call a lost worker's activity is retried
    for, on another worker, with the same idempotency key."""
    queue = f"retried-{uuid.uuid4().hex[:8]}"
    engine = client_engine(client, folder, queue)
    first = start_worker(temporal_address, queue, folder, "first")
    workers.append(first)
    sid, approval = await asyncio.wait_for(propose(engine, "slow2", "hold"), 90)
    deciding = asyncio.ensure_future(engine.decide(sid, approval.id, "approve", caller=CUSTOMER))
    assert await wait_for_file(folder / "paying", first) == str(first.pid)
    kill(first)
    (folder / "paying").unlink()

    second = start_worker(temporal_address, queue, folder, "second")
    workers.append(second)
    assert await wait_for_file(folder / "paying", second, 120) == str(second.pid)  # the retry
    (folder / "release").touch()
    result = await asyncio.wait_for(deciding, 90)
    assert result == replied("Done: Held a seat for slow2.", sid, used(24, 7, tool_calls=1))
    assert payments(folder) == [
        f"hold slow2 {approval.id} {first.pid}",
        f"hold slow2 {approval.id} {second.pid}",
    ]
    stored = await engine.store.load(sid)
    assert stored is not None and stored.status == "running" and stored.paused is None
    await engine.aclose()
