"""``TemporalExecutor``: the client side. ``FlowEngine.run`` checks a turn's input as always, then
hands the turn to Temporal as the workflow execution named after its session and revision, and
waits for its result. ``FlowEngine.decide`` does the same with a decision, as a
``PicoflowDecision`` execution (see ``decision_workflow_id`` for its name)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from picoflow._run.jobs import DecisionRequest, TurnRequest
from picoflow._run.observers import NO_OBSERVER, TurnObserver
from picoflow._run.session_turn import SessionJob, SessionTurns, store_call
from picoflow.context import ANY_PRINCIPAL, PrincipalFilter
from picoflow.exceptions import InvalidInput, RunError, SessionNotFound, StoreUnavailable
from picoflow.results import TurnResult
from picoflow.temporal import _codec as codec
from picoflow.temporal._events import POLL_SECONDS, Delivery
from picoflow.temporal._workflow import (
    CANCEL_UPDATE,
    DECISION_WORKFLOW,
    EVENTS_QUERY,
    NOT_YOURS,
    TIMELINE_QUERY,
    TURN_FAILED,
    WORKFLOW_NAME,
)

J = TypeVar("J", bound=SessionJob)


class TemporalExecutor:
    """Runs each turn as a Temporal workflow execution on ``task_queue``, where ``picoflow worker``
    processes (or ``run_worker``) take it.

    The execution's id is ``{id_prefix}-{session id}-{revision}``: submitting the same turn again
    (a client's retry, a second server) joins the running execution, or gets the finished turn's
    result, rather than running it twice. A failed turn may be submitted again.

    A decision (``decide``) runs as an execution of its own, named by ``decision_workflow_id``:
    any worker takes it, whether or not the worker that ran the proposing turn is still there.
    """

    def __init__(
        self,
        client: Client | None,
        task_queue: str = "picoflow",
        *,
        id_prefix: str = "picoflow",
        address: tuple[str, str] | None = None,
    ) -> None:
        """``client`` submits the turns; None connects to ``address`` (HOST:PORT, namespace) with
        the first turn instead (see ``at``)."""
        if client is None and address is None:
            raise ValueError("TemporalExecutor needs a client, or an address to connect to")
        self._client = client
        self.task_queue = task_queue
        self.id_prefix = id_prefix
        self._address = address
        self._connecting: asyncio.Lock | None = None

    @classmethod
    def at(
        cls,
        address: str,
        task_queue: str = "picoflow",
        *,
        namespace: str = "default",
        id_prefix: str = "picoflow",
    ) -> TemporalExecutor:
        """An executor that connects to Temporal at ``address`` (HOST:PORT) with its first turn, in
        the event loop that runs turns (for a server whose loop starts after the engine is built)."""
        return cls(None, task_queue, id_prefix=id_prefix, address=(address, namespace))

    async def client(self) -> Client:
        """The client turns are submitted with (connected now, for an executor made with ``at``)."""
        if self._client is None:
            assert self._address is not None
            if self._connecting is None:
                self._connecting = asyncio.Lock()
            async with self._connecting:
                if self._client is None:
                    address, namespace = self._address
                    try:
                        self._client = await Client.connect(address, namespace=namespace)
                    except RuntimeError as exc:  # the SDK's connection failure
                        raise StoreUnavailable(f"cannot reach Temporal at {address}: {exc}") from exc
        return self._client

    async def take(self, turns: SessionTurns, request: TurnRequest, observer: TurnObserver) -> TurnResult:
        if request.files:  # refused before the store is asked: nothing ran
            refused = InvalidInput("files are not carried by the Temporal executor yet", field="attachments")
            return await turns.failed(refused, request.continues, request.continues, None)
        return await self._submit(turns, request, observer, _turn, opens_at_once=True)

    async def decide(
        self, turns: SessionTurns, request: DecisionRequest, observer: TurnObserver
    ) -> TurnResult:
        # The session is reported opened with the decision's first event: once it passed its checks.
        return await self._submit(turns, request, observer, _decision, opens_at_once=False)

    async def cancel(
        self, turns: SessionTurns, session_id: str, revision: int | None, principal: PrincipalFilter
    ) -> str | None:
        """Stop the job running against ``session_id``, wherever it runs, from any process with a
        client: the turn's execution (its id is the session's and the stored revision it started
        on), else a decision's (found among the running ``PicoflowDecision`` executions of the
        session; a decision runs in a stored session). The job stops as it would in process
        (``JobWorkflow.cancel``): where it waits, before its commit."""
        client = await self.client()
        ask = codec.CancelIn(checked=revision is not None)
        if revision is None:  # a first turn's: its execution says whose it is
            ask.any_principal = principal is ANY_PRINCIPAL
            ask.principal = None if principal is ANY_PRINCIPAL else principal
        payload = ask.model_dump_json()
        answer = await _ask_to_cancel(client, f"{self.id_prefix}-{session_id}-{revision or 0}", payload)
        if answer is None and revision is not None:
            query = (
                f'WorkflowType = "{DECISION_WORKFLOW}" AND ExecutionStatus = "Running" '
                f'AND WorkflowId STARTS_WITH "{self.id_prefix}-decision-{session_id}-"'
            )
            try:
                async for execution in client.list_workflows(query):
                    answer = await _ask_to_cancel(client, execution.id, payload)
                    if answer:
                        break
            except RPCErrors as exc:
                raise StoreUnavailable(f"Temporal did not list the decisions of {session_id}: {exc}") from exc
        if answer == NOT_YOURS or (answer is None and revision is None):
            raise SessionNotFound(f"no session {session_id} for this caller", session_id=session_id)
        return answer or None

    async def _submit(
        self,
        turns: SessionTurns,
        job: J,
        observer: TurnObserver,
        submission: Callable[[J, int, codec.Watching, str], Submission],
        *,
        opens_at_once: bool,
    ) -> TurnResult:
        """Submit ``job`` as the execution ``submission`` names, on the session's revision the
        client sees, and wait for its result; meanwhile, hand its events to ``observer`` (the
        session reported opened now, or with the first event)."""
        try:
            revision = 0
            if job.continues is not None:
                async with store_call("loading session", job.continues):
                    stored = await turns.host.store.load(job.continues)
                revision = stored.revision if stored is not None else 0
            if opens_at_once:
                observer.session_opened(job.session_id)
            listens = observer is not NO_OBSERVER
            records = turns.host.timeline_settings is not None
            relays = records and observer.wants_timeline
            if relays:
                # The workflow records the timeline: its entries are the ones to watch, not what
                # the observer would make of the events this client sees.
                observer.timeline_relayed()
            delivery = (
                Delivery(observer, opens=None if opens_at_once else job.session_id, timeline=relays)
                if listens
                else None
            )
            watching = codec.Watching(events=listens, timeline=records, timeline_live=relays)
            submitted = submission(job, revision, watching, self.id_prefix)
            data = await self._result(submitted.workflow_id, submitted.payload, delivery, submitted.workflow)
            result, events, timeline = codec.decode_job_output(data)
            if timeline is not None:  # what the polls did not hand over, before the result
                relay = delivery.timeline if delivery is not None else None
                if relay is not None:
                    relay.new([codec.decode_update(u) for u in timeline.updates], timeline.first)
                if timeline.stored_as is not None and result.session_id is not None:
                    observer.timeline_stored(result.session_id, timeline.stored_as)
            if delivery is not None:
                delivery.new(events, 0)
                delivery.close(result)
            return result
        except RunError as exc:  # not submitted (no session, Temporal unreachable): nothing ran
            return await turns.failed(exc, job.continues, job.continues, None)

    async def _result(
        self,
        workflow_id: str,
        payload: str,
        delivery: Delivery | None = None,
        workflow: str = WORKFLOW_NAME,
    ) -> str:
        """The execution's encoded result; meanwhile, with a ``delivery``, its events as they happen."""
        client = await self.client()
        try:
            handle = await client.start_workflow(
                workflow,
                payload,
                id=workflow_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                result_type=str,
            )
        except WorkflowAlreadyStartedError:  # that turn completed already: its result
            handle = client.get_workflow_handle(workflow_id, result_type=str)
        except RPCErrors as exc:
            raise StoreUnavailable(f"Temporal did not take the turn: {exc}") from exc
        polling = None if delivery is None else asyncio.ensure_future(_poll(handle, delivery))
        try:
            result: str = await handle.result()
        except WorkflowFailureError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == TURN_FAILED and cause.details:
                return str(cause.details[0])
            raise RunError(f"the workflow {workflow_id} failed: {cause or exc}") from exc
        except RPCErrors as exc:
            raise StoreUnavailable(f"Temporal did not answer for {workflow_id}: {exc}") from exc
        finally:
            if polling is not None:
                polling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await polling
        return result


