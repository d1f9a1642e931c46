"""Approvals inside a turn: a response proposing calls that need a decision pauses the turn, and a
decision later runs the response it paused.

A response waits whole: when any of its calls needs an approval, none of its calls runs until
every approval it needs is decided; then the calls run in order, as one response, the denied ones
answered with the denial. A response with a call that cannot run (an invalid argument, an unknown
tool) is not proposed at all: it is dispatched as always, and its gated calls are refused with a
request to call them again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import replace

from pydantic import BaseModel

from picoflow._run.arguments import unborne_fields
from picoflow._run.ask import tools_for
from picoflow._run.dispatch import CallResult, refused
from picoflow._run.effects import Paused, transition
from picoflow._run.workspace import Workspace
from picoflow.approvals import EXPIRED, Approval, PausedResponse, args_sha256
from picoflow.context import INJECTED_NAMES, Caller
from picoflow.exceptions import (
    ApprovalDecided,
    ApprovalExpired,
    ApprovalNotAllowed,
    ApprovalNotFound,
    ApprovalStale,
    HookFailure,
)
from picoflow.flow import FlowSpec, StepSpec, tool_sha256
from picoflow.messages import ModelResponse, ToolCall
from picoflow.outcomes import Call, Direct, Go, Outcome
from picoflow.session import Session
from picoflow.step import Step

UNKNOWN_RESULT = (
    "The result of {tool} is unknown: the process running it stopped before it answered. It was not "
    "run again; check whether it had its effect before calling it again."
)


WITHDRAWN = "withdrawn: a new message came before anyone decided it"


def approval_id(session_id: str, seq: int, index: int, call_id: str) -> str:
    """The id of the approval of a response's ``index``-th call: the same whenever the turn runs
    again (a durable executor replays it), unique within the session (``seq`` only grows)."""
    digest = hashlib.sha256(f"{session_id}/{seq}/{index}/{call_id}".encode()).hexdigest()
    return f"apr_{digest[:24]}"


async def propose(
    ws: Workspace, step: Step, spec: StepSpec, response: ModelResponse, *, by_code: bool = False
) -> Paused | None:
    """Pause the turn when the response proposes calls that need approval; None to dispatch it
    as always (with ``ws.decided`` naming the gated calls a policy let through). ``by_code``: the
    step's code proposed them (``call``), with arguments it chose and checked."""
    calls = response.tool_calls
    exposed: Collection[str] = spec.exposed
    if spec.dynamic_tools and not by_code:
        exposed = {d.name for d in tools_for(step, spec)}
    validated: dict[str, BaseModel] = {}
    for call in calls:
        tool = spec.tools.get(call.name) if call.name in exposed else None
        if tool is None or tool.handler is None or (len(calls) > 1 and tool.exclusive):
            return None  # dispatch refuses the response's calls, the gated ones included
        args = tool.validate(_without_injected(call))
        if isinstance(args, str) or (not by_code and unborne_fields(ws, step, tool, args)):
            return None  # dispatch sends the correction; nobody is asked to approve a guess
        validated[call.id] = args
    now = ws.config.clock()
    cleared: dict[str, str | None] = {}
    asked: list[Approval] = []
    for index, call in enumerate(calls):
        rule = spec.tools[call.name].approval
        if rule is None:
            continue
        args = validated[call.id]
        ctx = ws.context_for(spec.name)
        approvers = await ws.hook(step, f"the approval policy of {call.name}", rule.approvers_for, ctx, args)
        if approvers is None:
            cleared[call.id] = None
            continue
        summary = await ws.hook(
            step, f"the approval summary of {call.name}", rule.summary_of, call.name, args, ctx
        )
        values = args.model_dump(mode="json")
        gated = spec.tools[call.name]
        asked.append(
            Approval(
                id=approval_id(ws.session.id, ws.session.next_seq, index, call.id),
                tool=call.name,
                args=values,
                summary=summary,
                approvers=approvers,
                expires_at=now + rule.seconds,
                step=spec.name,
                call_id=call.id,
                args_sha256=args_sha256(values),
                tool_sha256=tool_sha256(gated),
                flow_version=ws.config.spec.version,
                created_at=now,
                labels={name: label for name, label in gated.labels.items() if name in values},
            )
        )
    if not asked:
        ws.decided = cleared
        return None
    session = ws.session
    session.approvals = (*session.approvals, *asked)
    session.paused = PausedResponse(
        spec.name,
        tuple(calls),
        tuple(approval.id for approval in asked),
        visibilities=tuple(sorted(ws.caller.visibilities)),
        by_code=by_code,
    )
    session.status = "awaiting_approval"
    observer = ws.config.observer
    for approval in asked:
        observer.approval_requested(spec.name, approval)
    return Paused(tuple(asked))


