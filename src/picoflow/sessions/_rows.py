"""How a ``Session`` maps to rows, shared by the SQL stores.

A session is stored as one *document* row that holds everything except message bodies (each
namespace keeps only its ``start`` and ``summary``) plus one append-only row per message. Load
rebuilds each namespace's live memory from its stored messages, from the seq of the first live
one on. A save therefore writes one small document and the turn's new messages, however long the
conversation already is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from picoflow.exceptions import SessionConflict, StoreError
from picoflow.messages import Message
from picoflow.session import (
    LOG_ADAPTER,
    MESSAGE_ADAPTER,
    MESSAGES_ADAPTER,
    SESSION_ADAPTER,
    LogRecord,
    Namespace,
    Session,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MessageRow:
    seq: int
    namespace: str
    body: str


@dataclass(frozen=True, slots=True)
class SaveRows:
    """Everything a save writes, encoded before any I/O so bad input fails before a transaction opens."""

    revision: int
    document: str
    messages: list[MessageRow]
    namespaces: list[str]
    """Names of the namespaces in memory, beside ``starts``: the load query reads these rather than
    the document, which it then never has to parse."""
    starts: list[int]
    """Per namespace, the seq from which its stored messages are live (see ``live_from``)."""


def check_save(
    session: Session, expected_revision: int | None, appended: Sequence[tuple[str, Message]]
) -> int:
    """Validate a save's arguments (every store does) and return the revision it would store.

    The checks guard the invariant load relies on: every stored message has a unique, stamped
    ``seq`` below ``session.next_seq``, so an empty namespace, live from ``next_seq``, really
    hides everything older.
    """
    if not isinstance(session, Session):
        raise TypeError(f"save() needs a Session, not {type(session).__name__}")
    if not isinstance(session.id, str) or not session.id:
        raise ValueError("session.id must be a non-empty string")
    if expected_revision is not None and (
        isinstance(expected_revision, bool) or not isinstance(expected_revision, int) or expected_revision < 0
    ):
        raise ValueError(f"expected_revision must be None or an integer >= 0, not {expected_revision!r}")
    for name in session.memory:
        if not isinstance(name, str) or not name or "\x00" in name:
            raise ValueError(f"memory namespace names must be non-empty strings without NUL, not {name!r}")
    previous = -1
    for index, item in enumerate(appended):
        if not isinstance(item, tuple) or len(item) != 2:
            raise ValueError(f"appended[{index}] must be a (namespace, message) pair")
        namespace, message = item
        if not isinstance(namespace, str) or not namespace or "\x00" in namespace:
            raise ValueError(f"appended[{index}]: the namespace must be a non-empty string without NUL")
        if not isinstance(message, Message):
            raise ValueError(f"appended[{index}]: expected a Message, not {type(message).__name__}")
        if message.seq < 0:
            raise ValueError(f"appended[{index}] has no seq: stamp messages before saving them")
        if message.seq <= previous:
            raise ValueError(f"appended[{index}] (seq {message.seq}) is out of seq order")
        if message.seq >= session.next_seq:
            raise ValueError(
                f"appended[{index}] has seq {message.seq} but session.next_seq is {session.next_seq}"
            )
        previous = message.seq
    return 1 if expected_revision is None else expected_revision + 1


def prepare_save(
    session: Session, expected_revision: int | None, appended: Sequence[tuple[str, Message]]
) -> SaveRows:
    """Validate a save's arguments and encode the rows it writes (before any I/O)."""
    revision = check_save(session, expected_revision, appended)
    messages = [
        MessageRow(message.seq, namespace, _encode(MESSAGE_ADAPTER, message))
        for namespace, message in appended
    ]
    return SaveRows(
        revision,
        document_json(session, revision),
        messages,
        list(session.memory),
        [live_from(ns, session.next_seq) for ns in session.memory.values()],
    )


def session_columns(session: Session, prepared: SaveRows, expected_revision: int | None) -> dict[str, object]:
    """The session row's columns (and the revision the write is conditioned on), named for SQL."""
    return {
        "id": session.id,
        "flow": session.flow,
        "status": session.status,
        "principal": session.principal,
        "current_step": session.current_step,
        "revision": prepared.revision,
        "turns": session.turns,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "document": prepared.document,
        "expected": expected_revision,
    }


