"""A call the step's code proposes (``call(tool, **args)``) is taken exactly as its model's would be:
its arguments checked against the tool's schema, a gated call waiting for a person's decision
(the same approval, trail and refusals), any other run at once; and no model is asked for it."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from picoflow import (
    Approval,
    Call,
    Caller,
    Flow,
    FlowEngine,
    Outcome,
    RunContext,
    Step,
    call,
    direct,
    direct_to,
    tool,
)
from picoflow.engine import ANY_PRINCIPAL
from picoflow.exceptions import ApprovalDecided, HookFailure, ModelHTTPError, RunError, ToolFailure
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ScriptedModel
from picoflow.sessions.memory import MemoryStore
from picoflow.testing import transcript_lines

CUSTOMER = Caller(principal="cust-1")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Wish(BaseModel):
    """What the customer wants done."""

    order: int
    action: str


class Orders(Step):
    """Read what the customer wants done with their orders."""

    output = Wish
    ledger: ClassVar[list[tuple[str | None, int]]] = []
    denied: ClassVar[list[str]] = []

    def active_tools(self) -> list[str]:
        return []  # the model only reads: code alone proposes the calls

    def on_response(self, wish: Wish) -> Outcome:
        if wish.action == "refund":
            return call(self.refund, order_id=wish.order).with_state(asked=wish.order)
        if wish.action == "lookup":
            return call("lookup", order_id=wish.order)
        if wish.action == "typo":
            return call(self.refund, order_id="forty")
        if wish.action == "extra":
            return call(self.refund, order_id=wish.order, amount=5)
        if wish.action == "nothing":
            return call("teleport", order_id=wish.order)
        return direct("How can I help?")

    @tool(approval=True, approval_summary="Refund order #{order_id}", approval_seconds=600)
    def refund(self, order_id: int, ctx: RunContext[Any]) -> Outcome:
        """Refund an order."""
        Orders.ledger.append((ctx.idempotency_key, order_id))
        return direct(f"Order #{order_id} is refunded.")

    @tool
    def lookup(self, order_id: int) -> str:
        """Look an order up."""
        return f"order {order_id}: delivered"

    def on_denied(self, approval: Approval) -> Outcome | None:
        Orders.denied.append(approval.status)
        if approval.status == "denied":
            return direct_to(Orders, "Nothing was refunded.")
        return None


class OrdersFlow(Flow):
    name = "orders"
    steps = [Orders]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Orders.ledger = []
    Orders.denied = []


def engine_for(script: list[Any]) -> tuple[FlowEngine, ScriptedModel]:
    model = ScriptedModel(script)
    return FlowEngine([OrdersFlow], model=model, clock=Clock(), store=MemoryStore()), model


REFUND = '{"order": 40001, "action": "refund"}'


async def test_a_gated_call_code_proposes_waits_then_runs_once_with_the_approval_as_its_key() -> None:
    engine, model = engine_for([REFUND])
    result = await engine.run("orders", "refund order 40001", caller=CUSTOMER)
    assert result.ok, result.error
    (approval,) = result.pending
    assert (approval.tool, dict(approval.args), approval.summary) == (
        "refund",
        {"order_id": 40001},
        "Refund order #40001",
    )
    assert approval.approvers.principal and approval.expires_at == 1_000_000.0 + 600
    assert result.message == "Waiting for approval: Refund order #40001 (the customer must approve)"
    assert Orders.ledger == [] and len(model.requests) == 1  # the reading only: no model proposed it
    assert model.requests[0].tools == ()  # the tool is not offered to the model
    session_id = result.session_id
    assert session_id is not None
    stored = await engine.get_session(session_id, principal="cust-1")
    assert stored is not None and stored.status == "awaiting_approval" and stored.paused is not None
    assert stored.paused.by_code and stored.states["Orders"]["asked"] == 40001
    assert await transcript_lines(engine, session_id) == [
        "Orders | user: refund order 40001",
        'Orders | assistant [output]: {"order": 40001, "action": "refund"}',
        'Orders | assistant [call]: -> refund({"order_id": 40001}) #code_2',
    ]

    done = await engine.decide(session_id, approval.id, "approve", caller=CUSTOMER)
    assert done.ok and done.message == "Order #40001 is refunded."
    assert Orders.ledger == [(approval.id, 40001)]
    again = await engine.decide(session_id, approval.id, "approve", caller=CUSTOMER)
    assert again.error is not None and again.error.is_a(ApprovalDecided)
    assert Orders.ledger == [(approval.id, 40001)] and len(model.requests) == 1
    assert (await transcript_lines(engine, session_id))[3:] == [
        "Orders | tool refund #code_2: Accepted.",
        "Orders | assistant [direct]: Order #40001 is refunded.",
    ]


async def test_a_denied_code_call_is_routed_by_on_denied_and_a_new_message_withdraws_one() -> None:
    engine, _ = engine_for([REFUND, REFUND, '{"order": 0, "action": "help"}'])
    first = await engine.run("orders", "refund order 40001", caller=CUSTOMER)
    assert first.session_id is not None
    denied = await engine.decide(first.session_id, first.pending[0].id, "deny", caller=CUSTOMER)
    assert denied.ok and denied.message == "Nothing was refunded." and Orders.ledger == []

    second = await engine.run(None, "refund order 40001 after all", first.session_id, caller=CUSTOMER)
    assert len(second.pending) == 1 and second.pending[0].id != first.pending[0].id
    moved_on = await engine.run(None, "what can you do?", first.session_id, caller=CUSTOMER)
    assert moved_on.ok and moved_on.message == "How can I help?" and moved_on.pending == ()
    assert Orders.denied == ["denied", "withdrawn"] and Orders.ledger == []
    stored = await engine.get_session(first.session_id, principal=ANY_PRINCIPAL)
    assert stored is not None and [a.status for a in stored.approvals] == ["denied", "withdrawn"]


async def test_an_ungated_call_runs_at_once_and_its_result_goes_to_the_model() -> None:
    engine, model = engine_for(['{"order": 40001, "action": "lookup"}', '{"order": 0, "action": "help"}'])
    result = await engine.run("orders", "where is order 40001?", caller=CUSTOMER)
    assert result.ok and result.message == "How can I help?" and result.pending == ()
    assert len(model.requests) == 2
    assert [(m.role, m.kind, m.content) for m in model.requests[1].messages][-2:] == [
        ("assistant", "call", ""),
        ("tool", None, "order 40001: delivered"),
    ]


@pytest.mark.parametrize(
    ("action", "why"),
    [
        ("typo", "call() of refund with Invalid arguments for refund"),
        ("extra", "call() of refund with arguments it does not take: amount"),
        (
            "nothing",
            "call() names no tool of the step with a handler: 'teleport' (its tools: lookup, refund)",
        ),
    ],
)
async def test_a_call_code_gets_wrong_fails_the_turn_and_stores_nothing(action: str, why: str) -> None:
    engine, _ = engine_for([f'{{"order": 40001, "action": "{action}"}}'])
    result = await engine.run("orders", "refund order 40001", caller=CUSTOMER)
    assert result.error is not None and result.error.is_a(HookFailure)
    # A failed first turn keeps its session as it was before the turn: nothing of the turn in it.
    kept = await engine.store.load(result.session_id or "")
    assert kept is not None and kept.turns == 0 and kept.approvals == ()
    assert not any(namespace.messages for namespace in kept.memory.values())
    assert Orders.ledger == []
    records = await engine.store.errors(result.error.reference or "")
    assert why in records[0].message


class Proposing(Orders):
    """Look orders up; the lookup tries to propose a refund."""

    name = "Orders"

    @tool
    def lookup(self, order_id: int) -> Any:
        """Look an order up."""
        return call(self.refund, order_id=order_id)


class ProposingFlow(Flow):
    name = "orders"
    steps = [Proposing]


async def test_a_tool_cannot_propose_a_call() -> None:
    engine = FlowEngine([ProposingFlow], model=ScriptedModel(['{"order": 40001, "action": "lookup"}']))
    result = await engine.run("orders", "where is order 40001?", caller=CUSTOMER)
    assert result.error is not None and result.error.is_a(HookFailure)
    assert not result.error.is_a(ToolFailure) and Orders.ledger == []


def test_call_is_a_plain_value() -> None:
    proposed = call("refund", order_id=1, tool="x").with_state(asked=1)
    assert proposed == Call(tool="refund", args={"order_id": 1, "tool": "x"}, state={"asked": 1})
    assert proposed.tool_name == "refund" and call(Orders.refund).tool_name is None
    with pytest.raises(ValueError, match="empty name"):
        call(" ")
    with pytest.raises(TypeError, match="@tool method"):
        call(3)  # type: ignore[arg-type]


class Fallback(Orders):
    """Read what the customer wants; with no model, refund the order they opened the chat about."""

    name = "Orders"

    def on_model_error(self, error: RunError) -> Any:
        return call(self.refund, order_id=40001)


class FallbackFlow(Flow):
    name = "orders"
    steps = [Fallback]


async def test_on_model_error_may_propose_a_call_which_waits_as_any_other() -> None:
    def down(request: ModelRequest) -> Any:
        raise ModelHTTPError("provider overloaded", status_code=503)

    engine = FlowEngine([FallbackFlow], model=FunctionModel(down), clock=Clock(), store=MemoryStore())
    result = await engine.run("orders", "refund my order", caller=CUSTOMER)
    assert result.ok and [a.tool for a in result.pending] == ["refund"] and Orders.ledger == []
    assert result.session_id is not None
    done = await engine.decide(result.session_id, result.pending[0].id, "approve", caller=CUSTOMER)
    assert done.ok and Orders.ledger == [(result.pending[0].id, 40001)]