def _without_injected(call: ToolCall) -> ToolCall:
    args = call.args
    if isinstance(args, str) or INJECTED_NAMES.isdisjoint(args):
        return call
    return ToolCall(call.name, {k: v for k, v in args.items() if k not in INJECTED_NAMES}, call.id)


def approvals_of(session_approvals: Sequence[Approval], ids: Sequence[str]) -> list[Approval]:
    by_id = {approval.id: approval for approval in session_approvals}
    return [by_id[approval_id] for approval_id in ids if approval_id in by_id]


async def decided_calls(
    ws: Workspace, step: Step, spec: StepSpec, paused: PausedResponse
) -> dict[str, str | CallResult | None]:
    """What each gated call of a decided response does: run with its approval's id as its key,
    or answer with its denial (which the step's ``on_denied`` may turn into an outcome)."""
    mine = {approval.call_id: approval for approval in approvals_of(ws.session.approvals, paused.approvals)}
    decided: dict[str, str | CallResult | None] = {}
    for call in paused.calls:
        approval = mine.get(call.id)
        if approval is None:
            decided[call.id] = None  # a call its policy let through when it was proposed
        elif approval.status == "approved":
            decided[call.id] = approval.id
        else:
            answer = refused(call, denial_text(approval))
            if "on_denied" in spec.overrides:
                answer.outcome = _checked(spec, await ws.hook(step, "on_denied", step.on_denied, approval))
            decided[call.id] = answer
    return decided


def denial_text(approval: Approval) -> str:
    """What the model is told of a call not approved (never who denied it)."""
    if approval.status in ("expired", "withdrawn"):
        again = "Propose it again if it is still wanted."
        return f"Not run: the approval of {approval.tool} {approval.reason}. {again}"
    because = f": {approval.reason}" if approval.reason else "."
    return f"Not run: {approval.tool} was denied{because}"


async def answer_unfinished(ws: Workspace, paused: PausedResponse, now: float) -> None:
    """Before a new message: answer every call of the paused response, which can no longer run,
    so the model sees what became of them. Approvals still pending are recorded ``expired`` (their
    time ran out) or ``withdrawn`` (the conversation moved on); a response a process had begun to
    run and never finished has its calls reported as unknown (they are never run again).

    The paused step's ``on_denied`` hears of each approval closed so: an outcome that leads to
    another step (``go``, ``direct_to``) moves the conversation there with the state it carries,
    and the new message is answered there (a reply, prompt or message the outcome carries is for
    a decision, not a new message)."""
    session = ws.session
    closed: list[Approval] = []
    if paused.resuming_since is None:
        trail = list(session.approvals)
        for index, approval in enumerate(trail):
            if approval.id in paused.approvals and approval.pending:
                trail[index] = _closed(approval, now)
                closed.append(trail[index])
        session.approvals = tuple(trail)
        mine = {a.call_id: a for a in approvals_of(session.approvals, paused.approvals)}
        for call in paused.calls:
            asked = mine.get(call.id)
            if asked is not None and asked.status in ("expired", "withdrawn"):
                text = denial_text(asked)
            else:
                text = f"Not run: {NOT_RUN_TOGETHER}"
            ws.add_tool_result(paused.step, call, text, True)
    else:
        for call in paused.calls:
            ws.add_tool_result(paused.step, call, UNKNOWN_RESULT.format(tool=call.name), True)
    session.paused = None
    session.status = "running"
    spec = ws.config.spec.steps[paused.step]
    if not closed or "on_denied" not in spec.overrides:
        return
    step = ws.step(spec.name)
    for approval in closed:
        outcome = _checked(spec, await ws.hook(step, "on_denied", step.on_denied, approval))
        if isinstance(outcome, Go | Direct) and outcome.target_name is not None:
            destination = ws.destination(outcome, spec.name)
            if destination != session.current_step:
                await transition(ws, session.current_step, destination)
            if outcome.state:
                ws.state_for(destination).merge(outcome.state)
            return


