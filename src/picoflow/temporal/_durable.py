"""The workflow's side of a turn: a ``TurnHost`` whose store, models and tool handlers are
activities, so the ordinary turn code (``SessionTurns.take``) runs unchanged inside the workflow.

Each activity's result is recorded in the workflow's history. When another worker picks a turn up
(its worker died), the turn code runs again from the top and every call that already finished gets
its recorded result back instead of running again: a model is not asked twice, a tool never runs
twice, the session is loaded and saved once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from picoflow._run.dispatch import refused
from picoflow._run.workspace import ToolJob, Workspace
from picoflow.attachments import Attachment, AttachmentRef
from picoflow.exceptions import ModelError, RunError, SessionConflict, StoreError, ToolFailure
from picoflow.flow import FlowSpec, StepSpec
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall
from picoflow.models.base import Model
from picoflow.session import (
    LogRecord,
    Session,
    SessionInfo,
    SessionStatus,
    session_from_json,
    session_to_json,
)
from picoflow.sessions.base import SessionStore
from picoflow.step import Step
from picoflow.temporal import _codec as codec
from picoflow.temporal._events import watchers
from picoflow.timeline import TimelineSettings

ERROR_TYPE = "picoflow"
"""``ApplicationError.type`` of a failure an activity reports as a picoflow error (its details
hold the ``EncodedError``)."""

HEARTBEAT = timedelta(seconds=5)
"""How long a model or tool activity may go without a heartbeat before Temporal takes it for lost
(its worker died) and, for what may be retried, runs it on another worker."""

STORE_OPTIONS: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=200),
        maximum_interval=timedelta(seconds=5),
        maximum_attempts=6,
        non_retryable_error_types=[ERROR_TYPE],
    ),
}
"""Store calls are retried: a save is idempotent (see the save activity), a load reads."""

DEFAULT_MODEL_SECONDS = 600.0


async def call_activity(name: str, payload: str, failure: type[RunError], **options: Any) -> Any:
    """Run activity ``name``; a picoflow error it reported is raised again as its own class, any
    other failure (a timeout, retries exhausted) as ``failure``."""
    try:
        return await workflow.execute_activity(name, payload, **options)
    except ActivityError as exc:
        cause = exc.cause
        if isinstance(cause, CancelledError):
            # The workflow asked for it: its job was cancelled (``JobWorkflow.cancel``) while it
            # waited here. Raised as the cancellation it is, which the job path takes back.
            raise asyncio.CancelledError(f"{name} was cancelled") from None
        if isinstance(cause, ApplicationError) and cause.type == ERROR_TYPE and cause.details:
            raise codec.decode_error(codec.EncodedError.model_validate_json(cause.details[0])) from None
        raise failure(f"{name} failed: {cause or exc}") from exc


class DurableStore:
    """The store as the turn code sees it inside the workflow: each call is an activity."""

    def __init__(self, revision: int | None) -> None:
        self.revision = revision

    async def load(self, session_id: str) -> Session | None:
        data = await call_activity("picoflow.store.load", session_id, StoreError, **STORE_OPTIONS)
        if data is None:
            return None
        session = session_from_json(data)
        if self.revision is not None and session.revision != self.revision:
            # The client named the turn after the revision it saw; another turn came in between.
            raise SessionConflict(
                f"session {session_id} moved to revision {session.revision} before this turn started",
                session_id=session_id,
            )
        return session

    async def save(
        self,
        session: Session,
        *,
        expected_revision: int | None,
        appended: Sequence[tuple[str, Message]] = (),
        files: Sequence[Attachment] = (),
    ) -> int:
        if files:
            raise StoreError("files are not carried by the Temporal executor yet")
        payload = codec.SaveIn(
            session=session_to_json(session).decode(), expected_revision=expected_revision, appended=appended
        )
        revision: int = await call_activity(
            "picoflow.store.save", payload.model_dump_json(), StoreError, **STORE_OPTIONS
        )
        session.revision = revision
        return revision

    async def record_error(self, session_id: str, record: LogRecord) -> None:
        payload = codec.ErrorIn(session_id=session_id, record=record).model_dump_json()
        await call_activity("picoflow.store.record_error", payload, StoreError, **STORE_OPTIONS)

    async def load_files(self, session_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        payload = codec.FilesIn(session_id=session_id, hashes=sorted(hashes)).model_dump_json()
        data = await call_activity("picoflow.store.load_files", payload, StoreError, **STORE_OPTIONS)
        return codec.decode_files(data)

    # A turn uses none of these; they complete the ``SessionStore`` seam.
    async def list_files(self, session_id: str) -> list[AttachmentRef]:
        raise NotImplementedError

    async def delete(self, session_id: str) -> bool:
        raise NotImplementedError

    async def list_sessions(
        self,
        *,
        flow: str | None = None,
        status: SessionStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
        offset: int = 0,
        errors: bool | None = None,
    ) -> list[SessionInfo]:
        raise NotImplementedError

    async def find_ids(self, prefix: str, limit: int = 10) -> list[str]:
        raise NotImplementedError

    async def transcript(self, session_id: str) -> list[Message]:
        raise NotImplementedError

    async def errors(self, session_id: str) -> list[LogRecord]:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class DurableModel(Model):
    """A step's model inside the workflow: what the runner reads of it (name, window, whether it
    sees images) is the worker's real model's; each request is an activity."""

    def __init__(self, flow: str, step: str, real: Model) -> None:
        self.flow = flow
        self.step = step
        self.name = real.name
        self.context_window = real.context_window
        self.output_reserve = real.output_reserve
        self.reads_images = real.reads_images
        self.grounding = real.grounding
        # The adapter retries the provider itself; the activity is retried only when its worker is
        # lost, so its time allows every attempt of the adapter.
        limit = real.time_limit
        total = DEFAULT_MODEL_SECONDS if limit is None else limit * 2 + 30  # room for the retry waits
        self.options: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=total),
            "heartbeat_timeout": HEARTBEAT,
            "retry_policy": RetryPolicy(maximum_attempts=3, non_retryable_error_types=[ERROR_TYPE]),
        }

    async def request(self, request: ModelRequest) -> ModelResponse:
        # Read-only mappings (the runner shares one empty one) are sent as the dicts they hold.
        request = dataclasses.replace(request, settings=dict(request.settings), files=dict(request.files))
        payload = codec.ModelCallIn(flow=self.flow, step=self.step, request=request).model_dump_json()
        data = await call_activity("picoflow.model", payload, ModelError, **self.options)
        return codec.decode_response(data)


def workflow_time() -> float:
    """The workflow's time: the same when a worker replays the turn."""
    return workflow.now().timestamp()


