"""Tool dispatch: every call of a model response is validated, authorized and run, in order, and
gets exactly one result. Nothing here changes the session; ``effects`` applies the results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

from picoflow._run.ask import tools_for
from picoflow._run.workspace import RUNNING_CALL, Workspace
from picoflow.context import INJECTED_NAMES
from picoflow.exceptions import HookFailure, RunError, ToolError, ToolFailure
from picoflow.flow import StepSpec
from picoflow.messages import ModelResponse, ToolCall
from picoflow.outcomes import EXECUTING_STEP, Outcome, go
from picoflow.step import Step
from picoflow.tools import ToolGroup, ToolSpec, ValidCall

ACCEPTED = "Accepted."
DONE = "Done."
NOT_RUN_GROUP = "Not run: another call of this response has invalid arguments."


@dataclass(slots=True)
class CallResult:
    """What one tool call produced: the tool message's text, and the outcome to apply, if any."""

    call: ToolCall
    content: str
    is_error: bool = False
    outcome: Outcome | None = None


def refused(call: ToolCall, text: str) -> CallResult:
    return CallResult(call, text, True)


async def dispatch(ws: Workspace, step: Step, spec: StepSpec, response: ModelResponse) -> list[CallResult]:
    """One result per call of ``response``, in its order."""
    calls = response.tool_calls
    exposed = {d.name for d in tools_for(step, spec)} if spec.dynamic_tools else spec.exposed
    if len(calls) > 1:
        alone = next((c.name for c in calls if c.name in exposed and spec.tools[c.name].exclusive), None)
        if alone is not None:
            ws.warn("exclusive_tool_mixed", f"{alone} was called together with other tools", spec.name)
            text = (
                f"Not run: {alone} must be the only tool call of a response, so nothing in this response "
                f"ran. Call {alone} alone, in a response of its own."
            )
            return [refused(call, text) for call in calls]
    group = spec.groups.get(frozenset(call.name for call in calls)) if spec.groups else None
    if group is not None and group.names <= exposed:
        return await _run_group(ws, step, spec, group, calls)
    if len(calls) > 1 and any(_concurrent(spec, exposed, call) for call in calls):
        return await _run_in_turns(ws, step, spec, exposed, calls)
    return [await _run_call(ws, step, spec, exposed, call) for call in calls]


def _concurrent(spec: StepSpec, exposed: Collection[str], call: ToolCall) -> bool:
    tool = spec.tools.get(call.name) if call.name in exposed else None
    return tool is not None and tool.concurrent and tool.handler is not None


async def _run_in_turns(
    ws: Workspace, step: Step, spec: StepSpec, exposed: Collection[str], calls: list[ToolCall]
) -> list[CallResult]:
    """Consecutive concurrent calls run together; every other call runs alone, in order, so a call
    never starts before the calls ahead of it that are not concurrent have finished."""
    results: list[CallResult] = []
    together: list[ToolCall] = []
    for call in [*calls, None]:
        if call is not None and _concurrent(spec, exposed, call):
            together.append(call)
            continue
        if len(together) > 1:
            results.extend(await _all_at_once(ws, step, spec, exposed, together))
        elif together:
            results.append(await _run_call(ws, step, spec, exposed, together[0]))
        together = []
        if call is not None:
            results.append(await _run_call(ws, step, spec, exposed, call))
    return results


