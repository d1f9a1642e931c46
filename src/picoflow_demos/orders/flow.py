"""OrdersFlow: customer support over a real database, with refunds a person approves.

The model reads; code decides. Each turn Support's model turns the customer's latest message into
a small JSON value: the order numbers it writes, a status, a date range and what the customer
wants. Code keeps only what the customer's words bear out, looks the orders up (always for the
signed-in caller, never a customer the model or the conversation names) and writes every reply
from the database.

A refund of a found, refundable order moves to ``Refund``, whose only tool is the approval-gated
``refund(order_id)``: its model proposes the call for that one order, and the call waits for a
decision made through ``FlowEngine.decide`` (the customer's own for an order up to $100, someone
with the "staff" role above that), described by a summary code writes from the database. No typed
answer refunds anything: a message sent while the refund waits withdraws it and goes back to
Support. An approved refund runs once, keyed by the approval's id, and the reply is written from
the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from picoflow import (
    Approval,
    Direct,
    Flow,
    Handoff,
    LogicStep,
    Outcome,
    Prompt,
    Reject,
    Repairs,
    RunContext,
    Step,
    TerminateStep,
    ToolError,
    direct,
    direct_to,
    go,
    repair,
    since_last_user,
    tool,
)
from picoflow.exceptions import RunError
from picoflow.messages import Message, ModelResponse
from picoflow.slots import Said, as_written, bears_out, options_said, says_field, written_days
from picoflow_demos._common import SAYS_GOODBYE, usd_cents
from picoflow_demos.orders.database import Order, OrdersDatabase, Status, default_database, today

SUPPORT = Prompt.file("support.md")
REFUND = Prompt.file("refund.md")

# The same words for "no such order" and "someone else's order": a caller must not be able to
# probe which order numbers exist.
NOT_FOUND = "No order #{order_id} was found for your account."
NOT_SIGNED_IN = "Please sign in first: without a signed-in customer no order can be looked up."
HELP = (
    "I can look up your orders by number or by date, list them by status (pending, shipped or "
    "refunded), and refund an order. For example: “status of order 40006” or “refunds since October 1”."
)
ASK_DATES = (
    "Which dates should I search? For example: “since October 1” or “between October 1 and November 1”."
)
ASK_WHICH_REFUND = "Which order shall I refund? Give its number."
ANYTHING_ELSE = "Anything else I can help with?"
FAREWELL = "Thank you for shopping with us. Goodbye!"
NOT_REFUNDED = "OK, order #{order_id} was not refunded. Anything else I can help with?"
WITHDRAWN = (
    "Your message came before a decision, so the refund of order #{order_id} was withdrawn and nothing "
    "was refunded. To refund it, ask again with its number, then approve the request."
)
NOT_STARTED = "I could not start the refund of order #{order_id}; nothing was refunded. Please ask again."
#: Refunds above this many cents need someone with the "staff" role; smaller ones, the customer.
STAFF_ABOVE_CENTS = 10_000
STAFF = "staff"
LIMIT = 20
# Searches without a start date reach back to the first order.
EARLIEST = date(2000, 1, 1)


# The words that bear out a reading (see picoflow.slots.grounding): a month said by its name or
# its digits, a status by a word for it, a goodbye by a farewell. "Thanks!" alone is no goodbye, and
# "forget it" answers a refund, not the conversation.
MONTH = Said(options={
    1: ("january", "jan", "januar", "janvier", "enero", "01"),
    2: ("february", "feb", "februar", "février", "fevrier", "febrero", "02"),
    3: ("march", "mar", "märz", "maerz", "mars", "marzo", "03"),
    4: ("april", "apr", "avril", "abril", "04"),
    5: ("may", "mai", "mayo", "05"),
    6: ("june", "jun", "juni", "juin", "junio", "06"),
    7: ("july", "jul", "juli", "juillet", "julio", "07"),
    8: ("august", "aug", "août", "aout", "agosto", "08"),
    9: ("september", "sep", "sept", "septembre", "septiembre", "09"),
    10: ("october", "oct", "oktober", "octobre", "octubre"),
    11: ("november", "nov", "novembre", "noviembre"),
    12: ("december", "dec", "dezember", "décembre", "decembre", "diciembre"),
})  # fmt: skip
STATUS = Said(options={
    "pending": ("not shipped", "not yet shipped", "waiting", "processing", "unshipped", "open",
                "ausstehend", "offen", "en attente"),
    "shipped": ("shipping", "sent", "on the way", "on its way", "dispatched", "delivered", "versandt",
                "verschickt", "expédié", "expédiée", "expédiées", "expédiés", "envoyé", "envoyée"),
    "refunded": ("refund", "refunds", "reimbursed", "money back", "erstattet", "rückerstattet",
                 "remboursé", "remboursée", "remboursées", "remboursés"),
})  # fmt: skip
# What only a person can settle: a damaged or wrong item, a dispute, or a customer asking for one.
# The words are checked like a goodbye's: a reading of "person" the message does not bear out is
# no request for a person.
ASKS_FOR_PERSON = Said(options={"person": (
    "a person", "a human", "an agent", "real person", "someone", "staff", "damaged", "broken",
    "defective", "wrong item", "dispute", "complaint", "chargeback", "mensch", "mitarbeiter",
    "beschädigt", "kaputt", "une personne", "un conseiller", "endommagé", "cassé", "una persona",
    "un agente", "dañado", "roto",
)})  # fmt: skip
# The shop's policies a customer may ask about on the way (the digression pattern): each topic's
# words, and its answer, written here. ``OrdersQuestions`` answers them; Support then asks its
# question again.
POLICY_TOPICS = Said(options={
    "returns": ("return policy", "return window", "returns", "send it back", "exchange", "rückgabe",
                "umtausch", "retour", "retourner", "devolución", "devolver"),
    "shipping": ("shipping cost", "delivery time", "how long does shipping", "how long does delivery",
                 "shipping time", "lieferzeit", "versandkosten", "délai de livraison", "frais de port",
                 "plazo de entrega", "gastos de envío"),
    "payment": ("payment methods", "pay with", "paypal", "credit card", "zahlungsarten", "kreditkarte",
                "moyens de paiement", "carte de crédit", "formas de pago", "tarjeta de crédito"),
})  # fmt: skip
POLICY_ANSWERS = {
    "returns": "You can return an item within 30 days of delivery, unused and in its packaging.",
    "shipping": "Orders ship within 2 business days and arrive 3 to 5 business days later; shipping is free "
    "over $50.",
    "payment": "We accept credit and debit cards and PayPal; you are charged when the order ships.",
}
ASKS_ABOUT_POLICY = Said(
    options={"policy": tuple(w for words in POLICY_TOPICS.options.values() for w in words)}
)
NO_POLICY_ANSWER = "I'm sorry, I have no answer to that here."
# Which end of a range a lone date is: "until September 30" read as a start is an end.
SINCE = Said(words=("since", "from", "after", "starting", "beginning", "seit", "ab", "depuis", "desde"))
UNTIL = Said(words=("until", "till", "til", "before", "through", "up to", "ending", "bis", "jusqu", "hasta"))


class Day(BaseModel):
    """A day as the customer writes it; the year is decided in code."""

    # Said(date=...): "01/10/2026" is read in the order the message writes its dates.
    month: Annotated[int, MONTH, Said(date="month")] = Field(ge=1, le=12)
    day: Annotated[int, Said(date="day")] = Field(ge=1, le=31)


class CustomerRequest(BaseModel):
    """What the customer asks for in their latest message."""

    # Every field is required, so the model writes them in this order: what the message names
    # (orders, status, dates) comes before the action it decides.
    orders: list[int] = Field(max_length=5, description="Order numbers the customer writes, such as 40006")
    status: Annotated[Literal["any", "pending", "shipped", "refunded"], STATUS] = Field(
        description="The order status the customer asks about; any when they name none"
    )
    since: Annotated[Day | None, SINCE] = Field(
        description="First day of the dates the customer gives; null when none"
    )
    until: Annotated[Day | None, UNTIL] = Field(
        description="Last day of the dates the customer gives; null when none"
    )
    action: Annotated[
        Literal["order", "search", "refund", "policy", "goodbye", "person", "other"],
        SAYS_GOODBYE,
        ASKS_FOR_PERSON,
        ASKS_ABOUT_POLICY,
    ] = Field(
        description="order: about orders they give by number; search: their orders by date or status; "
        "refund: refund an order; policy: a question about returns, shipping or payment; goodbye: the "
        "customer ends the conversation; person: they want a person, or have a problem only a person "
        "can settle (a damaged item, a dispute); other: anything else"
    )


def borne_out(request: CustomerRequest, said: str) -> CustomerRequest:
    """``request`` with what the customer's words do not bear out taken back: an order number they
    did not write, a status or a goodbye they did not say (see ``MONTH``, ``STATUS``, ``SAYS_GOODBYE``),
    and a lone date put at the end of the range its words say (``SINCE``, ``UNTIL``). A day written
    in digits is read in the order the message writes its dates (``as_written``); whether its words
    bear it out is asked of it where it is used."""
    orders = [
        number
        for number in dict.fromkeys(request.orders)
        if bears_out(CustomerRequest, "orders", [number], said)
    ]
    status = request.status if bears_out(CustomerRequest, "status", request.status, said) else "any"
    action = request.action if bears_out(CustomerRequest, "action", request.action, said) else "other"
    since, until = (
        as_written(CustomerRequest, end, getattr(request, end), said) for end in ("since", "until")
    )
    written = written_days(CustomerRequest, "since", said)
    read = (("since", since), ("until", until))
    if (
        since
        and until
        and len(written) == 2
        and not all(bears_out(CustomerRequest, *end, said) for end in read)
    ):
        # Both ends read and two dates written in digits: the range runs between those two,
        # whichever of their numbers a model put where.
        since, until = (Day.model_validate(day) for day in written)
    if (since is None) != (until is None):  # one date: its words say which end it is
        day = since or until
        starts, ends = (says_field(CustomerRequest, end, said) for end in ("since", "until"))
        if starts != ends:
            since, until = (day, None) if starts else (None, day)
    return request.model_copy(
        update={"orders": orders, "status": status, "action": action, "since": since, "until": until}
    )


def days_of(request: CustomerRequest) -> list[Day]:
    """The days the request gives (its since and until, when read)."""
    return [day for day in (request.since, request.until) if day is not None]


def asks(said: str) -> bool:
    """Whether the customer's message asks a question of its own (a question mark of any script)."""
    return any(mark in said for mark in "?？¿؟")


