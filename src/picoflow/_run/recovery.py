"""When a model call fails for good (after the adapter's own retries and the step's attempts).

First, when the step's model is a ``FallbackModel`` that hands over on misbehaviour and the member
that answered kept answering unusably, the next member gets the step's attempts. Then the step's
``on_model_error`` (and after it the flow's) may answer the user instead (``direct``), carry on in
another step (``go``), ask once more with a correction (``stay``) or of another model
(``retry_with``), or let the error stand. Each hook is asked at most once per failed call: when the
step's remedy fails too, the flow's hook is asked; when that fails, the error stands.
"""

from __future__ import annotations

from typing import Any

from picoflow._run.ask import ask
from picoflow._run.workspace import Workspace
from picoflow.exceptions import AttemptsExhausted, HookFailure, ModelError, RunError
from picoflow.flow import Flow, StepSpec
from picoflow.messages import Message, ModelResponse
from picoflow.models.base import Model
from picoflow.models.fallback import FallbackModel, as_model
from picoflow.outcomes import Call, Direct, Go, RetryWith, Stay
from picoflow.step import Step

_RETRY_MODELS: dict[str, Model] = {}
"""Models named by ``retry_with``, created once per process (an adapter holds a connection pool)."""


async def recover(
    ws: Workspace, step: Step, spec: StepSpec, error: ModelError | AttemptsExhausted
) -> tuple[ModelResponse, Any] | Direct | Go | Call:
    """An answer after all, where the turn goes instead, or a call the step's code proposes in
    place of its model's; raises ``error`` when nothing helps."""
    model = ws.config.model_for(spec)
    asked: set[str] = set()
    while True:
        extra: list[Message] = []
        successor = _successor(ws, spec, model, error)
        if successor is not None:
            failed = ws.session.models.get(spec.name, model.name)
            ws.warn(
                "model_fallback", f"{failed} kept answering unusably; {successor.name} takes over", spec.name
            )
            model = successor
        else:
            decision = await _decision(ws, step, spec, error, asked)
            if decision is None:
                raise error
            if isinstance(decision, Direct | Go | Call):
                ws.warn("model_error_handled", f"{error.kind}: on_model_error took over", spec.name)
                return decision
            if isinstance(decision, RetryWith):
                model = _model(decision.model)
            elif decision.feedback:
                extra = [Message.user(decision.feedback, kind="correction")]
        try:
            return await ask(ws, step, spec, model, extra)
        except (ModelError, AttemptsExhausted) as again:
            error = again


def _successor(ws: Workspace, spec: StepSpec, model: Model, error: RunError) -> Model | None:
    """The fallback member after the one that kept misbehaving, if the model hands over on that."""
    if not (
        isinstance(error, AttemptsExhausted) and isinstance(model, FallbackModel) and model.on_misbehaviour
    ):
        return None
    return model.after(ws.session.models.get(spec.name))


async def _decision(
    ws: Workspace, step: Step, spec: StepSpec, error: RunError, asked: set[str]
) -> Direct | Go | Call | Stay | RetryWith | None:
    """What the step's ``on_model_error`` says, else the flow's; each is asked once per failed call
    (so a remedy that fails again passes to the flow, then lets the error stand)."""
    decision: Any = None
    if "step" not in asked and "on_model_error" in spec.overrides:
        asked.add("step")
        decision = await ws.hook(step, "on_model_error", step.on_model_error, error)
    flow = ws.flow
    if decision is None and "flow" not in asked and type(flow).on_model_error is not Flow.on_model_error:
        asked.add("flow")
        decision = await ws.hook(step, "the flow's on_model_error", flow.on_model_error, error)
    if decision is None or isinstance(decision, Direct | Go | Call | Stay | RetryWith):
        return decision
    raise HookFailure(
        f"on_model_error for step {spec.name} must return direct(), go(), call(), stay(), retry_with() "
        "or None, "
        f"not {type(decision).__name__}",
        step=spec.name,
    )


def _model(choice: Any) -> Model:
    if isinstance(choice, Model):
        return choice
    key = str(choice)
    model = _RETRY_MODELS.get(key)
    if model is None:
        model = _RETRY_MODELS[key] = as_model(choice)
    return model
