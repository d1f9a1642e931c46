"""Sub-steps: a step runs another step as a nested, bounded sub-turn (``run_step``), several at
once (``run_steps``) or one step over many inputs (``batch``).

A run works on a ``SubWorkspace``: its own cursor, memory and step objects over the turn's
session, sharing the turn's usage and limits, caller and deps. Whatever it changes (step states,
kept memory, the models it used, its transcript messages, warnings) reaches its parent only when
it answers, so a failed run leaves nothing behind. Its messages join the transcript marked with
``within``; they never enter the caller's memory.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_json

from picoflow._run.dispatch import first_failure
from picoflow._run.effects import Reply
from picoflow._run.loop import run_turn
from picoflow._run.observers import TurnObserver
from picoflow._run.subspace import SubWorkspace
from picoflow._run.text import storable
from picoflow._run.workspace import RUNNING_CALL, Workspace
from picoflow._schema import describe_validation_error
from picoflow.exceptions import (
    HookFailure,
    RunError,
    ScriptExhausted,
    SubStepFailed,
    SubStepsFailed,
    UsageLimitExceeded,
)
from picoflow.flow import FlowSpec, StepSpec, as_sub_step
from picoflow.models.base import Model
from picoflow.step import Step

MAX_DEPTH = 8
"""How deep sub-steps may nest (a step running itself without end stops here)."""


class Composer:
    """Runs sub-steps for the turns of one engine, over its registered flows."""

    def __init__(
        self,
        flows: Mapping[str, FlowSpec],
        model_for: Callable[[FlowSpec, StepSpec], Model],
        with_mcp_tools: Callable[[FlowSpec], Awaitable[FlowSpec]] | None = None,
    ) -> None:
        self._flows = flows
        self._model_for = model_for
        self._with_mcp_tools = with_mcp_tools
        """Lists a flow's MCP tools (a sub-step of another flow may run before that flow's first turn)."""
        self._specs: dict[tuple[str, str, type[BaseModel] | None], FlowSpec] = {}

    async def run_steps(
        self,
        ws: Any,
        caller: str,
        requests: Sequence[tuple[Any, Any, Any]],
        concurrency: int | None,
        keys: Sequence[Any] | None = None,
    ) -> list[Any]:
        """Answers to ``(step, input, output)`` requests, in order. ``concurrency`` None: one
        request (``run_step``), whose failure raises its own ``SubStepFailed``."""
        assert isinstance(ws, Workspace), "sub-steps run on a turn's workspace"
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ValueError(f"concurrency must be a whole number of at least 1, not {concurrency!r}")
        # Every request is checked before any runs: a typo in the third must not leave two done.
        runs = []
        for step, input, output in requests:
            flow, name = await self._resolve(ws, step, output)
            runs.append(((flow, name), _input_text(input, flow.steps[name].cls)))
        if concurrency is None:
            (flow, name), text = runs[0]
            return [await self._run(ws, caller, flow, name, text)]
        results: list[Any] = [None] * len(runs)
        gate = asyncio.Semaphore(concurrency)

        async def branch(index: int, flow: FlowSpec, name: str, text: str) -> None:
            async with gate:
                try:
                    results[index] = await self._run(ws, caller, flow, name, text)
                except SubStepFailed as failed:
                    results[index] = failed

        try:
            async with asyncio.TaskGroup() as group:
                for index, ((flow, name), text) in enumerate(runs):
                    group.create_task(branch(index, flow, name, text))
        except BaseExceptionGroup as failed:  # a limit or a bug: the whole turn stops
            raise first_failure(failed) from None
        failures = [result for result in results if isinstance(result, SubStepFailed)]
        if failures:
            steps = ", ".join(sorted({failure.step or "?" for failure in failures}))
            raise SubStepsFailed(
                f"{len(failures)} of {len(runs)} sub-steps failed ({steps})", results=results, keys=keys
            )
        return results

    async def _resolve(self, ws: Workspace, step: Any, output: Any) -> tuple[FlowSpec, str]:
        """The flow (built for sub-step use) and name of the step a request names."""
        here = self._flows.get(ws.config.spec.name, ws.config.spec)
        if isinstance(step, str):
            if step not in here.steps:
                raise LookupError(f"run_step: flow {here.name} has no step named {step!r}")
            flow, name = here, step
        elif isinstance(step, type) and issubclass(step, Step):
            found = next((f for f in (here, *self._flows.values()) if _holds(f, step)), None)
            if found is None:
                raise LookupError(
                    f"run_step: {step.__name__} is not a step of flow {here.name} or of another registered "
                    "flow; list it in a flow's steps"
                )
            flow, name = found, step.name
        else:
            raise TypeError(f"run_step takes a Step class or a step name, not {type(step).__name__}")
        gated = flow.steps[name].gated
        if gated:
            raise ValueError(
                f"run_step: {name} has tools that need approval ({', '.join(sorted(gated))}); a sub-step "
                "answers its caller at once and cannot wait for a decision"
            )
        if flow.steps[name].is_terminal:
            raise ValueError(
                f"run_step: {name} is a TerminateStep, which ends the conversation, not a sub-step"
            )
        if output is not None and not (isinstance(output, type) and issubclass(output, BaseModel)):
            raise TypeError(f"run_step: output must be a pydantic model class, not {output!r:.60}")
        if flow.mcp_servers and self._with_mcp_tools is not None:
            flow = await self._with_mcp_tools(flow)  # never built (nor kept) without its MCP tools
        key = (flow.name, name, output)
        built = self._specs.get(key)
        if built is None:
            built = self._specs[key] = as_sub_step(flow, name, output)
        return built, name

    async def _run(self, ws: Workspace, caller: str, flow: FlowSpec, name: str, text: str) -> Any:
        """One sub-step run: its answer, merged into ``ws`` only once it answered."""
        depth = ws.depth + 1 if isinstance(ws, SubWorkspace) else 1
        if depth > MAX_DEPTH:
            raise HookFailure(
                f"sub-steps nest deeper than {MAX_DEPTH} (step {caller} runs {name})", step=caller
            )
        observer: TurnObserver = ws.config.observer.sub_turn(caller, RUNNING_CALL.get())
        child = SubWorkspace(
            ws,
            flow,
            name,
            functools.partial(self._model_for, flow),
            observer=observer,
            depth=depth,
            text=text,
        )
        error: BaseException | None = None
        try:
            ended = await run_turn(child, text)
            if not isinstance(ended, Reply):  # _resolve refuses such steps; this is the last guard
                raise HookFailure(f"sub-step {name} cannot wait for an approval", step=name)
            reply = ended.text
            spec = child.config.spec.steps[name]
            if "on_exit" in spec.overrides:
                leaving = child.step(name)
                await child.hook(leaving, "on_exit", leaving.on_exit)
            answer = _answer(spec, reply)
            child.merge()
            return answer
        except (UsageLimitExceeded, ScriptExhausted) as exc:
            # The turn's budget is spent, or a test's script ran out: the whole turn stops.
            error = exc
            raise
        except RunError as exc:
            error = exc
            ws.warnings.extend(child.warnings)  # what went wrong on the way explains the failure
            ws.warn("sub_step_failed", f"sub-step {name} failed: {exc.kind}", caller)
            raise SubStepFailed(
                f"sub-step {name} (run by {caller}) failed: {exc}", cause=exc, step=name
            ) from exc
        except BaseException as exc:
            error = exc
            raise
        finally:
            observer.turn_ended(error)
            child.release()


def _holds(flow: FlowSpec, step: type[Step]) -> bool:
    spec = flow.steps.get(step.name)
    return spec is not None and spec.cls is step


def _input_text(value: Any, step: type[Step]) -> str:
    """A request's input as the sub-step's user message."""
    if value is None:
        text = step.crossing_message
    elif isinstance(value, str):
        text = value
    elif isinstance(value, BaseModel):
        text = value.model_dump_json()
    else:
        try:
            text = to_json(value).decode()
        except PydanticSerializationError as exc:
            raise TypeError(
                f"run_step: input must be text, a pydantic model or JSON data, not {type(value).__name__}"
            ) from exc
    if not text.strip():
        raise ValueError("run_step: the input is empty")
    if not storable(text):
        raise ValueError("run_step: the input holds characters no store can keep (NUL or a lone surrogate)")
    return text


def _answer(spec: StepSpec, reply: str) -> Any:
    """The run's answer: its output model when the step has one, else its text."""
    output = spec.cls.output
    if output is None:
        return reply
    try:
        return output.model_validate_json(reply)
    except ValidationError as error:
        raise HookFailure(
            f"sub-step {spec.name} answered with something that is not a valid {output.__name__}: "
            + describe_validation_error(error, tool=output.__name__),
            step=spec.name,
        ) from None
