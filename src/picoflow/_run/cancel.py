"""Cancelling a running job (a turn, a decision): ``JobCancel``, the handle ``SessionTurns`` keeps
for each job it runs, by session, and the rules of a cancel.

A cancel stops the job where it waits (a model's answer, an async tool, a store load), by
cancelling the task that runs it; the job path turns that into a ``TurnCancelled`` failure, so the
job's caller gets a result like any failed turn's and the stored session is left as it was. Saves
are the exception, since a save cut short might still land while the job says it did not:

* while a checkpoint is saved (a decision's claim, the calls it ran), the cancel waits for the save
  and the job stops right after it (``check``): what the checkpoint saved is then the last
  committed state;
* once the job's final commit has started, the job is past cancelling (``request`` says so).

Every save and every tool call is also a safe point (``check``): a job asked to stop never starts
one, even if some code on the way swallowed the task's cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from picoflow.exceptions import TurnCancelled

__all__ = ["NEVER_CANCELLED", "JobCancel"]

_UNOPENED: Final = object()


class JobCancel:
    """The cancel of one running job, in the task that runs it."""

    __slots__ = ("_cut", "_final", "_saving", "_task", "noun", "owner", "requested", "revision")

    def __init__(self, task: asyncio.Task[Any] | None, noun: str = "turn") -> None:
        self._task = task
        self.noun = noun
        """What the job is: "turn" or "decision"."""
        self.owner: object = _UNOPENED
        """The principal of the job's session, once the job opened it."""
        self.revision: int | None = None
        """The stored revision the job started on, once it opened its session (None: it starts
        the session): a request from another process names the revision it saw (``answers``)."""
        self.requested = False
        """Someone asked the job to stop."""
        self._cut = False  # the task was cancelled for it
        self._saving = 0
        self._final = False

    @property
    def task(self) -> asyncio.Task[Any] | None:
        """The task the job runs in."""
        return self._task

    @property
    def opened(self) -> bool:
        """Whether the job opened its session (``owner`` is known)."""
        return self.owner is not _UNOPENED

    def request(self) -> bool:
        """Ask the job to stop: at once where it waits, or right after the checkpoint it is saving.
        False when it is past stopping: its final commit started, or it ended."""
        task = self._task
        if self._final or task is None or task.done():
            return False
        if not self.requested:
            self.requested = True
            if not self._saving:
                self._cut = True
                task.cancel()
        return True

    def answers(self, revision: int) -> bool:
        """Whether a cancel made when the stored session stood at ``revision`` is meant for this
        job: it started on that revision or an earlier one (a checkpoint it saved since moved
        the session on). A job started later began after the cancel was made."""
        return self.revision is not None and self.revision <= revision

    def check(self) -> None:
        """A safe point: raise ``TurnCancelled`` when the job was asked to stop."""
        if self.requested:
            raise TurnCancelled(f"the {self.noun} was cancelled")

    @contextmanager
    def saving(self, *, final: bool) -> Iterator[None]:
        """Around a save of the job: refused when the job was asked to stop; meanwhile a cancel
        is refused (``final``: the save that ends the job) or waits. The code that goes on after a
        checkpoint applies a cancel that waited (``check``), knowing what the save stored."""
        if self._task is None:  # nothing can cancel the job
            yield
            return
        self.check()
        self._final = self._final or final
        self._saving += 1
        try:
            yield
        finally:
            self._saving -= 1

    def caught(self) -> bool:
        """Whether the ``CancelledError`` the job's task is raising is this cancel's (then it is
        taken back: the job ends as cancelled, with a result). Any other cancellation (the
        server stopping, the caller's own task cancelled) goes on."""
        if not self._cut or self._task is None:
            return False
        self._cut = False
        return self._task.uncancel() == 0


NEVER_CANCELLED: Final = JobCancel(None)
"""The cancel of a job no one can cancel (a workspace outside ``SessionTurns.take``)."""
