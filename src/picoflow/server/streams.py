"""A turn as Server-Sent Events, built on ``FlowEngine.run_stream``, with the models' load status
while the turn waits for them.

Events: ``status`` (the embedded model is still loading: ``{"status": "loading", "phase": ...,
"message": ...}``, the same body as ``GET /readyz``), ``step``, ``tool_call``, ``tool_result``,
``text`` (when the provider streams; never a structured answer's), ``approval_requested`` and
``approval_decided`` (an ``ApprovalOut``), ``reading`` (a reading's verdicts: ``{"step": ...,
"verdicts": [...]}``), ``handoff`` (the conversation was handed to a person: ``{"step": ...,
"reason": ...}``), then ``result`` (a ``TurnResponse``), ``error`` (``{"status": ..., "error":
{...}}``) or ``cancelled`` (the same body, kind ``turn_cancelled``: the turn was cancelled,
``DELETE /v1/sessions/{id}/turn``, and nothing of it was stored). Every stream ends with a
``result``, an ``error`` or a ``cancelled`` event.

Asked with ``?inspect=true`` by a caller who may inspect (the rule of
``GET /v1/sessions/{id}/timeline``), the stream also carries the turn's ``timeline`` entries as
they are recorded: ``{"session_id": ..., "turn": N,
"index": I, "entry": {...}}``, an entry of the timeline's schema; one sent again with the same
index (a model request once answered, a tool call once it returned) replaces the earlier one.

The stream opens once the engine has accepted the turn (its ``before_turn`` gate runs): what the
engine refuses before that (the message, an unknown session or flow, an ended session) is a plain
HTTP status, as for a turn that is not streamed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, Final

from fastapi.responses import StreamingResponse

from picoflow.approvals import Approval
from picoflow.attachments import Attachment
from picoflow.context import Caller
from picoflow.engine import FlowEngine, LocalExecutor
from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    PatternFired,
    ReadingJudged,
    SessionMigrated,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
    TurnEvent,
    migration_record,
)
from picoflow.exceptions import RunError, TurnCancelled
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnError, TurnFinished
from picoflow.server.errors import ApiError, decision_error, v1_error
from picoflow.server.readiness import TurnWatch
from picoflow.server.schemas import ApprovalOut, TurnResponse
from picoflow.server.state import ServerState
from picoflow.timeline import TimelineFollower, TimelineUpdate, TurnRecorded

__all__ = [
    "BEAT",
    "SSE_HEADERS",
    "STARTED",
    "Beat",
    "Feed",
    "Item",
    "cancel_run",
    "follow_stream",
    "open_decision",
    "open_turn",
    "stream_decision",
    "stream_turn",
]

logger = logging.getLogger("picoflow.server")


class _Started:
    """The engine accepted the turn: the stream may open."""


STARTED: Final = _Started()
Item = TurnEvent | TimelineUpdate | TurnFinished | LoadStatus | _Started | None
"""What a stream reads; None: the turn ended without a result (cancelled, or a bug)."""


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


def _timeline_event(update: TimelineUpdate) -> bytes:
    # The entry is JSON text already, cleaned by the recorder: spliced in, not parsed again.
    head = json.dumps({"session_id": update.session_id, "turn": update.turn, "index": update.index})
    return f'event: timeline\ndata: {head[:-1]}, "entry": {update.entry}}}\n\n'.encode()


def _error_event(error: ApiError, event: str = "error") -> bytes:
    return _sse(event, {"status": error.status, "error": error.detail()})


def _internal() -> ApiError:
    return ApiError(500, "internal", "The assistant could not complete this turn.")


def _approval(approval: Approval) -> dict[str, Any]:
    return ApprovalOut.from_approval(approval).model_dump(mode="json")


def _event(event: TurnEvent) -> bytes:
    # ``parent`` only in a sub-step run's events, so the events of a turn without any stay as they were.
    nested = {} if event.parent is None else {"parent": event.parent}
    if isinstance(event, StepEntered):
        return _sse("step", {"step": event.step, "previous": event.previous, **nested})
    if isinstance(event, ToolCalled):
        data = {"step": event.step, "id": event.id, "name": event.name, "args": dict(event.args)}
        return _sse("tool_call", {**data, **nested})
    if isinstance(event, ToolReturned):
        data = {"step": event.step, "id": event.id, "name": event.name, "content": event.content}
        return _sse("tool_result", {**data, "is_error": event.is_error, **nested})
    if isinstance(event, TextChunk):
        return _sse("text", {"step": event.step, "text": event.text, **nested})
    if isinstance(event, ApprovalRequested):
        return _sse("approval_requested", {**_approval(event.approval), **nested})
    if isinstance(event, ApprovalDecided):
        return _sse("approval_decided", {**_approval(event.approval), **nested})
    if isinstance(event, ReadingJudged):
        return _sse("reading", {"step": event.step, "verdicts": [dict(v) for v in event.verdicts], **nested})
    if isinstance(event, PatternFired):
        return _sse("pattern", {"step": event.step, "pattern": event.pattern, "detail": event.detail})
    if isinstance(event, HandedOff):  # the summary is for staff (GET /v1/handoffs), not the stream
        return _sse("handoff", {"step": event.step, "reason": event.reason})
    if isinstance(event, SessionMigrated):
        record = migration_record(event.migration)
        return _sse("migrated", {key: value for key, value in record.items() if key != "kind"})
    raise TypeError(f"unknown turn event {type(event).__name__}")


class Beat:
    """Nothing happened for ``ServerSettings.sse_heartbeat`` seconds: a stream writes a comment so
    proxies and clients keep the connection."""


BEAT: Final = Beat()


class Feed:
    """A turn (or a decision) running in a task the server holds, read item by item by one
    protocol's writer: the native events below, AG-UI, the AI SDK stream, A2A, Chat Completions.

    ``first`` is what the run gave first: ``STARTED`` (the engine accepted the turn), a
    ``LoadStatus``, an event, or ``TurnFinished`` (a refusal before anything ran, whose result has
    an error). Iterating yields ``first`` and what follows, ``BEAT`` while nothing comes, and ends
    after ``TurnFinished`` or None (the run ended without a result)."""

    __slots__ = ("_heartbeat", "_items", "_stop", "first", "task")

    def __init__(
        self,
        task: asyncio.Task[None],
        items: asyncio.Queue[Item],
        first: Item,
        heartbeat: float,
        stop: Callable[[], None] | None = None,
    ):
        self.task = task
        self._items = items
        self.first = first
        self._heartbeat = heartbeat
        self._stop = stop

    @property
    def refused(self) -> TurnError | None:
        """The error of a run refused before it started (nothing ran, nothing was stored)."""
        first = self.first
        if isinstance(first, TurnFinished):
            return first.result.error
        return None

    async def __aiter__(self) -> AsyncIterator[Item | Beat]:
        item = self.first
        while True:
            yield item
            if item is None or isinstance(item, TurnFinished):
                return
            while True:
                if not self._items.empty():  # already there: no timer to arm
                    item = self._items.get_nowait()
                    break
                try:
                    item = await asyncio.wait_for(self._items.get(), self._heartbeat)
                    break
                except TimeoutError:
                    yield BEAT

    def abandon(self) -> None:
        """The client went away before the run's end (a protocol's abort): cancel the run as
        ``FlowEngine.cancel`` does (it stops before its commit; nothing of it is stored, no tool
        starts after). No one reads its end any more."""
        if self._stop is not None and not self.task.done():
            self._stop()


async def open_turn(
    state: ServerState,
    flow: str | None,
    message: str,
    session_id: str | None,
    caller: Caller,
    attachments: Sequence[Attachment] = (),
    inspect: bool = False,
) -> Feed:
    """Start a turn of a new session of ``flow`` or of ``session_id`` in a task the server holds,
    and return its feed once its first item is in: a client that disconnects cannot leave the
    turn half done. With ``inspect`` the feed carries the turn's timeline entries too."""
    items: asyncio.Queue[Item] = asyncio.Queue()
    watch = TurnWatch(state.readiness, on_start=lambda: items.put_nowait(STARTED), on_status=items.put_nowait)

    async def read() -> None:
        with watch:  # this task's context, which the engine's turn inherits
            try:
                # The turn runs in this task, which the server holds: a client that leaves cannot
                # cut it short anywhere; ``Feed.abandon`` cancels it (before its commit, as
                # ``FlowEngine.cancel`` does) for a protocol whose client's abort means so.
                result = await state.engine.run(
                    flow,
                    message,
                    session_id,
                    caller=caller,
                    on_event=items.put_nowait,
                    attachments=attachments,
                    on_timeline=items.put_nowait if inspect else None,
                )
                items.put_nowait(TurnFinished(result))
            except asyncio.CancelledError:
                items.put_nowait(None)
                raise
            except Exception:
                logger.exception("picoflow.server: a streamed turn failed")
                items.put_nowait(None)

    return await _open(state, items, read(), session_id, caller)


