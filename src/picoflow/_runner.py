"""The bounded loop that runs one turn of a flow.

The model proposes; this module validates, authorizes, executes and routes. One ``Turn`` owns a
private working copy of the session: nothing reaches the store unless the whole turn succeeds
(the engine commits it), so a failure anywhere leaves the stored session as it was.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json, to_jsonable_python

from picoflow._schema import describe_validation_error
from picoflow._text import check_text
from picoflow._window import Fitting, fits_at_a_glance, limits_for, shown
from picoflow.context import INJECTED_NAMES, Caller, RunContext
from picoflow.events import StepEntered, TextChunk, ToolCalled, ToolReturned, TurnEvent
from picoflow.exceptions import (
    AttemptsExhausted,
    HookFailure,
    InvalidInput,
    ModelError,
    ModelMisbehaved,
    RunError,
    ToolError,
    ToolFailure,
)
from picoflow.flow import FlowRuntime, FlowSpec, StepSpec
from picoflow.memory import compact
from picoflow.messages import (
    Message,
    MessageKind,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
    ToolDefinition,
)
from picoflow.models.base import Model, ResponseDone, TextDelta
from picoflow.outcomes import EXECUTING_STEP, Direct, Go, Outcome, Reject, Stay
from picoflow.session import LogRecord, Session
from picoflow.step import LogicStep, Step, StepRuntime, StepState
from picoflow.tools import ToolGroup, ToolSpec, ValidCall
from picoflow.usage import Usage, UsageLimits

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from picoflow._tracing import Tracing

NUDGE = "Your last response was empty. Answer the user, or call one of the available tools."
ACCEPTED = "Accepted."
DONE = "Done."

ModelFor = Callable[[StepSpec], Model]


@dataclass(slots=True)
class _CallResult:
    call: ToolCall
    content: str
    is_error: bool = False
    outcome: Outcome | None = None


def _json_text(value: Any) -> str:
    return to_json(value).decode()


class Turn(FlowRuntime, StepRuntime):
    """One turn on a private working copy of a session."""

    def __init__(
        self,
        *,
        spec: FlowSpec,
        session: Session,
        caller: Caller,
        deps: Any,
        model_for: ModelFor,
        limits: UsageLimits,
        max_reply_chars: int = 100_000,
        emit: Callable[[TurnEvent], None] | None = None,
        tracing: Tracing | None = None,
        trace_parent: Span | None = None,
    ) -> None:
        self.spec = spec
        self.session = session
        self.session_id = session.id
        self.caller = caller
        self.deps = deps
        self.model_for = model_for
        self.limits = limits
        self.max_reply_chars = max_reply_chars
        self.emit = emit
        self.tracing = tracing
        self._turn_span = trace_parent
        self._step_span: Span | None = None
        self._traced_step: str | None = None
        self.usage = Usage()
        self.appended: list[tuple[str, Message]] = []
        self.warnings: list[LogRecord] = []
        self.content_type: str | None = None
        self.transitions = 0
        self.attempt = 1
        self._steps: dict[str, Step] = {}
        self._states: dict[str, StepState] = {}
        self._contexts: dict[str, RunContext[Any]] = {}
        self._deferred_erase: set[str] | None = None
        self.touched: set[str] = set()
        self.flow = spec.cls(self)

    # --- runtime services for steps and flows -----------------------------------------------

    def state_for(self, step_name: str) -> StepState:
        state = self._states.get(step_name)
        if state is None:
            state = self._states[step_name] = StepState(self.session.state_of(step_name))
        return state

    def messages_of(self, namespace: str) -> Sequence[Message]:
        if self._deferred_erase and namespace in self._deferred_erase:
            return ()
        return self.session.namespace(namespace).messages

    def erase(self, namespace: str) -> None:
        if self._deferred_erase is not None:
            # A tool call of this response still waits for its results in some namespace; erasing
            # now could separate them, so the erase happens once the results are written.
            self._deferred_erase.add(namespace)
            return
        ns = self.session.namespace(namespace)
        ns.messages = []
        ns.start = self.session.next_seq
        ns.summary = None

    def terminate_target(self) -> str | None:
        return self.spec.terminate

    def step(self, name: str) -> Step:
        step = self._steps.get(name)
        if step is None:
            step = self._steps[name] = self.spec.steps[name].cls(self)
        return step

    def add(
        self,
        namespace: str,
        step: str,
        role: Role,
        content: str,
        tool_calls: Sequence[ToolCall] = (),
        *,
        call: ToolCall | None = None,
        is_error: bool = False,
        kind: MessageKind | None = None,
        reasoning: Sequence[Mapping[str, Any]] = (),
        remembered_as: str | None = None,
    ) -> Message:
        """Append a message to ``namespace`` and to the turn's list of new messages."""
        session = self.session
        # Look the namespace up first: a new one must start at this message's seq.
        live = session.namespace(namespace).messages
        message = Message(
            role,
            content,
            tuple(tool_calls),
            call.id if call else None,
            call.name if call else None,
            is_error,
            step,
            kind,
            session.next_seq,
            time.time(),
            tuple(reasoning),
            remembered_as,
        )
        session.next_seq += 1
        live.append(message)
        self.appended.append((namespace, message))
        self.touched.add(namespace)
        return message

    def warn(self, code: str, message: str, step: str | None) -> None:
        self.warnings.append(LogRecord(code, message, "warning", step, self.session.turns + 1))

    def context_for(self, step: str) -> RunContext[Any]:
        context = self._contexts.get(step)
        if context is None:
            caller = self.caller
            context = self._contexts[step] = RunContext(
                principal=caller.principal,
                visibilities=caller.visibilities,
                deps=self.deps,
                session_id=self.session_id,
                step=step,
                usage=self.usage,
                config=caller.config,
            )
        return context

    async def _hook(self, step: Step, label: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run user code of ``step``; anything it raises fails the turn as a ``HookFailure``."""
        token = EXECUTING_STEP.set(step.name)
        try:
            value = fn(*args)
            if inspect.isawaitable(value):
                value = await value
        except RunError:
            raise
        except Exception as exc:
            raise HookFailure(
                f"{label}() of step {step.name} raised {type(exc).__name__}: {exc}", step=step.name
            ) from exc
        finally:
            EXECUTING_STEP.reset(token)
        return value

    # --- the loop ------------------------------------------------------------------------------

    async def run(self, text: str) -> str:
        if self.tracing is None:
            return await self._run(text)
        try:
            return await self._run(text)
        except BaseException as exc:
            if self._step_span is not None:
                self.tracing.fail(self._step_span, exc)
                self._step_span = None
            raise
        finally:
            if self._step_span is not None:
                self._step_span.end()

    def _trace_step(self, name: str) -> None:
        if self.tracing is None or self._traced_step == name:
            return
        if self._step_span is not None:
            self._step_span.end()
        self._traced_step = name
        self._step_span = self.tracing.step(self._turn_span, name, self.session_id)  # type: ignore[arg-type]

    async def _run(self, text: str) -> str:
        session = self.session
        if not session.sequence:
            await self._enter(session.current_step, previous=None)
        pending_user: str | None = text
        crossed_from: str | None = None
        while True:
            name = session.current_step
            spec = self.spec.steps[name]
            step = self.step(name)
            if self.tracing is not None:
                self._trace_step(name)
            if spec.is_logic:
                assert isinstance(step, LogicStep)
                outcome = await self._hook(step, "run_logic", step.run_logic)
                if isinstance(outcome, Direct):
                    return await self._finish_direct(spec, outcome, pending_user)
                if not isinstance(outcome, Go) or self._target(outcome) == name:
                    raise HookFailure(
                        f"run_logic() of LogicStep {name} must return go(<another step>) or direct(...), "
                        f"not {outcome!r}",
                        step=name,
                    )
                await self._apply_route(spec, outcome)
                crossed_from = name
                continue

            if pending_user is not None:
                self.add(spec.namespace, name, "user", pending_user)
                pending_user = None
            elif crossed_from is not None:
                if "on_crossing" in spec.overrides:
                    crossing = await self._hook(step, "on_crossing", step.on_crossing, crossed_from)
                else:
                    crossing = step.on_crossing(crossed_from)
                if crossing:
                    self.add(spec.namespace, name, "user", str(crossing), kind="crossing")
            crossed_from = None

            response, parsed = await self._ask(step, spec)
            if response.tool_calls:
                reply = await self._dispatch(step, spec, response)
                if reply is not None:
                    return reply
                if session.current_step != name:
                    crossed_from = name
                continue

            value = parsed if spec.output is not None else response.text
            if "on_response" in spec.overrides:
                result = await self._hook(step, "on_response", step.on_response, value)
            else:
                result = value
            if isinstance(result, Direct):
                return await self._finish_direct(spec, result)
            if isinstance(result, Stay):
                self.add(spec.namespace, name, "assistant", response.text)
                self._apply_effects(result, name)
                if result.feedback:
                    self.add(spec.namespace, name, "user", result.feedback, kind="correction")
                continue
            if isinstance(result, Go):
                self.add(spec.namespace, name, "assistant", response.text)
                await self._apply_route(spec, result)
                if session.current_step != name:
                    crossed_from = name
                continue
            reply = self._reply_text(result)
            self.add(spec.namespace, name, "assistant", reply)
            return reply

    def _reply_text(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        self.content_type = self.content_type or "application/json"
        return _json_text(value)

    async def _finish_direct(self, spec: StepSpec, outcome: Direct, pending_user: str | None = None) -> str:
        """End the turn with a direct reply (from run_logic or on_response), moving first if asked."""
        destination = self._target(outcome)
        await self._transition(spec.name, destination)
        self._apply_effects(outcome, destination)
        namespace = self.spec.steps[destination].namespace
        if pending_user is not None:  # a logic step answered: keep the user's words beside the reply
            self.add(namespace, destination, "user", pending_user)
        if outcome.message is not None:
            self.add(namespace, destination, "user", outcome.message, kind="forwarded")
        note = outcome.remember
        self.add(namespace, destination, "assistant", outcome.content, kind="direct", remembered_as=note)
        return outcome.content

    # --- asking the model ----------------------------------------------------------------------

    def _tools_for(self, step: Step, spec: StepSpec) -> Sequence[ToolDefinition]:
        if not spec.dynamic_tools:
            return spec.definitions
        active = step.active_tools()
        if active is None:
            return spec.definitions
        wanted = set(active)
        return tuple(d for d in spec.definitions if d.name in wanted)

    async def _build_request(self, step: Step, spec: StepSpec, extra: list[Message]) -> ModelRequest:
        override = self.session.prompts.get(spec.name)
        if override is not None:
            system = override
        elif "prompt" in spec.overrides:
            system = await self._hook(step, "prompt", step.prompt)
        else:
            system = spec.default_prompt
        if not isinstance(system, str):
            raise HookFailure(f"prompt() of step {spec.name} returned {type(system).__name__}, not str")
        namespace = self.session.namespace(spec.namespace)
        if namespace.summary:
            system = f"{system}\n\n## Summary of the earlier conversation\n{namespace.summary}"
        messages: Sequence[Message] = shown(namespace.messages)
        if "history" in spec.overrides:
            messages = await self._hook(step, "history", step.history, messages)
        return ModelRequest(
            system=system,
            messages=[*messages, *extra] if extra else list(messages),
            tools=self._tools_for(step, spec),
            output=spec.output,
            step=spec.name,
            session_id=self.session_id,
        )

    async def _call_model(self, model: Model, request: ModelRequest, step: str) -> ModelResponse:
        if self.tracing is None:
            return await self._call_model_untraced(model, request, step)
        span = self.tracing.model(self._step_span, model.name, request)
        try:
            response = await self._call_model_untraced(model, request, step)
        except BaseException as exc:
            self.tracing.fail(span, exc)
            raise
        self.tracing.model_done(span, response)
        return response

    async def _call_model_untraced(self, model: Model, request: ModelRequest, step: str) -> ModelResponse:
        try:
            if self.emit is None:
                return await model.request(request)
            emit = self.emit
            async for event in model.request_stream(request):
                if isinstance(event, TextDelta):
                    emit(TextChunk(step, event.text))
                elif isinstance(event, ResponseDone):
                    return event.response
            raise ModelMisbehaved(f"model {model.name} ended its stream without a response", step=step)
        except RunError as exc:
            exc.step = exc.step or step
            raise
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the turn itself is being cancelled: let it go
            # A model that raises CancelledError on its own is misbehaving, not cancelling us.
            raise ModelMisbehaved(f"model {model.name} raised CancelledError", step=step) from exc
        except Exception as exc:
            failure = f"model {model.name} failed: {type(exc).__name__}: {exc}"
            if isinstance(exc, TimeoutError | OSError):
                # A timeout or a broken connection is an outage: a retry later may well succeed.
                raise ModelError(failure, step=step) from exc
            # Anything else escaping a model is its own fault, which a retry would meet again.
            raise ModelMisbehaved(failure, step=step) from exc

    async def _ask(self, step: Step, spec: StepSpec) -> tuple[ModelResponse, Any]:
        """Ask the model until a response passes the empty check, the gate and the output schema."""
        model = self.model_for(spec)
        self.session.models[spec.name] = model.name
        extra: list[Message] = []
        window = limits_for(model, spec.cls.memory_budget)
        attempts = spec.cls.max_attempts
        problems: list[str] = []
        for attempt in range(1, attempts + 1):
            self.attempt = attempt
            self.limits.check_before_model_call(self.usage)
            request = await self._build_request(step, spec, extra)
            if window is not None and not fits_at_a_glance(window, request):
                rebuild = functools.partial(self._build_request, step, spec, extra)
                fitting = Fitting(window, spec, model.name, self.session, rebuild, self.warn)
                request = await fitting.fit(request, len(extra))
            response = await self._call_model(model, request, spec.name)
            usage = response.usage
            self.usage.add(usage)
            if usage.model_calls == 0:
                self.usage.model_calls += 1
            self.limits.check_tokens(self.usage)
            if response.is_empty:
                problems.append("empty response")
                self.warn("empty_response", "the model returned an empty response", spec.name)
                extra.append(Message.user(NUDGE, kind="nudge"))
                continue
            unusable = _unusable(response, self.max_reply_chars)
            if unusable is not None:
                # An oversize or unstorable reply is the model's to correct; it is never stored, and
                # the correction quotes none of it (it may be megabytes, or not encodable at all).
                problems.append(unusable)
                self.warn("response_unusable", f"the model's response {unusable}", spec.name)
                extra.extend(
                    [
                        Message.assistant("[response withheld]", kind="correction"),
                        Message.user(f"Your response {unusable}. Answer again, briefly.", kind="correction"),
                    ]
                )
                continue
            response.tool_calls = _unique_ids(response.tool_calls, self.session.next_seq)
            if spec.checks_response:
                verdict = await self._hook(step, "check_response", step.check_response, response)
                if isinstance(verdict, Reject):
                    problems.append(f"rejected: {verdict.reason}")
                    self.warn("response_rejected", verdict.reason, spec.name)
                    extra.extend(_correction(response, f"Your response was not accepted: {verdict.reason}"))
                    continue
                if verdict is not None:
                    raise HookFailure(
                        f"check_response() of step {spec.name} must return None or Reject(reason), "
                        f"not {type(verdict).__name__}",
                        step=spec.name,
                    )
            parsed: Any = None
            if spec.output is not None and not response.tool_calls and spec.cls.output is not None:
                try:
                    parsed = spec.cls.parse_output(_strip_fences(response.text))
                except ValueError as error:
                    problems.append("output did not match the schema")
                    text = (
                        describe_validation_error(error, tool=spec.output.name)
                        if isinstance(error, ValidationError)
                        else str(error)
                    )
                    extra.extend(
                        _correction(
                            response,
                            "Your answer must be one JSON object matching the required schema. " + text,
                        )
                    )
                    continue
            return response, parsed
        raise AttemptsExhausted(
            f"step {spec.name}: no acceptable model response in {attempts} attempts ({'; '.join(problems)})",
            step=spec.name,
        )

    # --- tool calls ------------------------------------------------------------------------------

    async def _dispatch(self, step: Step, spec: StepSpec, response: ModelResponse) -> str | None:
        """Handle every call of the response in order; returns the reply if the turn ends here."""
        name = spec.name
        # Reasoning blocks ride along only with tool calls: the provider wants them back while the
        # tool loop goes on, and drops them itself once a turn has ended in text.
        reasoning = response.reasoning
        self.add(spec.namespace, name, "assistant", response.text, response.tool_calls, reasoning=reasoning)
        calls = response.tool_calls
        exposed = {d.name for d in self._tools_for(step, spec)} if spec.dynamic_tools else spec.exposed
        if len(calls) > 1:
            alone = next((c.name for c in calls if c.name in exposed and spec.tools[c.name].exclusive), None)
            if alone is not None:
                self.warn("exclusive_tool_mixed", f"{alone} was called together with other tools", name)
                text = (
                    f"Not run: {alone} must be the only tool call of a response, so nothing in this response "
                    f"ran. Call {alone} alone, in a response of its own."
                )
                return await self._apply_results(spec, [_CallResult(call, text, True) for call in calls])
        group = spec.groups.get(frozenset(call.name for call in calls)) if spec.groups else None
        if group is not None and group.names <= exposed:
            results = await self._run_group(step, spec, group, calls)
        else:
            results = [await self._run_call(step, spec, exposed, call) for call in calls]
        return await self._apply_results(spec, results)

    def _prepare(self, spec: StepSpec, tool: ToolSpec, call: ToolCall) -> BaseModel | str:
        args = call.args
        if not isinstance(args, str) and INJECTED_NAMES.intersection(args):
            dropped = sorted(INJECTED_NAMES.intersection(args))
            self.warn(
                "injected_argument_ignored",
                f"the model sent {', '.join(dropped)} to {tool.name}; injected values come from the caller",
                spec.name,
            )
            args = {key: value for key, value in args.items() if key not in INJECTED_NAMES}
            call = ToolCall(call.name, args, call.id)
        return tool.validate(call)

    def _unknown(self, spec: StepSpec, exposed: set[str] | frozenset[str], call: ToolCall) -> _CallResult:
        self.warn("hallucinated_tool", f"hallucinated tool: {call.name}", spec.name)
        available = ", ".join(sorted(exposed)) or "none"
        return _CallResult(
            call, f"There is no tool named {call.name!r} here. Available tools: {available}.", is_error=True
        )

    async def _run_call(
        self, step: Step, spec: StepSpec, exposed: set[str] | frozenset[str], call: ToolCall
    ) -> _CallResult:
        if call.name not in exposed:
            return self._unknown(spec, exposed, call)
        tool = spec.tools[call.name]
        if tool.handler is None:
            self.warn("missing_tool_handler", f"missing tool handler: {call.name}", spec.name)
            return _CallResult(call, f"{call.name} cannot be used on its own here; nothing was run.", True)
        validated = self._prepare(spec, tool, call)
        if isinstance(validated, str):
            return _CallResult(call, validated, is_error=True)
        kwargs = {param: getattr(validated, param) for param in tool.params}
        for param in tool.context_params:
            kwargs[param] = self.context_for(spec.name)
        if self.tracing is None:
            value = await self._invoke(step, spec, call, tool.handler, tool.is_async, kwargs)
            return value if isinstance(value, _CallResult) else self._classify(call, value)
        span = self.tracing.tool(self._step_span, call, spec.name, self.session_id)
        try:
            value = await self._invoke(step, spec, call, tool.handler, tool.is_async, kwargs)
        except BaseException as exc:
            self.tracing.fail(span, exc)
            raise
        result = value if isinstance(value, _CallResult) else self._classify(call, value)
        self.tracing.tool_done(span, result.content, result.is_error)
        return result

    async def _invoke(
        self,
        step: Step,
        spec: StepSpec,
        call: ToolCall,
        handler: Callable[..., Any],
        is_async: bool,
        kwargs: dict[str, Any],
    ) -> Any:
        self.limits.check_before_tool_call(self.usage)
        self.usage.tool_calls += 1
        if self.emit is not None:
            args = {} if isinstance(call.args, str) else dict(call.args)
            self.emit(ToolCalled(spec.name, call.id, call.name, args))
        token = EXECUTING_STEP.set(spec.name)
        try:
            value = handler(step, **kwargs)
            if is_async:
                value = await value
        except ToolError as refusal:
            return _CallResult(call, refusal.message, is_error=True)
        except RunError:
            raise
        except Exception as exc:
            raise ToolFailure(
                f"tool {call.name} of step {spec.name} raised {type(exc).__name__}: {exc}", step=spec.name
            ) from exc
        finally:
            EXECUTING_STEP.reset(token)
        return value

    async def _run_group(
        self, step: Step, spec: StepSpec, group: ToolGroup, calls: list[ToolCall]
    ) -> list[_CallResult]:
        validated: list[ValidCall] = []
        errors: dict[str, str] = {}
        for call in calls:
            args = self._prepare(spec, spec.tools[call.name], call)
            if isinstance(args, str):
                errors[call.id] = args
            else:
                validated.append(ValidCall(call.id, call.name, args))
        if errors:
            return [
                _CallResult(call, errors[call.id], is_error=True)
                if call.id in errors
                else _CallResult(call, "Not run: another call of this response has invalid arguments.", True)
                for call in calls
            ]
        kwargs: dict[str, Any] = {}
        for param in group.context_params:
            kwargs[param] = self.context_for(spec.name)
        value = await self._invoke(
            step, spec, calls[0], _group_caller(group, validated), group.is_async, kwargs
        )
        if isinstance(value, _CallResult):  # ToolError: the same refusal answers every call
            return [_CallResult(call, value.content, True) for call in calls]
        if not isinstance(value, Outcome):
            raise HookFailure(
                f"@tools handler {group.attribute} of step {spec.name} must return go(), stay() or direct(), "
                f"not {type(value).__name__}",
                step=spec.name,
            )
        feedback = value.feedback or ACCEPTED
        results = [_CallResult(call, feedback) for call in calls]
        results[0].outcome = value
        return results

    def _classify(self, call: ToolCall, value: Any) -> _CallResult:
        if isinstance(value, Outcome):
            return _CallResult(call, value.feedback or ACCEPTED, outcome=value)
        if value is None:
            return _CallResult(call, DONE)
        if isinstance(value, str):
            return _CallResult(call, value)
        return _CallResult(call, _json_text(value))

    # --- applying outcomes, in the fixed effect order ---------------------------------------------

    def _target(self, outcome: Go | Direct) -> str:
        target = outcome.target_name
        if target not in self.spec.steps:
            raise HookFailure(
                f"go({target!r}) names no step of flow {self.spec.name}", step=self.session.current_step
            )
        return target

    async def _apply_results(self, spec: StepSpec, results: list[_CallResult]) -> str | None:
        source = spec.name
        winner: Outcome | None = None
        applied: list[Outcome] = []
        for result in results:
            outcome = result.outcome
            if outcome is None:
                continue
            routes = isinstance(outcome, Direct) or (
                isinstance(outcome, Go) and self._target(outcome) != source
            )
            if routes and winner is not None:
                result.content = (
                    "Not applied: an earlier call of this response already decided where the conversation "
                    "goes next, so this call's outcome was ignored."
                )
                result.is_error = True
                result.outcome = None
                continue
            if routes:
                winner = outcome
            applied.append(outcome)

        destination = self._target(winner) if isinstance(winner, Go | Direct) else source
        self._deferred_erase = set()
        try:
            await self._transition(source, destination)  # (1)
            for outcome in applied:  # (2) prompt, (3) state, (4) content type
                self._apply_effects(outcome, destination if outcome is winner else source)
            namespace = spec.namespace
            for result in results:  # (5) exactly one tool message per call, in order
                self.add(
                    namespace, source, "tool", result.content, call=result.call, is_error=result.is_error
                )
                if self.emit is not None:
                    call = result.call
                    self.emit(ToolReturned(source, call.id, call.name, result.content, result.is_error))
        finally:
            deferred, self._deferred_erase = self._deferred_erase, None
            for erased in deferred or ():
                self.erase(erased)
        for outcome in applied:  # (6) messages
            if outcome.message is not None:
                target = destination if outcome is winner else source
                target_ns = self.spec.steps[target].namespace
                self.add(target_ns, target, "user", outcome.message, kind="forwarded")
        if isinstance(winner, Direct):
            namespace = self.spec.steps[destination].namespace
            note = winner.remember
            self.add(namespace, destination, "assistant", winner.content, kind="direct", remembered_as=note)
            return winner.content
        return None

    async def _apply_route(self, spec: StepSpec, outcome: Go) -> None:
        """Apply an outcome that has no tool calls to answer (from run_logic or on_response)."""
        destination = self._target(outcome)
        await self._transition(spec.name, destination)
        self._apply_effects(outcome, destination)
        if outcome.message is not None:
            namespace = self.spec.steps[destination].namespace
            self.add(namespace, destination, "user", outcome.message, kind="forwarded")

    def _apply_effects(self, outcome: Outcome, destination: str) -> None:
        if outcome.prompt is not None:
            self.session.prompts[destination] = outcome.prompt
        if outcome.state:
            self.state_for(destination).merge(outcome.state)
        if outcome.content_type is not None:
            self.content_type = outcome.content_type

    async def _transition(self, source: str, destination: str) -> None:
        if source == destination:
            return
        self.transitions += 1
        self.limits.check_transition(self.transitions)
        if "on_exit" in self.spec.steps[source].overrides:
            await self._hook(self.step(source), "on_exit", self.step(source).on_exit)
        self.session.prompts.pop(source, None)
        await self._enter(destination, previous=source)

    async def _enter(self, destination: str, *, previous: str | None) -> None:
        session = self.session
        session.current_step = destination
        session.sequence.append(destination)
        if self.spec.steps[destination].is_terminal:
            session.status = "completed"
        if self.emit is not None:
            self.emit(StepEntered(destination, previous))
        if "on_enter" in self.spec.steps[destination].overrides:
            step = self.step(destination)
            await self._hook(step, "on_enter", step.on_enter)

    async def first_request(self, text: str) -> tuple[Model, ModelRequest] | None:
        """The model and request a brand-new session would send first for ``text`` (None when the
        flow starts with a LogicStep). Nothing is sent; the session is not meant to be saved."""
        name = self.session.current_step
        spec = self.spec.steps[name]
        if spec.is_logic:
            return None
        await self._enter(name, previous=None)
        request = await self._build_request(self.step(name), spec, [Message.user(text)])
        return self.model_for(spec), request

    # --- end of turn -------------------------------------------------------------------------------

    def release(self) -> None:
        """Break the turn <-> step/flow reference cycles so the turn is freed at once, not by the GC."""
        self._steps.clear()
        self._contexts.clear()
        self.flow._runtime = cast(FlowRuntime, _RELEASED)

    async def finish(self) -> None:
        """Compact memory where configured and bring every touched state back to JSON values."""
        for step_name, spec in self.spec.steps.items():
            policy = spec.cls.compaction
            if policy is None or spec.namespace not in self.touched:
                continue
            try:
                await compact(self.session.namespace(spec.namespace), policy)
            except Exception as exc:  # compaction is an optimisation; a failure must not lose the turn
                self.warn("compaction_skipped", f"memory compaction skipped: {type(exc).__name__}", step_name)
        for state in self._states.values():
            raw = state.raw
            normalized = to_jsonable_python(raw)
            if normalized != raw:
                raw.clear()
                raw.update(normalized)


class _Released:
    """Stands in for a finished turn in step and flow objects that outlive it."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("this step or flow object belongs to a turn that has ended")


_RELEASED = _Released()


def _group_caller(group: ToolGroup, calls: list[ValidCall]) -> Callable[..., Any]:
    def call_group(step: Step, **kwargs: Any) -> Any:
        return group.handler(step, calls, **kwargs)

    return call_group


def _unique_ids(calls: list[ToolCall], seed: int) -> list[ToolCall]:
    """Give every call an id unique within the response (providers normally do; scripts may not)."""
    seen: set[str] = set()
    fixed: list[ToolCall] | None = None
    for index, call in enumerate(calls):
        if call.id and call.id not in seen:
            seen.add(call.id)
            continue
        if fixed is None:
            fixed = list(calls)
        new_id = f"call_{seed}_{index}"
        seen.add(new_id)
        fixed[index] = ToolCall(call.name, call.args, new_id)
    return calls if fixed is None else fixed


def _unusable(response: ModelResponse, max_chars: int) -> str | None:
    """Why a response cannot be kept (too long, or text no store can hold), or None."""
    # ensure_ascii=False keeps a lone surrogate raw, so the UTF-8 check below sees it.
    texts = [response.text] + [
        call.name + json.dumps(call.args, ensure_ascii=False, default=str) for call in response.tool_calls
    ]
    if sum(len(text) for text in texts) > max_chars:
        return f"was longer than {max_chars} characters"
    for text in texts:
        try:
            check_text(text, "text")
        except InvalidInput:
            return "held characters that cannot be stored (a lone surrogate or NUL)"
        if "\\u0000" in text:  # an escaped NUL in JSON arguments, which PostgreSQL's jsonb refuses
            return "held characters that cannot be stored (a lone surrogate or NUL)"
    return None


def _correction(response: ModelResponse, text: str) -> list[Message]:
    """Messages showing the model its refused response and why, so the next attempt can do better."""
    refused = Message.assistant(
        response.text, response.tool_calls, kind="correction", reasoning=response.reasoning
    )
    if response.tool_calls:
        return [refused] + [
            Message.tool(call, f"Not run. {text}", is_error=True, kind="correction")
            for call in response.tool_calls
        ]
    return [refused, Message.user(text, kind="correction")]


def _strip_fences(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        if stripped.rstrip().endswith("```"):
            stripped = stripped.rstrip()[:-3]
    return stripped.strip()
