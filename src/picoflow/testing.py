"""Helpers for testing flows: readable transcripts to assert on, whole.

lines = await transcript_lines(engine, result.session_id)
assert lines == [
    "Support | user: Which orders were refunded?",
    'Support | assistant -> search_orders({"since": "October 1st"}) #call_1',
    "Support | tool search_orders #call_1 (error): Invalid arguments for search_orders: ...",
    ...
]
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable

from picoflow.engine import FlowEngine
from picoflow.messages import Message, ModelRequest, ModelResponse
from picoflow.models.base import Model

__all__ = ["HeldModel", "describe", "request_lines", "transcript_lines"]


def describe(message: Message, *, width: int | None = None) -> str:
    """One line per message: ``"<step> | <role>[ kind]: <content>"`` with tool calls spelled out; a
    sub-step run's message names the run in place of the step (``"Hotels@4 | ..."``)."""
    place = message.within or message.step
    where = f"{place} | " if place else ""
    kind = f" [{message.kind}]" if message.kind else ""
    content = message.content if width is None else message.content[:width]
    if message.role == "tool":
        status = " (error)" if message.is_error else ""
        return f"{where}tool {message.name} #{message.tool_call_id}{status}{kind}: {content}"
    if message.tool_calls:
        calls = ", ".join(f"{call.name}({_args(call.args)}) #{call.id}" for call in message.tool_calls)
        said = f"{content} " if content else ""
        return f"{where}assistant{kind}: {said}-> {calls}"
    return f"{where}{message.role}{kind}: {content}"


def _args(args: object) -> str:
    return args if isinstance(args, str) else json.dumps(args, sort_keys=True)


def lines(messages: Iterable[Message], *, width: int | None = None) -> list[str]:
    return [describe(message, width=width) for message in messages]


async def transcript_lines(engine: FlowEngine, session_id: str, *, width: int | None = None) -> list[str]:
    """The stored transcript of a session, one line per message."""
    messages = await engine.store.transcript(session_id)
    return lines(messages, width=width)


def request_lines(request: ModelRequest, *, width: int | None = None) -> list[str]:
    """What a model was shown: the system prompt, then every message (without step prefixes)."""
    shown = [f"system: {request.system if width is None else request.system[:width]}"]
    for message in request.messages:
        shown.append(describe(dataclasses.replace(message, step=None, within=None), width=width))
    return shown


class HeldModel(Model):
    """``model``, holding its ``at``-th request (counted from 1) until ``release()``: a turn kept
    running at a point a test chooses, to cancel it there or race it, coordinated by events
    rather than timers.

        model = HeldModel(ScriptedModel([ToolCall("note", {}), "Done."]), at=2)
        running = asyncio.create_task(engine.run("desk", "go", session_id))
        await model.held.wait()                 # the tool ran; the second request waits
        await engine.cancel(session_id)
        await model.cancelled.wait()            # the held request was cancelled
    """

    def __init__(self, model: Model, *, at: int = 1) -> None:
        self.model = model
        self.name = model.name
        self.at = at
        self.count = 0
        """Requests received so far."""
        self.held = asyncio.Event()
        """Set when the ``at``-th request arrives (and is held)."""
        self.cancelled = asyncio.Event()
        """Set when the held request is cancelled (its turn was)."""
        self._gate = asyncio.Event()

    def release(self) -> None:
        """Let the held request (and any later one) through to ``model``."""
        self._gate.set()

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.count += 1
        if self.count == self.at:
            self.held.set()
            try:
                await self._gate.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return await self.model.request(request)

    async def aclose(self) -> None:
        await self.model.aclose()
