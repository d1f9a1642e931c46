"""Replaying stored sessions against the current code (``replay_session``, ``replay_sessions``).

Each session is read from its store (never written to) and played again, turn by turn, on a fresh
in-memory engine holding the current flow: the same user messages (from the transcript), the same
decisions on approvals (by the same principal, with the approvers' roles), the recorded model
answers where the request is the same. Each replayed turn's timeline is then compared with the
recorded one (``picoflow.replay.report``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from picoflow.approvals import Approval
from picoflow.attachments import Attachment
from picoflow.context import ANY_PRINCIPAL, Caller
from picoflow.engine import FlowEngine
from picoflow.flow import Flow
from picoflow.messages import Message
from picoflow.models.base import Model
from picoflow.replay._compare import compare, refused
from picoflow.replay._recorded import RecordedModel, RecordedTurn, ReplayExecutor, ReplayTools
from picoflow.replay.report import ReplayReport, SessionReplay, TurnReplay
from picoflow.session import Session
from picoflow.sessions.memory import MemoryStore
from picoflow.timeline import ApprovalRequestedEntry, TimelineSettings, TurnTimeline

__all__ = ["RecordedSession", "ReplayError", "load_recorded", "replay_session", "replay_sessions"]


class ReplayError(ValueError):
    """A session that cannot be replayed: unknown, without recorded timelines, of a flow not given."""


@dataclass(frozen=True, slots=True)
class _Input:
    """What started a recorded turn, as the replay sends it again."""

    text: str = ""
    files: tuple[Attachment, ...] = ()
    approval: Approval | None = None
    """For a decision: the approval decided, as the session keeps it."""
    decision: str = ""


@dataclass(slots=True)
class RecordedSession:
    """A stored session with what its replay needs: its timelines and each turn's input."""

    session: Session
    flow: type[Flow]
    turns: list[TurnTimeline]
    inputs: list[_Input] = field(default_factory=list)


async def load_recorded(source: FlowEngine, session_id: str, flows: Sequence[type[Flow]]) -> RecordedSession:
    """Read what replaying ``session_id`` needs from ``source``'s store (read only); ``ReplayError``
    naming what is missing when it cannot be replayed."""
    session = await source.get_session(session_id, principal=ANY_PRINCIPAL)
    if session is None:
        raise ReplayError(f"no session {session_id} in this store")
    flow = next((cls for cls in flows if cls.spec().name == session.flow), None)
    if flow is None:
        given = ", ".join(cls.spec().name for cls in flows) or "none"
        raise ReplayError(
            f"session {session_id} is of flow {session.flow!r}, which is not among the flows given ({given})"
        )
    recorded = await source.timeline(session_id, principal=ANY_PRINCIPAL)
    turns = list(recorded.turns) if recorded is not None else []
    if not turns:
        raise ReplayError(
            f"session {session_id} has no recorded timeline: replay needs the turns recorded "
            "(FlowEngine(timeline=TimelineSettings()); picoflow serve and the command line record them)"
        )
    if turns[0].turn != 1:
        raise ReplayError(
            f"session {session_id}: the timelines of its turns 1 to {turns[0].turn - 1} are no longer "
            "kept (TimelineSettings.keep_turns), so it cannot be replayed from its start"
        )
    transcript = await source.transcript(session_id, principal=ANY_PRINCIPAL) or []
    loaded = RecordedSession(session, flow, turns)
    loaded.inputs = await _inputs(source, session, turns, transcript)
    return loaded


async def _inputs(
    source: FlowEngine, session: Session, turns: list[TurnTimeline], transcript: list[Message]
) -> list[_Input]:
    """Each turn's input. A turn's message is taken whole from the transcript (the timeline's may be
    cut), in order: every message turn but a failed one stored the user's message."""
    typed = [m for m in transcript if m.role == "user" and m.kind is None and m.within is None]
    stored = [turn for turn in turns if turn.trigger == "message" and turn.outcome != "failed"]
    whole = dict(zip((id(turn) for turn in stored), typed, strict=False)) if len(typed) == len(stored) else {}
    approvals = {approval.id: approval for approval in session.approvals}
    inputs: list[_Input] = []
    for turn in turns:
        if turn.trigger == "decision":
            decision, _, approval_id = turn.message.partition(" ")
            inputs.append(_Input(approval=approvals.get(approval_id), decision=decision))
            continue
        message = whole.get(id(turn))
        if message is None:
            inputs.append(_Input(text=turn.message))
            continue
        files = []
        for ref in message.attachments:
            found = await source.session_file(session.id, ref.sha256, principal=ANY_PRINCIPAL)
            if found is not None:
                files.append(Attachment(ref.name, found.media_type, found.data))
        inputs.append(_Input(text=message.content, files=tuple(files)))
    return inputs