async def open_decision(
    state: ServerState,
    session_id: str,
    approval_id: str,
    decision: str,
    reason: str | None,
    caller: Caller,
    inspect: bool = False,
) -> Feed:
    """Start a decision and the turn it resumes, as ``open_turn`` starts a turn. Its first item
    is ``approval_decided`` or, for a refused decision (unknown, not allowed, decided, expired,
    stale), the ``TurnFinished`` of the refusal; while the flow's models are still loading, their
    status comes first and a refusal comes later."""
    items: asyncio.Queue[Item] = asyncio.Queue()
    watch = TurnWatch(state.readiness, on_status=items.put_nowait)

    async def read() -> None:
        with watch:
            try:
                result = await state.engine.decide(
                    session_id,
                    approval_id,
                    decision,
                    reason,
                    caller=caller,
                    on_event=items.put_nowait,
                    on_timeline=items.put_nowait if inspect else None,
                )
                items.put_nowait(TurnFinished(result))
            except asyncio.CancelledError:
                items.put_nowait(None)
                raise
            except Exception:
                logger.exception("picoflow.server: a streamed decision failed")
                items.put_nowait(None)

    return await _open(state, items, read(), session_id, caller)


async def _open(
    state: ServerState,
    items: asyncio.Queue[Item],
    read: Coroutine[Any, Any, None],
    session_id: str | None,
    caller: Caller,
) -> Feed:
    task = asyncio.create_task(read)
    state.streams.add(task)
    task.add_done_callback(state.streams.discard)
    first = await items.get()
    stop = None if session_id is None else _stopper(state, task, session_id, caller)
    return Feed(task, items, first, state.settings.sse_heartbeat, stop)


