"""A call the step's code proposes (``call``), taken as its model's would be.

Code decides which call to make (the hotel "the cheapest" names, the order just found) and the
runner treats it as a model response of that one call: its arguments validated against the
tool's schema, a gated tool's call waiting for a decision (``propose``: the same ``Approval``, the
same events and routes), any other run at once (``dispatch``), and its result applied as a tool's
(``apply_results``). No model is asked. The call is kept in the step's memory, marked ``call``, so
that its result answers a call there, and a later request to the model shows what happened.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from picoflow._run.approvals import propose
from picoflow._run.dispatch import dispatch
from picoflow._run.effects import Next, apply_effects, apply_results
from picoflow._run.workspace import NOTHING_DECIDED, Workspace
from picoflow.exceptions import HookFailure
from picoflow.flow import StepSpec
from picoflow.messages import ModelResponse, ToolCall
from picoflow.outcomes import Call
from picoflow.step import Step
from picoflow.tools import ToolSpec

CALL_ID = "code_{seq}"
"""The id of a code-proposed call: the seq its message takes, so unique in the session and the same
whenever a durable executor replays the turn."""


async def run_code_call(ws: Workspace, step: Step, spec: StepSpec, outcome: Call) -> Next:
    """Propose ``outcome``'s call in ``spec``'s step: the turn pauses on it (``Paused``) when its
    tool needs a decision; else it runs, and what happens next is its result's."""
    tool = _tool_of(spec, outcome)
    call = ToolCall(tool.name, _arguments(spec, tool, outcome), CALL_ID.format(seq=ws.session.next_seq))
    checked = tool.validate(call)
    if isinstance(checked, str):  # code chose these arguments: a mismatch is its bug, not a guess
        raise HookFailure(f"step {spec.name}: call() of {tool.name} with {checked}", step=spec.name)
    apply_effects(ws, outcome, spec.name)
    if outcome.message is not None:
        ws.forward(spec.name, outcome.message)
    ws.add_call(spec.name, call)
    response = ModelResponse(tool_calls=[call])
    if tool.approval is not None:
        paused = await propose(ws, step, spec, response, by_code=True)
        if paused is not None:
            return paused  # the call waits for a person's decision, as a model's would
    results = await dispatch(ws, step, spec, response, by_code=True)
    ws.decided = NOTHING_DECIDED
    return await apply_results(ws, spec, results)


def _tool_of(spec: StepSpec, outcome: Call) -> ToolSpec:
    """The step's tool ``outcome`` names, by its name or by its method."""
    wanted = outcome.tool
    if isinstance(wanted, str):
        tool = spec.tools.get(wanted)
    else:
        function = getattr(wanted, "__func__", wanted)  # a bound method: the function it binds
        tool = next((t for t in spec.tools.values() if t.handler is function), None)
    if tool is None or tool.handler is None:
        named = wanted if isinstance(wanted, str) else getattr(wanted, "__name__", repr(wanted))
        offered = ", ".join(sorted(name for name, t in spec.tools.items() if t.handler is not None))
        raise HookFailure(
            f"step {spec.name}: call() names no tool of the step with a handler: {named!r} "
            f"(its tools: {offered or 'none'})",
            step=spec.name,
        )
    return tool


def _arguments(spec: StepSpec, tool: ToolSpec, outcome: Call) -> dict[str, Any]:
    """The call's arguments as JSON values (what an approval keeps and hashes)."""
    unknown = sorted(set(outcome.args) - set(tool.params))
    if unknown:
        raise HookFailure(
            f"step {spec.name}: call() of {tool.name} with arguments it does not take: {', '.join(unknown)}",
            step=spec.name,
        )
    try:
        values = to_jsonable_python(dict(outcome.args))
    except PydanticSerializationError as exc:
        raise HookFailure(
            f"step {spec.name}: call() of {tool.name} with an argument that is no JSON value: {exc}",
            step=spec.name,
        ) from exc
    assert isinstance(values, dict)
    return values
