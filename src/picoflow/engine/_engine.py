"""``FlowEngine``: registered flows, their models and a session store — the application object.

``await engine.run(flow, message, session_id)`` runs one turn and always returns a
``TurnResult``: run-time failures (a model outage, a budget exceeded, a bug in a tool, a
concurrent turn on the same session) come back as ``result.error`` with text safe to show a user,
and the stored session is left exactly as it was before the turn. The engine is the one service:
the HTTP server and the command line translate requests into its calls and nothing more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from picoflow._run.loop import first_request
from picoflow._run.observers import NO_OBSERVER, EventStream, combine
from picoflow._run.session_turn import SessionTurns, TurnExecutor, TurnRequest, store_call
from picoflow._run.text import check_message
from picoflow._run.text import check_text as check_text  # the one input rule, public here
from picoflow._run.tracing import TracingSetting
from picoflow.attachments import Attachment, AttachmentLimits, check_attachments
from picoflow.context import ANY_PRINCIPAL, Caller
from picoflow.engine._faces import RunFaces
from picoflow.engine._sessions import MAX_OFFSET, StoredSessions, check_session_id
from picoflow.events import TurnEvent
from picoflow.exceptions import FlowDefinitionError, FlowNotFound, InvalidInput, RunError
from picoflow.flow import Flow, FlowSpec, StepSpec
from picoflow.mcp._listing import MCPTools
from picoflow.models.base import Model
from picoflow.models.catalog import (
    ModelSelection,
    as_selection,
    default_selection,
    validate_selection,
)
from picoflow.models.fallback import as_model
from picoflow.results import TurnError, TurnFinished, TurnResult
from picoflow.session import Session, new_session_id
from picoflow.sessions.base import SessionStore
from picoflow.sessions.memory import MemoryStore
from picoflow.usage import UsageLimits

__all__ = [
    "ANY_PRINCIPAL",
    "MAX_OFFSET",
    "FlowEngine",
    "TurnError",
    "TurnFinished",
    "TurnResult",
    "check_session_id",
    "check_text",
]

logger = logging.getLogger("picoflow")


class FlowEngine(StoredSessions, RunFaces):
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
            executor: Where turns run once their input is checked: None runs them here, in this
                process; ``picoflow.temporal.TemporalExecutor`` runs each as a durable workflow.
        """
        self.store: SessionStore = store if store is not None else MemoryStore()
        self.deps = deps
        self.limits = limits
        self.max_message_chars = max_message_chars
        self.max_reply_chars = max_reply_chars
        self.attachment_limits = attachment_limits or AttachmentLimits()
        self.before_turn = before_turn
        self.executor = executor
        self._tracing = TracingSetting(tracing, capture_content=trace_content)
        self._override: Model | ModelSelection | None = None
        if isinstance(model, Model):
            self._override = model
        elif model is not None:
            self._override = as_selection(model)
            validate_selection(self._override)
        self._flows: dict[str, FlowSpec] = {}
        self.registry: Mapping[str, FlowSpec] = MappingProxyType(self._flows)  # read-only, live
        self._models: dict[tuple[str, str], Model] = {}
        self._turns = SessionTurns(self)
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
            raise FlowNotFound(f"no flow named {name!r} is registered")
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
    ) -> TurnResult:
        """Run one turn. Never raises for run-time failures: see ``TurnResult.error``.

        ``flow`` may be None when ``session_id`` is given: the session knows its flow.
        ``attachments`` are files sent with the message (refused, before anything is stored, when
        their type is not accepted, contradicts their bytes, or they exceed ``attachment_limits``).
        """
        tracer = self._tracing.observer()
        observer = (
            NO_OBSERVER
            if tracer is None and on_event is None
            else combine(tracer, EventStream(on_event) if on_event is not None else None)
        )
        flow_name = flow if isinstance(flow, str) or flow is None else flow.name
        observer.turn_started(flow_name or "session", session_id, message)
        try:
            try:
                spec = self.flow(flow) if flow is not None or session_id is None else None
                text = self.check_message(message)
                if session_id is not None:
                    check_session_id(session_id)
                files = tuple(attachments) if attachments else ()
                if files:
                    check_attachments(list(files), self.attachment_limits)
            except RunError as exc:
                result = await self._turns.failed(exc, session_id, session_id, None)
            else:
                request = TurnRequest(spec, text, session_id, caller or Caller(), files)
                executor = self.executor
                if executor is None:
                    result = await self._turns.take(request, observer)
                else:
                    try:
                        result = await executor.take(self, request, observer)
                    except RunError as exc:  # refused before any execution: nothing ran, nothing stored
                        result = await self._turns.failed(exc, session_id, session_id, None)
        except BaseException as exc:
            observer.turn_aborted(exc)
            raise
        observer.turn_finished(result)
        return result

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
        ws = self._turns.workspace(spec, session, Caller(), combine())
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

    # --- sessions -------------------------------------------------------------------------------

    async def create_session(self, flow: str | type[Flow], *, caller: Caller | None = None) -> Session:
        """Store a new, empty session of ``flow`` for the caller, before any message.

        Its start step is entered with the first turn. Raises ``FlowNotFound`` or ``StoreError``.
        """
        spec = self.flow(flow)
        caller = caller or Caller()
        session = Session(
            id=new_session_id(), flow=spec.name, current_step=spec.start, principal=caller.principal
        )
        async with store_call("creating a session"):
            await self.store.save(session, expected_revision=None)
        return session.copy()

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
