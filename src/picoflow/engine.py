"""``FlowEngine``: registered flows, their models and a session store — the application object.

``await engine.run(flow, message, session_id)`` runs one turn and always returns a
``TurnResult``: run-time failures (a model outage, a budget exceeded, a bug in a tool, a
concurrent turn on the same session) come back as ``result.error`` with text safe to show a user,
and the stored session is left exactly as it was before the turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from picoflow._runner import Turn
from picoflow._text import check_text as check_text  # the one input rule, public here
from picoflow._tracing import Tracing
from picoflow._tracing import resolve as resolve_tracing
from picoflow._window import TRIMMED
from picoflow.context import Caller
from picoflow.events import TurnEvent
from picoflow.exceptions import (
    FlowDefinitionError,
    FlowMismatch,
    FlowNotFound,
    InvalidInput,
    MessageTooLong,
    RunError,
    SessionCompleted,
    SessionNotFound,
    StoreError,
)
from picoflow.flow import Flow, FlowSpec, StepSpec
from picoflow.messages import Message
from picoflow.models.base import Model
from picoflow.models.catalog import (
    ModelSelection,
    as_selection,
    create_model,
    default_selection,
    validate_selection,
)
from picoflow.session import LogRecord, Session, SessionInfo, SessionStatus
from picoflow.sessions.base import SessionStore
from picoflow.sessions.health import StoreHealth, store_check
from picoflow.sessions.memory import MemoryStore
from picoflow.usage import Usage, UsageLimits

if TYPE_CHECKING:
    from opentelemetry.trace import Span

logger = logging.getLogger("picoflow")

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MAX_OFFSET = 1_000_000_000
"""Largest listing offset accepted: far beyond any real listing, well inside a 64-bit integer."""
MAX_WARNINGS = 200
#: Warnings a long session raises every few turns as a matter of course: the session keeps only the
#: latest of each per step (each turn's result still lists its own), so its document stays small.
LATEST_ONLY = frozenset({TRIMMED})


@dataclass(frozen=True, slots=True)
class TurnError:
    """Why a turn failed, in words safe for an end user, plus what a program needs to react.

    ``error_class`` is the class of the failure; ``kind``, ``status`` and ``retryable`` come from it,
    so a program reacts with ``result.error.is_a(SessionNotFound)`` rather than by comparing strings.
    """

    error_class: type[RunError]
    message: str
    """Text safe to show an end user."""
    retry_after: float | None = None
    """Seconds to wait before retrying, when the failing dependency said so."""
    reference: str | None = None
    """Session id the error record was filed under (also for a first turn that stored nothing)."""
    field: str | None = None
    """For refused input: which input broke the rule (``message``, ``session_id``)."""

    @property
    def kind(self) -> str:
        """Stable code: ``usage_limit``, ``model_unavailable``, ``session_conflict``, ..."""
        return self.error_class.kind

    @property
    def status(self) -> int:
        """HTTP status of the failure."""
        return self.error_class.status

    @property
    def retryable(self) -> bool:
        return self.error_class.retryable

    def is_a(self, *types: type[RunError]) -> bool:
        return issubclass(self.error_class, types)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """The outcome of one turn."""

    message: str
    """The reply to show (or the public error text when the turn failed)."""
    session_id: str | None
    """None only when the first turn of a new session failed (nothing was stored)."""
    completed: bool
    content_type: str = "text/plain"
    step: str | None = None
    """Step the conversation is in after the turn."""
    usage: Usage = field(default_factory=Usage)
    error: TurnError | None = None
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """Last event of ``run_stream``: the turn's result."""

    result: TurnResult