def last_such_day(day: Day, current: date) -> date | None:
    """The most recent such day that is not after ``current`` (None when the month has no such day)."""
    for year in (current.year, current.year - 1):
        try:
            found = date(year, day.month, day.day)
        except ValueError:
            continue
        if found <= current:
            return found
    return None


def database_for(ctx: RunContext[Any]) -> OrdersDatabase:
    """The application's database when it passed one as deps, else the demo database."""
    return ctx.deps if isinstance(ctx.deps, OrdersDatabase) else default_database()


def order_line(order: Order) -> str:
    amount, placed = usd_cents(order.total_cents), order.created.isoformat()
    return f"Order #{order.id}: {order.status}, {amount}, placed {placed}."


def search_reply(
    orders: Sequence[Order], more: bool, since: date | None, until: date | None, status: str | None
) -> str:
    """The answer to a search, written from the database."""
    which = f"{status.capitalize()} orders" if status else "Orders"
    if since and until:
        span = f" from {since.isoformat()} to {until.isoformat()}"
    elif since:
        span = f" since {since.isoformat()}"
    elif until:
        span = f" until {until.isoformat()}"
    else:
        span = ""
    if not orders:
        return f"You have no {which.lower()} placed{span}." if span else f"You have no {which.lower()}."
    lines = [f"{which} placed{span}:" if span else f"Your {which.lower()}:"]
    lines.extend(f"- {order_line(order)}" for order in orders)
    if more:
        lines.append(f"Those are the latest {len(orders)}; ask for a shorter period to see the others.")
    return "\n".join(lines)


