"""The activities of a turn, bound to the worker's real ``FlowEngine``: its models, its store and
the flows' tool handlers run here, in ordinary Python, outside the workflow's replay."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from pydantic_core import to_json
from temporalio import activity
from temporalio.exceptions import ApplicationError

from picoflow._run.dispatch import LOCAL_TOOLS, CallResult, job_of
from picoflow._run.observers import combine
from picoflow._run.timeline import Recording, SubStepRecorder
from picoflow.exceptions import ModelError, ModelMisbehaved, RunError, SessionConflict
from picoflow.messages import ToolCall
from picoflow.outcomes import Outcome
from picoflow.session import session_from_json, session_to_json
from picoflow.sessions.base import TimelineStore
from picoflow.step import Step
from picoflow.temporal import _codec as codec
from picoflow.temporal._durable import ERROR_TYPE
from picoflow.temporal._events import SubStepEvents
from picoflow.timeline import TimelineSettings

T = TypeVar("T")

BEAT_SECONDS = 1.0


def reported(error: RunError) -> ApplicationError:
    """A picoflow error as the workflow will raise it again (never retried: the adapter and the
    store decided already)."""
    details = codec.encode_error(error).model_dump_json()
    return ApplicationError(str(error), details, type=ERROR_TYPE, non_retryable=True)


async def beating(work: Awaitable[T]) -> T:
    """Await ``work``, heartbeating meanwhile: when this worker dies, Temporal knows within the
    heartbeat timeout, not at the end of the activity's whole time."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=BEAT_SECONDS)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()


