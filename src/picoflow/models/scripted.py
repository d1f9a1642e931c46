"""Models for tests: ``ScriptedModel`` plays a fixed script, ``FunctionModel`` computes each answer.

Both record every request they receive (``.requests``), so a test can assert exactly what the
model was shown: system prompt, memory, corrections and tool schemas.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
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
    def __init__(self, name: str, context_window: int | None, output_reserve: int) -> None:
        if context_window is not None and not 0 <= output_reserve < context_window:
            raise ValueError("output_reserve must be at least 0 and smaller than context_window")
        self.name = name
        self.context_window = context_window
        self.output_reserve = output_reserve if context_window is not None else 0
        self.requests: list[ModelRequest] = []
        self._next_id = 0

    def _response(self, item: Any, request: ModelRequest) -> ModelResponse:
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelResponse):
            response = item
        elif isinstance(item, str):
            response = ModelResponse(text=item)
        elif isinstance(item, ToolCall):
            response = ModelResponse(tool_calls=[self._with_id(item)])
        elif isinstance(item, Sequence) and all(isinstance(call, ToolCall) for call in item):
            response = ModelResponse(tool_calls=[self._with_id(call) for call in item])
        else:
            raise TypeError(f"{self.name}: cannot turn {type(item).__name__} into a model response")
        if response.usage.model_calls == 0:
            prompt = len(request.system) + sum(len(message.content) for message in request.messages)
            answer = len(response.text) + sum(len(call.args_json()) for call in response.tool_calls)
            response.usage = Usage(
                input_tokens=_estimate_tokens(prompt), output_tokens=_estimate_tokens(answer), model_calls=1
            )
        response.model = response.model or self.name
        return response

    def _with_id(self, call: ToolCall) -> ToolCall:
        if call.id:
            return call
        self._next_id += 1
        return ToolCall(call.name, call.args, f"call_{self._next_id}")


class ScriptedModel(_RecordingModel):
    """Answers requests with the items of ``script``, in order.

    ``ScriptedModel(["Hello!", ToolCall("search", {"q": "x"}), [ToolCall("a"), ToolCall("b")]])``.
    Tool calls without an id get ``call_1``, ``call_2``, ... Asking for more responses than the
    script holds raises ``ScriptExhausted`` (the turn fails with a clear error).
    ``context_window`` and ``output_reserve`` play a model with that window (default: unlimited), so
    a test sees its requests fitted as a real model's would be.
    """

    def __init__(
        self,
        script: Iterable[Any],
        *,
        name: str = "scripted:test",
        context_window: int | None = None,
        output_reserve: int = 0,
    ) -> None:
        super().__init__(name, context_window, output_reserve)
        self.script: list[Any] = list(script)
        self._position = 0

    @property
    def remaining(self) -> int:
        return len(self.script) - self._position

    def extend(self, items: Iterable[Any]) -> None:
        self.script.extend(items)

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if self._position >= len(self.script):
            raise ScriptExhausted(
                f"{self.name}: step {request.step} asked for response {self._position + 1}, "
                f"but the script has only {len(self.script)}",
                step=request.step,
            )
        item = self.script[self._position]
        self._position += 1
        return self._response(item, request)


class FunctionModel(_RecordingModel):
    """Answers each request with ``fn(request)`` (sync or async), which returns a script item.

    ``context_window`` and ``output_reserve`` as for ``ScriptedModel``.
    """

    def __init__(
        self,
        fn: Callable[[ModelRequest], Any | Awaitable[Any]],
        *,
        name: str = "function:test",
        context_window: int | None = None,
        output_reserve: int = 0,
    ) -> None:
        super().__init__(name, context_window, output_reserve)
        self.fn = fn

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        item = self.fn(request)
        if inspect.isawaitable(item):
            item = await item
        return self._response(item, request)