def refund_reply(refund: Mapping[str, Any]) -> str:
    order, amount = refund["order_id"], usd_cents(refund["total_cents"])
    if refund["status"] == "already_refunded":
        return f"Order #{order} had already been refunded on {refund['on']}, so nothing more was paid."
    return (
        f"Done: order #{order} is refunded. {amount} goes back to your original payment method within "
        "5 to 10 business days."
    )


class Support(Step):
    """Answer the signed-in customer's questions about their orders."""

    memory = "orders-support"
    output = CustomerRequest
    terminate_tool = False

    def prompt(self) -> str:
        return SUPPORT.text

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        # The reading needs only the customer's latest words, not earlier lists of orders.
        return since_last_user(memory)

    async def on_response(self, request: CustomerRequest) -> Outcome:
        said = self.last_user_message or ""
        self.erase_memory()
        # Set by Refund when this very message withdrew the refund that waited for a decision.
        withdrawn = self.state.pop("withdrawn", None)
        # The question this step asked last, if any: an order number alone answers it.
        asked = self.state.pop("asked", None)
        # Only what the customer's own words bear out is acted on: a number, status or date the
        # model read but the customer never wrote is its invention.
        request = borne_out(request, said)
        if request.action == "search" and request.orders and request.status == "any" and not days_of(request):
            # A search names dates or a status; order numbers alone are orders to look up.
            request = request.model_copy(update={"action": "order"})
        if asked == "refund" and request.orders and request.action in ("order", "other") and not asks(said):
            # "Order number: 40004" answers "which order shall I refund?"; "Where is 40004?" asks anew.
            request = request.model_copy(update={"action": "refund"})
        if request.action == "goodbye":
            return direct_to(OrdersGoodbye, FAREWELL)
        if request.action == "policy":  # answered aside; what this step asked stays open
            if asked is not None:
                self.state["asked"] = asked
            return repair("digression", detail="a question about the shop's policies")
        if request.action == "person":  # a damaged item, a dispute: staff settle it, not this step
            return repair("handoff", detail="the customer asked for a person")
        order_ids = request.orders
        status = None if request.status == "any" else request.status
        days = days_of(request)
        if request.action not in ("refund", "search") and not (order_ids or status or days):
            return direct(HELP)
        customer = self.context.customer_id
        if not customer:
            return direct(NOT_SIGNED_IN)
        if request.action == "refund":
            if withdrawn is not None and not order_ids:
                # "Refund it now" typed while the refund waited is no decision, and "it" is not
                # taken as a new request: only a refund whose order number is written starts one.
                return direct(WITHDRAWN.format(order_id=withdrawn))
            return await self.start_refund(customer, order_ids)
        if order_ids:
            return await self.show_orders(customer, order_ids)
        if any(not bears_out(CustomerRequest, "since", day, said) for day in days):
            return direct(ASK_DATES)
        since, until = (
            last_such_day(day, today()) if day else None for day in (request.since, request.until)
        )
        if (request.since and since is None) or (request.until and until is None):
            return direct(ASK_DATES)
        return await self.search(customer, since, until, status)

    def question(self) -> str:
        # What a digression comes back to: the order to refund when that was asked, else an offer.
        return ASK_WHICH_REFUND if self.state.get("asked") == "refund" else ANYTHING_ELSE

    async def show_orders(self, customer: str, order_ids: Sequence[int]) -> Direct:
        database = database_for(self.context)
        found = [
            (order_id, await asyncio.to_thread(database.get, customer, order_id)) for order_id in order_ids
        ]
        self.state["shown"] = [order.id for _, order in found if order is not None]
        return direct(
            "\n".join(
                order_line(order) if order else NOT_FOUND.format(order_id=order_id)
                for order_id, order in found
            )
        )

    async def search(
        self, customer: str, since: date | None, until: date | None, status: Status | None
    ) -> Direct:
        turned = since is not None and until is not None and until < since
        if turned:
            # "between November 1 and October 1": the customer means the days in between.
            since, until = until, since
        database = database_for(self.context)
        orders, more = await asyncio.to_thread(
            database.search, customer, since or EARLIEST, until, status, LIMIT
        )
        self.state["shown"] = [order.id for order in orders]
        reply = search_reply(orders, more, since, until, status)
        return direct(
            f"You gave the later date first, so I searched the days in between.\n{reply}" if turned else reply
        )

    async def start_refund(self, customer: str, order_ids: Sequence[int]) -> Outcome:
        shown = list(self.state.get("shown") or [])
        if not order_ids and len(shown) == 1:
            order_ids = shown  # "refund it" right after one order was shown
        if len(order_ids) > 1:  # one refund at a time: which first is the customer's choice
            self.state["asked"] = "refund"  # the number they answer with is the one to refund
            return repair(
                "clarify", detail="which order to refund first", options=tuple(f"#{n}" for n in order_ids)
            )
        if not order_ids:
            self.state["asked"] = "refund"
            return direct(ASK_WHICH_REFUND)
        order = await asyncio.to_thread(database_for(self.context).get, customer, order_ids[0])
        if order is None:
            return direct(NOT_FOUND.format(order_id=order_ids[0]))
        if order.status == "refunded":
            return direct(f"Order #{order.id} has already been refunded; there is nothing more to refund.")
        refund = {"order_id": order.id, "total_cents": order.total_cents, "placed": order.created.isoformat()}
        return go(Refund).with_state(refund)