def _stopper(
    state: ServerState, task: asyncio.Task[None], session_id: str, caller: Caller
) -> Callable[[], None]:
    """How the run of ``task`` in ``session_id`` is cancelled when its client goes away."""

    def stop() -> None:
        if _stop_here(state.engine, task, session_id) is None:  # the job runs where the executor runs it
            stopping = asyncio.ensure_future(_quietly(_cancel(state.engine, session_id, caller)))
            state.streams.add(stopping)
            stopping.add_done_callback(state.streams.discard)

    return stop


def _stop_here(engine: FlowEngine, task: asyncio.Future[Any], session_id: str) -> bool | None:
    """Cancel the job the server's ``task`` runs in ``session_id``, when it runs in this process:
    whether it was asked to stop; None when the executor runs it elsewhere (it must be asked)."""
    if task.done():
        return False
    running = engine.turns.running(session_id)
    if running is not None:  # a job runs here: the task's own, or one the task's waits behind
        if running.task is task:
            return running.request()
        return task.cancel()  # its job waits for the session's lock: nothing of it ran
    if isinstance(engine.executor, LocalExecutor):
        return False  # its job ended: what is left (its timeline kept) is no one's to stop
    return None


async def _quietly(work: Coroutine[Any, Any, object]) -> None:
    await work


async def _cancel(engine: FlowEngine, session_id: str, caller: Caller) -> bool:
    try:
        await engine.cancel(session_id, caller=caller)
    except RunError:  # it ended meanwhile: nothing to stop
        return False
    return True


async def cancel_run(state: ServerState, task: asyncio.Future[Any], session_id: str, caller: Caller) -> bool:
    """Cancel the turn or decision the server runs in ``task`` for ``session_id`` (a protocol's own
    cancel), as ``FlowEngine.cancel`` does: it stops before its commit, nothing of it stored, and
    its result is a ``TurnCancelled`` failure (or, still waiting behind another job of the
    session, it never starts). Whether it was asked to stop."""
    here = _stop_here(state.engine, task, session_id)
    if here is not None:
        return here
    return await _cancel(state.engine, session_id, caller)