async def replay_session(
    recorded: RecordedSession,
    *,
    model: Model | None = None,
    deps: Any = None,
    run_tools: bool = True,
) -> SessionReplay:
    """Play ``recorded`` again against the current code of its flow, on a fresh in-memory engine.

    Args:
        recorded: From ``load_recorded``.
        model: Answers the requests the recording does not hold (the prompt, the tools or the
            conversation changed). None: such a request ends the session's replay there, as
            ``diverged``, naming what differs.
        deps: The application's dependencies for the tools, as in ``FlowEngine``.
        run_tools: Tools without approval run against the current code (True), or are answered
            from the recording as approval-gated tools always are.
    """
    tools = ReplayTools(run_tools)
    answering = RecordedModel(model)
    session = recorded.session
    engine = FlowEngine(
        [recorded.flow],
        store=MemoryStore(),
        model=answering,
        deps=deps,
        timeline=TimelineSettings(keep_turns=None),
        executor=ReplayExecutor(tools),
    )
    report = SessionReplay(
        session_id=session.id,
        flow=session.flow,
        recorded_version=session.flow_version,
        replayed_version=recorded.flow.spec().version,
        status="same",
    )
    owner = Caller(principal=session.principal)
    approval_ids: dict[str, str] = {}
    """Recorded approval id → the id the replay gave the same approval."""
    try:
        await engine.create_session(recorded.flow, caller=owner, session_id=session.id)
        stopped = False
        for timeline, given in zip(recorded.turns, recorded.inputs, strict=True):
            shown = TurnReplay(
                turn=timeline.turn, trigger=timeline.trigger, message=timeline.message, status="not_replayed"
            )
            report.turns.append(shown)
            if stopped:
                continue
            turn = RecordedTurn(timeline)
            answering.turn = tools.turn = turn
            kept = len((await engine.timeline(session.id, principal=ANY_PRINCIPAL) or _NONE).turns)
            if given.approval is None and timeline.trigger == "decision":
                shown.status, shown.diverged = (
                    "diverged",
                    "the session keeps no record of the approval decided",
                )
                stopped = True
                continue
            if given.approval is not None:
                replay_id = approval_ids.get(given.approval.id)
                if replay_id is None:
                    shown.status = "diverged"
                    shown.diverged = (
                        f"the approval of {given.approval.tool} decided in the recording was not asked"
                    )
                    stopped = True
                    continue
                result = await engine.decide(
                    session.id,
                    replay_id,
                    given.decision,
                    given.approval.reason,
                    caller=_decider(session, given.approval),
                )
            else:
                result = await engine.run(None, given.text, session.id, caller=owner, attachments=given.files)
            shown.recorded_answers, shown.fallback_answers = turn.recorded_answers, turn.fallback_answers
            timelines = (await engine.timeline(session.id, principal=ANY_PRINCIPAL) or _NONE).turns
            replayed = timelines[-1] if len(timelines) > kept else None
            if turn.missed is not None:
                shown.diverged = turn.missed
                if model is None:
                    shown.status, stopped = "diverged", True
                    continue
            if replayed is None:
                shown.differences = refused(timeline, result)
            else:
                shown.differences = compare(timeline, replayed)
                approval_ids.update(_paired(timeline, replayed))
            shown.status = "differs" if shown.differences else "same"
    finally:
        await engine.aclose()
    statuses = {turn.status for turn in report.turns}
    report.status = "diverged" if "diverged" in statuses else "differs" if "differs" in statuses else "same"
    return report


class _NoTimeline:
    turns: tuple[TurnTimeline, ...] = ()


_NONE = _NoTimeline()


def _decider(session: Session, approval: Approval) -> Caller:
    """The caller who decided ``approval``: its principal, with the approvers' roles when that was
    not the session's owner (a member of staff)."""
    if approval.decided_by == session.principal:
        return Caller(principal=approval.decided_by)
    return Caller(principal=approval.decided_by, visibilities=frozenset(approval.approvers.roles))


def _paired(recorded: TurnTimeline, replayed: TurnTimeline) -> dict[str, str]:
    """The approvals asked in both, in order, while their tool and arguments are the same."""
    asked = [e for e in recorded.entries if isinstance(e, ApprovalRequestedEntry)]
    again = [e for e in replayed.entries if isinstance(e, ApprovalRequestedEntry)]
    paired: dict[str, str] = {}
    for old, new in zip(asked, again, strict=False):
        if (old.tool, old.args) != (new.tool, new.args):
            break
        paired[old.approval] = new.approval
    return paired


async def replay_sessions(
    source: FlowEngine,
    session_ids: Sequence[str],
    flows: Sequence[type[Flow]],
    *,
    model: Model | None = None,
    deps: Any = None,
    run_tools: bool = True,
) -> ReplayReport:
    """Replay each of ``session_ids`` (read from ``source``'s store, never written to) against
    ``flows``, as ``replay_session`` does. Every session is read and checked first: ``ReplayError``
    for the first that cannot be replayed, before any runs."""
    loaded = [await load_recorded(source, session_id, flows) for session_id in session_ids]
    report = ReplayReport(fallback_model=model.name if model is not None else None, tools_run=run_tools)
    for recorded in loaded:
        report.sessions.append(await replay_session(recorded, model=model, deps=deps, run_tools=run_tools))
    return report
