"""``PicoflowTurn``: one turn as a Temporal workflow.

The workflow runs picoflow's own turn code (``SessionTurns.take``) on Temporal's deterministic
event loop, unsandboxed (the turn code is plain asyncio). Model requests, tool handlers and store
calls are activities (``_durable``); everything else of the turn runs in the workflow and is run
again when a worker replays it, so it must decide the same way every time: prompts, hooks
(``on_enter``, ``check_response``, ``on_response`` ...), ``LogicStep.run_logic`` and a flow's
``on_restore_session`` must not read clocks, random numbers, files, the network or anything else
that may change between runs — what they need from outside belongs in a tool.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from picoflow._run.observers import NO_OBSERVER
from picoflow._run.session_turn import SessionTurns, TurnRequest
from picoflow.exceptions import RunError
from picoflow.temporal import _codec as codec
from picoflow.temporal._durable import DURABLE_TOOLS, DurableHost
from picoflow.temporal._events import EventLog

WORKFLOW_NAME = "PicoflowTurn"
EVENTS_QUERY = "events"
TURN_FAILED = "picoflow.turn_failed"
"""``ApplicationError.type`` of a turn that failed; its details hold the encoded ``TurnResult``.
Failing the execution (rather than returning the result) lets the same turn be submitted again
under the same id: Temporal reuses the id of a failed execution, never of a completed one."""

ENGINES: dict[str, Any] = {}
"""The worker's ``FlowEngine`` by task queue: the flows, models and settings its turns use."""


@workflow.defn(name=WORKFLOW_NAME)
class PicoflowTurn:
    def __init__(self) -> None:
        self.log: EventLog | None = None

    @workflow.query(name=EVENTS_QUERY)
    def events(self, since: int) -> str:
        """The turn's events from index ``since`` on (``encode_events``; none when not recorded)."""
        return codec.encode_events(self.log.since(since) if self.log is not None else [])

    @workflow.run
    async def run(self, payload: str) -> str:
        turn = codec.TurnInput.model_validate_json(payload)
        if turn.events:
            self.log = EventLog()
        engine = ENGINES[workflow.info().task_queue]
        host = DurableHost(engine, None if turn.starts else turn.revision)
        turns = SessionTurns(host, tools=DURABLE_TOOLS)
        try:
            spec = engine.flow(turn.flow) if turn.flow is not None else None
        except RunError as exc:  # this worker does not have the flow the client has
            continued = None if turn.starts else turn.session_id
            result = await turns.failed(exc, turn.session_id, continued, None)
        else:
            request = TurnRequest(spec, turn.text, turn.session_id, turn.starts, turn.caller(engine.deps))
            result = await turns.take(request, self.log or NO_OBSERVER)
        encoded = codec.encode_result(result, self.log.encoded if self.log is not None else None)
        if result.error is not None:
            raise ApplicationError("the turn failed", encoded, type=TURN_FAILED, non_retryable=True)
        return encoded
