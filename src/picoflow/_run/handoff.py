"""Handoffs inside a turn: entering a ``Handoff`` step puts the session in ``awaiting_human`` with
a ticket for staff, and a turn of a session awaiting a human keeps the user's words for staff
without calling any model."""

from __future__ import annotations

from picoflow._run.effects import Reply
from picoflow._run.workspace import Workspace
from picoflow.exceptions import HookFailure
from picoflow.flow import StepSpec
from picoflow.handoffs import HandoffTicket, handoff_summary
from picoflow.messages import Message
from picoflow.outcomes import Direct, direct
from picoflow.step import Handoff, Step


async def hand_off(ws: Workspace, step: Step, spec: StepSpec, user: str | None) -> Direct:
    """Hand the conversation to a person: the ticket (with a summary written here, in code), the
    status, the ``HandedOff`` event, and the reply the user is told. ``user``: the turn's message
    when no step's memory holds it yet (a LogicStep routed here)."""
    assert isinstance(step, Handoff)
    session = ws.session
    sequence = session.sequence
    came_from = sequence[-2] if len(sequence) >= 2 else spec.name
    given = ws.state_for(spec.name).get("reason")
    reason = None if given is None else str(given)
    messages = sorted((m for ns in session.memory.values() for m in ns.messages), key=lambda m: m.seq)
    if user is not None:
        messages.append(Message.user(user))
    summary = handoff_summary(
        flow=ws.config.spec.name,
        step=came_from,
        reason=reason,
        states={name: state for name, state in session.states.items() if state and name != spec.name},
        messages=messages,
    )
    session.status = "awaiting_human"
    session.handoff = HandoffTicket(came_from, spec.name, reason, summary, ws.config.clock())
    ws.config.observer.handed_off(came_from, reason, summary)
    reply = await ws.hook(step, "handoff_reply", step.handoff_reply, reason)
    if not isinstance(reply, str):
        raise HookFailure(
            f"handoff_reply() of step {spec.name} must return text, not {type(reply).__name__}",
            step=spec.name,
        )
    return direct(reply)


async def wait_for_staff(ws: Workspace, text: str) -> Reply:
    """A message while the session awaits a human: kept in the Handoff step's memory, where staff
    read it; no model is called. The reply is the step's ``waiting_reply`` (often nothing)."""
    session = ws.session
    ticket = session.handoff
    steps = ws.config.spec.steps
    name = (
        ticket.handoff_step if ticket is not None and ticket.handoff_step in steps else session.current_step
    )
    ws.add_user(name, text)
    step = ws.step(name)
    reply = step.waiting_reply if isinstance(step, Handoff) else ""
    if reply:
        ws.add(name, "assistant", reply, "direct")
    return Reply(reply)
