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
from picoflow._run.observers import NO_OBSERVER
from picoflow._run.session_turn import SessionJob, SessionTurns
from picoflow.exceptions import ApprovalConflict, RunError
from picoflow.temporal import _codec as codec
from picoflow.temporal._durable import DURABLE_TOOLS, DurableHost, workflow_time
from picoflow.temporal._events import EventLog

WORKFLOW_NAME = "PicoflowTurn"
DECISION_WORKFLOW = "PicoflowDecision"
EVENTS_QUERY = "events"
TURN_FAILED = "picoflow.turn_failed"
"""``ApplicationError.type`` of a turn (or a decision) that failed; its details hold the encoded
``TurnResult``. Failing the execution (rather than returning the result) lets the same turn be
submitted again under the same id: Temporal reuses the id of a failed execution, never of a
completed one."""

ENGINES: dict[str, Any] = {}
"""The worker's ``FlowEngine`` by task queue: the flows, models and settings its turns use."""


class JobWorkflow:
    """What both workflows are: one job (``SessionJob``) run by ``SessionTurns.take`` on the
    worker's engine, its events recorded when the client listens (the ``events`` query)."""

    def __init__(self) -> None:
        self.log: EventLog | None = None

    @workflow.query(name=EVENTS_QUERY)
    def events(self, since: int) -> str:
        """The job's events from index ``since`` on (``encode_events``; none when not recorded)."""
        return codec.encode_events(self.log.since(since) if self.log is not None else [])

    async def run_job(
        self,
        given: codec.TurnInput | codec.DecisionInput,
        revision: int | None,
        job_of: Callable[[Any, DurableHost], SessionJob],
    ) -> str:
        """The encoded result of the job ``job_of(engine, host)`` makes of ``given``, on the
        session at ``revision`` (None: as it stands); a job it refuses (a ``RunError``) fails as
        any. A failed job fails its execution (``TURN_FAILED``)."""
        if given.events:
            self.log = EventLog()
        engine = ENGINES[workflow.info().task_queue]
        host = DurableHost(engine, revision)
        turns = SessionTurns(host, tools=DURABLE_TOOLS)
        try:
            job = job_of(engine, host)
        except RunError as exc:
            result = await turns.failed(exc, given.session_id, given.continues, None)
        else:
            result = await turns.take(job, self.log or NO_OBSERVER)
        encoded = codec.encode_result(result, self.log.encoded if self.log is not None else None)
        if result.error is not None:
            raise ApplicationError("the turn failed", encoded, type=TURN_FAILED, non_retryable=True)
        return encoded


@workflow.defn(name=WORKFLOW_NAME)
class PicoflowTurn(JobWorkflow):
    @workflow.run
    async def run(self, payload: str) -> str:
        turn = codec.TurnInput.model_validate_json(payload)

        def job_of(engine: Any, host: DurableHost) -> TurnRequest:
            spec = engine.flow(turn.flow) if turn.flow is not None else None  # this worker may not have it
            return TurnRequest(spec, turn.text, turn.session_id, turn.starts, turn.caller(engine.deps))

        return await self.run_job(turn, None if turn.starts else turn.revision, job_of)


@workflow.defn(name=DECISION_WORKFLOW)
class PicoflowDecision(JobWorkflow):
    @workflow.run
    async def run(self, payload: str) -> str:
        given = codec.DecisionInput.model_validate_json(payload)

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
        return await self.run_job(given, None, job_of)
