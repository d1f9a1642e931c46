"""The two kinds of job ``SessionTurns.take`` runs against a session: a turn (``TurnRequest``: a
message, answered by the loop) and a decision (``DecisionRequest``: on a pending approval, which
may resume the turn that asked for it). Each says how it opens its session and what it runs there;
the lock, the restore, the commit and the failure are the job path's.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass

from picoflow._run.approvals import answer_unfinished, approvals_of, check_decision, decide_approval
from picoflow._run.effects import Paused, Reply, enter
from picoflow._run.files import TurnFiles
from picoflow._run.handoff import wait_for_staff
from picoflow._run.loop import resume_turn, run_turn
from picoflow._run.session_turn import Opened, SessionTurns, may_access, store_call
from picoflow._run.workspace import Workspace
from picoflow.approvals import Decision, PausedResponse
from picoflow.attachments import Attachment
from picoflow.context import Caller
from picoflow.exceptions import (
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalPending,
    FlowMismatch,
    SessionCompleted,
    SessionConflict,
    SessionNotFound,
)
from picoflow.flow import FlowSpec
from picoflow.outcomes import direct
from picoflow.session import OPEN_STATUSES, Session
from picoflow.versions import migrate_session

__all__ = ["DecisionRequest", "TurnRequest"]

logger = logging.getLogger("picoflow")


@dataclass(slots=True)
class TurnRequest:
    """A turn as the engine checked it: the flow (None: the session's own), the text, the session."""

    spec: FlowSpec | None
    text: str
    session_id: str
    """The session the turn continues, or the id of the one it starts."""
    starts: bool
    """The turn starts the session ``session_id`` (its id chosen by the engine, before the turn)."""
    caller: Caller
    files: tuple[Attachment, ...] = ()
    """The files sent with the message, checked."""

    noun = "turn"

    @property
    def continues(self) -> str | None:
        """The id of the stored session the turn continues; None for a new one."""
        return None if self.starts else self.session_id

    async def open(self, turns: SessionTurns) -> Opened:
        """The turn's flow (its MCP tools listed, its models ready) and its session: a new one, or
        the caller's stored session, still running, of the requested flow."""
        if self.starts:
            spec = self.spec
            assert spec is not None  # the engine resolves the flow of a new session up front
            principal = self.caller.principal
            session = Session(
                id=self.session_id,
                flow=spec.name,
                current_step=spec.start,
                principal=principal,
                flow_version=spec.version,
            )
            return Opened(await turns.ready(spec), session, self.caller, None)
        spec, stored = await self._stored(turns)
        spec = await turns.ready(spec)  # its MCP tools listed: an approval of one may be carried
        expected = stored.revision
        migration = migrate_session(stored, spec, turns.host.clock())
        return Opened(spec, stored, self.caller, expected, migration)

    async def _stored(self, turns: SessionTurns) -> tuple[FlowSpec, Session]:
        session_id, spec = self.session_id, self.spec
        async with store_call("loading session", session_id):
            stored = await turns.host.store.load(session_id)
        if stored is None or not may_access(stored, self.caller.principal):
            raise SessionNotFound(f"no session {session_id} for this caller", session_id=session_id)
        if spec is None:
            spec = turns.host.flow(stored.flow)
        if stored.flow != spec.name:
            raise FlowMismatch(f"session {session_id} belongs to flow {stored.flow}, not {spec.name}")
        if stored.status not in OPEN_STATUSES:
            raise SessionCompleted(f"session {session_id} is {stored.status}", session_id=session_id)
        return spec, stored

    async def run(self, turns: SessionTurns, ws: Workspace, opened: Opened) -> Reply | Paused:
        """The message answered (by the loop, or kept for staff while a human is awaited), and
        committed with its files. A session a new version of its flow sent to the fallback step is
        told so instead."""
        if self.files or ws.session.files_sent:
            ws.files = TurnFiles(self.files, functools.partial(turns.host.store.load_files, ws.session.id))
        if ws.session.paused is not None:
            await _close_paused(turns, ws, ws.session.paused)
        fell_back = opened.migration.fell_back if opened.migration is not None else None
        if ws.session.status == "awaiting_human":  # staff answer: no model is called
            reply: Reply | Paused = await turns.observed(ws, wait_for_staff(ws, self.text))
        elif fell_back is not None and ws.session.current_step == fell_back.step:
            reply = await turns.observed(ws, _fall_back(ws, self.text))
        else:
            reply = await turns.observed(ws, run_turn(ws, self.text))
        await turns.commit(ws, opened.expected, self.files)
        return reply


async def _fall_back(ws: Workspace, text: str) -> Reply:
    """The first turn in the fallback step of a session whose step a new version of the flow
    removed: the step is entered, the user's message kept in its memory, and the reply, written in
    code, says what happened (``Flow.fallback_message``) and asks the step's opening question. The
    message itself is not answered: it was written for a step that no longer exists."""
    name = ws.session.current_step
    await enter(ws, name, previous=None)
    ws.add_user(name, text)
    step = ws.step(name)
    opening = await ws.hook(step, "opening", step.opening)
    notice = ws.config.spec.cls.fallback_message.strip()
    said = direct(f"{notice} {opening}".strip() if isinstance(opening, str) else notice)
    ws.add_direct(name, said)
    return Reply(said.content)


async def _close_paused(turns: SessionTurns, ws: Workspace, paused: PausedResponse) -> None:
    """A new message while calls wait: what waits is withdrawn (or expired), its calls answered
    as not run, and the turn goes on. Refused while a process runs the decided calls."""
    now = turns.host.clock()
    if paused.resuming_since is not None and now < paused.resuming_since + turns.host.approval_lease:
        raise ApprovalPending(
            f"session {ws.session.id} is carrying out a decision; send the message again when it is done",
            session_id=ws.session.id,
        )
    await answer_unfinished(ws, paused, now)


@dataclass(slots=True)
class DecisionRequest:
    """A decision as the engine checked it: on which approval, by whom, when (the deciding
    process's clock: a durable executor decides by it wherever the decision runs).

    Taken, it is recorded in the session; when it was the last its response waited for, the
    response's calls run (each approved one exactly once) and the turn goes on to its reply. A
    refusal changes nothing, as a failed turn."""

    session_id: str
    approval_id: str
    decision: Decision
    reason: str | None
    caller: Caller
    at: float

    noun = "decision"

    @property
    def continues(self) -> str:
        """A decision is taken in a stored session."""
        return self.session_id

    async def open(self, turns: SessionTurns) -> Opened:
        """The session the decision is taken in, with its flow (its MCP tools listed), once the
        decision passed its checks there. Whether the caller may see it is the approval's to say
        (a supervisor decides in others' sessions)."""
        session_id = self.session_id
        async with store_call("loading session", session_id):
            stored = await turns.host.store.load(session_id)
        if stored is None:
            raise ApprovalNotFound(f"no approval {self.approval_id} for this caller", session_id=session_id)
        spec = await turns.ready(turns.host.flow(stored.flow))
        expected = stored.revision
        migration = migrate_session(stored, spec, turns.host.clock())
        _, paused = check_decision(stored, spec, self.approval_id, self.caller, self.at)
        # The calls run as the proposing caller: the session's principal, with its visibilities.
        owner = Caller(
            principal=stored.principal, visibilities=frozenset(paused.visibilities), deps=self.caller.deps
        )
        return Opened(spec, stored, owner, expected, migration)

    async def run(self, turns: SessionTurns, ws: Workspace, opened: Opened) -> Reply | Paused:
        """The decision recorded and claimed; with the last one its response waited for, the
        response's calls run, checkpointed, and the turn goes on to its commit."""
        session = ws.session  # what the flow made of it: checked again
        approval, paused = check_decision(session, opened.spec, self.approval_id, self.caller, self.at)
        session.updated_at = time.time()
        decided = decide_approval(session, approval, self.decision, self.caller, self.reason, self.at)
        ws.config.observer.approval_decided(decided)
        waiting = tuple(a for a in approvals_of(session.approvals, paused.approvals) if a.pending)
        expected = session.revision
        cancel = ws.config.cancel
        if waiting:  # the response still waits for other decisions: this save ends the job
            with cancel.saving(final=True):
                await _claim(turns, session, expected)
            return Paused(waiting)
        session.paused = dataclasses.replace(paused, resuming_since=self.at)
        with cancel.saving(final=False):
            expected = await _claim(turns, session, expected)  # one process only goes on from here
        claimed = True  # until the checkpoint, the stored session says this process runs the calls

        async def checkpoint() -> None:
            nonlocal expected, claimed
            await turns.commit(ws, expected, (), ended=False)
            expected = session.revision
            ws.appended.clear()
            claimed = False
            cancel.check()  # a cancel that waited for the save stops the turn here

        try:
            cancel.check()  # a cancel that waited for the claim
            ended = await turns.observed(ws, resume_turn(ws, paused, checkpoint))
        except BaseException:
            if claimed and cancel.requested:
                await _give_up(turns, session.id, expected, self.at)
            raise
        await turns.commit(ws, expected, ())
        return ended


async def _claim(turns: SessionTurns, session: Session, expected: int) -> int:
    """Save a decision, compare-and-swap: of two processes deciding at once, one goes on and the
    other is refused with nothing run. Returns the new revision."""
    try:
        async with store_call("saving a decision in session", session.id):
            return await turns.host.store.save(session, expected_revision=expected)
    except SessionConflict as exc:
        raise ApprovalConflict(
            f"session {session.id} changed while the decision was taken (another decision or "
            "message came first); nothing was run",
            session_id=session.id,
        ) from exc


async def _give_up(turns: SessionTurns, session_id: str, claimed: int, at: float) -> None:
    """A decision cancelled while its calls ran: the claim it stored is given up (its lease ends
    at once), so the next message answers those calls as of unknown result (never run again)
    rather than waiting for the lease to run out. Best effort: a failure leaves the lease to end."""
    store = turns.host.store
    try:
        stored = await store.load(session_id)
        if stored is None or stored.revision != claimed or stored.paused is None:
            return
        stored.paused = dataclasses.replace(stored.paused, resuming_since=at - turns.host.approval_lease)
        await store.save(stored, expected_revision=claimed)
    except Exception:
        logger.warning(
            "picoflow: could not give up the cancelled decision's claim in session %s",
            session_id,
            exc_info=True,
        )
