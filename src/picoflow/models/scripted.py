"""Models for tests: ``ScriptedModel`` plays a fixed script, ``FunctionModel`` computes each answer.

Both record every request they receive (``.requests``), so a test can assert exactly what the
model was shown: system prompt, memory, corrections and tool schemas.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from picoflow.exceptions import ScriptExhausted
from picoflow.messages import ModelRequest, ModelResponse, ToolCall
from picoflow.models.base import Model
from picoflow.usage import Usage

ScriptItem: TypeAlias = "str | ToolCall | Sequence[ToolCall] | ModelResponse | BaseException"
"""One model response: text, one tool call, parallel tool calls, a full response, or an error to raise."""


def _estimate_tokens(text_length: int) -> int:
    return (text_length + 3) // 4


class _RecordingModel(Model):
    def __init__(
        self, name: str, context_window: int | None, output_reserve: int, grounding: str = "default"
    ) -> None:
        if grounding not in ("small", "default"):
            raise ValueError(f"grounding must be 'small' or 'default', not {grounding!r}")
        self.grounding = grounding
        if context_window is not None and not 0 <= output_reserve < context_window:
            raise ValueError("output_reserve must be at least 0 and smaller than context_window")
        self.name = name
        self.context_window = context_window
        self.output_reserve = output_reserve if context_window is not None else 0
        self.requests: list[ModelRequest] = []
        self._next_id = 0

    def _response(self, item: Any, request: ModelRequest) -> ModelResponse:
        # Text and a single call first: they are most of every script, and a test suite plays thousands.
        if isinstance(item, str):
            response = ModelResponse(item, [], self._usage(request, len(item)))
        elif isinstance(item, ToolCall):
            call = self._with_id(item, request)
            response = ModelResponse("", [call], self._usage(request, len(call.args_json())))
        elif isinstance(item, BaseException):
            raise item
        elif isinstance(item, ModelResponse):
            response = item
            if response.usage.model_calls == 0:
                answer = len(response.text) + sum(len(call.args_json()) for call in response.tool_calls)
                response.usage = self._usage(request, answer)
        elif isinstance(item, Sequence) and all(isinstance(call, ToolCall) for call in item):
            calls = [self._with_id(call, request) for call in item]
            response = ModelResponse("", calls, self._usage(request, sum(len(c.args_json()) for c in calls)))
        else:
            raise TypeError(f"{self.name}: cannot turn {type(item).__name__} into a model response")
        response.model = response.model or self.name
        return response

    @staticmethod
    def _usage(request: ModelRequest, answer: int) -> Usage:
        """One call's usage, its tokens estimated from the characters of the request and the answer."""
        prompt = len(request.system)
        for message in request.messages:
            prompt += len(message.content)
        return Usage(
            input_tokens=_estimate_tokens(prompt), output_tokens=_estimate_tokens(answer), model_calls=1
        )

    def _with_id(self, call: ToolCall, request: ModelRequest) -> ToolCall:
        return call if call.id else ToolCall(call.name, call.args, self._new_id(request))

    def _new_id(self, request: ModelRequest) -> str:
        self._next_id += 1
        return f"call_{self._next_id}"


