"""``FlowEngine``: registered flows, their models and a session store — the application object.

``await engine.run(flow, message, session_id)`` runs one turn and always returns a
``TurnResult``: run-time failures (a model outage, a budget exceeded, a bug in a tool, a
concurrent turn on the same session) come back as ``result.error`` with text safe to show a user,
and the stored session is left exactly as it was before the turn. ``run_stream`` and ``run_sync``
are the same turn for a caller that watches its events, or that has no event loop. The engine also
reads, lists and deletes stored sessions, every read checked against the caller's principal. It is
the one service: the HTTP server and the command line translate requests into its calls and nothing
more.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import MappingProxyType
from typing import Any

from picoflow._run.loop import first_request
from picoflow._run.observers import NO_OBSERVER, EventStream, TurnObserver, combine
from picoflow._run.session_turn import DecisionRequest, SessionTurns, TurnRequest, may_access, store_call
from picoflow._run.text import check_message
from picoflow._run.text import check_text as check_text  # the one input rule, public here
from picoflow._run.timeline import Recording, TimelineRecorder
from picoflow._run.tracing import TracingSetting
from picoflow.approvals import Approval, Decision, visible_to
from picoflow.attachments import Attachment, AttachmentLimits, AttachmentRef, check_attachments
from picoflow.context import ANY_PRINCIPAL, Caller, PrincipalFilter
from picoflow.engine._handoffs import StaffDesk, may_read
from picoflow.engine.executors import LocalExecutor, TurnExecutor
from picoflow.events import TurnEvent
from picoflow.exceptions import FlowDefinitionError, FlowNotFound, InvalidInput, RunError
from picoflow.flow import Flow, FlowSpec, StepSpec
from picoflow.handoffs import STAFF_VISIBILITY, QueuedHandoff
from picoflow.mcp.tools import MCPTools
from picoflow.messages import Message, with_outputs_marked
from picoflow.models.base import Model
from picoflow.models.catalog import ModelSelection, as_selection, default_selection, validate_selection
from picoflow.models.fallback import as_model
from picoflow.results import TurnFinished, TurnResult
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus, new_session_id
from picoflow.sessions.base import SessionStore, TimelineStore
from picoflow.sessions.health import StoreHealth, store_check
from picoflow.sessions.memory import MemoryStore
from picoflow.timeline import SessionTimeline, TimelineSettings, TimelineUpdate, TurnTimeline
from picoflow.usage import UsageLimits

__all__ = ["ANY_PRINCIPAL", "MAX_OFFSET", "SESSION_ID", "FlowEngine", "check_session_id", "check_text"]

logger = logging.getLogger("picoflow")

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
"""What a session id may be: 1-128 letters, digits, '-' or '_' (``check_session_id``)."""
MAX_OFFSET = 1_000_000_000
"""Largest listing offset accepted: far beyond any real listing, well inside a 64-bit integer."""


class FlowEngine:
    """Runs turns of registered flows against a session store; reads and deletes stored sessions."""

    def __init__(
        self,
        flows: Iterable[type[Flow]] = (),
        *,
        store: SessionStore | None = None,
        model: Model | str | ModelSelection | None = None,
        deps: Any = None,
        limits: UsageLimits | None = None,
        max_message_chars: int = 32_000,
        max_reply_chars: int = 100_000,
        tracing: Any = None,
        trace_content: bool = False,
        before_turn: Callable[[FlowSpec], Awaitable[None]] | None = None,
        attachment_limits: AttachmentLimits | None = None,
        executor: TurnExecutor | None = None,
        approval_lease: float = 300.0,
        clock: Callable[[], float] = time.time,
        staff_visibility: str = STAFF_VISIBILITY,
        timeline: TimelineSettings | None = None,
    ) -> None:
        """
        Args:
            flows: Flow classes to register (each is built and validated now).
            store: Where sessions live; an in-process ``MemoryStore`` by default.
            model: Overrides the model of every step of every flow (tests, or one model for all).
            deps: Application dependencies handed to tools through ``RunContext.deps``.
            limits: Per-turn budgets overriding each flow's own ``limits``.
            max_message_chars: Longest user message accepted.
            max_reply_chars: Longest model response accepted (its text plus its tool arguments); a
                longer one is sent back as a correction and, if every attempt is too long, the turn
                fails with ``AttemptsExhausted`` (502) and nothing is stored.
            tracing: OpenTelemetry: None traces when an SDK tracer provider is configured, False
                never, or pass a ``Tracer``.
            trace_content: Put prompts, replies and tool arguments/results on spans (off by
                default: they may hold personal data).
            before_turn: Awaited once the session of a turn is known, before its step runs; may
                raise a ``RunError`` to refuse the turn (a server waits here for the flow's models
                to load, and refuses with 503 when one failed).
            attachment_limits: Sizes and types of the files a turn may carry (``AttachmentLimits``).
            executor: Where turns run once their input is checked: ``LocalExecutor()`` (None) runs
                them here, in this process; ``picoflow.temporal.TemporalExecutor`` runs each as a
                durable workflow.
            approval_lease: Seconds a process that took up an approved call has to finish its
                turn; meanwhile a new message is refused (``ApprovalPending``), afterwards it
                answers the call as of unknown result (it is never run again).
            clock: The time approvals are asked, expire and are decided by, and handoffs are
                made and taken at (``time.time``).
            staff_visibility: The visibility (``Caller.visibilities``) a caller needs to see the
                queue of handoffs, take one, reply as staff and hand back (``"staff"``).
            timeline: Record each turn's timeline and keep it with the session, failed turns
                included (``picoflow.timeline``; ``picoflow serve`` and the command line pass
                ``TimelineSettings()``). None records nothing and attaches no observer.
        """
        self.store: SessionStore = store if store is not None else MemoryStore()
        self.deps = deps
        self.limits = limits
        self.max_message_chars = max_message_chars
        self.max_reply_chars = max_reply_chars
        self.attachment_limits = attachment_limits or AttachmentLimits()
        self.before_turn = before_turn
        self.executor: TurnExecutor = executor if executor is not None else LocalExecutor()
        if not (isinstance(approval_lease, int | float) and approval_lease >= 0):
            raise ValueError("approval_lease must be a number of seconds, 0 or more")
        self.approval_lease = float(approval_lease)
        self.clock = clock
        if not (isinstance(staff_visibility, str) and staff_visibility.strip()):
            raise ValueError("staff_visibility must be a non-empty string")
        self.staff_visibility = staff_visibility
        self._tracing = TracingSetting(tracing, capture_content=trace_content)
        self.timeline_settings = timeline
        self._recording = Recording(timeline) if timeline is not None else None
        self._timeline_store: TimelineStore | None = None
        self._override: Model | ModelSelection | None = None
        if isinstance(model, Model):
            self._override = model
        elif model is not None:
            self._override = as_selection(model)
            validate_selection(self._override)
        self._flows: dict[str, FlowSpec] = {}
        self.registry: Mapping[str, FlowSpec] = MappingProxyType(self._flows)  # read-only, live
        self._models: dict[tuple[str, str], Model] = {}
        self.turns = SessionTurns(self)
        """How turns run against this engine's store, flows and models (what executors run them on)."""
        self._desk = StaffDesk(self)
        self._background: set[asyncio.Future[TurnResult]] = set()
        self._mcp = MCPTools()
        self._mcp_lock: asyncio.Lock | None = None
        for flow in flows:
            self.register(flow)

    # --- registry -------------------------------------------------------------------------------

    def register(self, flow: type[Flow]) -> FlowSpec:
        """Build, validate and register a flow. Raises ``FlowDefinitionError``."""
        if not (isinstance(flow, type) and issubclass(flow, Flow)):
            raise FlowDefinitionError(f"{flow!r} is not a Flow subclass")
        spec = flow.spec()
        if spec.name in self._flows and self._flows[spec.name].cls is not flow:
            raise FlowDefinitionError(f"two flows are named {spec.name!r}")
        if self._override is None:
            for choice in [flow.model, *(step.cls.model for step in spec.steps.values())]:
                for one in [choice] if isinstance(choice, str | ModelSelection | Model | None) else choice:
                    if isinstance(one, str | ModelSelection):
                        validate_selection(as_selection(one))
            calls_models = any(not step.is_logic for step in spec.steps.values())
            if flow.model is None and calls_models and any(s.cls.model is None for s in spec.steps.values()):
                # A bad PICOFLOW_MODEL should stop the engine now, not fail the first turn.
                validate_selection(default_selection())
        self._flows[spec.name] = spec
        return spec

    async def start(self) -> None:
        """Start the MCP servers of the registered flows, list their tools and add them to the steps.

        The first turn does it when this was not called. Calling it at startup shows a server that
        does not start (``ToolSourceUnavailable``) or a tool that cannot be offered
        (``FlowDefinitionError``) before any user is served. Servers stay up until ``aclose()``.
        """
        for spec in list(self._flows.values()):
            if spec.mcp_servers:
                await self.with_mcp_tools(spec)

    async def with_mcp_tools(self, spec: FlowSpec) -> FlowSpec:
        """``spec`` with the tools of its MCP servers, listed once and kept (a turn of a flow with
        servers calls this first). Only that flow waits for them: a server that does not start
        fails the turns of its own flow (``ToolSourceUnavailable``, 503), and they try again."""
        if self._mcp_lock is None:
            self._mcp_lock = asyncio.Lock()
        async with self._mcp_lock:
            current = self._flows.get(spec.name, spec)
            if current.mcp_servers:
                current = await self._mcp.resolve(current)
                if spec.name in self._flows:
                    self._flows[spec.name] = current
            return current

    @property
    def flows(self) -> list[FlowSpec]:
        return list(self._flows.values())

    def flow(self, flow: str | type[Flow] | None) -> FlowSpec:
        if flow is None:
            raise InvalidInput("a new session needs a flow name")
        name = flow if isinstance(flow, str) else flow.name
        spec = self._flows.get(name)
        if spec is None:
            known = ", ".join(self._flows) or "none"
            raise FlowNotFound(f"no flow named {name!r} is registered (known: {known})")
        return spec

    def model_for(self, flow: FlowSpec, step: StepSpec) -> Model:
        """The model a step uses: engine override, else the step's, else the flow's, else the default."""
        key = (flow.name, step.name)
        model = self._models.get(key)
        if model is None:
            choice = self._override or step.cls.model or flow.cls.model or default_selection()
            model = as_model(choice)
            self._models[key] = model
        return model

    # --- turns ----------------------------------------------------------------------------------

    async def run(
        self,
        flow: str | type[Flow] | None,
        message: str,
        session_id: str | None = None,
        *,
        caller: Caller | None = None,
        on_event: Callable[[TurnEvent], None] | None = None,
        attachments: Sequence[Attachment] = (),
        on_timeline: Callable[[TimelineUpdate], None] | None = None,
    ) -> TurnResult:
        """Run one turn. Never raises for run-time failures: see ``TurnResult.error``.

        ``flow`` may be None when ``session_id`` is given: the session knows its flow.
        ``attachments`` are files sent with the message (refused, before anything is stored, when
        their type is not accepted, contradicts their bytes, or they exceed ``attachment_limits``).
        ``on_timeline`` is handed the turn's timeline entries as they are recorded (an inspector
        drawing the turn live); only an engine that records timelines (``timeline=``) has any.
        """
        tracer = self._tracing.observer()
        recorder = None if self._recording is None else self._recording.recorder(caller, watch=on_timeline)
        observer = (
            NO_OBSERVER
            if tracer is None and on_event is None and recorder is None
            else combine(tracer, EventStream(on_event) if on_event is not None else None, recorder)
        )
        flow_name = flow if isinstance(flow, str) or flow is None else flow.name
        observer.turn_started(flow_name or "session", session_id, message)
        try:
            result = await self._take(flow, message, session_id, caller, attachments, observer)
        except BaseException as exc:
            observer.turn_aborted(exc)
            raise
        observer.turn_finished(result)
        if recorder is not None:
            await self._keep_timeline(recorder, result)
        return result

    async def _keep_timeline(self, recorder: TimelineRecorder, result: TurnResult) -> None:
        """Store the turn's timeline with its session (best effort: the turn's result stands)."""
        settings, store = self.timeline_settings, self._timeline_store
        if settings is None:
            return
        if store is None:  # checked once: a protocol check costs more than a turn's recording
            if not isinstance(self.store, TimelineStore):
                return
            store = self._timeline_store = self.store
        document = recorder.document(result)
        if document is None:
            return
        session_id, turn, body = document
        try:
            await store.record_timeline(session_id, turn, body, keep_turns=settings.keep_turns)
        except Exception:
            logger.warning("picoflow: could not store the timeline of session %s", session_id, exc_info=True)

    def _take(
        self,
        flow: str | type[Flow] | None,
        message: str,
        session_id: str | None,
        caller: Caller | None,
        attachments: Sequence[Attachment],
        observer: TurnObserver,
    ) -> Awaitable[TurnResult]:
        """The turn to await for its result: the executor's, or the failure of input refused
        (filed like any other: nothing ran, nothing was stored)."""
        try:
            spec = self.flow(flow) if flow is not None or session_id is None else None
            text = self.check_message(message)
            if session_id is not None:
                check_session_id(session_id)
            files = tuple(attachments)
            if files:
                check_attachments(list(files), self.attachment_limits)
            if session_id is None:
                request = TurnRequest(spec, text, new_session_id(), True, caller or Caller(), files)
            else:
                request = TurnRequest(spec, text, session_id, False, caller or Caller(), files)
        except RunError as exc:
            return self.turns.failed(exc, session_id, session_id, None)
        return self.executor.take(self.turns, request, observer)

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

    async def warm(self, flow: str | type[Flow], *, message: str = "Hello") -> bool:
        """Send the first request of a new session of ``flow`` once, answering at most one token.

        This loads the start step's model and fills prompt caches (the embedded model keeps the
        processed prompt), so the first real turn does not pay for reading a long system prompt.
        It costs a model call: use it with local models. Best effort: returns whether it worked.
        """
        spec = self.flow(flow)
        if spec.mcp_servers:  # the start step's request shows its MCP tools too
            spec = await self.with_mcp_tools(spec)
        session = Session(id="warm-up", flow=spec.name, current_step=spec.start)
        ws = self.turns.workspace(spec, session, Caller(), combine())
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

    # --- approvals ------------------------------------------------------------------------------

    async def decide(
        self,
        session_id: str,
        approval_id: str,
        decision: str,
        reason: str | None = None,
        *,
        caller: Caller | None = None,
        on_event: Callable[[TurnEvent], None] | None = None,
        on_timeline: Callable[[TimelineUpdate], None] | None = None,
    ) -> TurnResult:
        """Approve or deny a call waiting in ``session_id``: ``decision`` is ``"approve"`` or
        ``"deny"``, ``reason`` is told to the model when denying. Never raises for a refusal:
        see ``TurnResult.error``.

        Once the last approval a response waits for is decided, its calls run, each approved one
        exactly once with the approval's id as ``ctx.idempotency_key``, and the turn goes on: the
        result is its reply (or the next calls it waits for). Refused, with nothing run and nothing
        stored: an unknown approval or one of another's session (``ApprovalNotFound``, 404), a
        caller the approval does not admit (``ApprovalNotAllowed``, 403), one decided already
        (``ApprovalDecided``), expired (``ApprovalExpired``), one whose flow, tool or arguments
        changed or whose conversation moved on (``ApprovalStale``), or one decided by another
        process at the same moment (``ApprovalConflict``), all 409. ``on_timeline`` is as for
        ``run``: the resumed turn's timeline entries as they are recorded.
        """
        tracer = self._tracing.observer()
        recorder = (
            None if self._recording is None else self._recording.recorder(caller, "decision", on_timeline)
        )
        observer = (
            NO_OBSERVER
            if tracer is None and on_event is None and recorder is None
            else combine(tracer, EventStream(on_event) if on_event is not None else None, recorder)
        )
        observer.turn_started("decision", session_id, f"{decision} {approval_id}")
        try:
            result = await self._decide(session_id, approval_id, decision, reason, caller, observer)
        except BaseException as exc:
            observer.turn_aborted(exc)
            raise
        observer.turn_finished(result)
        if recorder is not None:
            await self._keep_timeline(recorder, result)
        return result

    def _decide(
        self,
        session_id: str,
        approval_id: str,
        decision: str,
        reason: str | None,
        caller: Caller | None,
        observer: TurnObserver,
    ) -> Awaitable[TurnResult]:
        try:
            check_session_id(session_id)
            request = DecisionRequest(
                session_id,
                check_approval_id(approval_id),
                check_decision(decision),
                check_reason(reason),
                caller or Caller(),
                self.clock(),
            )
        except RunError as exc:
            return self.turns.failed(exc, None, None, None)
        return self.executor.decide(self.turns, request, observer)

    async def approvals(self, session_id: str, *, caller: Caller | None = None) -> list[Approval] | None:
        """The approvals of a session the caller may see (its own session's, or those its roles may
        decide), oldest first, each as it stands now (a pending one past its time reads
        ``expired``); None when the session is unknown or shows the caller none."""
        check_session_id(session_id)
        caller = caller or Caller()
        async with store_call("loading session", session_id):
            session = await self.store.load(session_id)
        if session is None:
            return None
        who, roles = caller.principal, caller.visibilities
        shown = visible_to(session.approvals, who, roles, session.principal, self.clock())
        if not shown and not may_access(session, who):
            return None
        return shown

    async def pending_approvals(
        self, *, caller: Caller | None = None, flow: str | None = None, limit: int = 50
    ) -> list[tuple[str, Approval]]:
        """(session id, approval) for every pending, unexpired approval the caller may decide, in
        the sessions waiting for one, most recent first: a supervisor's queue."""
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500", field="limit")
        caller = caller or Caller()
        who, roles = caller.principal, caller.visibilities
        found: list[tuple[str, Approval]] = []
        now = self.clock()
        offset = 0
        while len(found) < limit:
            async with store_call("listing sessions"):
                page = await self.store.list_sessions(
                    status="awaiting_approval", flow=flow, limit=100, offset=offset
                )
            for info in page:
                async with store_call("loading session", info.id):
                    session = await self.store.load(info.id)
                if session is None:
                    continue
                owner = session.principal
                found += [
                    (session.id, approval)
                    for approval in visible_to(session.approvals, who, roles, owner, now)
                    if approval.pending and approval.approvers.admit(who, roles, owner)
                ]
            if len(page) < 100:
                break
            offset += 100
        return found[:limit]

    # --- handoffs -------------------------------------------------------------------------------

    async def handoffs(
        self, *, caller: Caller | None = None, flow: str | None = None, limit: int = 50
    ) -> list[QueuedHandoff]:
        """The staff queue: every session awaiting a human (a ``Handoff``), oldest first, each with
        its summary and who took it. Raises ``HandoffNotAllowed`` (403) for a caller without the
        ``staff_visibility``, ``InvalidInput`` for a limit outside 1..500."""
        return await self._desk.queue(caller or Caller(), flow, limit)

    async def take(
        self, session_id: str, *, caller: Caller | None = None, force: bool = False
    ) -> QueuedHandoff:
        """Assign a session awaiting a human to the calling member of staff. Refused, nothing
        changed: a caller without the staff visibility (``HandoffNotAllowed``, 403), an unknown
        session (``HandoffNotFound``, 404), one not awaiting a human (``HandoffNotWaiting``, 409),
        one another member of staff took, unless ``force`` (``HandoffTaken``, 409), or one changed
        at the same moment by another process (``HandoffConflict``, 409)."""
        check_session_id(session_id)
        return await self._desk.take(session_id, caller or Caller(), force)

    async def reply_as_staff(self, session_id: str, text: str, *, caller: Caller | None = None) -> Message:
        """Write ``text`` to the user of a session the caller took: an assistant message of kind
        ``staff`` with the caller as ``author``, in the transcript the user reads. Refused as
        ``take`` is, and for a session nobody took (``HandoffNotTaken``) or another took
        (``HandoffTaken``), or text that is empty, too long or not storable (``InvalidInput``)."""
        check_session_id(session_id)
        return await self._desk.reply(session_id, text, caller or Caller())

    async def hand_back(
        self,
        session_id: str,
        step: str | None = None,
        *,
        caller: Caller | None = None,
        note: str | None = None,
    ) -> SessionInfo:
        """Give a session the caller took back to the flow: status ``running``, in ``step`` (by
        default the one it was handed off from); the user's next message is answered by the model
        again. ``note`` is told to that step's model (never shown to the user). Refused as
        ``reply_as_staff`` is, and for a step the flow has not, or one that ends or hands off
        (``InvalidInput``)."""
        check_session_id(session_id)
        return await self._desk.hand_back(session_id, step, caller or Caller(), note)

    async def messages(
        self, session_id: str, *, after: int = -1, caller: Caller | None = None
    ) -> tuple[Session, list[Message]] | None:
        """The session and the messages of it the user saw (``Message.is_shown``) after ``after``
        (a ``seq``), in order: what a page polls for staff replies. Its owner reads them, and staff
        while it awaits a human; None for anyone else, or an unknown session."""
        check_session_id(session_id)
        if not -1 <= after <= MAX_OFFSET:
            raise InvalidInput(f"after must be between -1 and {MAX_OFFSET}", field="after")
        caller = caller or Caller()
        async with store_call("loading session", session_id):
            session = await self.store.load(session_id)
        if session is None or not may_read(session, caller, self.staff_visibility):
            return None
        async with store_call("reading a transcript", session_id):
            stored = await self.store.transcript(session_id)
        shown = [m for m in with_outputs_marked(stored) if m.seq > after and m.is_shown]
        return session, shown

    def session_lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Hold this process's lock of ``session_id``: no turn of it runs here meanwhile."""
        return self.turns.session_lock(session_id)

    # --- sessions -------------------------------------------------------------------------------

    async def create_session(
        self, flow: str | type[Flow], *, caller: Caller | None = None, session_id: str | None = None
    ) -> Session:
        """Store a new, empty session of ``flow`` for the caller, before any message.

        ``session_id`` names it (an id derived from a protocol's thread id, say); by default the
        engine draws one. Its start step is entered with the first turn. Raises ``FlowNotFound``,
        ``InvalidInput`` for a malformed id, ``SessionConflict`` when a session has that id
        already, or ``StoreError``.
        """
        spec = self.flow(flow)
        if session_id is not None:
            check_session_id(session_id)
        caller = caller or Caller()
        session = Session(
            id=session_id or new_session_id(),
            flow=spec.name,
            current_step=spec.start,
            principal=caller.principal,
        )
        async with store_call("creating a session"):
            await self.store.save(session, expected_revision=None)
        return session.copy()

    async def get_session(self, session_id: str, *, principal: PrincipalFilter = None) -> Session | None:
        """The stored session, or None if unknown or owned by another principal (``ANY_PRINCIPAL``
        reads any session: for operators' tools, never for end users' requests).

        Raises ``InvalidInput`` for a malformed id and ``StoreError`` when the store fails."""
        check_session_id(session_id)
        async with store_call("loading session"):
            session = await self.store.load(session_id)
        if session is None or not may_access(session, principal):
            return None
        return session

    async def transcript(self, session_id: str, *, principal: PrincipalFilter = None) -> list[Message] | None:
        """Every message of the session in order (None if unknown or another principal's), the
        structured answers stored before ``kind="output"`` existed marked as such
        (``with_outputs_marked``), so every reader shows what the user saw the same way."""
        if await self.get_session(session_id, principal=principal) is None:
            return None
        async with store_call("reading a transcript"):
            stored = await self.store.transcript(session_id)
        return with_outputs_marked(stored)

    async def session_files(
        self, session_id: str, *, principal: PrincipalFilter = None
    ) -> list[AttachmentRef] | None:
        """The files users sent in the session, in the order first sent (None if unknown or another
        principal's). Each file once, under the name it was first sent with."""
        if await self.get_session(session_id, principal=principal) is None:
            return None
        async with store_call("listing a session's files"):
            return await self.store.list_files(session_id)

    async def session_file(
        self, session_id: str, sha256: str, *, principal: PrincipalFilter = None
    ) -> Attachment | None:
        """One file of the session by its SHA-256, with its bytes (None if the session is unknown
        or another principal's, or holds no such file)."""
        refs = await self.session_files(session_id, principal=principal)
        ref = next((ref for ref in refs or () if ref.sha256 == sha256), None)
        if ref is None:
            return None
        async with store_call("reading a session's file"):
            found = await self.store.load_files(session_id, [sha256])
        data = found.get(sha256)
        return None if data is None else Attachment(ref.name, ref.media_type, data)

    async def session_errors(
        self, session_id: str, *, principal: PrincipalFilter = None
    ) -> list[LogRecord] | None:
        """The error records filed with the session, oldest first (None if unknown or another's).

        A first turn that fails keeps its session as it was before the turn, and its record is
        filed with it. With ``ANY_PRINCIPAL`` the records are read even when no session was saved
        under the id (the store failed as the first turn did): the error is filed under the id its
        session would have had."""
        if principal is ANY_PRINCIPAL:
            check_session_id(session_id)
        elif await self.get_session(session_id, principal=principal) is None:
            return None
        async with store_call("reading error records"):
            return await self.store.errors(session_id)

    async def timeline(
        self, session_id: str, *, principal: PrincipalFilter = None, turn: int | None = None
    ) -> SessionTimeline | None:
        """The recorded timelines of the session's turns, oldest first (only ``turn``'s when
        given; a failed turn and its retry share a number); None if the session is unknown or
        another principal's. Who may inspect at all is the edge's to decide (the HTTP route asks
        for the ``inspect`` visibility). Raises ``InvalidInput`` for a malformed id, ``StoreError``."""
        session = await self.get_session(session_id, principal=principal)
        if session is None:
            return None
        turns: list[TurnTimeline] = []
        if isinstance(self.store, TimelineStore):
            async with store_call("reading timelines", session_id):
                texts = await self.store.timelines(session_id, turn)
            turns = [TurnTimeline.from_json(text) for text in texts]
        return SessionTimeline(session_id=session.id, flow=session.flow, turns=turns)

    async def list_sessions(
        self,
        *,
        principal: PrincipalFilter,
        flow: str | None = None,
        status: SessionStatus | None = None,
        limit: int = 50,
        offset: int = 0,
        errors: bool | None = None,
    ) -> list[SessionInfo]:
        """The principal's sessions, most recent first (every principal's for ``ANY_PRINCIPAL``, and,
        as before, for None); with ``errors`` True only those with an error record (a turn that
        failed), False only those without. Raises ``InvalidInput`` for a limit outside 1..500 or an
        offset outside 0..``MAX_OFFSET``, ``StoreError`` when the store fails."""
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500", field="limit")
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidInput(f"offset must be between 0 and {MAX_OFFSET}", field="offset")
        # Asked of the store only when wanted: a store written before the filter lists as it did.
        extra = {} if errors is None else {"errors": errors}
        async with store_call("listing sessions"):
            return await self.store.list_sessions(
                flow=flow,
                status=status,
                principal=None if principal is ANY_PRINCIPAL else principal,
                limit=limit,
                offset=offset,
                **extra,
            )

    async def find_sessions(self, id_or_prefix: str, *, limit: int = 6) -> list[str]:
        """Ids of stored sessions equal to ``id_or_prefix`` or starting with it (at most ``limit``),
        the exact match alone when there is one: what a command line needs to accept short ids."""
        check_session_id(id_or_prefix)
        async with store_call("finding sessions"):
            ids = await self.store.find_ids(id_or_prefix, limit=limit)
        # An exact id is its own prefix and sorts before every longer id that starts with it.
        return [id_or_prefix] if id_or_prefix in ids else ids

    async def store_health(self) -> StoreHealth | None:
        """``ok`` or ``unavailable`` from a short, briefly cached ping of the store; None for stores
        that live in this process and need none (memory, SQLite)."""
        check = store_check(self.store)
        return None if check is None else await check.health()

    async def delete_session(self, session_id: str, *, principal: PrincipalFilter = None) -> bool:
        """Delete a session (waits for a turn in progress on it). False if it did not exist."""
        async with self.turns.session_lock(session_id):
            if await self.get_session(session_id, principal=principal) is None:
                return False
            async with store_call(f"deleting session {session_id}"):
                return await self.store.delete(session_id)

    async def aclose(self) -> None:
        """Close the store, the models and the MCP servers (their processes are stopped)."""
        await self._mcp.aclose()
        await self.store.close()
        for model in {id(m): m for m in self._models.values()}.values():
            await model.aclose()

    def check_message(self, message: object) -> str:
        """The user's message as the turn will see it (stripped), or ``InvalidInput`` /
        ``MessageTooLong`` naming the rule it breaks. Every turn runs this first."""
        return check_message(message, self.max_message_chars)


APPROVAL_ID = re.compile(r"^apr_[0-9a-f]{24}$")
MAX_REASON_CHARS = 2000


def check_approval_id(approval_id: object) -> str:
    if not isinstance(approval_id, str) or not APPROVAL_ID.match(approval_id):
        raise InvalidInput("approval id must be apr_ and 24 hexadecimal digits", field="approval_id")
    return approval_id


def check_decision(decision: object) -> Decision:
    if decision == "approve" or decision == "deny":
        return decision
    raise InvalidInput('decision must be "approve" or "deny"', field="decision")


def check_reason(reason: object) -> str | None:
    """A decision's reason (told to the model when denying): text, at most 2,000 characters."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidInput(f"reason must be text, not {type(reason).__name__}", field="reason")
    text = reason.strip()
    if len(text) > MAX_REASON_CHARS:
        raise InvalidInput(f"reason is longer than {MAX_REASON_CHARS} characters", field="reason")
    check_text(text, "reason")
    return text or None


def check_session_id(session_id: str) -> None:
    """Refuse an id no store could hold, before any store is asked."""
    if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
        raise InvalidInput("session id must be 1-128 letters, digits, '-' or '_'", field="session_id")


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
