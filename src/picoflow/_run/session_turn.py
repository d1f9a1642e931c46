"""The one path of a job against a session — a turn, a decision (``jobs``): lock the session in
this process, open it, restore it, run the job, commit it atomically, or turn a failure into a
``TurnResult`` — the stored session left exactly as it was. A job running here can be cancelled
(``SessionTurns.cancel``, the rules in ``cancel``): it ends as a failure like any other.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from picoflow._run.cancel import NEVER_CANCELLED, JobCancel
from picoflow._run.compose import Composer
from picoflow._run.dispatch import LOCAL_TOOLS
from picoflow._run.effects import Paused, Reply
from picoflow._run.observers import TurnObserver
from picoflow._run.window import TRIMMED
from picoflow._run.workspace import ToolRunner, TurnConfig, Workspace, compact_memory
from picoflow.attachments import Attachment
from picoflow.context import ANY_PRINCIPAL, Caller, PrincipalFilter
from picoflow.exceptions import (
    ApprovalRefused,
    InvalidInput,
    RunError,
    SessionCompleted,
    SessionConflict,
    SessionNotFound,
    StoreError,
    SubStepFailed,
    TurnCancelled,
)
from picoflow.flow import FlowSpec, StepSpec
from picoflow.models.base import Model
from picoflow.results import TurnError, TurnResult
from picoflow.session import LogRecord, Session, SessionMigration
from picoflow.sessions.base import CancelChannel, CancelRequest, SessionStore
from picoflow.timeline import TimelineSettings
from picoflow.usage import Usage, UsageLimits

logger = logging.getLogger("picoflow")

MAX_WARNINGS = 200
#: Warnings a long session raises every few turns as a matter of course: the session keeps only the
#: latest of each per step (each turn's result still lists its own), so its document stays small.
LATEST_ONLY = frozenset({TRIMMED})

R = TypeVar("R")

CHECKED: Final = object()
"""``SessionTurns.cancel``'s owner when the caller's access to the stored session was checked."""


class TurnHost(Protocol):
    """What turns read from their engine, at each turn (so a changed setting applies at once)."""

    store: SessionStore
    deps: Any
    limits: UsageLimits | None
    max_reply_chars: int
    before_turn: Callable[[FlowSpec], Awaitable[None]] | None
    clock: Callable[[], float]
    """The time approvals are asked and decided by."""
    approval_lease: float
    """Seconds a process that took a decided response up has to finish it before a new message
    may answer its calls as of unknown result."""
    timeline_settings: TimelineSettings | None
    """How the engine records its jobs' timelines (``picoflow.timeline``); None: it does not."""

    registry: Mapping[str, FlowSpec]
    """The registered flows by name (a sub-step may be a step of any of them)."""

    def flow(self, flow: str) -> FlowSpec: ...

    async def with_mcp_tools(self, spec: FlowSpec) -> FlowSpec:
        """The flow with its MCP servers' tools (``spec.mcp_servers`` is empty once they are in)."""
        ...

    def model_for(self, flow: FlowSpec, step: StepSpec) -> Model: ...


@dataclass(slots=True)
class Opened:
    """A job's session as the job opened it, before the flow restores it."""

    spec: FlowSpec
    """The session's flow, its MCP tools listed."""
    session: Session
    caller: Caller
    """Who the job's calls run as."""
    expected: int | None
    """The stored revision the job's commit expects (None: the job starts the session)."""
    migration: SessionMigration | None = None
    """What loading the session under this version of its flow changed (``picoflow.versions``),
    committed with the job; None when it ran on this version already."""