class DurableHost:
    """The ``TurnHost`` of a turn inside the workflow: the worker's engine for flows and settings,
    activities for the store and the models."""

    def __init__(self, engine: Any, revision: int | None) -> None:
        self.engine = engine
        self.store: SessionStore = DurableStore(revision)
        self.deps = engine.deps
        self.limits = engine.limits
        self.max_reply_chars = engine.max_reply_chars
        self.before_turn: Callable[[FlowSpec], Awaitable[None]] | None = None
        self.registry: Mapping[str, FlowSpec] = engine.registry
        self.approval_lease: float = engine.approval_lease
        self.timeline_settings: TimelineSettings | None = engine.timeline_settings
        self.clock: Callable[[], float] = workflow_time
        self._models: dict[tuple[str, str], Model] = {}

    def flow(self, flow: str) -> FlowSpec:
        spec: FlowSpec = self.engine.flow(flow)
        return spec

    async def with_mcp_tools(self, spec: FlowSpec) -> FlowSpec:
        raise RunError(f"flow {spec.name} uses MCP servers, which the Temporal executor does not run yet")

    def model_for(self, flow: FlowSpec, step: StepSpec) -> Model:
        key = (flow.name, step.name)
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = DurableModel(flow.name, step.name, self.engine.model_for(flow, step))
        return model


