"""A turn running for a task: the run the server holds (accepted, told, cancelled, its outcome),
what it writes into a stream's outbox, and the heartbeat that keeps a quiet stream alive."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar

from picoflow.events import TurnEvent
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnResult
from picoflow.server.protocols.a2a._tasks import PROGRESS, _Task, _working
from picoflow.server.protocols.a2a._wire import Wire
from picoflow.server.streams import BEAT, Beat

logger = logging.getLogger("picoflow.server")


Outbox = asyncio.Queue[Wire | Beat | None]
"""What a stream writes: events (the wire objects of ``StreamResponse``), beats (a comment), then
None (the end)."""


class _Pulse:
    """Puts ``BEAT`` in a stream's outbox every ``every`` seconds until stopped: one timer per
    stream, not one per event."""

    __slots__ = ("_every", "_handle", "_outbox")

    def __init__(self, outbox: Outbox, every: float) -> None:
        self._outbox = outbox
        self._every = every
        self._handle = asyncio.get_running_loop().call_later(every, self._beat) if every > 0 else None

    def _beat(self) -> None:
        self._outbox.put_nowait(BEAT)
        self._handle = asyncio.get_running_loop().call_later(self._every, self._beat)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


class _Run:
    """A turn (or a decision) running in a task the server holds: a client that goes away cannot
    leave it half done, and ``cancel`` stops it before it commits (nothing is stored then).

    ``accepted`` resolves True once the engine accepted the run (its input, session and flow, or
    the decision), False when it ended refused. What the run does is written at once as ``working``
    updates of task ``task_id``, into ``outbox`` (a streamed run's) and every listener's."""

    __slots__ = ("accepted", "context_id", "listeners", "outbox", "task", "task_id")

    _held: ClassVar[set[asyncio.Task[TurnResult]]] = set()
    """Every run still going, referenced (the loop keeps tasks weakly)."""

    def __init__(self, task_id: str, context_id: str, streamed: bool) -> None:
        self.accepted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.task_id = task_id
        self.context_id = context_id
        self.outbox: Outbox | None = asyncio.Queue() if streamed else None
        self.listeners: list[Outbox] = []
        """The outboxes of ``SubscribeToTask`` streams: the run's updates, then the task's end and None."""
        self.task: asyncio.Task[TurnResult]

    def begin(self, work: Coroutine[Any, Any, TurnResult]) -> None:
        self.task = asyncio.ensure_future(work)
        self._held.add(self.task)
        self.task.add_done_callback(self._ended)

    def accept(self) -> None:
        if not self.accepted.done():
            self.accepted.set_result(True)

    def seen(self, item: TurnEvent | LoadStatus) -> None:
        if self.outbox is None and not self.listeners:
            return
        for data in PROGRESS.write(item):
            update = _working(self.task_id, self.context_id, data)
            if self.outbox is not None:
                self.outbox.put_nowait(update)
            for listener in self.listeners:
                listener.put_nowait(update)

    def _ended(self, task: asyncio.Task[TurnResult]) -> None:
        self._held.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("picoflow.server: an A2A turn failed", exc_info=error)
        if not self.accepted.done():
            self.accepted.set_result(False)
        if self.outbox is not None:
            self.outbox.put_nowait(None)

    async def outcome(self) -> TurnResult | None:
        """The run's result, or None when it ended without one (cancelled, or a bug)."""
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if self.task.cancelled():
                return None
            raise  # the caller itself is being cancelled: the run goes on
        except Exception:
            return None


@dataclass(frozen=True, slots=True)
class _Ran:
    """A run taken in the request itself (a ``SendMessage`` no one else can know of): its result,
    or None when it ended without one (a bug, logged)."""

    result: TurnResult | None


@dataclass(slots=True, eq=False)
class _Turn:
    """A task whose turn runs: the task as it stands and its run."""

    task: _Task
    run: _Run
    final: list[Wire] | None = None
    """The events that ended the task, once it ended."""
