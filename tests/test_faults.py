"""Fault injection: a model that times out, rate-limits, errors or drops the connection, and a store
that fails on load or save (before or after writing). Every turn completes or fails cleanly with an
error record, the next turn works, and no booking is ever applied twice for one approval."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import pytest

from picoflow import Caller, Flow, FlowEngine, RunContext, Step, ToolError, go, tool
from picoflow.exceptions import ModelError, ModelHTTPError, StoreError
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall
from picoflow.models import Model
from picoflow.session import Session, session_to_json
from picoflow.sessions import MemoryStore


class Ledger:
    """The outside world: bookings keyed by approval id, so a retried confirmation is a no-op."""

    def __init__(self) -> None:
        self.bookings: dict[str, str] = {}
        self.handler_runs = 0

    def book(self, approval: str, item: str) -> str:
        self.handler_runs += 1
        if approval not in self.bookings:
            self.bookings[approval] = item
        return f"B-{approval}"


class Shop(Step):
    """Help the user book items."""

    @tool
    def request_booking(self, item: str) -> Any:
        """Ask to book an item; the user must approve it first."""
        number = self.state.get("approvals", 0) + 1
        self.state["approvals"] = number
        approval = f"{self.session_id[:8]}-{number}"
        return go(Approve).with_state(pending={"approval": approval, "item": item})


class Approve(Step):
    """Ask the user to confirm the pending booking."""

    @tool
    def confirm(self, ctx: RunContext[Ledger]) -> Any:
        """The user confirmed."""
        pending = self.state.get("pending")
        if not pending:
            raise ToolError("There is nothing to confirm.")
        reference = ctx.deps.book(pending["approval"], pending["item"])
        self.state["pending"] = None
        done = [*self.state.get("done", []), pending["approval"]]
        self.state["done"] = done
        return go(Shop).with_tool_feedback(f"Booked, reference {reference}.")


class BookingFlow(Flow):
    name = "bookings"
    steps = [Shop, Approve]


def scripted_answer(request: ModelRequest) -> ModelResponse:
    """A well-behaved model: what it says depends only on what it is shown."""
    last = request.messages[-1]
    if last.role == "tool":
        return ModelResponse(text=f"OK: {last.content}")
    if request.step == "Shop":
        if last.content.startswith("book "):
            return ModelResponse(
                tool_calls=[ToolCall("request_booking", {"item": last.content[5:]}, _id(request))]
            )
        return ModelResponse(text="What would you like to book?")
    if last.content == "yes":
        return ModelResponse(tool_calls=[ToolCall("confirm", {}, _id(request))])
    return ModelResponse(text="Please answer yes to confirm.")


def _id(request: ModelRequest) -> str:
    return f"call_{len(request.messages)}"


class FlakyModel(Model):
    name = "flaky:model"

    def __init__(self, rng: random.Random, rate: float) -> None:
        self.rng = rng
        self.rate = rate
        self.faults = 0

    async def request(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        if self.rng.random() < self.rate:
            self.faults += 1
            fault = self.rng.choice(["timeout", "429", "500", "drop"])
            if fault == "timeout":
                raise TimeoutError("the provider did not answer in time")
            if fault == "drop":
                raise ModelError("connection reset by peer")
            status = int(fault)
            raise ModelHTTPError(f"provider answered {status}", status_code=status, retry_after=1.0)
        return scripted_answer(request)


class FlakyStore(MemoryStore):
    """Fails loads, saves before writing, and saves after writing (committed, but the reply was lost)."""

    def __init__(self, rng: random.Random, rate: float) -> None:
        super().__init__()
        self.rng = rng
        self.rate = rate
        self.faults: dict[str, int] = {"load": 0, "save-before": 0, "save-after": 0}

    def _fault(self, kind: str) -> bool:
        if self.rng.random() < self.rate:
            self.faults[kind] += 1
            return True
        return False

    async def load(self, session_id: str) -> Session | None:
        if self._fault("load"):
            raise OSError("database is unreachable")
        return await super().load(session_id)

    async def save(
        self, session: Session, *, expected_revision: int | None, appended: Sequence[tuple[str, Message]] = ()
    ) -> int:
        if self._fault("save-before"):
            raise OSError("write failed")
        revision = await super().save(session, expected_revision=expected_revision, appended=appended)
        if self._fault("save-after"):
            raise ConnectionResetError("the commit happened but the connection dropped")
        return revision

    async def peek(self, session_id: str) -> Session | None:
        return await super().load(session_id)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_faults_never_half_apply_and_never_book_twice(seed: int) -> None:
    rng = random.Random(seed)
    ledger = Ledger()
    store = FlakyStore(rng, rate=0.12)
    model = FlakyModel(rng, rate=0.2)
    engine = FlowEngine([BookingFlow], model=model, store=store, deps=ledger)
    caller = Caller(principal="alice")

    session_id: str | None = None
    first_failed = 0
    while session_id is None:
        opened = await engine.run("bookings", "hello", caller=caller)
        session_id = opened.session_id
        if session_id is not None and not opened.ok:
            first_failed = 1  # kept as it was before the turn: saved once, no turn counted

    approvals_asked = 0
    failures = 0
    for index in range(40):
        for message in (f"book item-{index}", "yes"):
            for _attempt in range(30):
                before = await store.peek(session_id)
                result = await engine.run("bookings", message, session_id, caller=caller)
                if result.ok:
                    break
                failures += 1
                assert result.error is not None and result.message == result.error.message
                assert result.error.is_a(ModelError, StoreError)
                assert result.error.retryable
                after = await store.peek(session_id)
                assert after is not None and before is not None
                if store.faults["save-after"] == 0 or after.revision == before.revision:
                    assert session_to_json(after) == session_to_json(before)
                if after.revision != before.revision:
                    break  # committed although the reply was lost: the client moves on
            else:
                pytest.fail(f"turn {message!r} never succeeded")
        approvals_asked += 1

    session = await store.peek(session_id)
    assert session is not None
    # Every approval was booked exactly once, whatever was retried.
    assert sorted(ledger.bookings) == sorted(session.states["Approve"]["done"])
    assert len(ledger.bookings) == len(set(session.states["Approve"]["done"])) == approvals_asked
    assert ledger.handler_runs >= len(ledger.bookings)
    assert failures > 10 and model.faults > 5 and all(store.faults.values())
    # Every committed turn is whole: its user message, the model's messages and the tool results.
    transcript = await store.transcript(session_id)
    assert session.next_seq == len(transcript) and [m.seq for m in transcript] == list(range(len(transcript)))
    assert session.revision == session.turns + first_failed
    errors = await store.errors(session_id)
    assert len(errors) == failures + first_failed and {e.code for e in errors} <= {
        "model_unavailable",
        "model_error",
        "store_error",
    }


async def test_a_failure_after_the_tool_ran_rolls_back_state_but_the_booking_is_not_repeated() -> None:
    from picoflow.models import FunctionModel

    ledger = Ledger()
    failed_once: list[bool] = []

    def answer(request: ModelRequest) -> ModelResponse:
        if ledger.handler_runs == 1 and not failed_once:
            failed_once.append(True)
            raise ModelHTTPError("overloaded", status_code=529)
        return scripted_answer(request)

    engine = FlowEngine([BookingFlow], model=FunctionModel(answer), deps=ledger)
    sid = (await engine.run("bookings", "book lamp")).session_id
    assert sid is not None
    before = await engine.store.load(sid)
    failed = await engine.run("bookings", "yes", sid)
    assert failed.error is not None and failed.error.is_a(ModelHTTPError) and failed.error.retryable
    assert ledger.handler_runs == 1 and list(ledger.bookings.values()) == ["lamp"]
    after = await engine.store.load(sid)
    assert before is not None and after is not None and session_to_json(after) == session_to_json(before)
    retried = await engine.run("bookings", "yes", sid)
    assert retried.ok and retried.step == "Shop"
    assert ledger.handler_runs == 2 and list(ledger.bookings.values()) == ["lamp"]
    final = await engine.store.load(sid)
    assert final is not None and final.states["Approve"]["done"] == list(ledger.bookings)
