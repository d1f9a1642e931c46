"""The ``SessionStore`` protocol every store implements (the values it stores are in
``picoflow.session``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from picoflow.attachments import Attachment, AttachmentRef
from picoflow.messages import Message
from picoflow.session import (
    DOCUMENT_VERSION,
    LogRecord,
    Namespace,
    Session,
    SessionInfo,
    SessionStatus,
    copy_json,
    session_from_json,
    session_to_json,
)

__all__ = [
    "DOCUMENT_VERSION",
    "CancelChannel",
    "CancelRequest",
    "LiveSession",
    "LiveSessions",
    "LogRecord",
    "Namespace",
    "Session",
    "SessionInfo",
    "SessionStatus",
    "SessionStore",
    "TimelineStore",
    "copy_json",
    "session_from_json",
    "session_to_json",
]


@runtime_checkable
class SessionStore(Protocol):
    """Durable storage of sessions with compare-and-swap saves.

    Contract every implementation honours (checked by the conformance suite):

    * ``load`` returns a private copy: the caller may mutate it freely; ``None`` if unknown.
    * ``save(session, expected_revision=None, ...)`` creates the session and fails with
      ``SessionConflict`` if the id exists. ``save(session, expected_revision=r, ...)`` succeeds
      only if the stored revision is still ``r``; otherwise ``SessionConflict`` and nothing is
      written. A successful save stores revision ``r + 1`` (1 on create), sets
      ``session.revision`` to it and returns it. It is atomic: all of it or nothing.
    * ``appended`` are the messages added since the session was loaded, as
      ``(namespace, message)`` pairs in ``seq`` order; they join the transcript.
    * ``files`` are the attachments the saved turn brought. They are written in the same
      transaction as the session, beside it (never inside the document), once per session by
      SHA-256: a file the session already holds is kept as it is. A save that fails (conflict,
      error) writes none of them. Each must be an ``Attachment`` (``TypeError`` otherwise).
    * ``load_files`` returns the bytes of the session's stored files among ``hashes`` (missing
      ones are simply absent); ``list_files`` every file stored for the session, in the order
      first stored, under the name it was first stored with. Both are per session: another
      session's files are never returned. ``delete`` removes the files too.
    * ``record_error`` keeps an error record beside the session without touching the document.
    """

    async def load(self, session_id: str) -> Session | None: ...

    async def save(
        self,
        session: Session,
        *,
        expected_revision: int | None,
        appended: Sequence[tuple[str, Message]] = (),
        files: Sequence[Attachment] = (),
    ) -> int: ...

    async def load_files(self, session_id: str, hashes: Collection[str]) -> dict[str, bytes]: ...

    async def list_files(self, session_id: str) -> list[AttachmentRef]: ...

    async def delete(self, session_id: str) -> bool: ...

    async def list_sessions(
        self,
        *,
        flow: str | None = None,
        status: SessionStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
        offset: int = 0,
        errors: bool | None = None,
    ) -> list[SessionInfo]:
        """Sessions newest first (``updated_at``, then id), filtered by each argument given;
        ``errors`` True keeps those with an error record, False those without."""
        ...

    async def find_ids(self, prefix: str, limit: int = 10) -> list[str]:
        """Ids of stored sessions starting with ``prefix`` (an exact id is its own prefix), in
        order, at most ``limit``: how the command line accepts a unique prefix, like git."""
        ...

    async def transcript(self, session_id: str) -> list[Message]: ...

    async def record_error(self, session_id: str, record: LogRecord) -> None: ...

    async def errors(self, session_id: str) -> list[LogRecord]: ...

    async def close(self) -> None: ...


@runtime_checkable
class TimelineStore(Protocol):
    """A store that keeps turns' timelines beside its sessions (``picoflow.timeline``); every store
    picoflow ships is one. An engine recording timelines on a store without it records nothing.

    * ``record_timeline`` keeps one turn's timeline (JSON text), in its own write, without touching
      the document; with ``keep_turns`` it also deletes the session's timelines of turns older than
      the last ``keep_turns`` (a failed turn and its retry share a number).
    * ``timelines`` returns a session's timelines in the order recorded, or those of one turn.
    * ``delete`` removes them with the session.
    """

    async def record_timeline(
        self, session_id: str, turn: int, body: str, *, keep_turns: int | None = None
    ) -> None: ...

    async def timelines(self, session_id: str, turn: int | None = None) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class LiveSession:
    """One stored session as ``LiveSessions.live_sessions`` reads it."""

    id: str
    session: Session | None
    """The session without its messages (each namespace empty); None when it is not readable."""
    problem: str | None = None
    """Why the stored session could not be read (never a value it holds)."""


@runtime_checkable
class LiveSessions(Protocol):
    """A store that reads its live sessions (running, awaiting an approval or a human) in pages, in
    the order of their ids: what ``picoflow sessions check`` walks, however many there are. Every
    store picoflow ships is one.

    * ``live_sessions(flow, after=, limit=)`` returns at most ``limit`` live sessions of ``flow``
      whose id sorts after ``after``, in id order (keyset pagination: a page costs the same on the
      millionth session as on the first, and a session saved meanwhile is neither skipped nor
      read twice unless its id is new). Each is read without its messages; a session whose
      document cannot be read is returned with its ``problem`` instead.
    * ``live_versions()`` counts the live sessions of each flow by the flow version they last ran
      on (``""``: stored before versions were recorded), without reading their documents.
    """

    async def live_sessions(self, flow: str, *, after: str = "", limit: int = 1000) -> list[LiveSession]: ...

    async def live_versions(self) -> dict[tuple[str, str], int]: ...


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """A request, published by a process sharing the store, to stop the job (a turn, a decision)
    running against a session. It carries ids and a revision only: the process that published it
    loaded the stored session and checked that its caller owns it."""

    session_id: str
    revision: int
    """The session's stored revision when the request was made. The job to stop started on it or
    on an earlier one (a job that saved a checkpoint since stands on a later one); a job started on
    a later revision began after the request, and is left alone."""
    request_id: str
    """Names the request in its answer; a request heard again is answered again, never acted on twice."""


@runtime_checkable
class CancelChannel(Protocol):
    """A store that carries cancel requests between the processes sharing it, so that
    ``FlowEngine.cancel`` reaches a job running in any of them (``PostgresStore``, over
    ``LISTEN``/``NOTIFY``). A store without it (``MemoryStore``, ``SQLiteStore``) leaves each
    process to cancel its own jobs.

    * ``listen_for_cancels(answer)`` hands ``answer`` each request any process publishes (this one
      included), in this event loop, until the function it returns is called or the store closes.
      ``answer`` stops the job the request names if it runs here, and returns what it stopped
      ("turn", "decision"), or None. The call returns at once: the listening goes on in the
      background, keeps itself connected, and logs its failures without raising them.
    * ``request_cancel(session_id, revision)`` publishes a request and returns what the process
      that stopped the job answered, or None when none answered within the store's bound (its
      ``cancel_wait``): no job runs, or it is past stopping, or the process running it cannot be
      reached.
    """

    def listen_for_cancels(self, answer: Callable[[CancelRequest], str | None]) -> Callable[[], None]: ...

    async def request_cancel(self, session_id: str, revision: int) -> str | None: ...