def refund_approvers(ctx: RunContext[Any], args: Any) -> str | bool:
    """Who approves a refund: staff above $100, else the customer (the session's principal)."""
    order = database_for(ctx).get(ctx.customer_id or "", args.order_id)
    return STAFF if order is not None and order.total_cents > STAFF_ABOVE_CENTS else True


def refund_summary(ctx: RunContext[Any], args: Any) -> str:
    """What the approver is asked, written from the database (never by the model)."""
    order = database_for(ctx).get(ctx.customer_id or "", args.order_id)
    if order is None:
        return f"Refund order #{args.order_id} (not found for this customer: nothing can be refunded)"
    return (
        f"Refund order #{order.id} (placed {order.created.isoformat()}, {usd_cents(order.total_cents)}) "
        "in full to the original payment method"
    )


class Refund(Step):
    """Propose the refund of the one order Support found; it runs only once a person approves it.

    State: ``order_id``, ``total_cents`` and ``placed`` of that order, as the database gave them.
    """

    memory = "orders-refund"
    terminate_tool = False
    crossing_message = "Propose the refund."

    def on_enter(self) -> None:
        # Each refund starts clean: nothing said about an earlier one reaches this one's model.
        self.erase_memory()

    def prompt(self) -> str:
        return REFUND.render(order_id=str(self.state["order_id"]))

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        return since_last_user(memory)

    def check_response(self, response: ModelResponse) -> Reject | None:
        # The only proposal that may wait for a decision: this order's refund, alone.
        order_id = int(self.state["order_id"])
        calls = response.tool_calls
        if len(calls) == 1 and calls[0].name == "refund":
            args = calls[0].args
            if isinstance(args, Mapping) and str(args.get("order_id")) == str(order_id):
                return None
        return Reject(f'Call refund with {{"order_id": {order_id}}}, and nothing else.')

    # The order is the one code looked up (checked against the step's state below) and a person
    # approves the refund: the policy, not the user's words of this step, gates it.
    @tool(approval=refund_approvers, approval_summary=refund_summary, grounded=False)
    async def refund(self, order_id: int, ctx: RunContext[Any]) -> Outcome:
        """Refund the order in full to the original payment method, once it is approved."""
        expected = int(self.state["order_id"])
        if order_id != expected:
            raise ToolError(f"Only order #{expected} can be refunded here.")
        customer = ctx.customer_id
        if not customer:
            return direct_to(Support, NOT_SIGNED_IN)
        if ctx.idempotency_key is None:  # the policy always asks someone: never without a decision
            raise ToolError("A refund runs only once it is approved.")
        # The approval's id is the refund's reference: the same approval can never pay twice.
        result = await asyncio.to_thread(
            database_for(ctx).refund, customer, order_id, reference=ctx.idempotency_key
        )
        if result.order is None or result.refunded_on is None:
            return direct_to(Support, NOT_FOUND.format(order_id=order_id))
        outcome = {
            "order_id": order_id,
            "total_cents": result.order.total_cents,
            "status": result.status,
            "on": result.refunded_on.isoformat(),
        }
        # What was paid back, and when, is told as the database says it.
        return direct_to(Support, refund_reply(outcome)).with_state(refund=outcome)

    def on_denied(self, approval: Approval) -> Outcome:
        # Denied, expired or withdrawn by a new message: back to Support, which answers that message.
        order_id = int(self.state["order_id"])
        refund = {"order_id": order_id, "total_cents": self.state["total_cents"], "status": approval.status}
        if approval.status == "withdrawn":
            return go(Support).with_state(refund=refund, withdrawn=order_id)
        return direct_to(Support, NOT_REFUNDED.format(order_id=order_id)).with_state(refund=refund)

    def on_model_error(self, error: RunError) -> Outcome:
        # The model would not propose the refund: say so, and let Support take the next message.
        return direct_to(Support, NOT_STARTED.format(order_id=int(self.state["order_id"])))


