"""Turns and decisions as the engine hands them over: each one's input checked into a job (a
``TurnRequest``, a ``DecisionRequest``) or refused, the job handed to the executor, and every one
watched the same way — traced, its events streamed to the caller, its timeline recorded and kept
with its session — and stopped on request while it runs (``cancel``). ``stream`` and ``run_sync``
run a turn (``engine.run``) for a caller that watches its events, or that has no event loop;
``warm`` sends a flow's first request once, ahead of any turn.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, Literal, Protocol, cast

from picoflow._run.jobs import TurnRequest
from picoflow._run.loop import first_request
from picoflow._run.observers import EventStream, TurnObserver, combine
from picoflow._run.session_turn import SessionTurns, may_access, store_call
from picoflow._run.timeline import Recording, TimelineRecorder
from picoflow._run.tracing import TracingSetting
from picoflow.attachments import Attachment, AttachmentLimits, check_attachments
from picoflow.context import Caller
from picoflow.engine._approvals import Approvals
from picoflow.engine._checks import check_session_id
from picoflow.engine.executors import TurnExecutor
from picoflow.events import TurnEvent
from picoflow.exceptions import RunError, SessionNotFound, TurnNotRunning
from picoflow.flow import Flow, FlowSpec
from picoflow.results import Cancelled, TurnFinished, TurnResult
from picoflow.session import Session, new_session_id
from picoflow.sessions.base import SessionStore, TimelineStore
from picoflow.timeline import TimelineFollower, TimelineSettings, TimelineUpdate, TurnRecorded

logger = logging.getLogger("picoflow")

Submit = Callable[[TurnObserver], Awaitable[TurnResult]]
"""A job handed over (or its refusal), to await for its result, watched by the observer given."""
Turn = Callable[..., Coroutine[Any, Any, TurnResult]]
"""``engine.run`` with a turn's input bound (``on_event`` may be given)."""


class JobsHost(Protocol):
    """What the engine's jobs read from their engine, at each job."""

    store: SessionStore
    executor: TurnExecutor
    turns: SessionTurns
    attachment_limits: AttachmentLimits
    timeline_settings: TimelineSettings | None

    def flow(self, flow: str | type[Flow] | None) -> FlowSpec: ...

    def check_message(self, message: object) -> str: ...

    async def with_mcp_tools(self, spec: FlowSpec) -> FlowSpec: ...