async def _all_at_once(
    ws: Workspace, step: Step, spec: StepSpec, exposed: Collection[str], calls: list[ToolCall]
) -> list[CallResult]:
    """Run ``calls`` at the same time; the first failure stops the others and fails the turn."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_run_call(ws, step, spec, exposed, call)) for call in calls]
    except BaseExceptionGroup as failed:
        raise first_failure(failed) from None
    return [task.result() for task in tasks]


def first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The failure to report for a group: a turn failure if there is one, else the first error."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop(0)
        if isinstance(error, BaseExceptionGroup):
            pending[:0] = list(error.exceptions)
        else:
            leaves.append(error)
    return next((error for error in leaves if isinstance(error, RunError)), leaves[0])


async def _run_call(
    ws: Workspace, step: Step, spec: StepSpec, exposed: Collection[str], call: ToolCall
) -> CallResult:
    if call.name not in exposed:
        ws.warn("hallucinated_tool", f"hallucinated tool: {call.name}", spec.name)
        available = ", ".join(sorted(exposed)) or "none"
        return refused(call, f"There is no tool named {call.name!r} here. Available tools: {available}.")
    tool = spec.tools[call.name]
    if tool.handler is None:
        ws.warn("missing_tool_handler", f"missing tool handler: {call.name}", spec.name)
        return refused(call, f"{call.name} cannot be used on its own here; nothing was run.")
    validated = _validated(ws, spec, tool, call)
    if isinstance(validated, str):
        return refused(call, validated)
    kwargs = {param: getattr(validated, param) for param in tool.params}
    _inject(ws, spec, tool.context_params, kwargs)
    value = await _invoke(ws, step, spec, call, tool.handler, tool.is_async, kwargs, tool.timeout)
    if isinstance(value, type | str) and _names_a_step(ws, value):
        value = go(value)  # PicoFlow's way to route: return the step (or its registered name)
    result = value if isinstance(value, CallResult) else _result(call, value)
    ws.observer.tool_finished(spec.name, call, result.content, result.is_error)
    return result


async def _run_group(
    ws: Workspace, step: Step, spec: StepSpec, group: ToolGroup, calls: list[ToolCall]
) -> list[CallResult]:
    """A ``@tools`` handler owns the whole response: it runs once, with every call validated."""
    validated: list[ValidCall] = []
    errors: dict[str, str] = {}
    for call in calls:
        args = _validated(ws, spec, spec.tools[call.name], call)
        if isinstance(args, str):
            errors[call.id] = args
        else:
            validated.append(ValidCall(call.id, call.name, args))
    if errors:
        return [refused(call, errors.get(call.id, NOT_RUN_GROUP)) for call in calls]
    kwargs: dict[str, Any] = {}
    _inject(ws, spec, group.context_params, kwargs)
    handler = _group_handler(group, validated)
    value = await _invoke(ws, step, spec, calls[0], handler, group.is_async, kwargs, group=calls)
    if isinstance(value, CallResult):  # ToolError: the same refusal answers every call
        ws.observer.tool_finished(spec.name, calls[0], value.content, True)
        return [refused(call, value.content) for call in calls]
    if not isinstance(value, Outcome):
        failure = HookFailure(
            f"@tools handler {group.attribute} of step {spec.name} must return go(), stay() or direct(), "
            f"not {type(value).__name__}",
            step=spec.name,
        )
        ws.observer.tool_failed(spec.name, calls[0], failure)
        raise failure
    feedback = value.feedback or ACCEPTED
    results = [CallResult(call, feedback) for call in calls]
    results[0].outcome = value
    ws.observer.tool_finished(spec.name, calls[0], feedback, False)
    return results


def _validated(ws: Workspace, spec: StepSpec, tool: ToolSpec, call: ToolCall) -> BaseModel | str:
    """The call's arguments validated, or the correction for the model (never quoting a value)."""
    args = call.args
    if not isinstance(args, str) and not INJECTED_NAMES.isdisjoint(args):
        dropped = sorted(INJECTED_NAMES.intersection(args))
        ws.warn(
            "injected_argument_ignored",
            f"the model sent {', '.join(dropped)} to {tool.name}; injected values come from the caller",
            spec.name,
        )
        args = {key: value for key, value in args.items() if key not in INJECTED_NAMES}
        call = ToolCall(call.name, args, call.id)
    return tool.validate(call)


def _inject(ws: Workspace, spec: StepSpec, params: Collection[str], kwargs: dict[str, Any]) -> None:
    """Hand the caller's context to the handler's ``RunContext`` parameters."""
    for param in params:
        kwargs[param] = ws.context_for(spec.name)