def _checked(spec: StepSpec, outcome: object) -> Outcome | None:
    if outcome is not None and (not isinstance(outcome, Outcome) or isinstance(outcome, Call)):
        raise HookFailure(
            f"on_denied() of step {spec.name} must return go(), stay(), direct() or None, "
            f"not {type(outcome).__name__}",
            step=spec.name,
        )
    return outcome


def _closed(approval: Approval, now: float) -> Approval:
    if now >= approval.expires_at:
        return replace(approval, status="expired", decided_at=now, reason=EXPIRED)
    return replace(approval, status="withdrawn", decided_at=now, reason=WITHDRAWN)


NOT_RUN_TOGETHER = "it came in one response with calls that were not approved in time."


def check_decision(
    session: Session, spec: FlowSpec, approval_id: str, caller: Caller, at: float
) -> tuple[Approval, PausedResponse]:
    """The approval ``caller`` decides at time ``at``, and the response it pauses; or the refusal,
    with nothing changed. Deny by default: a decision is taken only on a pending approval of the
    paused response, in time, by a caller it admits, for exactly the call it was asked for."""
    approval = next((a for a in session.approvals if a.id == approval_id), None)
    owner = caller.principal == session.principal
    if approval is None or not (owner or not set(approval.approvers.roles).isdisjoint(caller.visibilities)):
        raise ApprovalNotFound(f"no approval {approval_id} for this caller", session_id=session.id)
    if not approval.approvers.admit(caller.principal, caller.visibilities, session.principal):
        raise ApprovalNotAllowed(
            f"approval {approval_id} needs {approval.approvers.describe()}", session_id=session.id
        )
    if not approval.pending:
        if approval.status in ("approved", "denied"):
            raise ApprovalDecided(
                f"approval {approval_id} was {approval.status} already", session_id=session.id
            )
        raise ApprovalStale(
            f"approval {approval_id} was {approval.status}: {approval.reason}", session_id=session.id
        )
    paused = session.paused
    if paused is None or approval_id not in paused.approvals or paused.resuming_since is not None:
        raise ApprovalStale(
            f"approval {approval_id} no longer applies: the conversation moved on", session_id=session.id
        )
    if at >= approval.expires_at:
        raise ApprovalExpired(f"approval {approval_id} expired; nothing was run", session_id=session.id)
    _check_unchanged(session, spec, approval, paused)
    return approval, paused


def _check_unchanged(session: Session, spec: FlowSpec, approval: Approval, paused: PausedResponse) -> None:
    """Refuse an approval whose flow, tool or arguments are not what they were when it was asked."""
    stale = f"approval {approval.id} no longer applies"
    if approval.flow_version != spec.version:
        raise ApprovalStale(f"{stale}: the flow changed since it was asked", session_id=session.id)
    step = spec.steps.get(approval.step)
    tool = step.tools.get(approval.tool) if step is not None else None
    if tool is None or tool_sha256(tool) != approval.tool_sha256:
        raise ApprovalStale(f"{stale}: its tool {approval.tool} changed since", session_id=session.id)
    call = next((c for c in paused.calls if c.id == approval.call_id), None)
    validated = (
        tool.validate(_without_injected(call)) if call is not None and call.name == tool.name else None
    )
    if (
        validated is None
        or isinstance(validated, str)
        or args_sha256(validated.model_dump(mode="json")) != approval.args_sha256
        or args_sha256(approval.args) != approval.args_sha256
    ):
        raise ApprovalStale(
            f"{stale}: its arguments are not the ones it was asked for", session_id=session.id
        )


def decide_approval(
    session: Session, approval: Approval, decision: str, caller: Caller, reason: str | None, at: float
) -> Approval:
    """Record the decision in the session's audit trail; returns the decided approval."""
    decided = replace(
        approval,
        status="approved" if decision == "approve" else "denied",
        decided_by=caller.principal,
        decided_at=at,
        reason=reason,
    )
    session.approvals = tuple(decided if a.id == approval.id else a for a in session.approvals)
    return decided
