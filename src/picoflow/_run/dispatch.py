"""Tool dispatch: every call of a model response is validated, authorized and run, in order, and
gets exactly one result. Nothing here changes the session; ``effects`` applies the results.

Validated calls cross one seam, ``ToolRunner``: ``LOCAL_TOOLS`` runs the handler here, within the
turn's tool budget and its time limit; a durable executor runs the same ``LocalTools`` in an
activity instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from picoflow._run.arguments import refusal
from picoflow._run.ask import tools_for
from picoflow._run.workspace import RUNNING_CALL, ToolJob, Workspace
from picoflow.context import INJECTED_NAMES
from picoflow.exceptions import HookFailure, RunError, ToolError, ToolFailure
from picoflow.flow import StepSpec
from picoflow.messages import ModelResponse, ToolCall
from picoflow.outcomes import Call, Outcome, go
from picoflow.step import Step
from picoflow.tools import ToolGroup, ValidCall, timed_out

ACCEPTED = "Accepted."
DONE = "Done."
NOT_RUN_GROUP = "Not run: another call of this response has invalid arguments."
NOT_PROPOSED = (
    "Not run: {tool} needs a person's approval, which is asked only for a response whose every call "
    "is valid. Call it again."
)
UNDECIDED = object()
"""A gated call nobody decided (it came with a response that could not be proposed)."""


@dataclass(slots=True)
class CallResult:
    """What one tool call produced: the tool message's text, and the outcome to apply, if any."""

    call: ToolCall
    content: str
    is_error: bool = False
    outcome: Outcome | None = None


def refused(call: ToolCall, text: str) -> CallResult:
    return CallResult(call, text, True)


async def dispatch(
    ws: Workspace, step: Step, spec: StepSpec, response: ModelResponse, *, by_code: bool = False
) -> list[CallResult]:
    """One result per call of ``response``, in its order. ``by_code``: the step's code proposed
    the call (``call``): any tool of the step may run, offered to the model or not, and the
    checks against a model's guesses and loops (``arguments``) do not apply."""
    calls = response.tool_calls
    exposed: frozenset[str] | set[str] = spec.exposed
    if spec.dynamic_tools and not by_code:
        exposed = {d.name for d in tools_for(step, spec)}
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
    return [await _run_call(ws, step, spec, exposed, call, by_code) for call in calls]


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
    ws: Workspace, step: Step, spec: StepSpec, exposed: Collection[str], call: ToolCall, by_code: bool = False
) -> CallResult:
    if call.name not in exposed:
        ws.warn("hallucinated_tool", f"hallucinated tool: {call.name}", spec.name)
        available = ", ".join(sorted(exposed)) or "none"
        return refused(call, f"There is no tool named {call.name!r} here. Available tools: {available}.")
    tool = spec.tools[call.name]
    if tool.handler is None:
        ws.warn("missing_tool_handler", f"missing tool handler: {call.name}", spec.name)
        return refused(call, f"{call.name} cannot be used on its own here; nothing was run.")
    if not (isinstance(call.args, str) or INJECTED_NAMES.isdisjoint(call.args)):
        call = _without_injected(ws, spec, call)
    validated = tool.validate(call)
    if isinstance(validated, str):
        return refused(call, validated)
    if not by_code and (why := refusal(ws, step, tool, call, validated)) is not None:
        return refused(call, why)
    key = None
    if tool.approval is not None:  # runs only as decided: approved, or cleared by its policy
        decided = ws.decided.get(call.id, UNDECIDED)
        if decided is UNDECIDED:
            return refused(call, NOT_PROPOSED.format(tool=call.name))
        if isinstance(decided, CallResult):
            return decided
        key = decided
    ws.config.cancel.check()  # no tool starts once the job was asked to stop
    value = await ws.config.tools.run(ws, step, spec, ToolJob(spec.name, (call,), (validated,), False, key))
    if isinstance(value, (type, str)) and _names_a_step(ws, value):  # a tuple: no union built per call
        value = go(value)  # PicoFlow's way to route: return the step (or its registered name)
    result = value if isinstance(value, CallResult) else _result(call, value)
    ws.config.observer.tool_finished(spec.name, call, result.content, result.is_error)
    return result


