"""OrdersFlow: customer support over a real database, with refunds that need a human yes.

Support answers questions with read-only, customer-scoped tools. ``refund_order`` only proposes a
refund: it moves the conversation to ApproveRefund and asks the customer, in words written by
code, to confirm that order and amount. The refund runs when the customer's own next message is a
clear yes — checked in code before the model's ``confirm_refund`` runs — and its result is told
in code too. The customer always comes from the authenticated caller, never from the model or the
conversation.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from pydantic import Field

from picoflow import (
    Direct,
    Flow,
    Go,
    Prompt,
    Reject,
    RunContext,
    Step,
    TerminateStep,
    ToolError,
    direct,
    direct_to,
    go,
    tool,
)
from picoflow.messages import ModelResponse
from picoflow_demos._common import (
    LeavesOnRequest,
    correct_once,
    goodbye_check,
    repeated_lookup,
    unanswered_question,
    usd_cents,
)
from picoflow_demos.orders.database import Order, OrdersDatabase, Status, default_database, today

SUPPORT = Prompt.file("support.md")
APPROVE = Prompt.file("approve.md")

# The same words for "no such order" and "someone else's order": a caller must not be able to
# probe which order numbers exist.
NOT_FOUND = "No order with that number was found for this customer."
ASK_WHICH_ORDERS = (
    "Let me look that up first. Which order do you mean (its number), or which dates should I search?"
)
NOT_SIGNED_IN = "No customer is signed in, so no order can be looked up. Ask the user to sign in first."

_YES = re.compile(
    r"\b(yes|yeah|yep|yup|sure|ok|okay|confirm|confirmed|correct|absolutely|proceed"
    r"|go ahead|do it|please do)\b",
    re.IGNORECASE,
)
_NO = re.compile(r"\b(no|nope|not|don'?t|do not|cancel|stop|wait|never)\b", re.IGNORECASE)
_ABOUT_ORDERS = re.compile(
    r"\b(orders?|refund\w*|purchases?|bought|shipp\w*|pending|deliver\w*)\b|\d{5}", re.I
)


def is_clear_yes(text: str) -> bool:
    """A short, unhedged agreement ("yes", "ok, go ahead"), not "yes... no wait"."""
    return bool(_YES.search(text)) and not _NO.search(text)


def database_for(ctx: RunContext[Any]) -> OrdersDatabase:
    """The application's database when it passed one as deps, else the demo database."""
    return ctx.deps if isinstance(ctx.deps, OrdersDatabase) else default_database()


def customer_of(ctx: RunContext[Any]) -> str:
    customer = ctx.customer_id
    if not customer:
        raise ToolError(NOT_SIGNED_IN)
    return customer


def order_view(order: Order) -> dict[str, Any]:
    """An order as the model sees it (the customer id is left out: it is always the caller)."""
    return {
        "order": order.id,
        "status": order.status,
        "total": usd_cents(order.total_cents),
        "placed": order.created.isoformat(),
    }