def decision_workflow_id(prefix: str, decision: codec.DecisionInput) -> str:
    """``{prefix}-decision-{session id}-{approval id}-{digest}``: the digest (``DecisionInput.digest``)
    covers the session's revision the client saw, the decision, its reason and the caller.

    - A client's retry of the same decision that saw the same revision (sent again while the first
      waited for a worker or ran: a lost answer, a second server handed the same request) joins
      that execution, or gets its result: the calls run once and both get the same reply.
    - Any other decision on the approval has another id: a different decision, reason or caller,
      or the same decision sent again after the first was recorded (the revision moved on). It
      runs in its own execution, where the compare-and-swap claim refuses it (``ApprovalDecided``,
      ``ApprovalConflict``: 409) with nothing run — as a second decision is refused in process.
      Two requests never share a result unless they are the same decision by the same caller on
      the same revision, which cannot be told from a retry.
    - A refused decision fails its execution (``TURN_FAILED``), so the same request may be sent
      again under the same id, and is checked again.
    """
    return f"{prefix}-decision-{decision.session_id}-{decision.approval_id}-{decision.digest()}"


@dataclass(frozen=True, slots=True)
class Submission:
    """A job as Temporal runs it: its workflow, its execution's id and its input."""

    workflow: str
    workflow_id: str
    payload: str