class Jobs:
    """The turns and decisions of one engine."""

    def __init__(
        self, host: JobsHost, approvals: Approvals, tracing: TracingSetting, timeline: TimelineSettings | None
    ) -> None:
        self.host = host
        self.approvals = approvals
        self.tracing = tracing
        self._recording = Recording(timeline) if timeline is not None else None
        self._timeline_store: TimelineStore | None = None
        self._background: set[asyncio.Future[TurnResult]] = set()
        self._followers: dict[str, list[TimelineFollower]] = {}
        """Per session id: who follows its turns' timelines (``FlowEngine.follow_timeline``)."""

    # --- the one path -----------------------------------------------------------------------------

    async def _watched(
        self,
        submit: Submit,
        *,
        caller: Caller | None,
        on_event: Callable[[TurnEvent], None] | None,
        trigger: str,
        flow: str,
        session_id: str | None,
        summary: str,
        on_timeline: Callable[[TimelineUpdate], None] | None = None,
    ) -> TurnResult:
        """The job's result, watched by tracing, by ``on_event`` and by the timeline's recorder
        (``trigger`` says what started it), whose record is kept with the session; ``on_timeline``
        is handed its entries as they are recorded."""
        tracer = self.tracing.observer()
        if session_id is not None and session_id in self._followers:
            on_timeline = self._handed_to_followers(session_id, on_timeline)
        recorder = None if self._recording is None else self._recording.recorder(caller, trigger, on_timeline)
        observer = combine(tracer, EventStream(on_event) if on_event is not None else None, recorder)
        observer.turn_started(flow, session_id, summary)
        try:
            result = await submit(observer)
        except BaseException as exc:
            observer.turn_aborted(exc)
            raise
        observer.turn_finished(result)
        if recorder is not None:
            turn = recorder.stored_elsewhere  # a durable executor's worker recorded and stored it
            if turn is None:
                turn = await self._keep_timeline(recorder, result)
            if turn is not None and result.session_id in self._followers:
                self._tell_followers(result, turn)
        return result

    async def _keep_timeline(self, recorder: TimelineRecorder, result: TurnResult) -> int | None:
        """Store the job's timeline with its session (best effort: the job's result stands); the
        turn's number once stored, else None."""
        settings, store = self.host.timeline_settings, self._timeline_store
        if settings is None:
            return None
        if store is None:  # checked once: a protocol check costs more than a turn's recording
            if not isinstance(self.host.store, TimelineStore):
                return None
            store = self._timeline_store = self.host.store
        document = recorder.document(result)
        if document is None:
            return None
        session_id, turn, body = document
        try:
            await store.record_timeline(session_id, turn, body, keep_turns=settings.keep_turns)
        except Exception:
            logger.warning("picoflow: could not store the timeline of session %s", session_id, exc_info=True)
            return None
        return turn

    # --- following a session's timeline -----------------------------------------------------------

    def follow(self, session_id: str, turn: int) -> TimelineFollower:
        """A new follower of the session's turns (``FlowEngine.follow_timeline``)."""
        follower = TimelineFollower(session_id, turn, self._unfollow)
        self._followers.setdefault(session_id, []).append(follower)
        return follower

    def _unfollow(self, follower: TimelineFollower) -> None:
        following = self._followers.get(follower.session_id)
        if following is not None and follower in following:
            following.remove(follower)
            if not following:
                del self._followers[follower.session_id]

    def _handed_to_followers(
        self, session_id: str, also: Callable[[TimelineUpdate], None] | None
    ) -> Callable[[TimelineUpdate], None]:
        """``also`` (the job's own watcher, if any) and each follower of the session at the time,
        handed every entry as it is recorded."""

        def hand(update: TimelineUpdate) -> None:
            if also is not None:
                also(update)
            for follower in self._followers.get(session_id, ()):
                follower.put(update)

        return hand

    def _tell_followers(self, result: TurnResult, turn: int) -> None:
        session_id = cast(str, result.session_id)
        outcome: Literal["replied", "paused", "failed"] = (
            "failed" if result.error is not None else "paused" if result.pending else "replied"
        )
        for follower in self._followers.get(session_id, ()):
            follower.put(TurnRecorded(session_id, turn, outcome))

    # --- the two kinds ----------------------------------------------------------------------------

    async def run(
        self,
        flow: str | type[Flow] | None,
        message: str,
        session_id: str | None,
        caller: Caller | None,
        on_event: Callable[[TurnEvent], None] | None,
        attachments: Sequence[Attachment],
        on_timeline: Callable[[TimelineUpdate], None] | None = None,
    ) -> TurnResult:
        host = self.host

        def submit(observer: TurnObserver) -> Awaitable[TurnResult]:
            """The turn to await for its result: the executor's, or the failure of input refused
            (filed like any other: nothing ran, nothing was stored)."""
            try:
                spec = host.flow(flow) if flow is not None or session_id is None else None
                text = host.check_message(message)
                if session_id is not None:
                    check_session_id(session_id)
                files = tuple(attachments)
                if files:
                    check_attachments(list(files), host.attachment_limits)
                if session_id is None:
                    request = TurnRequest(spec, text, new_session_id(), True, caller or Caller(), files)
                else:
                    request = TurnRequest(spec, text, session_id, False, caller or Caller(), files)
            except RunError as exc:
                return host.turns.failed(exc, session_id, session_id, None)
            return host.executor.take(host.turns, request, observer)

        flow_name = flow if isinstance(flow, str) or flow is None else flow.name
        return await self._watched(
            submit,
            caller=caller,
            on_event=on_event,
            trigger="message",
            flow=flow_name or "session",
            session_id=session_id,
            summary=message,
            on_timeline=on_timeline,
        )

    async def decide(
        self,
        session_id: str,
        approval_id: str,
        decision: str,
        reason: str | None,
        caller: Caller | None,
        on_event: Callable[[TurnEvent], None] | None,
        on_timeline: Callable[[TimelineUpdate], None] | None = None,
    ) -> TurnResult:
        host = self.host

        def submit(observer: TurnObserver) -> Awaitable[TurnResult]:
            """The decision to await for its result: the executor's, or its input refused."""
            try:
                request = self.approvals.request(
                    session_id, approval_id, decision, reason, caller or Caller()
                )
            except RunError as exc:
                return host.turns.failed(exc, None, None, None)
            return host.executor.decide(host.turns, request, observer)

        return await self._watched(
            submit,
            caller=caller,
            on_event=on_event,
            trigger="decision",
            flow="decision",
            session_id=session_id,
            summary=f"{decision} {approval_id}",
            on_timeline=on_timeline,
        )

    async def cancel(self, session_id: str, caller: Caller | None) -> Cancelled:
        """Ask the turn or decision running in the caller's session to stop (``FlowEngine.cancel``)."""
        host = self.host
        check_session_id(session_id)
        principal = (caller or Caller()).principal
        async with store_call("loading session", session_id):
            stored = await host.store.load(session_id)
        if stored is not None and not may_access(stored, principal):
            raise SessionNotFound(f"no session {session_id} for this caller", session_id=session_id)
        # A first turn's session is stored with its commit: its job knows whose it is, and the
        # executor asks it (``revision`` None).
        revision = None if stored is None else stored.revision
        job = await host.executor.cancel(host.turns, session_id, revision, principal)
        if job is None:
            raise TurnNotRunning(f"no turn of session {session_id} is running", session_id=session_id)
        return Cancelled(session_id, cast(Literal["turn", "decision"], job))

    # --- turns for other callers ------------------------------------------------------------------

    async def stream(self, turn: Turn) -> AsyncIterator[TurnEvent | TurnFinished]:
        """The events of ``turn(on_event=...)`` as they happen, and ``TurnFinished`` last. The
        turn runs to its end even if the consumer stops listening."""
        queue: asyncio.Queue[TurnEvent | TurnFinished | None] = asyncio.Queue()
        task = asyncio.ensure_future(turn(on_event=queue.put_nowait))
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

    @staticmethod
    def run_sync(turn: Turn) -> TurnResult:
        """The result of ``turn()``, run on this thread's event loop."""
        loop = _thread_loop()
        task = loop.create_task(turn())
        try:
            return loop.run_until_complete(task)
        except BaseException:
            # Interrupted (Ctrl-C): the turn is abandoned with its loop, so no later call resumes it
            # (nothing of it was committed); the next call starts a new loop.
            task.cancel()
            _local.loop = None
            loop.close()
            raise

    async def warm(self, flow: str | type[Flow], message: str) -> bool:
        host = self.host
        spec = host.flow(flow)
        if spec.mcp_servers:  # the start step's request shows its MCP tools too
            spec = await host.with_mcp_tools(spec)
        session = Session(id="warm-up", flow=spec.name, current_step=spec.start)
        ws = host.turns.workspace(spec, session, Caller(), combine())
        try:
            first = await first_request(ws, message)
            if first is None:
                return False
            model, request = first
            await model.request(dataclasses.replace(request, settings={**request.settings, "max_tokens": 1}))
            return True
        except Exception:
            logger.warning("picoflow: warming flow %s failed", spec.name, exc_info=True)
            return False
        finally:
            ws.release()


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
