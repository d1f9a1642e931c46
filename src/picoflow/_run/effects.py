"""Applying outcomes, in the fixed effect order of DESIGN §2: (1) transition, (2) prompt,
(3) state, (4) content type, (5) exactly one tool message per call, (6) forwarded message.
``with_state``/``with_prompt`` land on the destination step.

Each function returns what happens next, as a value the loop matches on: the turn ends with a
``Reply``, goes on in another step (``Moved``), or asks the same step's model again (``Stayed``).
"""

from __future__ import annotations

from dataclasses import dataclass

from picoflow._run.dispatch import CallResult
from picoflow._run.workspace import Workspace
from picoflow.approvals import Approval
from picoflow.exceptions import HookFailure
from picoflow.flow import StepSpec
from picoflow.outcomes import Direct, Go, Outcome, Repair, Stay

NOT_APPLIED = (
    "Not applied: an earlier call of this response already decided where the conversation goes next, "
    "so this call's outcome was ignored."
)


@dataclass(slots=True)
class Reply:
    """The turn ends; ``text`` is what the user reads."""

    text: str


@dataclass(slots=True)
class Moved:
    """The conversation is now in ``destination``; the turn goes on there."""

    source: str | None
    """The step it left mid-turn (None: the turn starts here)."""
    destination: str
    user: str | None = None
    """The user's words, not yet in any step's memory (the turn starts, or a LogicStep moved on)."""


@dataclass(slots=True)
class Stayed:
    """The step stays; its model is asked again, with what the outcome added to memory."""


@dataclass(slots=True)
class Paused:
    """The turn ends with calls the model proposed waiting for decisions (``FlowEngine.decide``)."""

    approvals: tuple[Approval, ...]

    @property
    def text(self) -> str:
        """What the user reads meanwhile: what will happen, and who must decide (written in code)."""
        lines = [
            f"Waiting for approval: {approval.summary} ({approval.approvers.describe()} must approve)"
            for approval in self.approvals
        ]
        return "\n".join(lines)


STAYED = Stayed()
Next = Reply | Moved | Stayed | Paused


MAX_REPAIRS = 3
"""Patterns one outcome may lead through (an out-of-scope request that becomes a handoff)."""


async def resolved(ws: Workspace, spec: StepSpec, outcome: Outcome) -> Outcome:
    """``outcome``, or where a ``Repair`` leads: the step's ``on_repair`` decides, each pattern
    reported as it fires. A pattern the policy switched off is no repair: the step stays."""
    for _ in range(MAX_REPAIRS):
        if not isinstance(outcome, Repair):
            return outcome
        step = ws.step(spec.name)
        if not step.repair_policy.allows(outcome.pattern):
            return Stay()
        ws.config.observer.pattern_fired(spec.name, outcome.pattern, outcome.detail)
        led = await ws.hook(step, "on_repair", step.on_repair, outcome)
        if not isinstance(led, Outcome):
            raise HookFailure(
                f"on_repair() of step {spec.name} must return an outcome, not {led!r:.60}", step=spec.name
            )
        outcome = led
    raise HookFailure(
        f"on_repair() of step {spec.name} led from one repair to another {MAX_REPAIRS} times", step=spec.name
    )


async def apply_results(ws: Workspace, spec: StepSpec, results: list[CallResult]) -> Next:
    """Apply the outcomes of one response's tool calls."""
    source = spec.name
    winner: Go | Direct | None = None
    destination = source
    applied: list[Outcome] = []
    for result in results:
        outcome = result.outcome
        if outcome is None:
            continue
        if isinstance(outcome, Repair):
            outcome = result.outcome = await resolved(ws, spec, outcome)
        if isinstance(outcome, Go | Direct):
            leads_to = ws.destination(outcome, source)
            if isinstance(outcome, Direct) or leads_to != source:
                if winner is not None:  # the first transition wins
                    result.content, result.is_error, result.outcome = NOT_APPLIED, True, None
                    continue
                winner, destination = outcome, leads_to
        applied.append(outcome)

    moving = destination != source
    if moving:  # (1)
        # The hooks of the steps left and entered may erase memory while this response's results
        # are still to be written: those erases wait until they are (a failure discards it all).
        ws.held_erases = frozenset()
        await transition(ws, source, destination)
    for outcome in applied:  # (2) prompt, (3) state, (4) content type
        apply_effects(ws, outcome, destination if outcome is winner else source)
    observer = ws.config.observer
    for result in results:  # (5) exactly one tool message per call, in order
        call = result.call
        ws.add_tool_result(source, call, result.content, result.is_error)
        observer.tool_answered(source, call, result.content, result.is_error)
    if moving:
        ws.release_erases()
    for outcome in applied:  # (6) messages
        if outcome.message is not None:
            ws.forward(destination if outcome is winner else source, outcome.message)
    if isinstance(winner, Direct):
        ws.add_direct(destination, winner)
        return Reply(winner.content)
    return STAYED if destination == source else Moved(source, destination)


async def settle(ws: Workspace, spec: StepSpec, outcome: Outcome, user: str | None = None) -> Next:
    """Apply an outcome that answers no tool call (from ``run_logic``, ``on_response`` or
    ``on_model_error``). ``user``: the turn's message, when no step's memory holds it yet."""
    source = spec.name
    outcome = await resolved(ws, spec, outcome)
    if isinstance(outcome, Stay):
        apply_effects(ws, outcome, source)
        if outcome.feedback:
            ws.add(source, "user", outcome.feedback, "correction")
        return STAYED
    assert isinstance(outcome, Go | Direct)
    destination = ws.destination(outcome, source)
    if destination != source:
        await transition(ws, source, destination)
    apply_effects(ws, outcome, destination)
    if isinstance(outcome, Direct):
        if user is not None:  # a logic step answered: keep the user's words beside the reply
            ws.add_user(destination, user)
            user = None
        if outcome.message is not None:
            ws.forward(destination, outcome.message)
        ws.add_direct(destination, outcome)
        return Reply(outcome.content)
    if outcome.message is not None:
        ws.forward(destination, outcome.message)
    return STAYED if destination == source else Moved(source, destination, user)


def apply_effects(ws: Workspace, outcome: Outcome, destination: str) -> None:
    if outcome.prompt is not None:
        ws.session.prompts[destination] = outcome.prompt
    if outcome.state:
        ws.state_for(destination).merge(outcome.state)
    if outcome.content_type is not None:
        ws.content_type = outcome.content_type


async def transition(ws: Workspace, source: str, destination: str) -> None:
    """Leave ``source`` for another step, ``destination``."""
    ws.transitions += 1
    steps = ws.config.spec.steps
    ws.config.limits.check_transition(ws.transitions)
    if "on_exit" in steps[source].overrides:
        leaving = ws.step(source)
        await ws.hook(leaving, "on_exit", leaving.on_exit)
    ws.session.prompts.pop(source, None)
    await enter(ws, destination, previous=source)


async def enter(ws: Workspace, destination: str, *, previous: str | None) -> None:
    session = ws.session
    session.current_step = destination
    session.sequence.append(destination)
    spec = ws.config.spec.steps[destination]
    if spec.is_terminal:
        session.status = "completed"
    ws.config.observer.step_entered(destination, previous)
    if "on_enter" in spec.overrides:
        step = ws.step(destination)
        await ws.hook(step, "on_enter", step.on_enter)
