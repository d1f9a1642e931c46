"""Applying outcomes, in the fixed effect order of DESIGN §2: (1) transition, (2) prompt,
(3) state, (4) content type, (5) exactly one tool message per call, (6) forwarded message.
``with_state``/``with_prompt`` land on the destination step.
"""

from __future__ import annotations

from picoflow._run.dispatch import CallResult
from picoflow._run.workspace import Workspace
from picoflow.flow import StepSpec
from picoflow.outcomes import Direct, Go, Outcome

NOT_APPLIED = (
    "Not applied: an earlier call of this response already decided where the conversation goes next, "
    "so this call's outcome was ignored."
)


async def apply_results(ws: Workspace, spec: StepSpec, results: list[CallResult]) -> str | None:
    """Apply the outcomes of one response's tool calls; returns the reply when one is ``direct``."""
    source = spec.name
    winner: Outcome | None = None
    applied: list[Outcome] = []
    for result in results:
        outcome = result.outcome
        if outcome is None:
            continue
        routes = isinstance(outcome, Direct) or (isinstance(outcome, Go) and ws.target(outcome) != source)
        if routes and winner is not None:  # the first transition wins
            result.content, result.is_error, result.outcome = NOT_APPLIED, True, None
            continue
        if routes:
            winner = outcome
        applied.append(outcome)

    destination = ws.target(winner) if isinstance(winner, Go | Direct) else source
    ws.defer_erases()
    try:
        if destination != source:
            await transition(ws, source, destination)  # (1)
        for outcome in applied:  # (2) prompt, (3) state, (4) content type
            apply_effects(ws, outcome, destination if outcome is winner else source)
        namespace = spec.namespace
        observer = ws.observer
        for result in results:  # (5) exactly one tool message per call, in order
            call = result.call
            ws.add(namespace, source, "tool", result.content, call=call, is_error=result.is_error)
            observer.tool_answered(source, call, result.content, result.is_error)
    finally:
        ws.apply_erases()
    for outcome in applied:  # (6) messages
        if outcome.message is not None:
            target = destination if outcome is winner else source
            ws.add(ws.spec.steps[target].namespace, target, "user", outcome.message, kind="forwarded")
    if isinstance(winner, Direct):
        return _reply(ws, winner, destination)
    return None


async def apply_route(ws: Workspace, spec: StepSpec, outcome: Go) -> None:
    """Apply an outcome with no tool calls to answer (from ``run_logic`` or ``on_response``)."""
    destination = ws.target(outcome)
    if destination != spec.name:
        await transition(ws, spec.name, destination)
    apply_effects(ws, outcome, destination)
    if outcome.message is not None:
        ws.add(ws.spec.steps[destination].namespace, destination, "user", outcome.message, kind="forwarded")


async def finish_direct(
    ws: Workspace, spec: StepSpec, outcome: Direct, pending_user: str | None = None
) -> str:
    """End the turn with a direct reply (from ``run_logic`` or ``on_response``), moving first if asked."""
    destination = ws.target(outcome)
    await transition(ws, spec.name, destination)
    apply_effects(ws, outcome, destination)
    namespace = ws.spec.steps[destination].namespace
    if pending_user is not None:  # a logic step answered: keep the user's words beside the reply
        ws.add(namespace, destination, "user", pending_user, attachments=ws.files.refs if ws.files else ())
    if outcome.message is not None:
        ws.add(namespace, destination, "user", outcome.message, kind="forwarded")
    return _reply(ws, outcome, destination)


def _reply(ws: Workspace, outcome: Direct, destination: str) -> str:
    """Record a direct reply as the assistant's message, so the next turn knows what the user saw."""
    namespace = ws.spec.steps[destination].namespace
    ws.add(
        namespace, destination, "assistant", outcome.content, kind="direct", remembered_as=outcome.remember
    )
    return outcome.content


def apply_effects(ws: Workspace, outcome: Outcome, destination: str) -> None:
    if outcome.prompt is not None:
        ws.session.prompts[destination] = outcome.prompt
    if outcome.state:
        ws.state_for(destination).merge(outcome.state)
    if outcome.content_type is not None:
        ws.content_type = outcome.content_type


async def transition(ws: Workspace, source: str, destination: str) -> None:
    """Leave ``source`` for ``destination`` (nothing when they are the same step)."""
    if source == destination:
        return
    ws.transitions += 1
    ws.limits.check_transition(ws.transitions)
    if "on_exit" in ws.spec.steps[source].overrides:
        leaving = ws.step(source)
        await ws.hook(leaving, "on_exit", leaving.on_exit)
    ws.session.prompts.pop(source, None)
    await enter(ws, destination, previous=source)


async def enter(ws: Workspace, destination: str, *, previous: str | None) -> None:
    session = ws.session
    session.current_step = destination
    session.sequence.append(destination)
    if ws.spec.steps[destination].is_terminal:
        session.status = "completed"
    ws.observer.step_entered(destination, previous)
    if "on_enter" in ws.spec.steps[destination].overrides:
        step = ws.step(destination)
        await ws.hook(step, "on_enter", step.on_enter)
