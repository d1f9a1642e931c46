"""``PicoflowTurn``: one turn as a Temporal workflow; ``PicoflowDecision``: one decision.

The workflow runs picoflow's own turn code (``SessionTurns.take``) on Temporal's deterministic
event loop, unsandboxed (the turn code is plain asyncio). Model requests, tool handlers and store
calls are activities (``_durable``); everything else of the turn runs in the workflow and is run
again when a worker replays it, so it must decide the same way every time: prompts, hooks
(``on_enter``, ``check_response``, ``on_response`` ...), ``LogicStep.run_logic`` and a flow's
``on_restore_session`` must not read clocks, random numbers, files, the network or anything else
that may change between runs — what they need from outside belongs in a tool.

A decision on a pending approval (``FlowEngine.decide``) is a workflow execution of its own,
``PicoflowDecision``, running the same ``SessionTurns.take``: a turn and a decision are two kinds
of job (``JobWorkflow``). The turn that proposed the call is over (its execution completed with
the pending result, the session saved ``awaiting_approval``), so no worker waits for the
decision: whichever worker takes the decision's execution, even one started after every other
died, loads the session, records the decision, claims the paused response (a compare-and-swap
save: of two decisions, one goes on), runs its calls as tool activities and goes on with the turn.
The decision is taken at the client's time (``DecisionInput.at``), so a replay decides the same
way; one that waited for a worker longer than the approval lease is refused (``ApprovalConflict``),
as its claim would be out of date at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from picoflow._run.jobs import DecisionRequest, TurnRequest
from picoflow._run.observers import combine
from picoflow._run.session_turn import CHECKED, SessionJob, SessionTurns
from picoflow._run.timeline import Recording, TimelineRecorder
from picoflow.context import ANY_PRINCIPAL
from picoflow.exceptions import ApprovalConflict, RunError, SessionNotFound, StoreError, TurnCancelled
from picoflow.results import TurnResult
from picoflow.temporal import _codec as codec
from picoflow.temporal._durable import DURABLE_TOOLS, STORE_OPTIONS, DurableHost, call_activity, workflow_time
from picoflow.temporal._events import EventLog
from picoflow.timeline import TimelineUpdate

WORKFLOW_NAME = "PicoflowTurn"
DECISION_WORKFLOW = "PicoflowDecision"
EVENTS_QUERY = "events"
TIMELINE_QUERY = "timeline"
"""The query that answers a running job's timeline updates from a position on (``TimelineUpdate``,
encoded): recorded in the workflow when the client watches its timeline live."""
QUERY_CHARS = 1_000_000
"""Most characters of entries one ``timeline`` answer holds (the rest at the next poll): an
answer stays well under Temporal's payload limit however far behind the client is."""
TAIL_CHARS = 200_000
"""Most characters of entries a job's result carries of its last timeline updates: what the
client's polls cannot have seen yet (a client further behind misses the rest, which the stored
timeline has)."""
TURN_FAILED = "picoflow.turn_failed"
"""``ApplicationError.type`` of a turn (or a decision) that failed; its details hold the encoded
``TurnResult``. Failing the execution (rather than returning the result) lets the same turn be
submitted again under the same id: Temporal reuses the id of a failed execution, never of a
completed one."""

CANCEL_UPDATE = "cancel"
"""The update that cancels a running job (``JobWorkflow.cancel``); it answers the job's noun
("turn", "decision"), "" (nothing to stop) or ``NOT_YOURS``."""
NOT_YOURS = "not-yours"
"""The cancel's answer to a caller who may not reach the job's session."""

ENGINES: dict[str, Any] = {}
"""The worker's ``FlowEngine`` by task queue: the flows, models and settings its turns use."""
RECORDINGS: dict[str, Recording] = {}
"""The worker's timeline recording by task queue (its engine's ``timeline=``, or the defaults)."""


