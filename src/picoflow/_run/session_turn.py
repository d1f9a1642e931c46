"""One turn end to end around the loop: open the session, restore it, run the loop, commit it
atomically, or turn a failure into a ``TurnResult`` — the stored session left exactly as it was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from picoflow._run.approvals import answer_unfinished, approvals_of, check_decision, decide_approval
from picoflow._run.compose import Composer
from picoflow._run.dispatch import LOCAL_TOOLS
from picoflow._run.effects import Paused, Reply
from picoflow._run.files import TurnFiles
from picoflow._run.handoff import wait_for_staff
from picoflow._run.loop import resume_turn, run_turn
from picoflow._run.observers import TurnObserver
from picoflow._run.window import TRIMMED
from picoflow._run.workspace import ToolRunner, TurnConfig, Workspace, compact_memory
from picoflow.approvals import Decision, PausedResponse
from picoflow.attachments import Attachment
from picoflow.context import ANY_PRINCIPAL, Caller, PrincipalFilter
from picoflow.exceptions import (
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalPending,
    ApprovalRefused,
    FlowMismatch,
    InvalidInput,
    RunError,
    SessionCompleted,
    SessionConflict,
    SessionNotFound,
    StoreError,
    SubStepFailed,
)
from picoflow.flow import FlowSpec, StepSpec
from picoflow.models.base import Model
from picoflow.results import TurnError, TurnResult
from picoflow.session import OPEN_STATUSES, LogRecord, Session
from picoflow.sessions.base import SessionStore
from picoflow.usage import Usage, UsageLimits

logger = logging.getLogger("picoflow")

MAX_WARNINGS = 200
#: Warnings a long session raises every few turns as a matter of course: the session keeps only the
#: latest of each per step (each turn's result still lists its own), so its document stays small.
LATEST_ONLY = frozenset({TRIMMED})


@dataclass(slots=True)
class TurnRequest:
    """A turn as the engine checked it: the flow (None: the session's own), the text, the session."""

    spec: FlowSpec | None
    text: str
    session_id: str
    """The session the turn continues, or the id of the one it starts."""
    starts: bool
    """The turn starts the session ``session_id`` (its id chosen by the engine, before the turn)."""
    caller: Caller
    files: tuple[Attachment, ...] = ()
    """The files sent with the message, checked."""

    @property
    def continues(self) -> str | None:
        """The id of the stored session the turn continues; None for a new one."""
        return None if self.starts else self.session_id


@dataclass(slots=True)
class DecisionRequest:
    """A decision as the engine checked it: on which approval, by whom, when (the deciding
    process's clock: a durable executor decides by it wherever the decision runs)."""

    session_id: str
    approval_id: str
    decision: Decision
    reason: str | None
    caller: Caller
    at: float


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

    registry: Mapping[str, FlowSpec]
    """The registered flows by name (a sub-step may be a step of any of them)."""

    def flow(self, flow: str) -> FlowSpec: ...

    async def with_mcp_tools(self, spec: FlowSpec) -> FlowSpec:
        """The flow with its MCP servers' tools (``spec.mcp_servers`` is empty once they are in)."""
        ...

    def model_for(self, flow: FlowSpec, step: StepSpec) -> Model: ...


class SessionTurns:
    """Runs turns against the store, one at a time per session inside this process; tool calls
    run where ``tools`` runs them."""

    def __init__(self, host: TurnHost, tools: ToolRunner = LOCAL_TOOLS) -> None:
        self.host = host
        self.tools = tools
        self.composer = Composer(host.registry, host.model_for, host.with_mcp_tools)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def take(self, request: TurnRequest, observer: TurnObserver) -> TurnResult:
        """The turn's result; a failure is filed with the session and leaves it as stored."""
        ws: Workspace | None = None
        continued = None if request.starts else request.session_id
        lock = None if continued is None else self._lock(continued)  # a new session needs none
        held = False
        try:
            if lock is not None:
                held = await lock.acquire()
            spec, session, expected = await self._open(request)
            observer.session_opened(session.id)
            ws = self.workspace(spec, session, request.caller, observer)
            if session.revision:
                self._restore(ws)
            if request.files or ws.session.files_sent:
                loader = functools.partial(self.host.store.load_files, ws.session.id)
                ws.files = TurnFiles(request.files, loader)
            if observer.wants_session:
                observer.session_before(ws.session)
            if ws.session.paused is not None:
                await self._close_paused(ws, ws.session.paused)
            try:
                reply: Reply | Paused
                if ws.session.status == "awaiting_human":  # staff answer: no model is called
                    reply = await wait_for_staff(ws, request.text)
                else:
                    reply = await run_turn(ws, request.text)
            except BaseException as exc:
                _ended(ws, observer, exc)
                raise
            _ended(ws, observer, None)
            await self._commit(ws, expected, request.files)
            return _result(ws, reply)
        except RunError as exc:
            return await self.failed(exc, request.session_id, continued, ws)
        except Exception as exc:
            logger.exception("picoflow: unexpected error in a turn of session %s", request.session_id)
            wrapped = RunError(f"unexpected {type(exc).__name__}: {exc}")
            wrapped.__cause__ = exc
            return await self.failed(wrapped, request.session_id, continued, ws)
        finally:
            if ws is not None:
                ws.release()
            if lock is not None:
                self._unlock(continued or "", lock, held)

    async def _close_paused(self, ws: Workspace, paused: PausedResponse) -> None:
        """A new message while calls wait: what waits is withdrawn (or expired), its calls answered
        as not run, and the turn goes on. Refused while a process runs the decided calls."""
        now = self.host.clock()
        if paused.resuming_since is not None and now < paused.resuming_since + self.host.approval_lease:
            raise ApprovalPending(
                f"session {ws.session.id} is carrying out a decision; send the message again when it is done",
                session_id=ws.session.id,
            )
        await answer_unfinished(ws, paused, now)

    async def decide(self, request: DecisionRequest, observer: TurnObserver) -> TurnResult:
        """Take a decision on a pending approval: recorded in the session; when it was the last its
        response waited for, the response's calls run (each approved one exactly once) and the turn
        goes on to its reply. A refusal changes nothing, as a failed turn."""
        ws: Workspace | None = None
        session_id = request.session_id
        lock = self._lock(session_id)
        held = False
        try:
            held = await lock.acquire()
            spec, stored = await self._load_decided(request)
            _, paused = check_decision(stored, spec, request.approval_id, request.caller, request.at)
            observer.session_opened(stored.id)
            # The calls run as the proposing caller: the session's principal, with its visibilities.
            owner = Caller(
                principal=stored.principal,
                visibilities=frozenset(paused.visibilities),
                deps=request.caller.deps,
            )
            ws = self.workspace(spec, stored, owner, observer)
            self._restore(ws)
            if observer.wants_session:
                observer.session_before(ws.session)
            session = ws.session  # what the flow made of it: checked again
            approval, paused = check_decision(session, spec, request.approval_id, request.caller, request.at)
            session.updated_at = time.time()
            decided = decide_approval(
                session, approval, request.decision, request.caller, request.reason, request.at
            )
            observer.approval_decided(decided)
            waiting = tuple(a for a in approvals_of(session.approvals, paused.approvals) if a.pending)
            expected = session.revision
            if waiting:  # the response still waits for other decisions
                await self._claim(session, expected)
                return _result(ws, Paused(waiting))
            session.paused = dataclasses.replace(paused, resuming_since=request.at)
            expected = await self._claim(session, expected)  # one process only goes on from here

            async def checkpoint() -> None:
                nonlocal expected
                await self._commit(ws, expected, (), ended=False)
                expected = session.revision
                ws.appended.clear()

            try:
                ended = await resume_turn(ws, paused, checkpoint)
            except BaseException as exc:
                _ended(ws, observer, exc)
                raise
            _ended(ws, observer, None)
            await self._commit(ws, expected, ())
            return _result(ws, ended)
        except RunError as exc:
            return await self.failed(exc, session_id, session_id, ws)
        except Exception as exc:
            logger.exception("picoflow: unexpected error in a decision of session %s", session_id)
            wrapped = RunError(f"unexpected {type(exc).__name__}: {exc}")
            wrapped.__cause__ = exc
            return await self.failed(wrapped, session_id, session_id, ws)
        finally:
            if ws is not None:
                ws.release()
            self._unlock(session_id, lock, held)

    async def _load_decided(self, request: DecisionRequest) -> tuple[FlowSpec, Session]:
        """The session a decision is taken in, with its flow (its MCP tools listed). Whether the
        caller may see it is the approval's to say (a supervisor decides in others' sessions)."""
        session_id = request.session_id
        async with store_call("loading session", session_id):
            stored = await self.host.store.load(session_id)
        if stored is None:
            raise ApprovalNotFound(
                f"no approval {request.approval_id} for this caller", session_id=session_id
            )
        spec = self.host.flow(stored.flow)
        if spec.mcp_servers:
            spec = await self.host.with_mcp_tools(spec)
        if self.host.before_turn is not None:
            await self.host.before_turn(spec)
        return spec, stored

    async def _claim(self, session: Session, expected: int) -> int:
        """Save a decision, compare-and-swap: of two processes deciding at once, one goes on and
        the other is refused with nothing run. Returns the new revision."""
        try:
            async with store_call("saving a decision in session", session.id):
                return await self.host.store.save(session, expected_revision=expected)
        except SessionConflict as exc:
            raise ApprovalConflict(
                f"session {session.id} changed while the decision was taken (another decision or "
                "message came first); nothing was run",
                session_id=session.id,
            ) from exc

    def workspace(
        self, spec: FlowSpec, session: Session, caller: Caller, observer: TurnObserver
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
        )
        return Workspace(config, session)

    async def _open(self, request: TurnRequest) -> tuple[FlowSpec, Session, int | None]:
        """The turn's flow (its MCP tools listed, its models ready), its session and the revision
        the save expects (None: a new session)."""
        if request.starts:
            spec, session, expected = self._new(request)
        else:
            spec, session, expected = await self._load(request, request.session_id)
        host = self.host
        if spec.mcp_servers:  # its MCP servers' tools are not listed yet
            spec = await host.with_mcp_tools(spec)
        if host.before_turn is not None:
            await host.before_turn(spec)
        return spec, session, expected

    async def _commit(
        self, ws: Workspace, expected: int | None, files: tuple[Attachment, ...], *, ended: bool = True
    ) -> None:
        """Save the turn: all of it or, should the store refuse, nothing. ``ended=False`` saves a
        turn still going on (a checkpoint: the turn is counted when it ends)."""
        if ended:
            if ws.config.spec.compacting:  # most flows compact nothing: no coroutine for them
                await compact_memory(ws)
            _commit_locally(ws)
        ws.normalize_states()
        session = ws.session
        store = self.host.store
        try:
            if files:
                session.files_sent += len(files)
                await store.save(session, expected_revision=expected, appended=ws.appended, files=files)
            else:
                await store.save(session, expected_revision=expected, appended=ws.appended)
        except OSError as exc:  # as in ``store_call``, without its await on the hot path
            raise outage(f"saving session {session.id}", exc) from exc

    @staticmethod
    def _new(request: TurnRequest) -> tuple[FlowSpec, Session, None]:
        spec = request.spec
        assert spec is not None  # the engine resolves the flow of a new session up front
        principal = request.caller.principal
        session = Session(id=request.session_id, flow=spec.name, current_step=spec.start, principal=principal)
        return spec, session, None

    async def _load(self, request: TurnRequest, session_id: str) -> tuple[FlowSpec, Session, int]:
        """The caller's stored session, still running, of the requested flow."""
        spec = request.spec
        async with store_call("loading session", session_id):
            stored = await self.host.store.load(session_id)
        if stored is None or not may_access(stored, request.caller.principal):
            raise SessionNotFound(f"no session {session_id} for this caller", session_id=session_id)
        if spec is None:
            spec = self.host.flow(stored.flow)
        if stored.flow != spec.name:
            raise FlowMismatch(f"session {session_id} belongs to flow {stored.flow}, not {spec.name}")
        if stored.status not in OPEN_STATUSES:
            raise SessionCompleted(f"session {session_id} is {stored.status}", session_id=session_id)
        if stored.current_step not in spec.steps:
            raise FlowMismatch(
                f"session {session_id} is in step {stored.current_step}, unknown to {spec.name}"
            )
        return spec, stored, stored.revision

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
            id=ran.id, flow=ran.flow, current_step=ws.config.spec.start, principal=ran.principal
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