class Support(LeavesOnRequest):
    """Answer the signed-in customer's questions about their orders."""

    memory = "orders-support"
    crossing_message = "Where does my refund request stand?"

    def prompt(self) -> str:
        latest = self.state.get("refund")
        return SUPPORT.render(today=today().isoformat(), refund=_describe(latest) if latest else "none")

    def check_response(self, response: ModelResponse) -> Reject | None:
        refused = goodbye_check(self, response)
        if refused is not None or response.tool_calls:
            return refused
        if self._guessed(response.text):
            return correct_once(
                self, "look the orders up with the tools first, and answer only from what they return."
            )
        return None

    def on_response(self, response: str) -> str | Direct:
        # Corrected once and still guessing: a question back is better than an invented order.
        return direct(ASK_WHICH_ORDERS) if self._guessed(response) else response

    def _guessed(self, reply: str) -> bool:
        """Order facts (numbers, amounts, dates) with no lookup since the question are a guess.

        Words forwarded from the approval step were acted on there; the outcome is in the prompt.
        """
        question = unanswered_question(self.messages, forwarded=False)
        return question is not None and bool(_ABOUT_ORDERS.search(question)) and bool(re.search(r"\d", reply))

    @tool
    async def search_orders(
        self,
        since: date,
        ctx: RunContext,
        until: date | None = None,
        status: Status | None = None,
        limit: int = Field(10, ge=1, le=50),
    ) -> dict[str, Any] | Direct:
        """Search the customer's orders placed from `since` to `until` (both included), newest first.

        Args:
            since: First day, YYYY-MM-DD.
            until: Last day, YYYY-MM-DD, on or after since. Leave it out to search up to today.
            status: Only orders with this status.
            limit: At most this many orders (1 to 50).
        """
        if until is not None and until < since:
            raise ToolError(
                "until must be on or after since: the search runs from since to until. Swap the dates "
                "if they were reversed, or leave until out to search up to today."
            )
        customer = customer_of(ctx)
        orders, more = await asyncio.to_thread(
            database_for(ctx).search, customer, since, until, status, limit
        )
        if repeated_lookup(self.state, self.messages, f"search {since} {until} {status} {limit}"):
            return direct(_search_reply(orders, more, since, until, status))
        return {"orders": [order_view(order) for order in orders], "more_results": more}

    @tool
    async def get_order(self, order_id: int, ctx: RunContext) -> dict[str, Any] | Direct:
        """Show one of the customer's orders.

        Args:
            order_id: The order number.
        """
        order = await asyncio.to_thread(database_for(ctx).get, customer_of(ctx), order_id)
        if order is None:
            raise ToolError(NOT_FOUND)
        if repeated_lookup(self.state, self.messages, f"order {order_id}"):
            return direct(_order_line(order))
        return order_view(order)

    # One refund at a time: the customer confirms exactly the order the approval step names.
    @tool(exclusive=True)
    async def refund_order(self, order_id: int, ctx: RunContext) -> Direct | str:
        """Start a full refund of one of the customer's orders. The customer must then confirm it; this
        call refunds nothing by itself.

        Args:
            order_id: The order number.
        """
        order = await asyncio.to_thread(database_for(ctx).get, customer_of(ctx), order_id)
        if order is None:
            raise ToolError(NOT_FOUND)
        if order.status == "refunded":
            return f"Order {order.id} has already been refunded; there is nothing more to refund."
        refund = {"order_id": order.id, "total_cents": order.total_cents, "placed": order.created.isoformat()}
        return (
            direct_to(ApproveRefund, _confirm_question(refund))
            .with_state(refund)
            .with_tool_feedback("The customer is asked to confirm the refund.")
        )


def _order_line(order: Order) -> str:
    placed = order.created.isoformat()
    return f"Order #{order.id}: {order.status}, {usd_cents(order.total_cents)}, placed {placed}."


def _search_reply(
    orders: list[Order], more: bool, since: date, until: date | None, status: str | None
) -> str:
    """The answer to a search, written in code (used when the model asks for the same search twice)."""
    which = f"{status.capitalize()} orders" if status else "Orders"
    span = f"from {since.isoformat()} to {until.isoformat()}" if until else f"since {since.isoformat()}"
    if not orders:
        return f"No {which.lower()} placed {span}."
    lines = [f"{which} placed {span}:", *(f"- {_order_line(order)}" for order in orders)]
    if more:
        lines.append("More orders match; ask for a shorter period to see them.")
    return "\n".join(lines)


def _describe(refund: dict[str, Any]) -> str:
    order, amount = refund["order_id"], usd_cents(refund["total_cents"])
    if refund["status"] == "cancelled":
        return f"the customer decided not to refund order {order}; nothing was refunded."
    if refund["status"] == "already_refunded":
        return f"order {order} ({amount}) had already been refunded on {refund['on']}; nothing more was paid."
    return (
        f"order {order} was refunded on {refund['on']}: {amount} goes back to the original payment "
        "method within 5 to 10 business days."
    )