class ScriptedModel(_RecordingModel):
    """Answers requests with the items of ``script``, in order.

    ``ScriptedModel(["Hello!", ToolCall("search", {"q": "x"}), [ToolCall("a"), ToolCall("b")]])``.
    Tool calls without an id get ``call_1``, ``call_2``, ... Asking for more responses than the
    script holds raises ``ScriptExhausted`` (the turn fails with a clear error).

    ``ScriptedModel({"Hotels": [...], "Events": [...]})`` gives each step (``request.step``) a script
    of its own, played in order however the steps' requests interleave (parallel sub-steps). Tool
    call ids are then numbered per step (``call_Hotels_1``), so they do not depend on that order
    either. A step without an entry, or whose script ran out, raises ``ScriptExhausted``.

    ``context_window`` and ``output_reserve`` play a model with that window (default: unlimited), so
    a test sees its requests fitted as a real model's would be. ``grounding`` is the profile its
    readings and tool calls get (``picoflow.slots.Grounding``): ``"default"``, as a hosted model's,
    unless the test stands in for the embedded model with ``"small"``.

    ``assert_complete()`` fails when responses were left unplayed: a script longer than what the
    flow asked for means the flow took another path than the test believes (a step ended early, a
    tool call was never proposed). ``drop_remaining()`` forgets them when that is the point.
    """

    def __init__(
        self,
        script: Iterable[Any] | Mapping[str, Iterable[Any]],
        *,
        name: str = "scripted:test",
        context_window: int | None = None,
        output_reserve: int = 0,
        grounding: str = "default",
    ) -> None:
        super().__init__(name, context_window, output_reserve, grounding)
        self.script: list[Any] | dict[str, list[Any]] = (
            _per_step(script) if isinstance(script, Mapping) else list(script)
        )
        self._played: dict[str | None, int] = {}  # responses given, per step (None: the one list)
        self._ids: dict[str, int] = {}

    @property
    def remaining(self) -> int:
        """Responses not played yet (of every step, for a script per step)."""
        if isinstance(self.script, dict):
            return sum(len(items) - self._played.get(step, 0) for step, items in self.script.items())
        return len(self.script) - self._played.get(None, 0)

    def extend(self, items: Iterable[Any] | Mapping[str, Iterable[Any]]) -> None:
        """Append responses: a list to a list script, a mapping step -> list to a script per step."""
        if isinstance(self.script, dict):
            if not isinstance(items, Mapping):
                raise TypeError(
                    f"{self.name} has a script per step: extend it with a mapping step -> responses"
                )
            for step, more in _per_step(items).items():
                self.script.setdefault(step, []).extend(more)
        elif isinstance(items, Mapping):
            raise TypeError(f"{self.name} has one script for every step: extend it with a list of responses")
        else:
            self.script.extend(items)

    def drop_remaining(self) -> int:
        """Forget the responses not played yet; returns how many there were."""
        dropped = self.remaining
        if isinstance(self.script, dict):
            for step, items in self.script.items():
                del items[self._played.get(step, 0) :]
        else:
            del self.script[self._played.get(None, 0) :]
        return dropped

    def assert_complete(self) -> None:
        """Raise ``AssertionError`` unless every response of the script was played.

        The message says how many were left (per step for a script per step) and what the first of
        them are, so a test can see which answer the flow never asked for.
        """
        unplayed = self._unplayed()
        total = sum(len(items) for items in unplayed.values())
        if not total:
            return
        noun = "response was" if total == 1 else "responses were"
        if isinstance(self.script, dict):
            detail = "; ".join(
                f"{step}: {len(items)} ({_preview(items)})" for step, items in unplayed.items() if items
            )
        else:
            detail = _preview(unplayed[None])
        raise AssertionError(f"{self.name}: {total} scripted {noun} not played: {detail}")

    def _unplayed(self) -> dict[str | None, list[Any]]:
        if isinstance(self.script, dict):
            return {step: items[self._played.get(step, 0) :] for step, items in self.script.items()}
        return {None: self.script[self._played.get(None, 0) :]}

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if isinstance(self.script, dict):
            key: str | None = request.step
            items = self.script.get(request.step or "")
            if items is None:
                scripted = ", ".join(self.script) or "none"
                raise ScriptExhausted(
                    f"{self.name}: step {request.step} asked for a response, but the script has no "
                    f"entry for it (steps scripted: {scripted})",
                    step=request.step,
                )
            whose = "its script"
        else:
            key, items, whose = None, self.script, "the script"
        position = self._played.get(key, 0)
        if position >= len(items):
            raise ScriptExhausted(
                f"{self.name}: step {request.step} asked for response {position + 1}, "
                f"but {whose} has only {len(items)}",
                step=request.step,
            )
        self._played[key] = position + 1
        return self._response(items[position], request)

    def _new_id(self, request: ModelRequest) -> str:
        if not isinstance(self.script, dict):
            self._next_id += 1
            return f"call_{self._next_id}"
        step = request.step or ""
        self._ids[step] = self._ids.get(step, 0) + 1
        return f"call_{step}_{self._ids[step]}"


def _preview(items: Sequence[Any], shown: int = 2) -> str:
    """The first few script items, each in a few words."""
    text = ", ".join(_describe(item) for item in items[:shown])
    return text + (", ..." if len(items) > shown else "")


def _describe(item: Any, width: int = 40) -> str:
    def clip(text: str) -> str:
        return text if len(text) <= width else text[: width - 3] + "..."

    if isinstance(item, str):
        return repr(clip(item))
    if isinstance(item, ToolCall):
        return f"{item.name}({clip(item.args_json())})"
    if isinstance(item, ModelResponse):
        parts = [repr(clip(item.text))] if item.text else []
        parts += [_describe(call, width) for call in item.tool_calls]
        return "ModelResponse(" + ", ".join(parts) + ")"
    if isinstance(item, BaseException):
        return f"raise {type(item).__name__}({clip(str(item))!r})"
    if isinstance(item, Sequence):
        return "[" + ", ".join(_describe(call, width) for call in item) + "]"
    return type(item).__name__


def _per_step(script: Mapping[str, Iterable[Any]]) -> dict[str, list[Any]]:
    """A script per step, its names and lists checked (a text for a list would play letter by letter)."""
    steps: dict[str, list[Any]] = {}
    for step, items in script.items():
        if not isinstance(step, str) or not step:
            raise TypeError(f"a script per step is keyed by step names, not {step!r}")
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise TypeError(f"the script of step {step} is a list of responses, not {type(items).__name__}")
        steps[step] = list(items)
    return steps


class FunctionModel(_RecordingModel):
    """Answers each request with ``fn(request)`` (sync or async), which returns a script item.

    ``context_window``, ``output_reserve`` and ``grounding`` as for ``ScriptedModel``.
    """

    def __init__(
        self,
        fn: Callable[[ModelRequest], Any | Awaitable[Any]],
        *,
        name: str = "function:test",
        context_window: int | None = None,
        output_reserve: int = 0,
        grounding: str = "default",
    ) -> None:
        super().__init__(name, context_window, output_reserve, grounding)
        self.fn = fn

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        item = self.fn(request)
        if inspect.isawaitable(item):
            item = await item
        return self._response(item, request)