class DurableTools:
    """The ``ToolRunner`` of a turn inside the workflow: a validated call runs in the tool activity,
    and the workspace takes back what the handler did there."""

    async def run(self, ws: Workspace, step: Step, spec: StepSpec, job: ToolJob) -> Any:
        call = job.calls[0]
        tool = None if job.group else spec.tools[call.name]
        # Checked and reported here, in the workflow, so the call shows while it runs; the activity
        # checks again, on the same usage, and counts it.
        ws.config.limits.check_before_tool_call(ws.usage)
        observer = ws.config.observer
        observer.tool_started(spec.name, call)
        streams, recorders = watchers(observer)
        started = workflow_time()
        payload = codec.ToolCallIn(
            flow=ws.config.spec.name,
            step=spec.name,
            calls=[{"name": c.name, "args": c.args, "id": c.id} for c in job.calls],
            group=job.group,
            key=job.key,
            session=session_to_json(ws.session).decode(),
            usage=ws.usage,
            events=bool(streams),
            timeline=bool(recorders),
            **codec.caller_fields(ws.caller),
        )
        seconds = (tool.timeout if tool is not None and tool.timeout else DEFAULT_MODEL_SECONDS) + 30
        # One attempt unless the tool says a second run is harmless: a worker lost mid-handler may
        # have had its effect. That holds for an approved call too (``job.key``, its approval's
        # id): it runs at most once, and an idempotent one gets the same key on every attempt.
        idempotent = tool is not None and tool.idempotent
        data = await call_activity(
            "picoflow.tool",
            payload.model_dump_json(),
            ToolFailure,
            start_to_close_timeout=timedelta(seconds=seconds),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RetryPolicy(
                maximum_attempts=3 if idempotent else 1, non_retryable_error_types=[ERROR_TYPE]
            ),
        )
        out = codec.ToolCallOut.model_validate_json(data)
        # The handler's sub-step runs, as the activity recorded them.
        for event in out.events:
            decoded = codec.decode_event(event)
            for stream in streams:
                stream.emit(decoded)
        for recorder in recorders:
            recorder.log.records.adopt(out.timeline, started)
        _adopt(ws, out)
        if out.error is not None:
            raise codec.decode_error(out.error)
        assert out.value is not None
        return _value(ws, call, out.value)


DURABLE_TOOLS = DurableTools()


def _adopt(ws: Workspace, out: codec.ToolCallOut) -> None:
    """Make the workspace what the handler left: its session (in place, so the step states the
    turn's objects hold stay the live ones), messages, warnings and usage. Its erases are in the
    session: handlers run before a response's erases are ever held."""
    session, after = ws.session, session_from_json(out.session)
    states = session.states
    for key, state in after.states.items():
        mine = states.get(key)
        if mine is None:
            states[key] = state
        elif mine != state:
            mine.clear()
            mine.update(state)
    for key in [key for key in states if key not in after.states]:
        del states[key]
    for field in dataclasses.fields(Session):
        if field.name not in ("states", "id"):
            setattr(session, field.name, getattr(after, field.name))
    ws.appended.extend(out.appended)
    ws.warnings.extend(out.warnings)
    usage = ws.usage  # the same object the step contexts hold
    for field in dataclasses.fields(usage):
        setattr(usage, field.name, getattr(out.usage, field.name))


def _value(ws: Workspace, call: ToolCall, value: codec.ToolValue) -> Any:
    if value.kind == "outcome":
        assert value.outcome is not None
        return codec.decode_outcome(value.outcome)
    if value.kind == "refusal":
        return refused(call, value.text or "")
    if value.kind == "step":
        return ws.config.spec.steps[value.text or ""].cls
    if value.kind == "none":
        return None
    return value.text  # text, or another value already as its JSON