async def _run_group(
    ws: Workspace, step: Step, spec: StepSpec, group: ToolGroup, calls: list[ToolCall]
) -> list[CallResult]:
    """A ``@tools`` handler owns the whole response: it runs once, with every call validated."""
    calls = [_without_injected(ws, spec, call) for call in calls]
    validated = [spec.tools[call.name].validate(call) for call in calls]
    if any(isinstance(args, str) for args in validated):
        return [
            refused(call, args if isinstance(args, str) else NOT_RUN_GROUP)
            for call, args in zip(calls, validated, strict=True)
        ]
    arguments = tuple(args for args in validated if not isinstance(args, str))
    key = None
    for call in calls:
        if spec.tools[call.name].approval is None:
            continue
        decided = ws.decided.get(call.id, UNDECIDED)
        if isinstance(decided, CallResult):  # denied: the group's one handler cannot run
            return [refused(other, decided.content) for other in calls]
        if decided is UNDECIDED:
            return [refused(other, NOT_PROPOSED.format(tool=call.name)) for other in calls]
        key = key or decided
    ws.config.cancel.check()
    value = await ws.config.tools.run(ws, step, spec, ToolJob(spec.name, tuple(calls), arguments, True, key))
    observer = ws.config.observer
    if isinstance(value, CallResult):  # ToolError: the same refusal answers every call
        observer.tool_finished(spec.name, calls[0], value.content, True)
        return [refused(call, value.content) for call in calls]
    if not isinstance(value, Outcome):
        failure = HookFailure(
            f"@tools handler {group.attribute} of step {spec.name} must return go(), stay() or direct(), "
            f"not {type(value).__name__}",
            step=spec.name,
        )
        observer.tool_failed(spec.name, calls[0], failure)
        raise failure
    feedback = value.feedback or ACCEPTED
    results = [CallResult(call, feedback) for call in calls]
    results[0].outcome = value
    observer.tool_finished(spec.name, calls[0], feedback, False)
    return results


def _without_injected(ws: Workspace, spec: StepSpec, call: ToolCall) -> ToolCall:
    """The call without arguments the runtime injects (a model may try to set them); warned."""
    args = call.args
    if isinstance(args, str) or INJECTED_NAMES.isdisjoint(args):
        return call
    dropped = sorted(INJECTED_NAMES.intersection(args))
    ws.warn(
        "injected_argument_ignored",
        f"the model sent {', '.join(dropped)} to {call.name}; injected values come from the caller",
        spec.name,
    )
    return ToolCall(
        call.name, {key: value for key, value in args.items() if key not in INJECTED_NAMES}, call.id
    )


class LocalTools:
    """The ``ToolRunner`` that runs handlers here, in this process."""

    async def run(self, ws: Workspace, step: Step, spec: StepSpec, job: ToolJob) -> Any:
        """Run the job's handler within the turn's tool budget and its time limit: its value, or a
        refusal for a ``ToolError`` or a handler that took too long."""
        config = ws.config
        config.limits.check_before_tool_call(ws.usage)
        ws.usage.tool_calls += 1
        call = job.calls[0]
        kwargs: dict[str, Any] = {}
        limit: float | None = None
        if job.group:
            group = spec.groups[frozenset(c.name for c in job.calls)]
            calls = [ValidCall(c.id, c.name, a) for c, a in zip(job.calls, job.arguments, strict=True)]
            handler = _group_handler(group, calls)
            is_async, injected = group.is_async, group.context_params
        else:
            tool = spec.tools[call.name]
            assert tool.handler is not None  # dispatch runs only calls with a handler
            args = job.arguments[0]
            kwargs = {param: getattr(args, param) for param in tool.params}
            handler, is_async, injected, limit = (
                tool.handler,
                tool.is_async,
                tool.context_params,
                tool.timeout,
            )
        if injected:  # the caller's context, never the model's
            context = ws.context_for(spec.name)
            if job.key is not None:
                context = dataclasses.replace(context, idempotency_key=job.key)
            for param in injected:
                kwargs[param] = context
        observer = config.observer
        observer.tool_started(spec.name, call)
        running = RUNNING_CALL.set(call)
        try:
            value = handler(step, **kwargs)
            if is_async:
                value = await (value if limit is None else _within(ws, spec, call, value, limit))
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
        if isinstance(value, Call):  # a tool's result answers a call; it cannot propose another
            proposing = HookFailure(
                f"tool {call.name} of step {spec.name} returned call(...): propose a call from "
                "on_response or on_model_error, not from a tool",
                step=spec.name,
            )
            observer.tool_failed(spec.name, call, proposing)
            raise proposing
        return value


LOCAL_TOOLS = LocalTools()


def job_of(spec: StepSpec, calls: list[ToolCall], group: bool, key: str | None = None) -> ToolJob:
    """The job of ``calls`` that dispatch validated elsewhere (a durable executor sends the calls
    it validated to the worker that runs them): their arguments, read into the same models, and
    the idempotency ``key`` of an approved call."""
    arguments = []
    for call in calls:
        validated = spec.tools[call.name].validate(call)
        if isinstance(validated, str):  # the same arguments passed before: the flow changed since
            raise RunError(f"tool {call.name}: arguments that passed validation failed it again: {validated}")
        arguments.append(validated)
    return ToolJob(spec.name, tuple(calls), tuple(arguments), group, key)


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
    refusal = timed_out(call.name, seconds)
    if refusal.warning is not None:
        ws.warn(*refusal.warning, spec.name)
    return refused(call, refusal.message)


def _names_a_step(ws: Workspace, value: type | str) -> bool:
    if isinstance(value, str):
        return value in ws.config.spec.steps
    return (
        issubclass(value, Step)
        and value.name in ws.config.spec.steps
        and ws.config.spec.steps[value.name].cls is value
    )


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