class FlowEngine:
    """Runs turns of registered flows against a session store."""

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
        """
        self.store: SessionStore = store if store is not None else MemoryStore()
        self.deps = deps
        self.limits = limits
        self.max_message_chars = max_message_chars
        self.max_reply_chars = max_reply_chars
        self._tracing_setting = tracing
        self._trace_content = trace_content
        self.before_turn = before_turn
        self._tracing_cache: tuple[object, Tracing | None] | None = None
        self._override: Model | ModelSelection | None = None
        if isinstance(model, Model):
            self._override = model
        elif model is not None:
            self._override = as_selection(model)
            validate_selection(self._override)
        self._flows: dict[str, FlowSpec] = {}
        self._models: dict[tuple[str, str], Model] = {}
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._background: set[asyncio.Future[TurnResult]] = set()
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
                if choice is not None and not isinstance(choice, Model):
                    validate_selection(as_selection(choice))
            calls_models = any(not step.is_logic for step in spec.steps.values())
            if flow.model is None and calls_models and any(s.cls.model is None for s in spec.steps.values()):
                # A bad PICOFLOW_MODEL should stop the engine now, not fail the first turn.
                validate_selection(default_selection())
        self._flows[spec.name] = spec
        return spec

    @property
    def flows(self) -> list[FlowSpec]:
        return list(self._flows.values())

    def flow(self, flow: str | type[Flow] | None) -> FlowSpec:
        if flow is None:
            raise InvalidInput("a new session needs a flow name")
        name = flow if isinstance(flow, str) else flow.name
        spec = self._flows.get(name)
        if spec is None:
            raise FlowNotFound(f"no flow named {name!r} is registered")
        return spec

    def model_for(self, flow: FlowSpec, step: StepSpec) -> Model:
        """The model a step uses: engine override, else the step's, else the flow's, else the default."""
        key = (flow.name, step.name)
        model = self._models.get(key)
        if model is None:
            choice = self._override or step.cls.model or flow.cls.model or default_selection()
            model = choice if isinstance(choice, Model) else create_model(as_selection(choice))
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
    ) -> TurnResult:
        """Run one turn. Never raises for run-time failures: see ``TurnResult.error``.

        ``flow`` may be None when ``session_id`` is given: the session knows its flow.
        """
        tracing = self._tracing()
        if tracing is None:
            return await self._run(flow, message, session_id, caller, on_event, None, None)
        flow_name = flow if isinstance(flow, str) or flow is None else flow.name
        span = tracing.turn(flow_name or "session", session_id, message)
        try:
            result = await self._run(flow, message, session_id, caller, on_event, tracing, span)
        except BaseException as exc:
            tracing.fail(span, exc)
            raise
        if result.session_id:
            span.set_attribute("gen_ai.conversation.id", result.session_id)
        span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
        if result.error is not None:
            tracing.fail(span, result.error.kind)
        else:
            if tracing.capture_content:
                span.set_attribute(
                    "gen_ai.output.messages", json.dumps([{"role": "assistant", "content": result.message}])
                )
            span.end()
        return result

    def _tracing(self) -> Tracing | None:
        setting = self._tracing_setting
        if setting is False:
            return None
        if setting is not None:
            if self._tracing_cache is None:
                self._tracing_cache = (setting, resolve_tracing(setting, capture_content=self._trace_content))
            return self._tracing_cache[1]
        try:
            from opentelemetry import trace
        except ImportError:
            self._tracing_setting = False
            return None
        provider = trace.get_tracer_provider()
        if self._tracing_cache is None or self._tracing_cache[0] is not provider:
            self._tracing_cache = (provider, resolve_tracing(None, capture_content=self._trace_content))
        return self._tracing_cache[1]

    async def _run(
        self,
        flow: str | type[Flow] | None,
        message: str,
        session_id: str | None,
        caller: Caller | None,
        on_event: Callable[[TurnEvent], None] | None,
        tracing: Tracing | None,
        span: Span | None,
    ) -> TurnResult:
        caller = caller or Caller()
        turn: Turn | None = None
        reference = session_id
        try:
            spec = self.flow(flow) if flow is not None or session_id is None else None
            text = self.check_message(message)
            if session_id is not None:
                check_session_id(session_id)
            async with self._session_lock(session_id):
                spec, session, expected = await self._open(spec, session_id, caller)
                reference = session.id
                if self.before_turn is not None:
                    await self.before_turn(spec)
                turn = self._turn(spec, session, caller, on_event, tracing, span)
                session = await self._restore(turn, session)
                if session is not turn.session:
                    turn.release()
                    turn = self._turn(spec, session, caller, on_event, tracing, span)
                reply = await turn.run(text)
                await turn.finish()
                self._commit_locally(turn)
                async with _store_call(f"saving session {session.id}"):
                    await self.store.save(session, expected_revision=expected, appended=turn.appended)
            return TurnResult(
                message=reply,
                session_id=session.id,
                completed=session.status == "completed",
                content_type=turn.content_type or "text/plain",
                step=session.current_step,
                usage=turn.usage,
                warnings=tuple(record.message for record in turn.warnings),
            )
        except RunError as exc:
            return await self._failed(exc, reference, session_id, turn)
        except Exception as exc:
            logger.exception("picoflow: unexpected error in a turn of session %s", reference)
            wrapped = RunError(f"unexpected {type(exc).__name__}: {exc}")
            wrapped.__cause__ = exc
            return await self._failed(wrapped, reference, session_id, turn)
        finally:
            if turn is not None:
                turn.release()

    async def run_stream(
        self,
        flow: str | type[Flow] | None,
        message: str,
        session_id: str | None = None,
        *,
        caller: Caller | None = None,
    ) -> AsyncIterator[TurnEvent | TurnFinished]:
        """Run one turn, yielding its events as they happen and ``TurnFinished`` last.

        The turn runs to its end even if the consumer stops listening, so a disconnect never
        leaves a half-done turn.
        """
        queue: asyncio.Queue[TurnEvent | TurnFinished | None] = asyncio.Queue()
        task = asyncio.ensure_future(
            self.run(flow, message, session_id, caller=caller, on_event=queue.put_nowait)
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
    ) -> TurnResult:
        """``run`` for code without an event loop (scripts, notebooks without one running)."""
        return asyncio.run(self.run(flow, message, session_id, caller=caller))

    async def warm(self, flow: str | type[Flow], *, message: str = "Hello") -> bool:
        """Send the first request of a new session of ``flow`` once, answering at most one token.

        This loads the start step's model and fills prompt caches (the embedded model keeps the
        processed prompt), so the first real turn does not pay for reading a long system prompt.
        It costs a model call: use it with local models. Best effort: returns whether it worked.
        """
        spec = self.flow(flow)
        session = Session(id="warm-up", flow=spec.name, current_step=spec.start)
        turn = self._turn(spec, session, Caller(), None, None, None)
        try:
            first = await turn.first_request(message)
            if first is None:
                return False
            model, request = first
            await model.request(dataclasses.replace(request, settings={**request.settings, "max_tokens": 1}))
            return True
        except Exception:
            logger.warning("picoflow: warming flow %s failed", spec.name, exc_info=True)
            return False
        finally:
            turn.release()

    # --- sessions -------------------------------------------------------------------------------

    async def create_session(self, flow: str | type[Flow], *, caller: Caller | None = None) -> Session:
        """Store a new, empty session of ``flow`` for the caller, before any message.

        Its start step is entered with the first turn. Raises ``FlowNotFound`` or ``StoreError``.
        """
        spec = self.flow(flow)
        caller = caller or Caller()
        session = Session(
            id=str(uuid.uuid4()), flow=spec.name, current_step=spec.start, principal=caller.principal
        )
        async with _store_call("creating a session"):
            await self.store.save(session, expected_revision=None)
        return session.copy()

    async def get_session(self, session_id: str, *, principal: str | None = None) -> Session | None:
        """The stored session, or None if unknown or owned by another principal.

        Raises ``InvalidInput`` for a malformed id and ``StoreError`` when the store fails."""
        check_session_id(session_id)
        async with _store_call("loading session"):
            session = await self.store.load(session_id)
        if session is None or not _may_access(session, principal):
            return None
        return session

    async def transcript(self, session_id: str, *, principal: str | None = None) -> list[Message] | None:
        """Every message of the session in order (None if unknown or another principal's)."""
        if await self.get_session(session_id, principal=principal) is None:
            return None
        async with _store_call("reading a transcript"):
            return await self.store.transcript(session_id)

    async def list_sessions(
        self,
        *,
        principal: str | None,
        flow: str | None = None,
        status: SessionStatus | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionInfo]:
        """The principal's sessions, most recent first. Raises ``InvalidInput`` for a limit outside
        1..500 or an offset outside 0..``MAX_OFFSET``, ``StoreError`` when the store fails."""
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500", field="limit")
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidInput(f"offset must be between 0 and {MAX_OFFSET}", field="offset")
        async with _store_call("listing sessions"):
            return await self.store.list_sessions(
                flow=flow, status=status, principal=principal, limit=limit, offset=offset
            )

    async def find_sessions(self, id_or_prefix: str, *, limit: int = 6) -> list[str]:
        """Ids of stored sessions equal to ``id_or_prefix`` or starting with it (at most ``limit``),
        the exact match alone when there is one: what a command line needs to accept short ids."""
        check_session_id(id_or_prefix)
        async with _store_call("finding sessions"):
            if await self.store.load(id_or_prefix) is not None:
                return [id_or_prefix]
            return await self.store.find_ids(id_or_prefix, limit=limit)

    async def store_health(self) -> StoreHealth | None:
        """``ok`` or ``unavailable`` from a short, briefly cached ping of the store; None for stores
        that live in this process and need none (memory, SQLite)."""
        check = store_check(self.store)
        return None if check is None else await check.health()

    async def delete_session(self, session_id: str, *, principal: str | None = None) -> bool:
        """Delete a session (waits for a turn in progress on it). False if it did not exist."""
        async with self._session_lock(session_id):
            if await self.get_session(session_id, principal=principal) is None:
                return False
            async with _store_call(f"deleting session {session_id}"):
                return await self.store.delete(session_id)

    async def aclose(self) -> None:
        await self.store.close()
        for model in {id(m): m for m in self._models.values()}.values():
            await model.aclose()

    # --- internals ------------------------------------------------------------------------------

    def check_message(self, message: object) -> str:
        """The user's message as the turn will see it (stripped), or ``InvalidInput`` /
        ``MessageTooLong`` naming the rule it breaks. Every turn runs this first."""
        if not isinstance(message, str):
            raise InvalidInput(f"message must be text, not {type(message).__name__}", field="message")
        text = message.strip()
        if not text:
            raise InvalidInput("message is empty", field="message")
        if len(text) > self.max_message_chars:
            raise MessageTooLong(
                f"message is longer than {self.max_message_chars} characters", field="message"
            )
        check_text(text, "message")
        return text

    def _turn(
        self,
        spec: FlowSpec,
        session: Session,
        caller: Caller,
        on_event: Callable[[TurnEvent], None] | None,
        tracing: Tracing | None,
        span: Span | None,
    ) -> Turn:
        return Turn(
            spec=spec,
            session=session,
            caller=caller,
            deps=caller.deps if caller.deps is not None else self.deps,
            model_for=lambda step: self.model_for(spec, step),
            limits=self.limits or spec.limits,
            max_reply_chars=self.max_reply_chars,
            emit=on_event,
            tracing=tracing,
            trace_parent=span,
        )

    async def _open(
        self, spec: FlowSpec | None, session_id: str | None, caller: Caller
    ) -> tuple[FlowSpec, Session, int | None]:
        if session_id is None:
            assert spec is not None  # run() resolves the flow of a new session up front
            session = Session(
                id=str(uuid.uuid4()), flow=spec.name, current_step=spec.start, principal=caller.principal
            )
            return spec, session, None
        async with _store_call(f"loading session {session_id}"):
            stored = await self.store.load(session_id)
        if stored is None or not _may_access(stored, caller.principal):
            raise SessionNotFound(f"no session {session_id} for this caller", session_id=session_id)
        if spec is None:
            spec = self.flow(stored.flow)
        if stored.flow != spec.name:
            raise FlowMismatch(f"session {session_id} belongs to flow {stored.flow}, not {spec.name}")
        if stored.status != "running":
            raise SessionCompleted(f"session {session_id} is {stored.status}", session_id=session_id)
        if stored.current_step not in spec.steps:
            raise FlowMismatch(
                f"session {session_id} is in step {stored.current_step}, unknown to {spec.name}"
            )
        return spec, stored, stored.revision

    async def _restore(self, turn: Turn, session: Session) -> Session:
        if session.revision == 0:
            return session
        try:
            restored = turn.flow.on_restore_session(session)
        except Exception as exc:
            raise RunError(f"on_restore_session raised {type(exc).__name__}: {exc}") from exc
        if restored is None:
            return Session(
                id=session.id,
                flow=session.flow,
                current_step=turn.spec.start,
                revision=session.revision,
                principal=session.principal,
                next_seq=session.next_seq,
            )
        if not isinstance(restored, Session) or restored.id != session.id:
            raise RunError("on_restore_session must return the session, a fresh Session with its id, or None")
        # A replacement document continues the transcript: its messages must come after the stored ones.
        restored.next_seq = max(restored.next_seq, session.next_seq)
        return restored

    def _commit_locally(self, turn: Turn) -> None:
        session = turn.session
        session.turns += 1
        session.usage.add(turn.usage)
        session.updated_at = time.time()
        if turn.warnings:
            superseded = {(w.code, w.step) for w in turn.warnings if w.code in LATEST_ONLY}
            if superseded:
                session.warnings[:] = [w for w in session.warnings if (w.code, w.step) not in superseded]
            session.warnings.extend(turn.warnings)
            del session.warnings[:-MAX_WARNINGS]

    async def _failed(
        self, exc: RunError, reference: str | None, requested_id: str | None, turn: Turn | None
    ) -> TurnResult:
        step = exc.step or (turn.session.current_step if turn else None)
        exc.session_id = exc.session_id or reference
        exc.step = step
        detail = str(exc)
        if exc.__cause__ is not None and type(exc.__cause__).__name__ not in detail:
            detail = f"{detail} (caused by {type(exc.__cause__).__name__})"
        if reference is not None and exc.recorded:
            record = LogRecord(exc.kind, detail, "error", step, (turn.session.turns + 1) if turn else None)
            try:
                await self.store.record_error(reference, record)
            except Exception:
                logger.exception("picoflow: could not record the error of session %s", reference)
        logger.warning("picoflow turn failed [%s] session=%s step=%s: %s", exc.kind, reference, step, detail)
        stored_id = requested_id if exc.keeps_session else None
        return TurnResult(
            message=exc.public_text,
            session_id=stored_id,
            completed=isinstance(exc, SessionCompleted),
            content_type="text/plain",
            step=step if stored_id else None,
            usage=turn.usage if turn else Usage(),
            error=TurnError(
                type(exc),
                exc.public_text,
                exc.retry_after,
                reference,
                exc.field if isinstance(exc, InvalidInput) else None,
            ),
            warnings=tuple(record.message for record in turn.warnings) if turn else (),
        )

    @asynccontextmanager
    async def _session_lock(self, session_id: str | None) -> AsyncIterator[None]:
        """Serialise turns of one session inside this process (the store's CAS covers the rest)."""
        if session_id is None:
            yield
            return
        lock, users = self._locks.get(session_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users <= 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


def check_session_id(session_id: str) -> None:
    """Refuse an id no store could hold, before any store is asked."""
    if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
        raise InvalidInput("session id must be 1-128 letters, digits, '-' or '_'", field="session_id")


@asynccontextmanager
async def _store_call(what: str) -> AsyncIterator[None]:
    """Typed errors pass; an ``OSError`` is an outage; anything else is a bug (500)."""
    try:
        yield
    except RunError:
        raise
    except OSError as exc:
        raise StoreError(f"{what} failed: {type(exc).__name__}: {exc}") from exc


def _may_access(session: Session, principal: str | None) -> bool:
    # A session created without a principal belongs to "nobody in particular": only callers without
    # a principal may use it, so an authenticated caller can never reach an anonymous session.
    return session.principal == principal