async def stream_turn(
    state: ServerState,
    flow: str | None,
    message: str,
    session_id: str | None,
    caller: Caller,
    render: str | None,
    attachments: Sequence[Attachment] = (),
    inspect: bool = False,
) -> StreamingResponse:
    """Stream a turn of a new session of ``flow`` or of ``session_id``; raise ``ApiError`` for a
    turn the engine refused before it started. With ``inspect`` the turn's timeline entries are
    streamed too (``timeline`` events)."""
    feed = await open_turn(state, flow, message, session_id, caller, attachments, inspect)
    return _respond(feed, session_id, render, v1_error)


async def stream_decision(
    state: ServerState,
    session_id: str,
    approval_id: str,
    decision: str,
    reason: str | None,
    caller: Caller,
    render: str | None,
    inspect: bool = False,
) -> StreamingResponse:
    """Stream a decision and the turn it resumes: ``approval_decided``, then the calls' events and
    the model's next reply (or ``approval_requested`` again) as in a turn, ending with ``result``.

    The stream opens with the decision's first event: a refused decision (unknown, not allowed,
    decided, expired, stale) is a plain HTTP status, since the engine checks it before any event.
    Only while the flow's models are still loading does it open earlier (to show their status),
    and a refusal then arrives as the stream's ``error`` event. With ``inspect`` the resumed turn's
    timeline entries are streamed too (``timeline`` events).
    """
    feed = await open_decision(state, session_id, approval_id, decision, reason, caller, inspect)
    return _respond(feed, session_id, render, decision_error)


SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""The headers of every event stream: not cached, not buffered by a proxy."""


def _respond(
    feed: Feed,
    session_id: str | None,
    render: str | None,
    error_of: Callable[[TurnError, str | None], ApiError],
) -> StreamingResponse:
    """Answer with the feed's events; raise the ``ApiError`` of a run refused before it."""
    refused = feed.refused
    if refused is not None:
        raise error_of(refused, session_id)
    if feed.first is None:
        raise _internal()

    async def events() -> AsyncIterator[bytes]:
        # Headers go out with the first chunk, so a client sees the stream open at once.
        yield b": turn started\n\n"
        try:
            async for item in feed:
                if item is None:
                    yield _error_event(_internal())
                    return
                if isinstance(item, TurnFinished):
                    result = item.result
                    if result.error is not None:
                        failure = error_of(result.error, session_id or result.session_id)
                        yield _error_event(
                            failure, "cancelled" if result.error.is_a(TurnCancelled) else "error"
                        )
                        return
                    name = result.flow or ""
                    yield _sse(
                        "result", TurnResponse.from_result(result, name, render).model_dump(mode="json")
                    )
                elif isinstance(item, Beat):
                    yield b": still working\n\n"
                elif isinstance(item, TimelineUpdate):
                    yield _timeline_event(item)
                elif isinstance(item, LoadStatus):
                    yield _sse("status", item.as_dict())
                elif not isinstance(item, _Started):
                    yield _event(item)
        except Exception:
            # An event that cannot be written (a model's text no encoder takes, a bug) must not
            # drop the connection silently: every stream ends with a result or an error event.
            logger.exception("picoflow.server: a turn's event stream failed")
            yield _error_event(_internal())

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)


def follow_stream(follower: TimelineFollower, idle: float, heartbeat: float) -> StreamingResponse:
    """A session's turns as they run in this process, whoever started them
    (``GET /v1/sessions/{id}/timeline/live``): ``following`` first (``{"session_id": ..., "turn":
    N}``, the last turn stored so far), then each running turn's ``timeline`` events as the turn
    streams carry them, and ``turn`` (``{"session_id": ..., "turn": N, "outcome": ...}``) once a
    turn is stored. The stream ends once no turn ran for ``idle`` seconds (a client still watching
    opens it again), or when the client leaves; a keep-alive comment every ``heartbeat`` seconds."""
    loop = asyncio.get_running_loop()

    async def events() -> AsyncIterator[bytes]:
        try:
            yield _sse("following", {"session_id": follower.session_id, "turn": follower.turn})
            quiet_until = loop.time() + idle
            while (left := quiet_until - loop.time()) > 0:
                update = await follower.next(min(left, heartbeat))
                if update is None:
                    yield b": following\n\n"
                    continue
                quiet_until = loop.time() + idle  # a turn is running: its end is waited for
                if isinstance(update, TurnRecorded):
                    data = {"session_id": update.session_id, "turn": update.turn, "outcome": update.outcome}
                    yield _sse("turn", data)
                else:
                    yield _timeline_event(update)
        finally:
            follower.close()

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)
