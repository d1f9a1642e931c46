"""Where a checked turn runs: ``FlowEngine(executor=...)``.

The engine checks a turn's input (the message, the session id, the files), then hands it to its
executor. ``LocalExecutor``, the default, runs it here, in this process, on the engine's store.
``picoflow.temporal.TemporalExecutor`` runs it as a durable workflow on worker processes. A
decision on a pending approval is handed over the same way: it is the other kind of job a session
runs (``SessionTurns.take`` runs both). An executor also stops a running job (``cancel``): where
the job runs, before it commits.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol

from picoflow._run.jobs import DecisionRequest, TurnRequest
from picoflow._run.observers import TurnObserver
from picoflow._run.session_turn import CHECKED, SessionJob, SessionTurns
from picoflow.context import PrincipalFilter
from picoflow.results import TurnResult

__all__ = ["LocalExecutor", "TurnExecutor"]


class TurnExecutor(Protocol):
    """Runs checked turns, and returns each one's result."""

    async def take(self, turns: SessionTurns, request: TurnRequest, observer: TurnObserver) -> TurnResult:
        """The result of ``request``; never raises for a run-time failure. ``turns`` are the
        engine's (its store, flows and models); a turn that could not even be submitted is
        ``turns.failed(...)``, filed as refused input is."""
        ...

    async def decide(
        self, turns: SessionTurns, request: DecisionRequest, observer: TurnObserver
    ) -> TurnResult:
        """The result of a decision: the turn it resumes, or its refusal. A decision is the other
        kind of job a session runs; ``SessionTurns.take`` (``decide`` is the same) runs both."""
        ...

    async def cancel(
        self, turns: SessionTurns, session_id: str, revision: int | None, principal: PrincipalFilter
    ) -> str | None:
        """Ask the job running against ``session_id`` to stop before it commits: what it is
        ("turn", "decision"), or None when none runs where this executor can reach it. ``revision``
        is the session's stored revision, the one a running turn started on; None: the session is
        not stored yet (a first turn), so the caller's access was not checked: a job of a session
        ``principal`` may not reach, or none at all, raises ``SessionNotFound``."""
        ...


class LocalExecutor:
    """Runs each turn in this process, one at a time per session (the store's compare-and-swap
    keeps turns in other processes apart). It cancels the jobs of this process and, on a store
    that carries cancels between processes (``CancelChannel``: ``PostgresStore``), those of every
    process sharing the store."""

    def take(
        self, turns: SessionTurns, request: SessionJob, observer: TurnObserver
    ) -> Coroutine[Any, Any, TurnResult]:
        turns.listen_for_cancels()  # from the first job on; a check of identity after that
        # The job itself, handed on to be awaited: no coroutine of its own on every turn's path.
        return turns.take(request, observer)

    decide = take  # a decision is a job as a turn is

    async def cancel(
        self, turns: SessionTurns, session_id: str, revision: int | None, principal: PrincipalFilter
    ) -> str | None:
        """Stop the job this process runs against ``session_id`` or, none running here, the one
        another process runs, when the store carries cancels between processes. A first turn's
        session is not stored yet, so its owner is unknown here: only this process reaches it."""
        job = turns.cancel(session_id, CHECKED if revision is not None else principal)
        if job is None and revision is not None:
            job = await turns.cancel_elsewhere(session_id, revision)
        return job