class OrderQuestion(BaseModel):
    """What a customer's side question is about (read from its declared words, in code)."""

    topic: Annotated[Literal["returns", "shipping", "payment"] | None, POLICY_TOPICS] = None


class OrdersQuestions(LogicStep):
    """Answer a question about the shop's policies in code, then go back to Support's question."""

    memory = "orders-questions"

    def run_logic(self) -> Direct:
        said = self.last_user_message or ""
        self.erase_memory()
        topics = options_said(OrderQuestion, "topic", said)
        return self.resume(" ".join(POLICY_ANSWERS[topic] for topic in topics) or NO_POLICY_ANSWER)


class OrdersGoodbye(TerminateStep):
    """Closing words."""

    memory = "orders-goodbye"


class OrdersStaff(Handoff):
    """A member of staff takes the conversation over (``FlowEngine.take``, ``picoflow handoffs``)."""

    reply = (
        "I'm passing this to our support team with what you told me: a person will reply here. "
        "You can keep writing; they will read it."
    )


class OrdersFlow(Flow):
    """Customer support over the orders database: search orders, and refund what a person approves."""

    name = "orders"
    steps = [Support, Refund, OrdersQuestions, OrdersGoodbye, OrdersStaff]
    repairs = Repairs(digress_to=OrdersQuestions)
