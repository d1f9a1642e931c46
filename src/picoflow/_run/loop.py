"""The bounded loop of one turn (DESIGN §3). The model proposes; code validates, authorizes,
executes and routes:

    loop (bounded by the turn budget):
        a LogicStep decides in code: go elsewhere, or answer directly
        otherwise ask the model (empty, oversize, rejected or malformed answers are retried)
        tool calls: dispatch them, apply their outcomes; direct ends the turn, else loop on
            (calls that need a person's approval end it instead, waiting: ``Paused``)
        text: on_response turns it into the reply, or an outcome that routes (or a call its
            code proposes, ``call``: taken as the model's would be)
        a model that fails for good: a fallback model, or on_model_error, may take over

Each round ends in a value — ``Reply``, ``Moved``, ``Stayed`` or ``Paused`` — and the loop only
matches on it.
Everything happens on the workspace's private copy of the session; the engine commits it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_core import to_json

from picoflow._run.approvals import decided_calls, propose
from picoflow._run.ask import ask, build_request
from picoflow._run.code_calls import run_code_call
from picoflow._run.dispatch import dispatch
from picoflow._run.effects import Moved, Next, Paused, Reply, apply_results, enter, resolved, settle
from picoflow._run.handoff import hand_off
from picoflow._run.recovery import recover
from picoflow._run.workspace import NOTHING_DECIDED, Workspace
from picoflow.approvals import PausedResponse
from picoflow.exceptions import AttemptsExhausted, HookFailure, ModelError
from picoflow.flow import StepSpec
from picoflow.messages import Message, ModelRequest, ModelResponse
from picoflow.models.base import Model
from picoflow.outcomes import Call, Direct, Go, Outcome
from picoflow.step import LogicStep, Step

ENDS = (Reply, Paused)
"""What ends a turn: its reply, or the calls it waits for a decision on."""


async def run_turn(ws: Workspace, text: str, now: Next | None = None) -> Reply | Paused:
    """Run the turn for the user's ``text``: its reply, or the calls it ends waiting for a decision
    on. Raises ``RunError`` on failure. ``now``: where a resumed turn goes on from (``resume_turn``)."""
    session = ws.session
    if now is None:
        if not session.sequence:
            await enter(ws, session.current_step, previous=None)
        now = Moved(None, session.current_step, text)
    steps, observer = ws.config.spec.steps, ws.config.observer
    while not isinstance(now, ENDS):
        moved = now if isinstance(now, Moved) else None
        spec = steps[session.current_step]
        step = ws.step(spec.name)
        if moved is not None:
            observer.step_started(spec.name)
        if spec.is_logic:  # code decides: another step, or the reply (a Handoff: a person will)
            user = moved.user if moved else None
            decided = await (
                hand_off(ws, step, spec, user) if spec.cls.is_handoff else _decide(ws, step, spec)
            )
            now = await settle(ws, spec, decided, user)
            continue
        if moved is not None:
            await _arrive(ws, step, spec, moved)
        try:
            response, parsed = await ask(ws, step, spec)
        except (ModelError, AttemptsExhausted) as error:  # another model or the step's hook may take over
            recovered = await recover(ws, step, spec, error)
            if isinstance(recovered, Outcome):
                now = await _settle(ws, step, spec, recovered)
                continue
            response, parsed = recovered
        if not response.tool_calls:
            now = await _answer(ws, step, spec, response, parsed)
            continue
        ws.add_response(spec.name, response)
        if spec.gated and (paused := await propose(ws, step, spec, response)) is not None:
            return paused  # the proposed calls wait for a person's decision
        results = await dispatch(ws, step, spec, response)
        if spec.gated:
            ws.decided = NOTHING_DECIDED
        now = await apply_results(ws, spec, results)
    return now


async def resume_turn(
    ws: Workspace, paused: PausedResponse, checkpoint: Callable[[], Awaitable[None]]
) -> Reply | Paused:
    """Go on with a turn whose response waited for decisions, now all taken: its calls run as one
    response (the approved ones with their approval's id as idempotency key, the denied ones
    answered with the denial, or routed by ``on_denied``); ``checkpoint`` then stores what they
    did, so a failure later in the turn loses no effect, and the loop goes on as ever."""
    session = ws.session
    session.paused = None
    session.status = "running"
    spec = ws.config.spec.steps[paused.step]
    step = ws.step(spec.name)
    ws.decided = await decided_calls(ws, step, spec, paused)
    results = await dispatch(
        ws, step, spec, ModelResponse(tool_calls=list(paused.calls)), by_code=paused.by_code
    )
    ws.decided = NOTHING_DECIDED
    now = await apply_results(ws, spec, results)
    await checkpoint()
    return await run_turn(ws, "", now)


async def _arrive(ws: Workspace, step: Step, spec: StepSpec, moved: Moved) -> None:
    """What the step's memory gets before its model is first asked: the user's words while no step
    holds them yet, else, as the turn moved here from another step, what ``on_crossing`` adds."""
    if moved.user is not None:
        ws.add_user(spec.name, moved.user)
    elif moved.source is not None:
        crossing = await ws.hook(step, "on_crossing", step.on_crossing, moved.source)
        if crossing:
            ws.add(spec.name, "user", str(crossing), "crossing")


async def _answer(ws: Workspace, step: Step, spec: StepSpec, response: ModelResponse, parsed: Any) -> Next:
    """A text answer: ``on_response`` makes it the reply, or an outcome that routes."""
    value = parsed if spec.output is not None else response.text
    if "on_response" in spec.overrides:
        # An erase in the hook forgets the answer it was given too: it waits until that is written.
        ws.held_erases = frozenset()
        try:
            value = await ws.hook(step, "on_response", step.on_response, value)
        except BaseException:
            ws.held_erases = None
            raise
    if isinstance(value, Outcome) and not isinstance(value, Direct):
        # The model's words stay in memory beside where they led.
        if spec.output is not None:
            ws.add_output(spec.name, response)
        else:
            ws.add_response(spec.name, response)
    ws.release_erases()  # what the outcome or reply adds (a correction, the reply) comes after
    if isinstance(value, Outcome):
        return await _settle(ws, step, spec, value)
    if isinstance(value, str):
        reply = value
    else:
        ws.content_type = ws.content_type or "application/json"
        reply = to_json(value).decode()
    ws.add_reply(spec.name, reply, response.answered_by)
    return Reply(reply)


async def _settle(ws: Workspace, step: Step, spec: StepSpec, outcome: Outcome) -> Next:
    """Apply an outcome of the step's code that answers no tool call; a call it proposes
    (``call``) is taken as the model's would be."""
    outcome = await resolved(ws, spec, outcome)
    if isinstance(outcome, Call):
        return await run_code_call(ws, step, spec, outcome)
    return await settle(ws, spec, outcome)


async def _decide(ws: Workspace, step: Step, spec: StepSpec) -> Go | Direct:
    """A LogicStep's decision, which must lead elsewhere or answer."""
    assert isinstance(step, LogicStep)
    outcome = await ws.hook(step, "run_logic", step.run_logic)
    if isinstance(outcome, Direct) or (
        isinstance(outcome, Go) and ws.destination(outcome, spec.name) != spec.name
    ):
        return outcome
    raise HookFailure(
        f"run_logic() of LogicStep {spec.name} must return go(<another step>) or direct(...), "
        f"not {outcome!r}",
        step=spec.name,
    )


async def first_request(ws: Workspace, text: str) -> tuple[Model, ModelRequest] | None:
    """The model and request a brand-new session would send first for ``text`` (None when the flow
    starts with a LogicStep). Nothing is sent; the workspace is not meant to be committed."""
    name = ws.session.current_step
    spec = ws.config.spec.steps[name]
    if spec.is_logic:
        return None
    await enter(ws, name, previous=None)
    request = await build_request(ws, ws.step(name), spec, [Message.user(text)])
    return ws.config.model_for(spec), request
