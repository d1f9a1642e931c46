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
    def __init__(self, name: str) -> None:
        self.name = name
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
    """

    def __init__(self, script: Iterable[Any], *, name: str = "scripted:test") -> None:
        super().__init__(name)
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
    """Answers each request with ``fn(request)`` (sync or async), which returns a script item."""

    def __init__(
        self, fn: Callable[[ModelRequest], Any | Awaitable[Any]], *, name: str = "function:test"
    ) -> None:
        super().__init__(name)
        self.fn = fn

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        item = self.fn(request)
        if inspect.isawaitable(item):
            item = await item
        return self._response(item, request)
