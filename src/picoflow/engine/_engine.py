"""``FlowEngine``: registered flows, their models and a session store — the application object.

``await engine.run(flow, message, session_id)`` runs one turn and always returns a
``TurnResult``: run-time failures (a model outage, a budget exceeded, a bug in a tool, a
concurrent turn on the same session) come back as ``result.error`` with text safe to show a user,
and the stored session is left exactly as it was before the turn. ``run_stream`` and ``run_sync``
are the same turn for a caller that watches its events, or that has no event loop. The engine also
reads, lists and deletes stored sessions, every read checked against the caller's principal. It is
the one service: the HTTP server and the command line translate requests into its calls and nothing
more.

The engine holds the settings and the registry; each concept is a part of its own, which reads
them from the engine at each call: the turns and decisions it hands to its executor (``_jobs``),
the approvals (``_approvals``), the MCP servers (``_mcp``), the stored sessions (``_sessions``)
and the staff desk (``_handoffs``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from types import MappingProxyType
from typing import Any

from picoflow._run.session_turn import SessionTurns
from picoflow._run.text import check_message
from picoflow._run.tracing import TracingSetting
from picoflow.approvals import Approval
from picoflow.attachments import Attachment, AttachmentLimits, AttachmentRef
from picoflow.context import ANY_PRINCIPAL, Caller, PrincipalFilter
from picoflow.engine._approvals import Approvals
from picoflow.engine._checks import MAX_OFFSET, SESSION_ID, check_session_id, check_text
from picoflow.engine._handoffs import StaffDesk
from picoflow.engine._jobs import Jobs
from picoflow.engine._mcp import FlowServers
from picoflow.engine._sessions import StoredSessions
from picoflow.engine._versions import SessionsCheck
from picoflow.engine.executors import LocalExecutor, TurnExecutor
from picoflow.events import TurnEvent
from picoflow.exceptions import FlowDefinitionError, FlowNotFound, InvalidInput
from picoflow.flow import Flow, FlowSpec, StepSpec
from picoflow.handoffs import STAFF_VISIBILITY, QueuedHandoff
from picoflow.messages import Message
from picoflow.models.base import Model
from picoflow.models.catalog import ModelSelection, as_selection, default_selection, validate_selection
from picoflow.models.fallback import as_model
from picoflow.results import Cancelled, TurnFinished, TurnResult
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions.base import SessionStore
from picoflow.sessions.health import StoreHealth
from picoflow.sessions.memory import MemoryStore
from picoflow.timeline import SessionTimeline, TimelineFollower, TimelineSettings, TimelineUpdate
from picoflow.usage import UsageLimits
from picoflow.versions import FlowCheck

__all__ = ["ANY_PRINCIPAL", "MAX_OFFSET", "SESSION_ID", "FlowEngine", "check_session_id", "check_text"]


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
        self._servers = FlowServers(self._flows)
        self._approvals = Approvals(self)
        self._jobs = Jobs(self, self._approvals, self._tracing, timeline)
        self._sessions = StoredSessions(self)
        self._desk = StaffDesk(self)
        self._check = SessionsCheck(self)
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
        await self._servers.start()

    async def with_mcp_tools(self, spec: FlowSpec) -> FlowSpec:
        """``spec`` with the tools of its MCP servers, listed once and kept (a turn of a flow with
        servers calls this first). Only that flow waits for them: a server that does not start
        fails the turns of its own flow (``ToolSourceUnavailable``, 503), and they try again."""
        return await self._servers.with_tools(spec)

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
        return await self._jobs.run(flow, message, session_id, caller, on_event, attachments, on_timeline)

    def run_stream(
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
        return self._jobs.stream(
            partial(self.run, flow, message, session_id, caller=caller, attachments=attachments)
        )

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
        return self._jobs.run_sync(
            partial(self.run, flow, message, session_id, caller=caller, attachments=attachments)
        )

    async def warm(self, flow: str | type[Flow], *, message: str = "Hello") -> bool:
        """Send the first request of a new session of ``flow`` once, answering at most one token.

        This loads the start step's model and fills prompt caches (the embedded model keeps the
        processed prompt), so the first real turn does not pay for reading a long system prompt.
        It costs a model call: use it with local models. Best effort: returns whether it worked.
        """
        return await self._jobs.warm(flow, message)

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
        return await self._jobs.decide(
            session_id, approval_id, decision, reason, caller, on_event, on_timeline
        )

    async def cancel(self, session_id: str, *, caller: Caller | None = None) -> Cancelled:
        """Cancel the turn running in ``session_id`` (or the decision, with the turn it resumes).

        The job stops where it waits, before its commit: nothing of it is stored, no tool starts
        after the cancel, and its own caller gets a ``TurnCancelled`` result (409; a stream ends
        with it). A checkpoint being saved (a decision's) finishes first and stands; a job whose
        final commit has started finishes. The next message is a turn like any other.

        Only the session's owner (the caller's principal) may cancel. Raises ``SessionNotFound``
        (404) for an unknown session or another's, ``TurnNotRunning`` (409) when nothing runs
        where the executor can reach it, and ``InvalidInput`` for a malformed id or
        ``StoreError`` when the store fails. ``LocalExecutor`` reaches the jobs of this process
        and, on a ``PostgresStore``, those of every process sharing its database and schema (a
        stored session's: a first turn's only here): no job running here, the cancel asks them
        and waits up to the store's ``cancel_wait`` for an answer. ``TemporalExecutor`` reaches
        them on any worker, from any process with a client.
        """
        return await self._jobs.cancel(session_id, caller)

    async def approvals(self, session_id: str, *, caller: Caller | None = None) -> list[Approval] | None:
        """The approvals of a session the caller may see (its own session's, or those its roles may
        decide), oldest first, each as it stands now (a pending one past its time reads
        ``expired``); None when the session is unknown or shows the caller none."""
        return await self._approvals.of_session(session_id, caller or Caller())

    async def pending_approvals(
        self, *, caller: Caller | None = None, flow: str | None = None, limit: int = 50
    ) -> list[tuple[str, Approval]]:
        """(session id, approval) for every pending, unexpired approval the caller may decide, in
        the sessions waiting for one, most recent first: a supervisor's queue."""
        return await self._approvals.pending(caller or Caller(), flow, limit)

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
        return await self._sessions.messages(session_id, after, caller or Caller())

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
        return await self._sessions.create(self.flow(flow), caller or Caller(), session_id)

    async def get_session(self, session_id: str, *, principal: PrincipalFilter = None) -> Session | None:
        """The stored session, or None if unknown or owned by another principal (``ANY_PRINCIPAL``
        reads any session: for operators' tools, never for end users' requests).

        Raises ``InvalidInput`` for a malformed id and ``StoreError`` when the store fails."""
        return await self._sessions.get(session_id, principal)

    async def transcript(self, session_id: str, *, principal: PrincipalFilter = None) -> list[Message] | None:
        """Every message of the session in order (None if unknown or another principal's), the
        structured answers stored before ``kind="output"`` existed marked as such
        (``with_outputs_marked``), so every reader shows what the user saw the same way."""
        return await self._sessions.transcript(session_id, principal)

    async def session_files(
        self, session_id: str, *, principal: PrincipalFilter = None
    ) -> list[AttachmentRef] | None:
        """The files users sent in the session, in the order first sent (None if unknown or another
        principal's). Each file once, under the name it was first sent with."""
        return await self._sessions.files(session_id, principal)

    async def session_file(
        self, session_id: str, sha256: str, *, principal: PrincipalFilter = None
    ) -> Attachment | None:
        """One file of the session by its SHA-256, with its bytes (None if the session is unknown
        or another principal's, or holds no such file)."""
        return await self._sessions.file(session_id, sha256, principal)

    async def session_errors(
        self, session_id: str, *, principal: PrincipalFilter = None
    ) -> list[LogRecord] | None:
        """The error records filed with the session, oldest first (None if unknown or another's).

        A first turn that fails keeps its session as it was before the turn, and its record is
        filed with it. With ``ANY_PRINCIPAL`` the records are read even when no session was saved
        under the id (the store failed as the first turn did): the error is filed under the id its
        session would have had."""
        return await self._sessions.errors(session_id, principal)

    async def timeline(
        self, session_id: str, *, principal: PrincipalFilter = None, turn: int | None = None
    ) -> SessionTimeline | None:
        """The recorded timelines of the session's turns, oldest first (only ``turn``'s when
        given; a failed turn and its retry share a number); None if the session is unknown or
        another principal's. Who may inspect at all is the edge's to decide (the HTTP route asks
        for the ``inspect`` visibility). Raises ``InvalidInput`` for a malformed id, ``StoreError``."""
        return await self._sessions.timeline(session_id, principal, turn)

    async def follow_timeline(
        self, session_id: str, *, principal: PrincipalFilter = None
    ) -> TimelineFollower | None:
        """Follow the session's turns and decisions as they run in this process, whoever started
        them (a page, a protocol, the command line): each timeline entry as it is recorded, and
        ``TurnRecorded`` once the turn is stored (``picoflow.timeline.TimelineFollower``; close it
        when done). None if the session is unknown or another principal's. The turns this engine
        hands to a durable executor are followed too (their worker relays the entries); turns
        another process submits (another server worker) show in ``timeline`` once stored.
        Raises ``RuntimeError`` when this engine records no timelines (``timeline=``),
        ``InvalidInput`` for a malformed id, ``StoreError``."""
        if self.timeline_settings is None:
            raise RuntimeError(
                "this engine records no timelines to follow: FlowEngine(timeline=TimelineSettings())"
            )
        session = await self._sessions.get(session_id, principal)
        if session is None:
            return None
        return self._jobs.follow(session.id, session.turns)

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
        return await self._sessions.list_sessions(principal, flow, status, limit, offset, errors)

    async def find_sessions(self, id_or_prefix: str, *, limit: int = 6) -> list[str]:
        """Ids of stored sessions equal to ``id_or_prefix`` or starting with it (at most ``limit``),
        the exact match alone when there is one: what a command line needs to accept short ids."""
        return await self._sessions.find(id_or_prefix, limit)

    async def store_health(self) -> StoreHealth | None:
        """``ok`` or ``unavailable`` from a short, briefly cached ping of the store; None for stores
        that live in this process and need none (memory, SQLite)."""
        return await self._sessions.health()

    async def check_sessions(self, flow: str | type[Flow], *, page: int = 1000) -> FlowCheck:
        """The pre-deploy check: what loading each live session of ``flow`` in the store under the
        registered version of the flow would do — nothing, migrate it, send it to the fallback
        step, or fail (and why), grouped. Reads the sessions ``page`` at a time, in id order, and
        changes nothing (``picoflow sessions check``). Raises ``FlowNotFound``, ``StoreError``,
        and ``ValueError`` for a store that cannot read its sessions in pages."""
        return await self._check.check(self.flow(flow), page)

    async def live_versions(self) -> dict[tuple[str, str], int]:
        """How many live sessions the store holds of each flow, by the version of the flow they last
        ran on ("": stored before versions were recorded), whether the flow is registered or not.
        Raises ``ValueError`` for a store that cannot count them (``LiveSessions``), ``StoreError``."""
        return await self._check.live_versions()

    async def delete_session(self, session_id: str, *, principal: PrincipalFilter = None) -> bool:
        """Delete a session (waits for a turn in progress on it). False if it did not exist."""
        return await self._sessions.delete(session_id, principal)

    async def aclose(self) -> None:
        """Close the store, the models and the MCP servers (their processes are stopped)."""
        self.turns.stop_listening()
        await self._servers.aclose()
        await self.store.close()
        for model in {id(m): m for m in self._models.values()}.values():
            await model.aclose()

    def check_message(self, message: object) -> str:
        """The user's message as the turn will see it (stripped), or ``InvalidInput`` /
        ``MessageTooLong`` naming the rule it breaks. Every turn runs this first."""
        return check_message(message, self.max_message_chars)
