"""Handoffs: a conversation leaves the flow's path for a person. Entering ``Handoff`` puts the
session in ``awaiting_human`` with a summary written in code; the user's messages then reach staff,
never a model; staff take the session, reply, and hand it back, each change compare-and-swap on the
session's revision."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.server.handoff_support import (
    CUSTOMER,
    NOW,
    OTHER_STAFF,
    STAFF,
    clock,
    support_engine,
)

from picoflow import Caller, Flow, FlowEngine, Handoff, LogicStep, go
from picoflow.engine import ANY_PRINCIPAL
from picoflow.events import HandedOff, TurnEvent
from picoflow.exceptions import (
    HandoffConflict,
    HandoffNotAllowed,
    HandoffNotFound,
    HandoffNotTaken,
    HandoffNotWaiting,
    HandoffTaken,
    InvalidInput,
    SessionNotFound,
)
from picoflow.handoffs import QueuedHandoff
from picoflow.models import ScriptedModel
from picoflow.sessions import MemoryStore, SQLiteStore
from picoflow.testing import transcript_lines

SUMMARY = "\n".join(
    [
        "Flow: support",
        "Step: Desk",
        "Reason: the customer asked for a person",
        "State:",
        "  Desk.order_id = 40001",
        "Last messages from the user:",
        "  > about order 40001",
        "  > I want to talk to a person",
    ]
)
REPLY = "I'm passing this conversation to a member of our team. A person will reply here."


async def handed_off(engine: FlowEngine) -> str:
    """A customer's session, handed to a person in its second turn."""
    first = await engine.run("support", "about order 40001", caller=CUSTOMER)
    assert first.ok and first.message == "Noted. (noted order 40001)"
    assert first.session_id is not None
    events: list[TurnEvent] = []
    second = await engine.run(
        "support", "I want to talk to a person", first.session_id, caller=CUSTOMER, on_event=events.append
    )
    assert second.ok, second.message
    assert (second.message, second.step, second.awaiting_human) == (REPLY, "Handoff", True)
    assert [e for e in events if isinstance(e, HandedOff)] == [
        HandedOff("Desk", "the customer asked for a person", SUMMARY)
    ]
    return first.session_id


async def test_a_handoff_waits_for_staff_who_take_reply_and_hand_back() -> None:
    engine = support_engine(MemoryStore())
    session_id = await handed_off(engine)
    session = await engine.get_session(session_id, principal=ANY_PRINCIPAL)
    assert session is not None and session.status == "awaiting_human" and session.handoff is not None
    assert (session.handoff.step, session.handoff.reason, session.handoff.summary) == (
        "Desk",
        "the customer asked for a person",
        SUMMARY,
    )
    assert await engine.handoffs(caller=STAFF) == [
        QueuedHandoff(
            session_id, "support", "Desk", "the customer asked for a person", SUMMARY, NOW, None, "cust-1"
        )
    ]

    # While it waits, the user's words reach the transcript and no model: this one has no script.
    silent = ScriptedModel([])
    engine._override = silent
    waiting = await engine.run("support", "hello? anyone there?", session_id, caller=CUSTOMER)
    assert waiting.ok and waiting.awaiting_human
    assert (waiting.message, waiting.step, waiting.usage.model_calls, waiting.usage.total_tokens) == (
        "",
        "Handoff",
        0,
        0,
    )
    assert silent.requests == []

    taken = await engine.take(session_id, caller=STAFF)
    assert (taken.taken_by, taken.session_id) == ("ana", session_id)
    said = await engine.reply_as_staff(
        session_id, "  Hi, Ana here. Let me check order 40001.  ", caller=STAFF
    )
    assert (said.role, said.kind, said.author, said.content) == (
        "assistant",
        "staff",
        "ana",
        "Hi, Ana here. Let me check order 40001.",
    )
    shown = await engine.messages(session_id, after=said.seq - 1, caller=CUSTOMER)
    assert shown is not None and [m.content for m in shown[1]] == ["Hi, Ana here. Let me check order 40001."]

    back = await engine.hand_back(session_id, caller=STAFF, note="refund approved by Ana")
    assert (back.status, back.current_step) == ("running", "Desk")
    assert await engine.handoffs(caller=STAFF) == []

    engine._override = None  # the flow's own model again: it answers in Desk
    again = await engine.run("support", "thanks, what next?", session_id, caller=CUSTOMER)
    assert again.ok and not again.awaiting_human
    assert (again.message, again.step) == ("Model, in Desk: thanks, what next?", "Desk")
    assert await transcript_lines(engine, session_id) == [
        "Desk | user: about order 40001",
        'Desk | assistant: -> note_order({"order_id": 40001}) #call-note',
        "Desk | tool note_order #call-note: noted order 40001",
        "Desk | assistant: Noted. (noted order 40001)",
        "Desk | user: I want to talk to a person",
        'Desk | assistant: -> escalate({"reason": "the customer asked for a person"}) #call-esc',
        "Desk | tool escalate #call-esc: Accepted.",
        f"Handoff | assistant [direct]: {REPLY}",
        "Handoff | user: hello? anyone there?",
        "Handoff | assistant [staff]: Hi, Ana here. Let me check order 40001.",
        "Desk | user [crossing]: A member of staff took this conversation over and handed it back: "
        "refund approved by Ana",
        "Desk | user: thanks, what next?",
        "Desk | assistant: Model, in Desk: thanks, what next?",
    ]
    final = await engine.get_session(session_id, principal=ANY_PRINCIPAL)
    assert final is not None
    assert (final.status, final.current_step, final.handoff, final.sequence) == (
        "running",
        "Desk",
        None,
        ["Desk", "Handoff", "Desk"],
    )
    assert final.states.get("Handoff", {}) == {} and final.states["Desk"] == {"order_id": 40001}


