"""The bounded loop of one turn (DESIGN §3). The model proposes; code validates, authorizes,
executes and routes:

    loop (bounded by the turn budget):
        a LogicStep decides in code: go elsewhere, or answer directly
        otherwise ask the model (empty, oversize, rejected or malformed answers are retried)
        tool calls: dispatch them, apply their outcomes; direct ends the turn, else loop on
        text: on_response turns it into the reply, or an outcome that routes
        a model that fails for good: a fallback model, or on_model_error, may take over

Everything happens on the workspace's private copy of the session; the engine commits it.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from picoflow._run.ask import ask, build_request
from picoflow._run.dispatch import dispatch
from picoflow._run.effects import apply_effects, apply_results, apply_route, enter, finish_direct
from picoflow._run.recovery import recover
from picoflow._run.workspace import Workspace
from picoflow.exceptions import AttemptsExhausted, HookFailure, ModelError
from picoflow.flow import StepSpec
from picoflow.messages import Message, ModelRequest
from picoflow.models.base import Model
from picoflow.outcomes import Direct, Go, Stay
from picoflow.step import LogicStep, Step


async def run_turn(ws: Workspace, text: str) -> str:
    """Run the turn for the user's ``text``; returns the reply. Raises ``RunError`` on failure."""
    session = ws.session
    if not session.sequence:
        await enter(ws, session.current_step, previous=None)
    pending_user: str | None = text
    crossed_from: str | None = None
    running: str | None = None
    while True:
        name = session.current_step
        spec = ws.spec.steps[name]
        step = ws.step(name)
        if name != running:
            ws.observer.step_started(name)
            running = name
        if spec.is_logic:
            outcome = await _decide(ws, step, name)
            if isinstance(outcome, Direct):
                return await finish_direct(ws, spec, outcome, pending_user)
            await apply_route(ws, spec, outcome)
            crossed_from = name
            continue

        if pending_user is not None:
            ws.add(spec.namespace, name, "user", pending_user, attachments=ws.files.refs if ws.files else ())
            pending_user = None
        elif crossed_from is not None:
            await _cross(ws, step, spec, crossed_from)
        crossed_from = None

        try:
            response, parsed = await ask(ws, step, spec)
        except (ModelError, AttemptsExhausted) as error:  # another model or the step's hook may take over
            recovered = await recover(ws, step, spec, error)
            if isinstance(recovered, Direct):
                return await finish_direct(ws, spec, recovered)
            if isinstance(recovered, Go):
                await apply_route(ws, spec, recovered)
                if session.current_step != name:
                    crossed_from = name
                continue
            response, parsed = recovered
        if response.tool_calls:
            # Reasoning rides along only with tool calls: the provider wants it back while the tool
            # loop goes on, and drops it itself once a turn has ended in text.
            ws.add(
                spec.namespace,
                name,
                "assistant",
                response.text,
                response.tool_calls,
                reasoning=response.reasoning,
                model=response.answered_by,
            )
            results = await dispatch(ws, step, spec, response)
            reply = await apply_results(ws, spec, results)
            if reply is not None:
                return reply
            if session.current_step != name:
                crossed_from = name
            continue

        value = parsed if spec.output is not None else response.text
        if "on_response" in spec.overrides:
            value = await ws.hook(step, "on_response", step.on_response, value)
        if isinstance(value, Direct):
            return await finish_direct(ws, spec, value)
        if isinstance(value, Stay):
            ws.add(spec.namespace, name, "assistant", response.text, model=response.answered_by)
            apply_effects(ws, value, name)
            if value.feedback:
                ws.add(spec.namespace, name, "user", value.feedback, kind="correction")
            continue
        if isinstance(value, Go):
            ws.add(spec.namespace, name, "assistant", response.text, model=response.answered_by)
            await apply_route(ws, spec, value)
            if session.current_step != name:
                crossed_from = name
            continue
        reply = _reply_text(ws, value)
        ws.add(spec.namespace, name, "assistant", reply, model=response.answered_by)
        return reply


async def _decide(ws: Workspace, step: Step, name: str) -> Go | Direct:
    """A LogicStep's decision, which must lead elsewhere or answer."""
    assert isinstance(step, LogicStep)
    outcome = await ws.hook(step, "run_logic", step.run_logic)
    if isinstance(outcome, Direct) or (isinstance(outcome, Go) and ws.target(outcome) != name):
        return outcome
    raise HookFailure(
        f"run_logic() of LogicStep {name} must return go(<another step>) or direct(...), not {outcome!r}",
        step=name,
    )


async def _cross(ws: Workspace, step: Step, spec: StepSpec, prior: str) -> None:
    """Entering a step mid-turn: its ``on_crossing`` may add a user message to continue from."""
    if "on_crossing" in spec.overrides:
        crossing = await ws.hook(step, "on_crossing", step.on_crossing, prior)
    else:
        crossing = step.on_crossing(prior)
    if crossing:
        ws.add(spec.namespace, spec.name, "user", str(crossing), kind="crossing")


def _reply_text(ws: Workspace, value: Any) -> str:
    if isinstance(value, str):
        return value
    ws.content_type = ws.content_type or "application/json"
    return to_json(value).decode()


async def first_request(ws: Workspace, text: str) -> tuple[Model, ModelRequest] | None:
    """The model and request a brand-new session would send first for ``text`` (None when the flow
    starts with a LogicStep). Nothing is sent; the workspace is not meant to be committed."""
    name = ws.session.current_step
    spec = ws.spec.steps[name]
    if spec.is_logic:
        return None
    await enter(ws, name, previous=None)
    request = await build_request(ws, ws.step(name), spec, [Message.user(text)])
    return ws.model_for(spec), request