class JobWorkflow:
    """What both workflows are: one job (``SessionJob``) run by ``SessionTurns.take`` on the
    worker's engine, its events recorded when the client listens (the ``events`` query), its
    timeline recorded and stored with the session when the client's engine records timelines,
    and stopped on request (the ``cancel`` update)."""

    noun = "turn"
    trigger = "message"
    """What starts the job, as its timeline says."""

    def __init__(self, given: codec.TurnInput | codec.DecisionInput) -> None:
        self.given = given
        """The job's input, read before any update is handled (``workflow.init``)."""
        self.log: EventLog | None = EventLog() if given.events else None
        self.live: list[codec.EncodedUpdate] = []
        """The timeline's updates, in the order recorded (when the client watches it live)."""
        self.turns: SessionTurns | None = None
        """The job's turns, once it started (a cancel is theirs to take)."""
        self.cancelled_early = False
        """A cancel came before the job started: it does not start."""

    @workflow.query(name=EVENTS_QUERY)
    def events(self, since: int) -> str:
        """The job's events from index ``since`` on (``encode_events``; none when not recorded)."""
        return codec.encode_events(self.log.since(since) if self.log is not None else [])

    @workflow.query(name=TIMELINE_QUERY)
    def timeline(self, since: int) -> str:
        """The timeline's updates from position ``since`` on, as many as ``QUERY_CHARS`` allow
        (``encode_updates``; none when not recorded live). A replay records the same ones, in the
        same order, from the history: a worker resuming the job answers as the lost one did."""
        return codec.encode_updates(codec.bounded(self.live[max(since, 0) :], QUERY_CHARS))

    def _recorded(self, update: TimelineUpdate) -> None:
        self.live.append(codec.encode_update(update))

    @workflow.update(name=CANCEL_UPDATE)
    def cancel(self, payload: str) -> str:
        """Stop the job as a cancel in its own process would (``SessionTurns.cancel``): its noun,
        "" when it is past stopping or over, ``NOT_YOURS`` when the caller may not reach it.

        An update is recorded in the workflow's history, so a replay stops the job at the same
        point: where it waits (a model's or a tool's activity, which is asked to stop; a tool's
        handler may finish, its result is dropped), or after the checkpoint it saves. Its final
        commit is past stopping."""
        ask = codec.CancelIn.model_validate_json(payload)
        owner: object = CHECKED
        if not ask.checked:
            owner = ANY_PRINCIPAL if ask.any_principal else ask.principal
        if self.turns is None:  # not started yet: only its input says whose it is
            if not _reaches(owner, self.given.principal):
                return NOT_YOURS
            self.cancelled_early = True
            return self.noun
        try:
            return self.turns.cancel(self.given.session_id, owner) or ""
        except SessionNotFound:
            return NOT_YOURS

    async def run_job(
        self,
        given: codec.TurnInput | codec.DecisionInput,
        revision: int | None,
        job_of: Callable[[Any, DurableHost], SessionJob],
        summary: tuple[str, str],
    ) -> str:
        """The encoded result of the job ``job_of(engine, host)`` makes of ``given``, on the
        session at ``revision`` (None: as it stands); a job it refuses (a ``RunError``) fails as
        any. A failed job fails its execution (``TURN_FAILED``). ``summary``: the flow and the
        message its timeline names (as the engine names them in process)."""
        queue = workflow.info().task_queue
        engine = ENGINES[queue]
        host = DurableHost(engine, revision)
        turns = SessionTurns(host, tools=DURABLE_TOOLS)
        recorder = None
        if given.timeline:
            # Timed by the workflow's clock: a replay (another worker resuming the job) records
            # every entry again, once, as it was, from the history.
            watch = self._recorded if given.timeline_live else None
            recorder = RECORDINGS[queue].recorder(given.caller(), self.trigger, watch, clock=workflow_time)
            recorder.turn_started(summary[0], given.continues, summary[1])
        observer = combine(self.log, recorder)
        self.turns = turns  # from here on, a cancel is the job's to take (or to refuse)
        try:
            job = job_of(engine, host)
            if self.cancelled_early:
                raise TurnCancelled(f"the {self.noun} was cancelled", session_id=given.session_id)
        except RunError as exc:
            result = await turns.failed(exc, given.session_id, given.continues, None)
        else:
            result = await turns.take(job, observer)
        timeline = None
        if recorder is not None:
            tail = codec.bounded(self.live, TAIL_CHARS, last=True)
            first = len(self.live) - len(tail)
            stored_as = await _keep_timeline(recorder, result)
            timeline = codec.TimelineTail(first=first, updates=tail, stored_as=stored_as)
        encoded = codec.encode_result(result, self.log.encoded if self.log is not None else None, timeline)
        if result.error is not None:
            raise ApplicationError("the turn failed", encoded, type=TURN_FAILED, non_retryable=True)
        return encoded


