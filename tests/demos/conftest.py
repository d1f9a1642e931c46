"""Shared set-up of the example-flow tests: a fixed "today" and a few conversation helpers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pytest

from picoflow import Approval, Caller, FlowEngine, TurnResult
from picoflow.approvals import Decision
from picoflow.messages import ModelRequest
from picoflow.models import ScriptedModel
from picoflow_demos.hotel.scripted import CURRENT_DATE
from picoflow_demos.orders import OrdersDatabase, create_database

ORDERS_TODAY = date(2026, 11, 20)


@pytest.fixture(autouse=True)
def fixed_today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    monkeypatch.setenv("ORDERS_FLOW_CURRENT_DATE", ORDERS_TODAY.isoformat())


@pytest.fixture
def orders_db(tmp_path: Path) -> OrdersDatabase:
    return OrdersDatabase(create_database(tmp_path / "orders.sqlite3", as_of=ORDERS_TODAY))


@dataclass
class Chat:
    """One conversation with a flow: every turn's result and the model requests it caused."""

    engine: FlowEngine
    model: ScriptedModel
    flow: str
    context: Caller = field(default_factory=Caller)
    session_id: str | None = None
    results: list[TurnResult] = field(default_factory=list)
    requests_per_turn: list[list[ModelRequest]] = field(default_factory=list)

    async def say(self, text: str) -> TurnResult:
        before = len(self.model.requests)
        result = await self.engine.run(self.flow, text, self.session_id, caller=self.context)
        self.session_id = result.session_id or self.session_id
        self.results.append(result)
        self.requests_per_turn.append(self.model.requests[before:])
        return result

    async def say_all(self, texts: Sequence[str]) -> list[TurnResult]:
        return [await self.say(text) for text in texts]

    async def decide(
        self, decision: Decision = "approve", approval: Approval | None = None, reason: str | None = None
    ) -> TurnResult:
        """Decide, as this conversation's caller, ``approval`` (by default the one the last turn
        ended waiting for): a turn of its own, in ``results``."""
        if approval is None:
            (approval,) = self.results[-1].pending
        before = len(self.model.requests)
        result = await self.engine.decide(
            self.session_id or "", approval.id, decision, reason=reason, caller=self.context
        )
        self.results.append(result)
        self.requests_per_turn.append(self.model.requests[before:])
        return result

    def turn_requests(self, turn: int) -> Iterator[ModelRequest]:
        """Requests of turn number ``turn`` (1-based)."""
        return iter(self.requests_per_turn[turn - 1])