def _turn(request: TurnRequest, revision: int, watching: codec.Watching, prefix: str) -> Submission:
    """A turn, as the execution ``{prefix}-{session id}-{revision}``."""
    turn = codec.TurnInput(
        flow=request.spec.name if request.spec is not None else None,
        text=request.text,
        session_id=request.session_id,
        starts=request.starts,
        revision=revision,
        **watching.model_dump(),
        **codec.caller_fields(request.caller),
    )
    return Submission(WORKFLOW_NAME, f"{prefix}-{request.session_id}-{revision}", turn.model_dump_json())


def _decision(request: DecisionRequest, revision: int, watching: codec.Watching, prefix: str) -> Submission:
    """A decision, as the execution ``decision_workflow_id`` names."""
    decision = codec.DecisionInput(
        session_id=request.session_id,
        approval_id=request.approval_id,
        decision=request.decision,
        reason=request.reason,
        at=request.at,
        revision=revision,
        **watching.model_dump(),
        **codec.caller_fields(request.caller),
    )
    return Submission(DECISION_WORKFLOW, decision_workflow_id(prefix, decision), decision.model_dump_json())


async def _poll(handle: WorkflowHandle[Any, str], delivery: Delivery) -> None:
    """Ask the running turn for its new events (and its timeline's new updates, when relayed)
    every ``POLL_SECONDS`` and deliver them, until cancelled (when the result is in). A query that
    fails (the turn not started on a worker yet, Temporal busy) is asked again at the next poll:
    the result carries every event anyway, and the last updates of its timeline."""
    relay = delivery.timeline
    while True:
        await asyncio.sleep(POLL_SECONDS)
        first = delivery.count
        try:
            data = await handle.query(EVENTS_QUERY, first, result_type=str)
        except QUERY_ERRORS:
            continue
        delivery.new(codec.decode_events(data), first)
        if relay is not None:
            first = relay.count
            try:
                data = await handle.query(TIMELINE_QUERY, first, result_type=str)
            except QUERY_ERRORS:
                continue
            relay.new(codec.decode_updates(data), first)


async def _ask_to_cancel(client: Client, workflow_id: str, payload: str) -> str | None:
    """What the execution ``workflow_id`` answered the cancel (``JobWorkflow.cancel``); None when
    it is not running."""
    from temporalio.service import RPCError, RPCStatusCode

    handle = client.get_workflow_handle(workflow_id)
    try:
        answer: str = await handle.execute_update(CANCEL_UPDATE, payload, result_type=str)
    except WorkflowUpdateFailedError:
        return None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # none, or it completed already
            return None
        raise StoreUnavailable(f"Temporal did not take the cancel of {workflow_id}: {exc}") from exc
    return answer


def _rpc_errors() -> tuple[type[BaseException], ...]:
    from temporalio.service import RPCError

    return (RPCError,)


RPCErrors = _rpc_errors()
QUERY_ERRORS: tuple[type[BaseException], ...] = (
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    *RPCErrors,
)
