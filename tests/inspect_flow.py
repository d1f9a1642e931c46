"""The conversation the inspector's tests record: a slot-filling step whose reading drops an item
the user never said, a step change, a tool refusing with a ToolError, an answer the acceptance gate
rejects, and a refund that waits for the user's approval. ``LoopFlow`` fails its first turn: its
model calls a tool forever, until the model-call limit ends the turn."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from picoflow import (
    Flow,
    FlowEngine,
    Outcome,
    Reject,
    RunContext,
    SlotStep,
    Step,
    ToolError,
    UsageLimits,
    ask,
    direct_to,
    stay,
    tool,
)
from picoflow.context import Caller
from picoflow.messages import ModelResponse, ToolCall
from picoflow.models import FunctionModel, ScriptedModel

ADA = Caller(principal="ada")
NAME = "What is your name?"
AGE = "How old are you?"
WELCOME = "Hello Ada, how can I help?"
PROMISE = "I guarantee you a refund today."
ASK_ORDER = "Order 7 is not yours. Which order shall I refund?"
REFUNDED = "Refunded $20.00 on order 8."


class Guest(BaseModel):
    """Who is asking."""

    name: str | None = Field(None, description="The guest's first name")
    age: int | None = Field(None, gt=0, le=120, description="Age in years")


class Interview(SlotStep):
    """Learn who the guest is."""

    slots = Guest
    questions = [ask(NAME, "name"), ask(AGE, "age")]

    def on_complete(self, values: Guest) -> Outcome:
        return direct_to(Desk, WELCOME).with_state(guest=values.model_dump())


class Desk(Step):
    """Help with orders. Never promise anything."""

    def check_response(self, response: ModelResponse) -> Reject | None:
        if "guarantee" in response.text:
            return Reject("never promise an outcome")
        return None

    @tool
    def lookup(self, order_id: int) -> str:
        """Look an order up."""
        if order_id == 7:
            raise ToolError(f"order {order_id} belongs to another customer")
        return f"order {order_id}: $20.00"

    @tool(approval=True)
    def refund(self, order_id: int, amount: float) -> str:
        """Refund an order."""
        self.state["refunded"] = [order_id, amount]
        return f"refunded ${amount:.2f} on order {order_id}"


class InspectFlow(Flow):
    name = "inspect"
    steps = [Interview, Desk]


def found(*items: tuple[str, str, Any]) -> str:
    """A reading: one item (field, quote, value) per thing the model read."""
    return json.dumps({"found": [{"field": f, "quote": q, "value": v} for f, q, v in items]})


TURNS: list[tuple[str, list[Any]]] = [
    ("Hi", [found()]),
    ("Ada", [found(("name", "Ada", "Ada"), ("age", "I'm 30", 30))]),  # the age was never said
    ("30", [found(("age", "30", 30))]),
    ("Refund order 7", [ToolCall("lookup", {"order_id": 7}), PROMISE, ASK_ORDER]),
    ("Order 8, twenty dollars", [ToolCall("refund", {"order_id": 8, "amount": 20.0})]),
]
"""Each turn: the user's words and the model's answers, in order."""


async def play(engine: FlowEngine, model: ScriptedModel) -> str:
    """Play ``TURNS`` and approve the refund; the session's id."""
    session_id: str | None = None
    for text, answers in TURNS:
        model.extend(answers)
        result = await engine.run("inspect", text, session_id, caller=ADA)
        assert result.error is None, result.error
        session_id = result.session_id
    assert session_id is not None and result.pending
    model.extend([REFUNDED])
    decided = await engine.decide(session_id, result.pending[0].id, "approve", caller=ADA)
    assert decided.error is None and decided.message == REFUNDED
    assert model.remaining == 0
    return session_id


def _looping(request: Any) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall("look", {"query": "again"})])


class Searcher(Step):
    """Search until you find it."""

    @tool
    def look(self, query: str) -> Any:
        """Look once more."""
        return stay("nothing yet")


class LoopFlow(Flow):
    name = "loop"
    steps = [Searcher]
    limits = UsageLimits(model_calls=4)


def looping_model() -> FunctionModel:
    """A model that calls ``look`` on every request, never answering."""
    return FunctionModel(_looping)


def tool_context_secret(ctx: RunContext[Any]) -> str:
    return str(ctx.config.get("crm_key", ""))
