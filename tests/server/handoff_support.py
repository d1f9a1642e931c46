"""A support flow that hands conversations to a person, shared by the handoff tests (engine, HTTP
with two server processes, the page): a desk step whose model escalates when asked for a person,
the ``Handoff`` step, and a model that answers from the request alone (so two processes, each
with its own model, answer alike)."""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI

from picoflow import Caller, Flow, FlowEngine, Handoff, Outcome, Step, TerminateStep, go, stay, tool
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ToolCall
from picoflow.server import ServerSettings, create_app
from picoflow.server.auth import Identity
from picoflow.sessions import SQLiteStore

CUSTOMER = Caller(principal="cust-1")
STAFF = Caller(principal="ana", visibilities=frozenset({"staff"}))
OTHER_STAFF = Caller(principal="ben", visibilities=frozenset({"staff"}))
KEYS: dict[str, Identity | str] = {
    "key-cust": "cust-1",
    "key-ana": Identity("ana", frozenset({"staff"})),
    "key-ben": Identity("ben", frozenset({"staff"})),
}
"""The API keys of the served tests."""
NOW = 4_102_444_800.0
"""2100-01-01 00:00 UTC: the engines' clock."""


def clock() -> float:
    return NOW


class Desk(Step):
    """Help with orders."""

    @tool
    def note_order(self, order_id: int) -> Outcome:
        """Remember the order the customer asks about."""
        return stay(f"noted order {order_id}").with_state(order_id=order_id)

    @tool
    def escalate(self, reason: str) -> Outcome:
        """Hand the conversation to a person when the customer asks for one."""
        return go(Handoff).with_state(reason=reason)


class SupportFlow(Flow):
    name = "support"
    steps = [Desk, Handoff, TerminateStep]


def answer(request: ModelRequest) -> Any:
    """The desk's model: escalates when the customer asks for a person, notes an order number,
    else answers with the customer's last words (what it read is plain in the reply)."""
    last = request.messages[-1]
    if last.role == "tool":
        return f"Noted. ({last.content})"
    said = last.content
    if "person" in said:
        return ToolCall("escalate", {"reason": "the customer asked for a person"}, "call-esc")
    words = said.split()
    if "order" in words and words[-1].isdigit():
        return ToolCall("note_order", {"order_id": int(words[-1])}, "call-note")
    return f"Model, in {request.step}: {said}"


def support_engine(store: Any, **options: Any) -> FlowEngine:
    return FlowEngine([SupportFlow], store=store, model=FunctionModel(answer), clock=clock, **options)


def make_app() -> FastAPI:
    """The app of one of the test's server processes, on the SQLite file the environment names."""
    engine = support_engine(SQLiteStore(os.environ["PICOFLOW_TEST_HANDOFF_DB"]))
    return create_app(engine, settings=ServerSettings(api_keys=KEYS, prepare_models=False))
