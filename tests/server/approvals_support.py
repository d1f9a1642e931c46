"""A refund desk whose refunds wait for a person's decision, for the approval tests over HTTP and
in the chat page: refunds up to $100 the customer approves, larger ones only staff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, ClassVar

import pytest
from pydantic import Field

from picoflow import Flow, RunContext, Step, tool
from picoflow.server.auth import Identity

NOW = 4_102_444_800.0
"""2100-01-01 00:00 UTC: the engine's clock in these tests, so nothing expires while they run."""

KEYS: dict[str, Identity | str] = {
    "cust-key": "cust-1",
    "other-key": "cust-2",
    "staff-key": Identity("sup-9", frozenset({"staff"})),
}
CUSTOMER = {"Authorization": "Bearer cust-key"}
OTHER = {"Authorization": "Bearer other-key"}
STAFF = {"Authorization": "Bearer staff-key"}


def clock() -> float:
    return NOW


def staff_over_100(ctx: RunContext[Any], args: Any) -> Any:
    """Refunds over $100 need staff; smaller ones, the customer."""
    return "staff" if args.amount > 100 else True


class Refunds(Step):
    """Help the customer with refunds."""

    ledger: ClassVar[list[tuple[str | None, int, float]]] = []
    """Every refund that ran: (idempotency key, order, amount)."""

    @tool(
        approval=staff_over_100,
        approval_summary="Refund ${amount:.2f} on order {order_id}",
        approval_seconds=600,
    )
    def refund(
        self,
        ctx: RunContext[Any],
        order_id: Annotated[int, Field(title="Order")],
        amount: float,
        note: str = "",
    ) -> str:
        """Refund an order. Its order is titled, for the approval card; the amount and the note
        are not, and a card shows them by their names made readable."""
        Refunds.ledger.append((ctx.idempotency_key, order_id, amount))
        return f"refunded ${amount:.2f} on order {order_id}"


@pytest.fixture
def fresh_ledger() -> Iterator[None]:
    """An empty ``Refunds.ledger`` before and after the test: what one test refunded is never
    another's (``tests/server/conftest.py`` offers it to the server tests, which ask for it with
    ``pytest.mark.usefixtures("fresh_ledger")``; the protocol tests' conftest to every one of them)."""
    Refunds.ledger = []
    yield
    Refunds.ledger = []


class RefundFlow(Flow):
    """Refunds, each approved by a person."""

    name = "refunds"
    steps = [Refunds]