class SessionJob(Protocol):
    """What runs against one session: a turn (``TurnRequest``) or a decision (``DecisionRequest``).
    ``SessionTurns.take`` runs either the same way: the lock, the restore, the failure filed."""

    @property
    def session_id(self) -> str:
        """The session the job runs against, or the id of the one it starts."""
        ...

    @property
    def continues(self) -> str | None:
        """The id of the stored session the job runs against (locked meanwhile); None for a new one."""
        ...

    @property
    def noun(self) -> str:
        """What the job is called in the log: "turn", "decision"."""
        ...

    async def open(self, turns: SessionTurns) -> Opened:
        """Load (or start) the session and refuse what the job may not do in it."""
        ...

    async def run(self, turns: SessionTurns, ws: Workspace, opened: Opened) -> Reply | Paused:
        """Run against the restored session and commit (``SessionTurns.commit``)."""
        ...


class SessionTurns:
    """Runs jobs (turns, decisions) against the store, one at a time per session inside this
    process; tool calls run where ``tools`` runs them."""

    def __init__(self, host: TurnHost, tools: ToolRunner = LOCAL_TOOLS) -> None:
        self.host = host
        self.tools = tools
        self.composer = Composer(host.registry, host.model_for, host.with_mcp_tools)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._running: dict[str, JobCancel] = {}
        """The cancel of the job running against each session here (the one holding its lock)."""
        self._heard: SessionStore | None = None
        """The store whose cancel requests this process answers (``listen_for_cancels``)."""
        self._unlisten: Callable[[], None] | None = None

    async def take(self, job: SessionJob, observer: TurnObserver) -> TurnResult:
        """The job's result (a turn's, a decision's); a failure is filed with the session and
        leaves it as stored. Cancelled (``cancel``), the job ends as a ``TurnCancelled`` failure."""
        ws: Workspace | None = None
        continued = job.continues
        lock = None if continued is None else self._lock(continued)  # a new session needs none
        held = False
        cancel: JobCancel | None = None
        try:
            if lock is not None:
                held = await lock.acquire()
            cancel = self._running[job.session_id] = JobCancel(asyncio.current_task(), job.noun)
            opened = await job.open(self)
            cancel.owner = opened.session.principal
            cancel.revision = opened.expected
            observer.session_opened(opened.session.id)
            ws = self.workspace(opened.spec, opened.session, opened.caller, observer, cancel)
            if opened.migration is not None:
                observer.session_migrated(opened.migration)
            if opened.session.revision:
                self._restore(ws)
            if observer.wants_session:
                observer.session_before(ws.session)
            return _result(ws, await job.run(self, ws, opened))
        except RunError as exc:
            return await self.failed(exc, job.session_id, continued, ws)
        except asyncio.CancelledError:
            if cancel is None or not cancel.caught():
                raise
            stopped = TurnCancelled(f"the {job.noun} was cancelled", session_id=job.session_id)
            return await self.failed(stopped, job.session_id, continued, ws)
        except Exception as exc:
            logger.exception("picoflow: unexpected error in a %s of session %s", job.noun, job.session_id)
            wrapped = RunError(f"unexpected {type(exc).__name__}: {exc}")
            wrapped.__cause__ = exc
            return await self.failed(wrapped, job.session_id, continued, ws)
        finally:
            if cancel is not None and self._running.get(job.session_id) is cancel:
                del self._running[job.session_id]
            if ws is not None:
                ws.release()
            if lock is not None:
                self._unlock(continued or "", lock, held)

    def running(self, session_id: str) -> JobCancel | None:
        """The cancel of the job running against ``session_id`` in this process, if one runs."""
        return self._running.get(session_id)

    def cancel(self, session_id: str, owner: PrincipalFilter | object = CHECKED) -> str | None:
        """Ask the job running against ``session_id`` here to stop (``JobCancel.request``): what
        it is ("turn", "decision"), or None when none runs here or it is past stopping.

        ``owner``: the caller's principal when the session is not stored yet (a first turn), so
        only its job knows whose it is: a job ``owner`` may not reach, or none running, is
        ``SessionNotFound``. ``CHECKED`` (the default): the caller's access to the stored
        session was checked already."""
        running = self._running.get(session_id)
        if owner is not CHECKED and not (
            running is not None and running.opened and (owner is ANY_PRINCIPAL or running.owner == owner)
        ):
            raise SessionNotFound(f"no session {session_id} for this caller", session_id=session_id)
        return running.noun if running is not None and running.request() else None

    # --- cancels between processes (a store that is a ``CancelChannel``) --------------------------

    def listen_for_cancels(self) -> None:
        """Answer the cancel requests that other processes sharing the store publish, when the
        store carries them (``CancelChannel``): called as jobs start here, it listens from the
        first one on (again should the engine's store change). Never raises: a job runs whatever
        becomes of the listening."""
        store = self.host.store
        if store is self._heard:
            return
        self.stop_listening()
        self._heard = store
        if isinstance(store, CancelChannel):
            try:
                self._unlisten = store.listen_for_cancels(self._answer_cancel)
            except Exception:
                logger.warning("picoflow: could not listen for cancels on %r", store, exc_info=True)

    def stop_listening(self) -> None:
        """Answer no more cancel requests from other processes (the engine closes)."""
        unlisten, self._unlisten = self._unlisten, None
        self._heard = None
        if unlisten is not None:
            unlisten()

    def _answer_cancel(self, request: CancelRequest) -> str | None:
        """Stop the job another process asked to stop, if it runs here on the revision the request
        names (its caller's access was checked where it was made): what it stopped, or None."""
        running = self._running.get(request.session_id)
        if running is None or not running.answers(request.revision):
            return None
        return running.noun if running.request() else None

    async def cancel_elsewhere(self, session_id: str, revision: int) -> str | None:
        """Ask the process running a job against ``session_id``, stored at ``revision``, to stop
        it, when the store carries cancels between processes: what it stopped, or None when the
        store carries none or no process answered in time."""
        store = self.host.store
        if not isinstance(store, CancelChannel):
            return None
        async with store_call("asking other processes to cancel a job of session", session_id):
            return await store.request_cancel(session_id, revision)

    decide = take
    """A decision is a job as a turn is: ``take`` runs it."""

    async def ready(self, spec: FlowSpec) -> FlowSpec:
        """The job's flow with its MCP tools listed and its models ready (``before_turn``)."""
        host = self.host
        if spec.mcp_servers:  # its MCP servers' tools are not listed yet
            spec = await host.with_mcp_tools(spec)
        if host.before_turn is not None:
            await host.before_turn(spec)
        return spec

    @staticmethod
    async def observed(ws: Workspace, running: Awaitable[R]) -> R:
        """``running``, the loop's part of a job; then the observer is told the loop stopped."""
        observer = ws.config.observer
        try:
            ended = await running
        except BaseException as exc:
            _ended(ws, observer, exc)
            raise
        _ended(ws, observer, None)
        return ended

    def workspace(
        self,
        spec: FlowSpec,
        session: Session,
        caller: Caller,
        observer: TurnObserver,
        cancel: JobCancel = NEVER_CANCELLED,
    ) -> Workspace:
        host = self.host
        config = TurnConfig(
            spec=spec,
            caller=caller,
            deps=caller.deps if caller.deps is not None else host.deps,
            model_for=functools.partial(host.model_for, spec),
            limits=host.limits or spec.limits,
            tools=self.tools,
            max_reply_chars=host.max_reply_chars,
            observer=observer,
            composer=self.composer,
            clock=host.clock,
            cancel=cancel,
        )
        return Workspace(config, session)

    async def commit(
        self, ws: Workspace, expected: int | None, files: tuple[Attachment, ...], *, ended: bool = True
    ) -> None:
        """Save the job: all of it or, should the store refuse, nothing. ``ended=False`` saves a
        turn still going on (a checkpoint: the turn is counted when it ends). Once the final save
        starts, the job is past cancelling; a checkpoint's save finishes before a cancel stops it."""
        if ended:
            if ws.config.spec.compacting:  # most flows compact nothing: no coroutine for them
                await compact_memory(ws)
            _commit_locally(ws)
        ws.normalize_states()
        session = ws.session
        session.flow_version = ws.config.spec.version  # the version this turn ran on
        store = self.host.store
        try:
            with ws.config.cancel.saving(final=ended):
                if files:
                    session.files_sent += len(files)
                    await store.save(session, expected_revision=expected, appended=ws.appended, files=files)
                else:
                    await store.save(session, expected_revision=expected, appended=ws.appended)
        except OSError as exc:  # as in ``store_call``, without its await on the hot path
            raise outage(f"saving session {session.id}", exc) from exc

    @staticmethod
    def _restore(ws: Workspace) -> None:
        """Let the flow reset or migrate a stored session before the turn uses it."""
        session = ws.session
        try:
            restored = ws.flow.on_restore_session(session)
        except Exception as exc:
            raise RunError(f"on_restore_session raised {type(exc).__name__}: {exc}") from exc
        if restored is session:
            return
        if restored is None:
            restored = Session(
                id=session.id,
                flow=session.flow,
                current_step=ws.config.spec.start,
                revision=session.revision,
                principal=session.principal,
                next_seq=session.next_seq,
            )
        elif not isinstance(restored, Session) or restored.id != session.id:
            raise RunError("on_restore_session must return the session, a fresh Session with its id, or None")
        # A replacement document continues the transcript: its messages must come after the stored ones.
        restored.next_seq = max(restored.next_seq, session.next_seq)
        ws.replace_session(restored)

    async def failed(
        self, exc: RunError, reference: str | None, requested_id: str | None, ws: Workspace | None
    ) -> TurnResult:
        """The result of a failed turn; the failure is filed with the session when it has one."""
        detail = str(exc)  # of a sub-step failure, the whole story: which step ran which
        if isinstance(exc, SubStepFailed):  # uncaught: the turn fails as the sub-step did
            exc = exc.root_cause
        step = exc.step or (ws.session.current_step if ws else None)
        exc.session_id = exc.session_id or reference
        exc.step = step
        if exc.__cause__ is not None and type(exc.__cause__).__name__ not in detail:
            detail = f"{detail} (caused by {type(exc.__cause__).__name__})"
        if reference is not None and exc.recorded:
            if requested_id is None and ws is not None and await self._keep_first(ws, exc):
                requested_id = reference
            record = LogRecord(exc.kind, detail, "error", step, (ws.session.turns + 1) if ws else None)
            try:
                await self.host.store.record_error(reference, record)
            except Exception:
                logger.exception("picoflow: could not record the error of session %s", reference)
        # What is not filed with a session (input refused, no such session or flow) is the
        # caller's to fix, not the server's: the first turn of a protocol's thread meets it too.
        # A decision refused (not the caller's to make, decided already) is filed for the audit
        # trail, but it is the rules working, not a failure of the server.
        level = logging.WARNING if exc.recorded and not isinstance(exc, ApprovalRefused) else logging.INFO
        logger.log(
            level, "picoflow turn failed [%s] session=%s step=%s: %s", exc.kind, reference, step, detail
        )
        stored_id = requested_id if exc.keeps_session else None
        field = exc.field if isinstance(exc, InvalidInput) else None
        return TurnResult(
            message=exc.public_text,
            session_id=stored_id,
            completed=isinstance(exc, SessionCompleted),
            content_type="text/plain",
            step=step if stored_id else None,
            usage=ws.usage if ws else Usage(),
            error=TurnError(type(exc), exc.public_text, exc.retry_after, reference, field),
            warnings=tuple(record.message for record in ws.warnings) if ws else (),
            flow=ws.config.spec.name if ws else None,
        )

    async def _keep_first(self, ws: Workspace, exc: RunError) -> bool:
        """A session's first turn failed once it ran: store the session as it was before that turn
        (its start step, not yet entered, no message), so its error record and timeline belong to
        a session its owner can read, and the next message can try again in it. Nothing of the
        failed turn is in it. Whether it was stored."""
        if not exc.keeps_session or isinstance(exc, StoreError | SessionConflict):
            return False
        ran = ws.session
        session = Session(
            id=ran.id,
            flow=ran.flow,
            current_step=ws.config.spec.start,
            principal=ran.principal,
            flow_version=ws.config.spec.version,
        )
        try:
            await self.host.store.save(session, expected_revision=None)
        except Exception:
            logger.exception("picoflow: could not store session %s after its first turn failed", ran.id)
            return False
        return True

    def session_lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the turn lock of ``session_id`` (e.g. to delete it between turns)."""
        return self._locked(session_id)

    @asynccontextmanager
    async def _locked(self, session_id: str) -> AsyncIterator[None]:
        lock = self._lock(session_id)
        held = False
        try:
            held = await lock.acquire()
            yield
        finally:
            self._unlock(session_id, lock, held)

    def _lock(self, session_id: str) -> asyncio.Lock:
        """The lock serialising turns of one session inside this process (the store's CAS covers
        other processes), with one more user until ``_unlock``. A new session needs none."""
        lock, users = self._locks.get(session_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[session_id] = (lock, users + 1)
        return lock

    def _unlock(self, session_id: str, lock: asyncio.Lock, held: bool) -> None:
        """Release ``lock`` if this user got it (its wait may have been cancelled), one user less."""
        if held:
            lock.release()
        _, users = self._locks[session_id]
        if users <= 1:
            del self._locks[session_id]
        else:
            self._locks[session_id] = (lock, users - 1)


def _ended(ws: Workspace, observer: TurnObserver, error: BaseException | None) -> None:
    """Tell ``observer`` the loop stopped, and show it the session as the turn left it."""
    if observer.wants_session:
        observer.session_after(ws.session)
    observer.turn_ended(error)


def _result(ws: Workspace, ended: Reply | Paused) -> TurnResult:
    session = ws.session
    warnings = tuple([record.message for record in ws.warnings]) if ws.warnings else ()
    # Positional, in field order (message, session id, completed, content type, step, usage, error,
    # warnings, flow, pending): every turn builds one.
    if isinstance(ended, Paused):
        return TurnResult(
            ended.text,
            session.id,
            False,
            "text/plain",
            session.current_step,
            ws.usage,
            None,
            warnings,
            ws.config.spec.name,
            ended.approvals,
        )
    return TurnResult(
        ended.text,
        session.id,
        session.status == "completed",
        ws.content_type or "text/plain",
        session.current_step,
        ws.usage,
        None,
        warnings,
        ws.config.spec.name,
        awaiting_human=session.status == "awaiting_human",
    )


def _commit_locally(ws: Workspace) -> None:
    session = ws.session
    session.turns += 1
    session.usage.add(ws.usage)
    session.updated_at = time.time()
    if ws.warnings:
        superseded = {(w.code, w.step) for w in ws.warnings if w.code in LATEST_ONLY}
        if superseded:
            session.warnings[:] = [w for w in session.warnings if (w.code, w.step) not in superseded]
        session.warnings.extend(ws.warnings)
        del session.warnings[:-MAX_WARNINGS]


class store_call:  # used like a function: ``async with store_call("loading")``
    """Around a store call: typed errors pass; an ``OSError`` is an outage (``StoreError``, 503);
    anything else is a bug and stays what it is (the engine reports it as a 500)."""

    __slots__ = ("what", "where")

    def __init__(self, what: str, where: str = "") -> None:
        self.what = what
        self.where = where

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, OSError):
            raise outage(f"{self.what} {self.where}" if self.where else self.what, exc) from exc


def outage(what: str, exc: OSError) -> StoreError:
    """A store call failed on its connection or disk: an outage, which a retry later may get past."""
    return StoreError(f"{what} failed: {type(exc).__name__}: {exc}")


def may_access(session: Session, principal: PrincipalFilter) -> bool:
    if principal is ANY_PRINCIPAL:
        return True
    # A session created without a principal belongs to "nobody in particular": only callers without
    # a principal may use it, so an authenticated caller can never reach an anonymous session.
    return session.principal == principal