async def _invoke(
    ws: Workspace,
    step: Step,
    spec: StepSpec,
    call: ToolCall,
    handler: Callable[..., Any],
    is_async: bool,
    kwargs: dict[str, Any],
    limit: float | None = None,
    group: list[ToolCall] | None = None,
) -> Any:
    """Run a handler within the turn's tool budget and its time limit: its value, or a refusal for
    a ``ToolError`` or a handler that took too long. With a ``handler_runner`` (a durable executor)
    the handler runs there, through this same function."""
    if ws.handler_runner is not None:
        return await ws.handler_runner(ws, spec, call, group)
    ws.limits.check_before_tool_call(ws.usage)
    ws.usage.tool_calls += 1
    observer = ws.observer
    observer.tool_started(spec.name, call)
    token = EXECUTING_STEP.set(spec.name)
    running = RUNNING_CALL.set(call)
    try:
        value = handler(step, **kwargs)
        if is_async:
            if limit is None:
                value = await value
            else:
                value = await _within(ws, spec, call, value, limit)
    except ToolError as refusal:
        if refusal.warning is not None:
            ws.warn(*refusal.warning, spec.name)
        value = refused(call, refusal.message)
    except RunError as error:
        observer.tool_failed(spec.name, call, error)
        raise
    except Exception as exc:
        failure = ToolFailure(
            f"tool {call.name} of step {spec.name} raised {type(exc).__name__}: {exc}", step=spec.name
        )
        observer.tool_failed(spec.name, call, failure)
        raise failure from exc
    except BaseException as exc:
        observer.tool_failed(spec.name, call, exc)
        raise
    finally:
        RUNNING_CALL.reset(running)
        EXECUTING_STEP.reset(token)
    return value


async def _within(ws: Workspace, spec: StepSpec, call: ToolCall, running: Any, seconds: float) -> Any:
    """Await a handler for at most ``seconds``; past it the handler is cancelled and the
    model told so (never with the arguments). A ``TimeoutError`` the handler raises itself is its
    own failure, not this limit's."""
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await running
    except TimeoutError:
        if not limit.expired():
            raise
    ws.warn(
        "tool_timeout", f"tool {call.name} did not finish within {seconds:g} s and was stopped", spec.name
    )
    return refused(
        call, f"{call.name} did not finish within {seconds:g} seconds and was stopped; it gave no result."
    )


def _names_a_step(ws: Workspace, value: type | str) -> bool:
    if isinstance(value, str):
        return value in ws.spec.steps
    return issubclass(value, Step) and value.name in ws.spec.steps and ws.spec.steps[value.name].cls is value


def _result(call: ToolCall, value: Any) -> CallResult:
    if isinstance(value, Outcome):
        return CallResult(call, value.feedback or ACCEPTED, outcome=value)
    if value is None:
        return CallResult(call, DONE)
    if isinstance(value, str):
        return CallResult(call, value)
    return CallResult(call, to_json(value).decode())


def _group_handler(group: ToolGroup, calls: list[ValidCall]) -> Callable[..., Any]:
    def call_group(step: Step, **kwargs: Any) -> Any:
        return group.handler(step, calls, **kwargs)

    return call_group


async def run_handler(ws: Workspace, step: Step, spec: StepSpec, calls: list[ToolCall], group: bool) -> Any:
    """Run the handler of ``calls`` (one call, or a ``@tools`` group's) as dispatch would, here:
    the other side of a ``handler_runner``, whose dispatch already validated and counted nothing.
    Arguments are validated again (cheap, and the same), silently: the caller warned already."""
    validated = [ValidCall(c.id, c.name, _quietly_validated(spec.tools[c.name], c)) for c in calls]
    kwargs: dict[str, Any] = {}
    if group:
        owner = spec.groups[frozenset(call.name for call in calls)]
        _inject(ws, spec, owner.context_params, kwargs)
        handler = _group_handler(owner, validated)
        return await _invoke(ws, step, spec, calls[0], handler, owner.is_async, kwargs)
    tool = spec.tools[calls[0].name]
    assert tool.handler is not None
    kwargs = {param: getattr(validated[0].args, param) for param in tool.params}
    _inject(ws, spec, tool.context_params, kwargs)
    return await _invoke(ws, step, spec, calls[0], tool.handler, tool.is_async, kwargs, tool.timeout)


def _quietly_validated(tool: ToolSpec, call: ToolCall) -> BaseModel:
    args = call.args
    if not isinstance(args, str) and not INJECTED_NAMES.isdisjoint(args):
        call = ToolCall(call.name, {key: value for key, value in args.items() if key not in INJECTED_NAMES})
    validated = tool.validate(call)
    if isinstance(validated, str):  # the workflow validated the very same arguments
        raise RunError(f"tool {call.name}: arguments that passed validation failed it again: {validated}")
    return validated
