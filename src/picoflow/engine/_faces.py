"""The other faces of ``FlowEngine.run``: a stream of a turn's events, and a call for code without
an event loop. Both run the very same turn; they differ only in how its result reaches the caller.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from picoflow.attachments import Attachment
from picoflow.context import Caller
from picoflow.events import TurnEvent
from picoflow.results import TurnFinished, TurnResult

if TYPE_CHECKING:
    from picoflow.flow import Flow


class RunFaces:
    """``run_stream`` and ``run_sync``, for ``FlowEngine`` (which provides ``run``)."""

    _background: set[asyncio.Future[TurnResult]]

    run: Callable[..., Coroutine[Any, Any, TurnResult]]
    """``FlowEngine.run``: the turn both faces run."""

    async def run_stream(
        self,
        flow: str | type[Flow] | None,
        message: str,
        session_id: str | None = None,
        *,
        caller: Caller | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> AsyncIterator[TurnEvent | TurnFinished]:
        """Run one turn, yielding its events as they happen and ``TurnFinished`` last.

        The turn runs to its end even if the consumer stops listening, so a disconnect never
        leaves a half-done turn.
        """
        queue: asyncio.Queue[TurnEvent | TurnFinished | None] = asyncio.Queue()
        task = asyncio.ensure_future(
            self.run(
                flow, message, session_id, caller=caller, on_event=queue.put_nowait, attachments=attachments
            )
        )
        # The loop holds tasks weakly; keep this one alive even if the consumer walks away.
        self._background.add(task)

        def finished(done: asyncio.Future[TurnResult]) -> None:
            self._background.discard(done)
            queue.put_nowait(None if done.cancelled() or done.exception() else TurnFinished(done.result()))

        task.add_done_callback(finished)
        while True:
            event = await queue.get()
            if event is None:
                if task.cancelled():
                    raise asyncio.CancelledError("the turn was cancelled")
                raise task.exception() or RuntimeError("the turn ended without a result")
            yield event
            if isinstance(event, TurnFinished):
                return

    def run_sync(
        self,
        flow: str | type[Flow] | None,
        message: str,
        session_id: str | None = None,
        *,
        caller: Caller | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> TurnResult:
        """``run`` for code without an event loop (scripts, notebooks without one running).

        Each thread keeps one event loop for all its calls, so connections the store and the
        models opened on the first call serve the next ones too.
        """
        loop = _thread_loop()
        task = loop.create_task(self.run(flow, message, session_id, caller=caller, attachments=attachments))
        try:
            return loop.run_until_complete(task)
        except BaseException:
            # Interrupted (Ctrl-C): the turn is abandoned with its loop, so no later call resumes it
            # (nothing of it was committed); the next call starts a new loop.
            task.cancel()
            _local.loop = None
            loop.close()
            raise


_local = threading.local()


def _thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for ``run_sync``: made on first use, reused after (a bare
    ``run_until_complete`` costs a fraction of ``asyncio.run``, which builds and closes a loop)."""
    if asyncio._get_running_loop() is not None:  # exported by asyncio.events; no exception per call
        raise RuntimeError("run_sync() cannot be called from a running event loop: await engine.run(...)")
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
        atexit.register(loop.close)
    return loop
