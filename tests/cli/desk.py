"""A support desk with a gated refund, for the approval commands: refunds over $100 need someone
with the ``staff`` role, smaller ones the customer; ``LEDGER`` records each refund that ran."""

from __future__ import annotations

from typing import Any

from picoflow import Flow, RunContext, Step, tool

LEDGER: list[tuple[str | None, int, float]] = []
"""(idempotency key, order, amount) of every refund that ran, in this process."""


def staff_over_100(ctx: RunContext[Any], args: Any) -> Any:
    return "staff" if args.amount > 100 else True


class Desk(Step):
    """Help with orders."""

    @tool(
        approval=staff_over_100,
        approval_summary="Refund ${amount:.2f} on order {order_id}",
        approval_seconds=600,
    )
    def refund(self, ctx: RunContext[Any], order_id: int, amount: float) -> str:
        """Refund an order."""
        LEDGER.append((ctx.idempotency_key, order_id, amount))
        return f"refunded ${amount:.2f} on order {order_id}"

    @tool(approval=True, approval_summary="Send the note {text!r}", approval_seconds=600)
    def send_note(self, text: str) -> str:
        """Send the customer a note."""
        LEDGER.append((None, 0, 0.0))
        return "sent"


class DeskFlow(Flow):
    """A support desk whose refunds wait for approval."""

    name = "desk"
    steps = [Desk]
