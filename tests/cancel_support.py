"""What the cancel tests share: a desk whose tools note every call they start, one tool that waits
for the test (``Slow.gate``), and a model held at a request the test chooses (``HeldModel``).

``hold_at(n, script)``: the desk on ``ScriptedModel(script)`` with its ``n``-th request held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

from picoflow import Caller, Flow, FlowEngine, RunContext, Step, tool
from picoflow.models import ScriptedModel, ToolCall
from picoflow.sessions import MemoryStore
from picoflow.sessions.base import SessionStore
from picoflow.testing import HeldModel, transcript_lines

__all__ = ["CancelDesk", "Started", "claim_given_up", "hold_at", "note", "pay", "slow"]


class Started:
    """The tool calls started, in order (``name:argument``), across every engine of a test."""

    calls: ClassVar[list[str]] = []
    sessions: ClassVar[list[str | None]] = []
    """The session of each ``note``."""
    slow_started: ClassVar[asyncio.Event]
    gate: ClassVar[asyncio.Event]
    slow_cancelled: ClassVar[asyncio.Event]

    @classmethod
    def reset(cls) -> None:
        cls.calls = []
        cls.sessions = []
        cls.slow_started = asyncio.Event()
        cls.gate = asyncio.Event()
        cls.slow_cancelled = asyncio.Event()


class Desk(Step):
    """Help the user; note what they ask."""

    @tool
    def note(self, text: str, ctx: RunContext) -> str:
        """Note something."""
        Started.calls.append(f"note:{text}")
        Started.sessions.append(ctx.session_id)
        return f"noted {text} in {ctx.session_id}"

    @tool
    async def slow(self, text: str) -> str:
        """Look something up slowly."""
        Started.calls.append(f"slow:{text}")
        Started.slow_started.set()
        try:
            await Started.gate.wait()
        except asyncio.CancelledError:
            Started.slow_cancelled.set()
            raise
        return f"found {text}"

    @tool(approval=True, approval_summary="Pay {amount}")
    async def pay(self, amount: int) -> str:
        """Pay, once a person approved it; waits for the test as ``slow`` does."""
        return await self.slow(f"pay {amount}")


class CancelDesk(Flow):
    name = "desk"
    steps = [Desk]


def note(text: str, call_id: str) -> ToolCall:
    return ToolCall("note", {"text": text}, call_id)


def slow(text: str, call_id: str) -> ToolCall:
    return ToolCall("slow", {"text": text}, call_id)


def pay(amount: int, call_id: str) -> ToolCall:
    return ToolCall("pay", {"amount": amount}, call_id)


def hold_at(
    at: int, script: Sequence[Any], store: SessionStore | None = None
) -> tuple[FlowEngine, HeldModel, ScriptedModel]:
    """The desk on ``script`` with its ``at``-th model request held (``HeldModel``)."""
    scripted = ScriptedModel(list(script))
    held = HeldModel(scripted, at=at)
    engine = FlowEngine([CancelDesk], store=store or MemoryStore(), model=held)
    return engine, held, scripted


async def claim_given_up(engine: FlowEngine, session_id: str, principal: str) -> None:
    """After a decision cancelled while its approved ``pay 5`` ran: the decision it saved stands,
    and the next message goes on at once, the call answered as unknown, never run again."""
    stored = await engine.get_session(session_id, principal=principal)
    assert stored is not None and stored.paused is not None and stored.status == "awaiting_approval"
    assert [a.status for a in stored.approvals] == ["approved"]  # the decision it saved stands

    after = await engine.run("desk", "did it work?", session_id, caller=Caller(principal=principal))
    assert (after.ok, after.message) == (True, "It may or may not have gone through.")
    assert (await transcript_lines(engine, session_id))[-4:] == [
        'Desk | assistant: -> pay({"amount": 5}) #c1',
        "Desk | tool pay #c1 (error): The result of pay is unknown: the process running it stopped "
        "before it answered. It was not run again; check whether it had its effect before calling it "
        "again.",
        "Desk | user: did it work?",
        "Desk | assistant: It may or may not have gone through.",
    ]
    assert Started.calls == ["slow:pay 5"]  # started once, never again