async def test_only_staff_act_and_refusals_change_nothing() -> None:
    engine = support_engine(MemoryStore())
    session_id = await handed_off(engine)
    before = await engine.get_session(session_id, principal=ANY_PRINCIPAL)
    assert before is not None
    for call in (
        engine.handoffs(caller=CUSTOMER),
        engine.take(session_id, caller=CUSTOMER),
        engine.reply_as_staff(session_id, "hi", caller=CUSTOMER),
        engine.hand_back(session_id, caller=CUSTOMER),
    ):
        with pytest.raises(HandoffNotAllowed) as refused:
            await call
        assert (refused.value.status, str(refused.value)) == (
            403,
            "only callers with the 'staff' visibility may act on handoffs",
        )
    with pytest.raises(HandoffNotFound):
        await engine.take("no-such-session", caller=STAFF)
    with pytest.raises(HandoffNotTaken):
        await engine.reply_as_staff(session_id, "hi", caller=STAFF)
    with pytest.raises(HandoffNotTaken):
        await engine.hand_back(session_id, caller=STAFF)
    await engine.take(session_id, caller=STAFF)
    taken = await engine.get_session(session_id, principal=ANY_PRINCIPAL)
    assert taken is not None
    with pytest.raises(HandoffTaken) as conflict:
        await engine.take(session_id, caller=OTHER_STAFF)
    assert (conflict.value.status, str(conflict.value)) == (
        409,
        f"session {session_id} is taken by ana; take it with force to take it over",
    )
    with pytest.raises(HandoffTaken):
        await engine.reply_as_staff(session_id, "hi", caller=OTHER_STAFF)
    with pytest.raises(InvalidInput) as bad_step:
        await engine.hand_back(session_id, "Nowhere", caller=STAFF)
    assert (bad_step.value.field, str(bad_step.value)) == ("step", "Nowhere is not a step of flow support")
    with pytest.raises(InvalidInput):
        await engine.hand_back(session_id, "Handoff", caller=STAFF)
    with pytest.raises(InvalidInput):
        await engine.reply_as_staff(session_id, "   ", caller=STAFF)
    assert (
        await engine.get_session(session_id, principal=ANY_PRINCIPAL) == taken
    )  # every refusal left it as it was

    forced = await engine.take(session_id, caller=OTHER_STAFF, force=True)
    assert forced.taken_by == "ben"
    await engine.hand_back(session_id, caller=OTHER_STAFF)
    with pytest.raises(HandoffNotWaiting):
        await engine.take(session_id, caller=STAFF)
    stranger = Caller(principal="cust-2")
    assert await engine.messages(session_id, caller=stranger) is None
    assert await engine.messages(session_id, caller=STAFF) is None  # staff read it only while it waits
    refused_turn = await engine.run("support", "hi", session_id, caller=stranger)
    assert refused_turn.error is not None and refused_turn.error.is_a(SessionNotFound)