def _reaches(owner: object, principal: str | None) -> bool:
    """Whether a cancel by ``owner`` reaches a job started by ``principal`` (not started yet)."""
    return owner is CHECKED or owner is ANY_PRINCIPAL or owner == principal


async def _keep_timeline(recorder: TimelineRecorder, result: TurnResult) -> int | None:
    """Store the job's timeline with its session, after its commit (as in process): an activity,
    so a worker lost meanwhile leaves it to the next, which stores it once. Best effort: the
    job's result stands. The turn's number once stored, else None."""
    document = recorder.document(result)
    if document is None:
        return None
    session_id, turn, body = document
    keep = recorder.log.settings.keep_turns
    payload = codec.TimelineIn(session_id=session_id, turn=turn, body=body, keep_turns=keep)
    try:
        stored = await call_activity(
            "picoflow.store.record_timeline", payload.model_dump_json(), StoreError, **STORE_OPTIONS
        )
    except RunError:
        workflow.logger.warning("picoflow: could not store the timeline of session %s", session_id)
        return None
    return turn if stored else None


@workflow.defn(name=WORKFLOW_NAME)
class PicoflowTurn(JobWorkflow):
    @workflow.init
    def __init__(self, payload: str) -> None:
        self.turn = codec.TurnInput.model_validate_json(payload)
        super().__init__(self.turn)

    @workflow.run
    async def run(self, payload: str) -> str:
        turn = self.turn

        def job_of(engine: Any, host: DurableHost) -> TurnRequest:
            spec = engine.flow(turn.flow) if turn.flow is not None else None  # this worker may not have it
            return TurnRequest(spec, turn.text, turn.session_id, turn.starts, turn.caller(engine.deps))

        summary = (turn.flow or "session", turn.text)
        return await self.run_job(turn, None if turn.starts else turn.revision, job_of, summary)


@workflow.defn(name=DECISION_WORKFLOW)
class PicoflowDecision(JobWorkflow):
    noun = trigger = "decision"

    @workflow.init
    def __init__(self, payload: str) -> None:
        self.decision = codec.DecisionInput.model_validate_json(payload)
        super().__init__(self.decision)

    @workflow.run
    async def run(self, payload: str) -> str:
        given = self.decision

        def job_of(engine: Any, host: DurableHost) -> DecisionRequest:
            waited = workflow_time() - given.at
            if waited >= host.approval_lease:
                # Its claim would be dated ``at``: a lease run out before the calls even start, so a
                # message could answer them as of unknown result while they run. Sent again, it is
                # taken at the new time (the same id: this failed execution's is reused).
                raise ApprovalConflict(
                    f"the decision on approval {given.approval_id} waited {waited:.0f} s for a worker, "
                    "longer than the approval lease; nothing was run: send it again",
                    session_id=given.session_id,
                )
            return DecisionRequest(
                given.session_id,
                given.approval_id,
                given.decision,
                given.reason,
                given.caller(engine.deps),
                given.at,
            )

        # Not bound to the revision the client saw (that only names the execution): a decision is
        # checked on the session as it stands, where another approval of the same response may
        # have been decided meanwhile.
        return await self.run_job(given, None, job_of, ("decision", f"{given.decision} {given.approval_id}"))
