"""A turn as Server-Sent Events: the models' load status while the turn waits for them, then the turn.

Events: ``status`` (the embedded model is still loading: ``{"status": "loading", "phase": ...,
"message": ...}``, the same body as ``GET /readyz``), ``step``, ``tool_call``, ``tool_result``,
``text`` (when the provider streams), then ``result`` (a ``TurnResponse``) or ``error``
(``{"status": ..., "error": {...}}``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi.responses import StreamingResponse

from picoflow.context import Caller
from picoflow.engine import TurnFinished, TurnResult
from picoflow.events import StepEntered, TextChunk, ToolCalled, ToolReturned, TurnEvent
from picoflow.models._readiness import LoadStatus, Phase
from picoflow.server.readiness import unavailable
from picoflow.server.schemas import ApiError, TurnResponse, turn_error

if TYPE_CHECKING:
    from picoflow.server.routes import ServerState

__all__ = ["event_stream"]

logger = logging.getLogger("picoflow.server")


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


def _event_data(event: TurnEvent) -> tuple[str, dict[str, Any]]:
    if isinstance(event, StepEntered):
        return "step", {"step": event.step, "previous": event.previous}
    if isinstance(event, ToolCalled):
        return "tool_call", {"step": event.step, "id": event.id, "name": event.name, "args": dict(event.args)}
    if isinstance(event, ToolReturned):
        return "tool_result", {
            "step": event.step,
            "id": event.id,
            "name": event.name,
            "content": event.content,
            "is_error": event.is_error,
        }
    if isinstance(event, TextChunk):
        return "text", {"step": event.step, "text": event.text}
    raise TypeError(f"unknown turn event {type(event).__name__}")


Item = TurnEvent | LoadStatus | TurnFinished | ApiError | None


def event_stream(
    state: ServerState, flow: str, message: str, session_id: str | None, caller: Caller, render: str | None
) -> StreamingResponse:
    """Stream a turn, first waiting for the flow's models to be ready.

    The turn runs in its own task, so a client that disconnects mid-turn cannot leave it half done.
    """
    queue: asyncio.Queue[Item] = asyncio.Queue()

    def waiting(status: LoadStatus) -> None:
        if not status.settled:  # the turn's own events follow as soon as the model is ready
            queue.put_nowait(status)

    async def run() -> TurnResult:
        ready = await state.readiness.wait(flow, on_change=waiting)
        if ready.phase is Phase.FAILED:
            raise unavailable(session_id)
        return await state.engine.run(flow, message, session_id, caller=caller, on_event=queue.put_nowait)

    task = asyncio.create_task(run())
    state.streams.add(task)

    def finished(done: asyncio.Task[TurnResult]) -> None:
        state.streams.discard(done)
        if done.cancelled():
            queue.put_nowait(None)
        elif isinstance(error := done.exception(), ApiError):
            queue.put_nowait(error)
        else:
            queue.put_nowait(None if error else TurnFinished(done.result()))

    task.add_done_callback(finished)

    async def events() -> AsyncIterator[bytes]:
        # Headers go out with the first chunk, so a client sees the stream open at once.
        yield b": turn started\n\n"
        try:
            async for chunk in turn_events():
                yield chunk
        except Exception:
            # An event that cannot be written (a model's text no encoder takes, a bug) must not
            # drop the connection silently: every stream ends with a result or an error event.
            logger.exception("picoflow: a turn's event stream failed")
            error = ApiError(500, "internal", "The assistant could not complete this turn.")
            yield _sse("error", {"status": error.status, "error": error.detail()})

    async def turn_events() -> AsyncIterator[bytes]:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), state.settings.sse_heartbeat)
            except TimeoutError:
                yield b": still working\n\n"
                continue
            if item is None:
                error = ApiError(500, "internal", "The assistant could not complete this turn.")
                yield _sse("error", {"status": error.status, "error": error.detail()})
                return
            if isinstance(item, ApiError):
                yield _sse("error", {"status": item.status, "error": item.detail()})
                return
            if isinstance(item, LoadStatus):
                yield _sse("status", item.as_dict())
                continue
            if isinstance(item, TurnFinished):
                result = item.result
                if result.error is not None:
                    error = turn_error(result.error, session_id)
                    yield _sse("error", {"status": error.status, "error": error.detail()})
                else:
                    yield _sse(
                        "result", TurnResponse.from_result(result, flow, render).model_dump(mode="json")
                    )
                return
            name, data = _event_data(item)
            yield _sse(name, data)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