def _confirm_question(refund: Mapping[str, Any]) -> str:
    # The question names the order and the amount exactly: the customer's yes is to these.
    return (
        f"Shall I refund order #{refund['order_id']} (placed {refund['placed']}, "
        f"{usd_cents(refund['total_cents'])}) in full to your original payment method? "
        "Please answer yes or no."
    )


def _refund_reply(refund: dict[str, Any]) -> str:
    order, amount = refund["order_id"], usd_cents(refund["total_cents"])
    if refund["status"] == "already_refunded":
        return f"Order #{order} had already been refunded on {refund['on']}, so nothing more was paid."
    return (
        f"Done: order #{order} is refunded. {amount} goes back to your original payment method within "
        "5 to 10 business days."
    )


# Not a LeavesOnRequest: with only confirm_refund and cancel_refund offered, the embedded 1.5B model
# answered a plain "yes" in words 4 times out of 6 runs; with the usual tool list it called
# confirm_refund every time (6 of 6). goodbye_check still refuses an unasked terminate_session.
class ApproveRefund(Step):
    """Take the customer's answer to one refund; nothing is refunded without their clear yes."""

    memory = "orders-approval"

    def on_enter(self) -> None:
        # Each approval starts clean, so a yes given to an earlier refund can never count for this one.
        self.erase_memory()

    def prompt(self) -> str:
        return APPROVE.render(
            order_id=str(self.state["order_id"]),
            created=self.state["placed"],
            amount=usd_cents(self.state["total_cents"]),
        )

    def check_response(self, response: ModelResponse) -> Reject | None:
        if "confirm_refund" not in response.tool_names():
            refused = goodbye_check(self, response)
            if refused is not None or response.tool_calls:
                return refused
            return correct_once(self, self._unheeded())
        if not self._customer_said_yes():
            return Reject(
                "the customer's latest message is not a clear yes to this refund. Ask them to confirm "
                "with yes or no, and wait for their answer."
            )
        return None

    def on_response(self, response: str) -> str | Direct:
        # Corrected once and still only talking after a clear yes: nothing was refunded, and the
        # customer must not read otherwise. The question is asked again, in code.
        if self._unheeded() is None:
            return response
        return direct(f"Nothing has been refunded yet. {_confirm_question(self.state)}")

    def _unheeded(self) -> str | None:
        """Why a text reply is wrong: the customer's latest message is a clear yes."""
        return "the customer said yes: call confirm_refund." if self._customer_said_yes() else None

    def _customer_said_yes(self) -> bool:
        for message in reversed(self.messages):
            if message.role == "user":
                # Only the customer's own words count, not a message the runtime added.
                return message.kind is None and is_clear_yes(message.content)
        return False

    @tool(exclusive=True)
    async def confirm_refund(self, ctx: RunContext) -> Direct:
        """Refund the order now. Only after the customer clearly said yes in their latest message."""
        order_id = int(self.state["order_id"])
        result = await asyncio.to_thread(
            database_for(ctx).refund, customer_of(ctx), order_id, reference=ctx.session_id
        )
        if result.order is None or result.refunded_on is None:
            raise ToolError(NOT_FOUND)
        outcome = {
            "order_id": order_id,
            "total_cents": result.order.total_cents,
            "status": result.status,
            "on": result.refunded_on.isoformat(),
        }
        # What was paid back, and when, is told as the database says it.
        return direct_to(Support, _refund_reply(outcome)).with_state(refund=outcome)

    @tool
    def cancel_refund(self) -> Go:
        """The customer does not want this refund, or wants something else."""
        outcome = {"order_id": self.state["order_id"], "total_cents": self.state["total_cents"]}
        back = go(Support).with_state(refund={**outcome, "status": "cancelled"})
        # Support hears the customer's own words, so "no, refund 40006 instead" is handled this turn.
        said = self.last_user_message
        return back.with_message(said) if said else back


class OrdersGoodbye(TerminateStep):
    """Closing words."""

    memory = "orders-goodbye"


class OrdersFlow(Flow):
    """Customer support over the orders database: search orders, and refund with confirmation."""

    name = "orders"
    steps = [Support, ApproveRefund, OrdersGoodbye]