async def test_a_custom_reply_and_a_handoff_from_a_logic_step() -> None:
    class Person(Handoff):
        waiting_reply = "Your message is with our team."

        def handoff_reply(self, reason: str | None) -> str:
            return f"A person will help you ({reason})."

    class Router(LogicStep):
        def run_logic(self) -> Any:
            return go(Person).with_state(reason="routed")

    class Routed(Flow):
        name = "routed"
        steps = [Router, Person]

    engine = FlowEngine([Routed], store=MemoryStore(), model=ScriptedModel([]), clock=clock)
    first = await engine.run("routed", "my parcel never came", caller=CUSTOMER)
    assert (first.message, first.awaiting_human, first.step) == (
        "A person will help you (routed).",
        True,
        "Person",
    )
    assert first.session_id is not None
    queue = await engine.handoffs(caller=STAFF)
    assert [item.summary for item in queue] == [
        "Flow: routed\nStep: Router\nReason: routed\nLast messages from the user:\n  > my parcel never came"
    ]
    second = await engine.run("routed", "still there?", first.session_id, caller=CUSTOMER)
    assert (second.message, second.awaiting_human) == ("Your message is with our team.", True)
    await engine.take(first.session_id, caller=STAFF)
    with pytest.raises(InvalidInput):  # a LogicStep may take it back; Person hands off again
        await engine.hand_back(first.session_id, "Person", caller=STAFF)
    assert await transcript_lines(engine, first.session_id) == [
        "Person | user: my parcel never came",
        "Person | assistant [direct]: A person will help you (routed).",
        "Person | user: still there?",
        "Person | assistant [direct]: Your message is with our team.",
    ]


async def test_the_staff_visibility_is_the_engine_s_to_name() -> None:
    engine = support_engine(MemoryStore(), staff_visibility="agents")
    await handed_off(engine)
    with pytest.raises(HandoffNotAllowed):
        await engine.handoffs(caller=STAFF)
    agent = Caller(principal="zoe", visibilities=frozenset({"agents"}))
    assert [item.flow for item in await engine.handoffs(caller=agent)] == ["support"]


class GatedStore(SQLiteStore):
    """A SQLite store whose loads wait at a barrier once armed: two engines both read the session
    before either saves, so their saves race for real."""

    barrier: asyncio.Barrier | None = None

    async def load(self, session_id: str) -> Any:
        session = await super().load(session_id)
        if self.barrier is not None:
            await self.barrier.wait()
        return session


async def test_two_engines_taking_one_session_at_once_on_one_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    first = support_engine(GatedStore(path))
    second = support_engine(GatedStore(path))
    try:
        session_id = await handed_off(first)
        barrier = asyncio.Barrier(2)
        GatedStore.barrier = barrier
        try:
            results = await asyncio.gather(
                first.take(session_id, caller=STAFF),
                second.take(session_id, caller=OTHER_STAFF),
                return_exceptions=True,
            )
        finally:
            GatedStore.barrier = None
        won = [r for r in results if isinstance(r, QueuedHandoff)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], HandoffConflict)
        assert lost[0].status == 409 and lost[0].retryable
        stored = await second.get_session(session_id, principal=ANY_PRINCIPAL)
        assert stored is not None and stored.handoff is not None
        assert stored.handoff.taken_by == won[0].taken_by
        assert [item.taken_by for item in await second.handoffs(caller=STAFF)] == [won[0].taken_by]
    finally:
        await first.aclose()
        await second.aclose()


def test_the_durable_executor_s_codec_carries_the_handoff() -> None:
    from picoflow.results import TurnResult
    from picoflow.temporal._codec import decode_event, decode_output, encode_event, encode_result

    event = HandedOff("Desk", "the customer asked for a person", SUMMARY)
    assert decode_event(encode_event(event)) == event
    result = TurnResult(REPLY, "s-1", False, step="Handoff", flow="support", awaiting_human=True)
    assert decode_output(encode_result(result, [encode_event(event)])) == (result, [event])
