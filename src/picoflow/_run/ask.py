"""Asking the model: build the step's request, send it, and keep asking until an answer passes
the empty check, the size and storability check, the acceptance gate and the output schema.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_json

from picoflow._run.files import refuse_images
from picoflow._run.text import storable
from picoflow._run.window import Fitting, fits_at_a_glance, limits_for, shown
from picoflow._run.workspace import Workspace
from picoflow._schema import describe_validation_error
from picoflow.exceptions import AttemptsExhausted, HookFailure, ModelError, ModelMisbehaved, RunError
from picoflow.flow import StepSpec
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition
from picoflow.models.base import Model, ResponseDone, TextDelta
from picoflow.models.text_calls import recover_tool_calls
from picoflow.outcomes import Reject
from picoflow.step import Step

_NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})
_NO_FILES: Mapping[str, bytes] = MappingProxyType({})
"""Requests carry no per-call settings (a model applies its selection's); read-only, so shared."""

VETOED = "The response did not pass this step's check. Answer again."
"""The reason given when ``check_response`` vetoes with ``True`` (PicoFlow's way) instead of ``Reject``."""

NUDGE = "Your last response was empty. Answer the user, or call one of the available tools."
UNREADABLE = (
    "Your last answer could not be read. Answer again: either call one of the available tools with "
    "JSON arguments, or reply in plain text."
)


def tools_for(step: Step, spec: StepSpec) -> Sequence[ToolDefinition]:
    """The tools the step exposes now (``active_tools`` may narrow them turn by turn)."""
    if not spec.dynamic_tools:
        return spec.definitions
    active = step.active_tools()
    if active is None:
        return spec.definitions
    wanted = set(active)
    return tuple(d for d in spec.definitions if d.name in wanted)


async def build_request(ws: Workspace, step: Step, spec: StepSpec, extra: list[Message]) -> ModelRequest:
    """The system prompt (rebuilt on every call), the step's memory, the corrections so far."""
    override = ws.session.prompts.get(spec.name)
    if override is not None:
        system = override
    elif "prompt" in spec.overrides:
        system = await ws.hook(step, "prompt", step.prompt)
    else:
        system = spec.default_prompt
    if not isinstance(system, str):
        raise HookFailure(f"prompt() of step {spec.name} returned {type(system).__name__}, not str")
    if spec.instructions:
        system = f"{system.rstrip()}\n\n{spec.instructions}" if system.strip() else spec.instructions
    namespace = ws.session.namespace(spec.namespace)
    if namespace.summary:
        system = f"{system}\n\n## Summary of the earlier conversation\n{namespace.summary}"
    messages: Sequence[Message] = shown(namespace.messages)
    if "history" in spec.overrides:
        messages = await ws.hook(step, "history", step.history, messages)
    tools = tools_for(step, spec) if spec.dynamic_tools else spec.definitions
    if ws.withheld:  # refused this turn for what the user never gave: the model asks instead
        tools = tuple(definition for definition in tools if definition.name not in ws.withheld)
    return ModelRequest(
        system,
        [*messages, *extra] if extra else list(messages),
        tools,
        spec.output,
        _NO_SETTINGS,
        spec.name,
        ws.session.id,
        _NO_FILES if ws.files is None else await ws.files.for_messages(messages),
    )


async def _streamed(model: Model, request: ModelRequest, step: str, text: Any) -> ModelResponse:
    async for event in model.request_stream(request):
        if isinstance(event, TextDelta):
            text(step, event.text)
        elif isinstance(event, ResponseDone):
            return event.response
    raise ModelMisbehaved(f"model {model.name} ended its stream without a response", step=step)


def _classified(exc: BaseException, model: Model, step: str) -> BaseException:
    if isinstance(exc, RunError):
        exc.step = exc.step or step
        return exc
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return exc  # the turn itself is being cancelled: let it go
        # A model that raises CancelledError on its own is misbehaving, not cancelling us.
        return ModelMisbehaved(f"model {model.name} raised CancelledError", step=step)
    if not isinstance(exc, Exception):
        return exc
    failure = f"model {model.name} failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError | OSError):
        # A timeout or a broken connection is an outage: a retry later may well succeed.
        return ModelError(failure, step=step)
    # Anything else escaping a model is its own fault, which a retry would meet again.
    return ModelMisbehaved(failure, step=step)


async def ask(
    ws: Workspace, step: Step, spec: StepSpec, model: Model | None = None, extra: list[Message] | None = None
) -> tuple[ModelResponse, Any]:
    """Ask the model (the step's, unless ``model``) until a response is acceptable; returns it with
    its parsed ``output``. ``extra`` are corrections to start from."""
    if model is None:
        model = ws.config.model_for(spec)
    extra = [] if extra is None else extra
    window = limits_for(model, spec.cls.memory_budget)
    attempts = spec.cls.max_attempts
    problems: list[str] = []
    limits, usage, observer = ws.config.limits, ws.usage, ws.config.observer
    for attempt in range(1, attempts + 1):
        ws.attempt = attempt
        limits.check_before_model_call(usage)
        request = await build_request(ws, step, spec, extra)
        if window is not None and not fits_at_a_glance(window, request):
            rebuild = functools.partial(build_request, ws, step, spec, extra)
            request = await Fitting(window, spec, model.name, ws.session, rebuild, ws.warn).fit(
                request, len(extra)
            )
        if request.files and not model.reads_images:
            refuse_images([ref for message in request.messages for ref in message.attachments], model.name)
        observer.model_started(spec.name, model.name, request)
        try:
            # A structured answer is a value for code, not words for anyone: its text is not told.
            if observer.wants_text and spec.output is None:
                response = await _streamed(model, request, spec.name, observer.text)
            else:
                response = await model.request(request)
        except BaseException as exc:
            _failed(ws, spec, model, exc)
            problems.append("unreadable answer")
            extra.append(Message.user(UNREADABLE, kind="correction"))
            continue
        observer.model_finished(spec.name, response)
        # Count the response against the turn's budget; note who answered and what it warned.
        usage.add(response.usage)
        answered = response.answered_by = response.answered_by or model.name
        ws.session.models[spec.name] = answered
        if request.tools and not response.tool_calls and "{" in response.text:
            recover_tool_calls(response, request, model=answered)  # a call written as text, read as one
        if response.warnings:
            for warning in response.warnings:
                ws.warn(warning.code, warning.message, spec.name)
        if response.usage.model_calls == 0:
            usage.model_calls += 1
        limits.check_tokens(usage)
        problem = _problem(ws, spec, response)
        if problem is None and spec.checks_response:
            problem = await _gate(ws, step, spec, response)
        if problem is None:
            if spec.output is None or response.tool_calls or spec.cls.output is None:
                observer.response_accepted(spec.name, response, None)
                return response, None
            parsed = _parse(spec, response)
            if isinstance(parsed, _Parsed):
                observer.response_accepted(spec.name, response, parsed.value)
                return response, parsed.value
            problem = parsed
            observer.response_rejected(spec.name, "output", problem[1][-1].content)
        problems.append(problem[0])
        extra.extend(problem[1])
    raise AttemptsExhausted(
        f"step {spec.name}: no acceptable model response in {attempts} attempts ({'; '.join(problems)})",
        step=spec.name,
    )


def _failed(ws: Workspace, spec: StepSpec, model: Model, exc: BaseException) -> None:
    """A model call raised ``exc``. Returns (the attempt failed, to be asked again with a
    correction) when the provider could not read what the model wrote (a broken call, a format it
    refused); anything else that escapes the model is raised as an outage or a misbehaviour."""
    error = _classified(exc, model, spec.name)
    ws.config.observer.model_failed(spec.name, error)
    if type(exc) is ModelMisbehaved:
        ws.warn("model_misbehaved", "the model's answer could not be read; it was asked again", spec.name)
        return
    if error is exc:
        raise exc
    raise error from exc


def _problem(ws: Workspace, spec: StepSpec, response: ModelResponse) -> tuple[str, list[Message]] | None:
    """What is wrong with ``response`` and the messages that tell the model, or None."""
    if response.is_empty:
        ws.warn("empty_response", "the model returned an empty response", spec.name)
        ws.config.observer.response_rejected(spec.name, "empty", "the model returned an empty response")
        return "empty response", [Message.user(NUDGE, kind="nudge")]
    unusable = _unusable(response, ws.config.max_reply_chars)
    if unusable is not None:
        # An oversize or unstorable reply is the model's to correct; it is never stored, and the
        # correction quotes none of it (it may be megabytes, or not encodable at all).
        ws.warn("response_unusable", f"the model's response {unusable}", spec.name)
        ws.config.observer.response_rejected(spec.name, "unusable", f"the model's response {unusable}")
        return unusable, [
            Message.assistant("[response withheld]", kind="correction"),
            Message.user(f"Your response {unusable}. Answer again, briefly.", kind="correction"),
        ]
    if response.tool_calls:
        response.tool_calls = _unique_ids(response.tool_calls, ws.session.next_seq)
    return None


async def _gate(
    ws: Workspace, step: Step, spec: StepSpec, response: ModelResponse
) -> tuple[str, list[Message]] | None:
    """The step's acceptance gate: None accepts, ``Reject(reason)`` asks again with the reason."""
    verdict = await ws.hook(step, "check_response", step.check_response, response)
    if verdict is True:  # PicoFlow's veto: True rejects, False accepts
        verdict = Reject(VETOED)
    elif verdict is False:
        return None
    if isinstance(verdict, Reject):
        ws.warn("response_rejected", verdict.reason, spec.name)
        ws.config.observer.response_rejected(spec.name, "check_response", verdict.reason)
        reason = f"Your response was not accepted: {verdict.reason}"
        return f"rejected: {verdict.reason}", _correction(response, reason)
    if verdict is not None:
        raise HookFailure(
            f"check_response() of step {spec.name} must return None, Reject(reason) or a bool, "
            f"not {type(verdict).__name__}",
            step=spec.name,
        )
    return None


@dataclass(frozen=True, slots=True)
class _Parsed:
    value: Any


def _parse(spec: StepSpec, response: ModelResponse) -> _Parsed | tuple[str, list[Message]]:
    """The final answer parsed as the step's ``output``, or the correction asking for it again."""
    assert spec.output is not None
    try:
        return _Parsed(spec.cls.parse_output(_strip_fences(response.text)))
    except ValueError as error:
        detail = (
            describe_validation_error(error, tool=spec.output.name)
            if isinstance(error, ValidationError)
            else str(error)
        )
    text = "Your answer must be one JSON object matching the required schema. " + detail
    return "output did not match the schema", _correction(response, text)


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


UNSTORABLE = "held characters that cannot be stored (a lone surrogate or NUL)"


def _unusable(response: ModelResponse, max_chars: int) -> str | None:
    """Why a response cannot be kept (too long, or text no store can hold), or None.

    The size is the text's characters plus each call's name and arguments as JSON."""
    text = response.text
    if not storable(text):
        return UNSTORABLE
    size = len(text)
    for call in response.tool_calls:
        try:
            encoded = to_json(call.args)
        except PydanticSerializationError:  # a lone surrogate cannot be encoded
            return UNSTORABLE
        # An escaped NUL, which PostgreSQL's jsonb refuses; the walk tells it from an escaped backslash.
        if b"\\u0000" in encoded and not _storable(call.args):
            return UNSTORABLE
        size += len(call.name) + len(encoded)
    if size > max_chars:
        return f"was longer than {max_chars} characters"
    return None


def _storable(value: Any) -> bool:
    """Whether every string in a JSON value is free of NUL and lone surrogates."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        return all(_storable(str(key)) and _storable(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(_storable(item) for item in value)
    return True


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
