"""The flows of the Temporal tests, importable by worker processes (``refund_flows:RefundFlow``).

A refund appends a line to ``$PICOFLOW_TEST_DIR/refunds`` (or to ``REFUNDS`` when the variable is
unset): a side effect whose count shows whether the tool ran once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from picoflow import Flow, RunContext, Step, TerminateStep, ToolError, go, stay, tool
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel
from picoflow.outcomes import Outcome, direct

REFUNDS: list[str] = []


def record_refund(order: str) -> None:
    folder = os.environ.get("PICOFLOW_TEST_DIR")
    if folder is None:
        REFUNDS.append(order)
        return
    with (Path(folder) / "refunds").open("a") as file:
        file.write(order + "\n")


class Desk(Step):
    """You handle refunds. Look orders up before refunding them."""

    @tool
    def lookup(self, order: str) -> Outcome:
        """Look an order up."""
        self.state["looked_up"] = [*self.state.get("looked_up", []), order]
        return stay(f"Order {order}: delivered, 40 EUR.")

    @tool
    def refund(self, order: str) -> str:
        """Refund an order."""
        record_refund(order)
        self.state["refunded"] = [*self.state.get("refunded", []), order]
        return f"Refunded {order}."

    @tool
    def finish(self) -> Outcome:
        """The customer needs nothing else."""
        return direct("Goodbye!").with_state(closed=True)

    @tool
    def void(self, order: str) -> str:
        """Void an order."""
        raise ToolError(f"Order {order} was delivered; it cannot be voided.")

    @tool
    def cancel(self, order: str) -> str:
        """Cancel an order."""
        raise RuntimeError("the card service is down")

    @tool
    async def second_opinion(self, order: str) -> str:
        """Ask the checker whether an order may be refunded."""
        return str(await self.run_step(Checker, f"May {order} be refunded?"))

    @tool
    def transfer(self) -> Outcome:
        """Hand the customer to the archive."""
        return go(Archive).with_message("archived")


class Archive(Step):
    """You archive conversations."""


class Checker(Step):
    """You check refunds."""


class RefundFlow(Flow):
    name = "refunds"
    steps = [Desk, Archive, Checker, TerminateStep]


TWO_TURNS: list[object] = [
    ToolCall("lookup", {"order": "A1"}),
    ToolCall("refund", {"order": "A1"}),
    "Refunded A1. Anything else?",
    ToolCall("finish", {}),
]


async def _crash_script(request: ModelRequest) -> object:
    """The model of the crash test: refund, then (on the call after the refund) say it reached the
    point, and wait for the test to release it."""
    folder = Path(os.environ["PICOFLOW_TEST_DIR"])
    last = request.messages[-1]
    if last.role == "user":
        return ToolCall("refund", {"order": "B7"}, "call-refund")
    (folder / "reached").write_text(str(os.getpid()))
    while not (folder / "release").exists():  # noqa: ASYNC110 - another process makes it
        await asyncio.sleep(0.05)
    return "Refunded B7."


def crash_model() -> FunctionModel:
    return FunctionModel(_crash_script, name="function:crash")


class Notes(Step):
    """You take notes."""

    @tool
    def note(self, text: str, ctx: RunContext) -> str:
        """Keep a note."""
        with (Path(os.environ["PICOFLOW_TEST_DIR"]) / "notes").open("a") as file:
            file.write(f"{ctx.session_id} {text}\n")  # one line per run of the tool
        self.state["notes"] = [*self.state.get("notes", []), text]
        return "Noted."


class NoteFlow(Flow):
    name = "notes"
    steps = [Notes]


def _note(request: ModelRequest) -> object:
    last = request.messages[-1]
    return (
        ToolCall("note", {"text": last.content})
        if last.role == "user"
        else f"Noted: {request.messages[-3].content}"
    )


def note_model() -> FunctionModel:
    return FunctionModel(_note, name="function:notes")


async def _run_handler(what: str, order: str, ctx: RunContext) -> None:
    """Append ``what order key pid`` to ``payments`` (one line per run of a handler); for a
    ``slow`` order, say so in ``paying`` and wait for the test to create ``release``."""
    folder = Path(os.environ["PICOFLOW_TEST_DIR"])
    with (folder / "payments").open("a") as file:
        file.write(f"{what} {order} {ctx.idempotency_key} {os.getpid()}\n")
    if order.startswith("slow"):
        (folder / "paying").write_text(str(os.getpid()))
        while not (folder / "release").exists():  # noqa: ASYNC110 - another process makes it
            await asyncio.sleep(0.05)


class Till(Step):
    """You take payments; each one waits for the customer's approval."""

    @tool(approval=True, approval_summary="Pay order {order}")
    async def pay(self, order: str, ctx: RunContext) -> str:
        """Pay an order."""
        await _run_handler("pay", order, ctx)
        self.state["paid"] = [*self.state.get("paid", []), order]
        return f"Paid {order}."

    @tool(approval=True, approval_summary="Hold a seat for order {order}", idempotent=True)
    async def hold(self, order: str, ctx: RunContext) -> str:
        """Hold a seat for an order (holding it twice under one key holds one seat)."""
        await _run_handler("hold", order, ctx)
        return f"Held a seat for {order}."


class TillFlow(Flow):
    name = "till"
    steps = [Till]


def _till(request: ModelRequest) -> object:
    """``pay X`` (``hold X``) proposes paying X (holding a seat for X); a tool's answer is
    repeated; anything else is answered with what the last tool message said."""
    last = request.messages[-1]
    if last.role == "tool":
        return f"Done: {last.content}"
    verb, _, order = last.content.partition(" ")
    if verb in ("pay", "hold") and order:
        return ToolCall(verb, {"order": order}, f"call-{verb}")
    told = [m.content for m in request.messages if m.role == "tool"]
    return f"Last I heard: {told[-1] if told else 'nothing'}"


def till_model() -> FunctionModel:
    return FunctionModel(_till, name="function:till")