def conflict(session_id: str, expected_revision: int | None) -> SessionConflict:
    """The conflict a compare-and-swap save lost: the session exists already, or moved on."""
    if expected_revision is None:
        return SessionConflict(f"session {session_id} already exists", session_id=session_id)
    return SessionConflict(
        f"session {session_id} changed since revision {expected_revision}", session_id=session_id
    )


def seq_reused(session_id: str) -> ValueError:
    return ValueError(f"session {session_id}: an appended message reuses a seq already stored")


def live_from(namespace: Namespace, next_seq: int) -> int:
    """The seq from which a namespace's stored messages are its live memory.

    Taken from the live messages themselves rather than ``Namespace.start``: live memory is always
    a suffix of what the namespace was given (appends add at the end, erasing empties it,
    compaction drops a prefix), so this rebuilds exactly the saved list even when ``start`` was not
    kept in step with it, e.g. a namespace created just after its first message took its seq.
    """
    return namespace.messages[0].seq if namespace.messages else next_seq


def document_json(session: Session, revision: int) -> str:
    """The session without message bodies, at ``revision``."""
    heads = {name: Namespace([], ns.start, ns.summary) for name, ns in session.memory.items()}
    stripped = dataclasses.replace(session, memory=heads, revision=revision)
    return _encode(SESSION_ADAPTER, stripped)


def restore_session(document: str | bytes, live: Iterable[tuple[str, str]]) -> Session:
    """Rebuild a session from its document and its live ``(namespace, body)`` rows in seq order."""
    rows = list(live)
    try:
        session = SESSION_ADAPTER.validate_json(document)
        # One parse of a JSON array is much cheaper than one parse call per message.
        messages = MESSAGES_ADAPTER.validate_json("[" + ",".join(body for _, body in rows) + "]")
    except ValidationError as exc:
        raise StoreError(f"stored session is not readable: {exc}") from exc
    for (namespace, _), message in zip(rows, messages, strict=True):
        session.memory[namespace].messages.append(message)
    return session


def decode_messages(bodies: Iterable[str]) -> list[Message]:
    try:
        return MESSAGES_ADAPTER.validate_json("[" + ",".join(bodies) + "]")
    except ValidationError as exc:
        raise StoreError(f"stored message is not readable: {exc}") from exc


def encode_record(record: LogRecord) -> str:
    if not isinstance(record, LogRecord):
        raise TypeError(f"record_error() needs a LogRecord, not {type(record).__name__}")
    return _encode(LOG_ADAPTER, record)


def decode_records(bodies: Iterable[str]) -> list[LogRecord]:
    try:
        return [LOG_ADAPTER.validate_json(body) for body in bodies]
    except ValidationError as exc:
        raise StoreError(f"stored error record is not readable: {exc}") from exc


def listing_query(
    table: str, mark: Callable[[str], str], filters: dict[str, str | None], limit: int, offset: int
) -> tuple[str, dict[str, object]]:
    """The session listing query over ``table`` with the given filters, newest first.

    ``mark`` writes a named placeholder in the driver's style (``:name`` or ``%(name)s``).
    """
    check_page(limit, offset)
    where = " AND ".join(
        f"{column} = {mark(column)}" for column, value in filters.items() if value is not None
    )
    query = (
        "SELECT id, flow, status, current_step, principal, revision, turns, created_at, updated_at"
        f" FROM {table} {'WHERE ' + where if where else ''}"
        f" ORDER BY updated_at DESC, id LIMIT {mark('limit')} OFFSET {mark('offset')}"
    )
    return query, {**filters, "limit": limit, "offset": offset}


def check_page(limit: int, offset: int) -> None:
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, not {value!r}")


def _encode(adapter: TypeAdapter[T], value: T) -> str:
    try:
        return adapter.dump_json(value).decode()
    except PydanticSerializationError as exc:
        # Typically a lone surrogate in some text, or a state value that is not JSON.
        raise ValueError(f"cannot store this value as JSON: {exc}") from exc