class TurnActivities:
    """The activities of ``PicoflowTurn`` for one engine (register the bound methods)."""

    def __init__(self, engine: Any, recording: Recording | None = None) -> None:
        self.engine = engine
        self.recording = recording or Recording(engine.timeline_settings or TimelineSettings())
        """How the sub-step runs of a handler are recorded, for a turn recording its timeline."""

    @activity.defn(name="picoflow.model")
    async def model(self, payload: str) -> str:
        call = codec.ModelCallIn.model_validate_json(payload)
        spec = self.engine.flow(call.flow)
        model = self.engine.model_for(spec, spec.steps[call.step])
        try:
            response = await beating(model.request(call.request))
        except RunError as exc:
            raise reported(exc) from exc
        except (TimeoutError, OSError) as exc:  # as the runner classifies them in process
            raise reported(ModelError(f"model {model.name} failed: {type(exc).__name__}: {exc}")) from exc
        except Exception as exc:
            failure = ModelMisbehaved(f"model {model.name} failed: {type(exc).__name__}: {exc}")
            raise reported(failure) from exc
        return codec.encode_response(response)

    @activity.defn(name="picoflow.tool")
    async def tool(self, payload: str) -> str:
        given = codec.ToolCallIn.model_validate_json(payload)
        engine = self.engine
        spec = engine.flow(given.flow)
        session = session_from_json(given.session)
        # The workspace the workflow had, rebuilt as the engine's turns build it: a handler that
        # starts sub-steps runs them here, inside this activity, on the real models.
        log = SubStepEvents() if given.events else None
        recorder = SubStepRecorder(self.recording) if given.timeline else None
        ws = engine.turns.workspace(spec, session, given.caller(engine.deps), combine(log, recorder))
        ws.usage = given.usage
        step_spec = spec.steps[given.step]
        calls = [ToolCall(c["name"], c["args"], c["id"]) for c in given.calls]
        out = codec.ToolCallOut()
        try:
            job = job_of(step_spec, calls, given.group, given.key)
            value = await beating(LOCAL_TOOLS.run(ws, ws.step(given.step), step_spec, job))
            out.value = _encoded_value(value, spec.steps)
        except RunError as exc:
            out.error = codec.encode_error(exc)
        finally:
            ws.release()
        ws.normalize_states()
        out.session = session_to_json(ws.session).decode()
        out.appended = ws.appended
        out.warnings = ws.warnings
        out.usage = ws.usage
        out.events = log.encoded if log is not None else []
        out.timeline = recorder.entries() if recorder is not None else []
        return out.model_dump_json()

    @activity.defn(name="picoflow.store.load")
    async def load(self, session_id: str) -> str | None:
        session = await self.engine.store.load(session_id)
        return None if session is None else session_to_json(session).decode()

    @activity.defn(name="picoflow.store.save")
    async def save(self, payload: str) -> int:
        given = codec.SaveIn.model_validate_json(payload)
        session = session_from_json(given.session)
        store = self.engine.store
        try:
            revision: int = await store.save(
                session, expected_revision=given.expected_revision, appended=given.appended
            )
        except SessionConflict as exc:
            # A retried save whose earlier attempt went through (its answer was lost with its
            # worker) finds its own write stored. A first attempt never does: its conflict is
            # another's write — of a decision's claim, another decision's, which must not go on.
            if activity.info().attempt > 1:
                stored = await store.load(session.id)
                expected = (given.expected_revision or 0) + 1
                if stored is not None and _same_write(stored, session, expected):
                    return expected
            raise reported(exc) from exc
        except RunError as exc:
            raise reported(exc) from exc
        return revision

    @activity.defn(name="picoflow.store.record_error")
    async def record_error(self, payload: str) -> None:
        given = codec.ErrorIn.model_validate_json(payload)
        await self.engine.store.record_error(given.session_id, given.record)

    @activity.defn(name="picoflow.store.record_timeline")
    async def record_timeline(self, payload: str) -> bool:
        """Whether the timeline is stored (False: the worker's store keeps none)."""
        given = codec.TimelineIn.model_validate_json(payload)
        store = self.engine.store
        if not isinstance(store, TimelineStore):
            return False
        # A retried attempt whose earlier one stored it (its answer was lost with its worker)
        # finds it stored: kept once. A turn and its retry share a number, never a whole body
        # (its start time, at least, differs).
        if activity.info().attempt > 1 and given.body in await store.timelines(given.session_id, given.turn):
            return True
        await store.record_timeline(given.session_id, given.turn, given.body, keep_turns=given.keep_turns)
        return True

    @activity.defn(name="picoflow.store.load_files")
    async def load_files(self, payload: str) -> str:
        given = codec.FilesIn.model_validate_json(payload)
        return codec.encode_files(await self.engine.store.load_files(given.session_id, given.hashes))

    def all(self) -> list[Any]:
        return [
            self.model,
            self.tool,
            self.load,
            self.save,
            self.record_error,
            self.record_timeline,
            self.load_files,
        ]


def _same_write(stored: Any, session: Any, revision: int) -> bool:
    """Whether ``stored`` is the write of ``session`` at ``revision``: the same messages, time and
    turn count (a turn's commit) and the same audit trail, paused response and states (a
    decision's claim, which appends nothing and keeps the time: two claims differ in the decision,
    its maker, its reason or its time)."""
    return bool(
        stored.revision == revision
        and stored.next_seq == session.next_seq
        and stored.updated_at == session.updated_at
        and stored.turns == session.turns
        and stored.status == session.status
        and stored.current_step == session.current_step
        and stored.approvals == session.approvals
        and stored.paused == session.paused
        and stored.states == session.states
    )


def _encoded_value(value: Any, steps: Any) -> codec.ToolValue:
    """A handler's value as dispatch will treat it in the workflow."""
    if isinstance(value, CallResult):
        return codec.ToolValue(kind="refusal", text=value.content)
    if isinstance(value, Outcome):
        return codec.ToolValue(kind="outcome", outcome=codec.encode_outcome(value))
    if value is None:
        return codec.ToolValue(kind="none")
    if isinstance(value, str):
        return codec.ToolValue(kind="text", text=value)
    if isinstance(value, type) and issubclass(value, Step):
        name = value.name
        if name in steps and steps[name].cls is value:
            return codec.ToolValue(kind="step", text=name)
    return codec.ToolValue(kind="json", text=to_json(value, fallback=str).decode())
