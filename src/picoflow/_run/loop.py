"""The bounded loop of one turn (DESIGN §3). The model proposes; code validates, authorizes,
executes and routes:

    loop (bounded by the turn budget):
        a LogicStep decides in code: go elsewhere, or answer directly
        otherwise ask the model (empty, oversize, rejected or malformed answers are retried)
        tool calls: dispatch them, apply their outcomes; direct ends the turn, else loop on
        text: on_response turns it into the reply, or an outcome that routes
        a model that fails for good: a fallback model, or on_model_error, may take over

Each round ends in a value — ``Reply``, ``Moved`` or ``Stayed`` — and the loop only matches on it.
Everything happens on the workspace's private copy of the session; the engine commits it.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from picoflow._run.ask import ask, build_request
from picoflow._run.dispatch import dispatch
from picoflow._run.effects import Moved, Next, Reply, apply_results, enter, settle
from picoflow._run.recovery import recover
from picoflow._run.workspace import Workspace
from picoflow.exceptions import AttemptsExhausted, HookFailure, ModelError
from picoflow.flow import StepSpec
from picoflow.messages import Message, ModelRequest, ModelResponse
from picoflow.models.base import Model
from picoflow.outcomes import Direct, Go, Outcome
from picoflow.step import LogicStep, Step


async def run_turn(ws: Workspace, text: str) -> str:
    """Run the turn for the user's ``text``; returns the reply. Raises ``RunError`` on failure."""
    session = ws.session
    if not session.sequence:
        await enter(ws, session.current_step, previous=None)
    steps, observer = ws.config.spec.steps, ws.config.observer
    now: Next = Moved(None, session.current_step, text)
    while not isinstance(now, Reply):
        moved = now if isinstance(now, Moved) else None
        spec = steps[session.current_step]
        step = ws.step(spec.name)
        if moved is not None:
            observer.step_started(spec.name)
        if spec.is_logic:  # code decides: another step, or the reply
            now = await settle(ws, spec, await _decide(ws, step, spec), moved.user if moved else None)
            continue
        if moved is not None:
            await _arrive(ws, step, spec, moved)
        try:
            response, parsed = await ask(ws, step, spec)
        except (ModelError, AttemptsExhausted) as error:  # another model or the step's hook may take over
            recovered = await recover(ws, step, spec, error)
            if isinstance(recovered, Outcome):
                now = await settle(ws, spec, recovered)
                continue
            response, parsed = recovered
        if response.tool_calls:
            ws.add_response(spec.name, response)
            now = await apply_results(ws, spec, await dispatch(ws, step, spec, response))
        else:
            now = await _answer(ws, step, spec, response, parsed)
    return now.text


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
        value = await ws.hook(step, "on_response", step.on_response, value)
    if isinstance(value, Outcome):
        if not isinstance(value, Direct):  # the model's words stay in memory beside where they led
            ws.add_response(spec.name, response)
        return await settle(ws, spec, value)
    if isinstance(value, str):
        reply = value
    else:
        ws.content_type = ws.content_type or "application/json"
        reply = to_json(value).decode()
    ws.add_reply(spec.name, reply, response.answered_by)
    return Reply(reply)


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
