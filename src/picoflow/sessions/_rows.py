"""How a ``Session`` maps to rows, shared by the SQL stores.

A session is stored as one *document* row that holds everything except message bodies (each
namespace keeps only its ``start`` and ``summary``) plus one append-only row per message. Load
rebuilds each namespace's live memory from its stored messages, from the seq of the first live
one on. A save therefore writes one small document and the turn's new messages, however long the
conversation already is. Parsing those messages is most of a load's cost, so the messages earlier
loads parsed are kept by the text they came from (``DecodedMemory``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from picoflow.exceptions import SessionConflict
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
from picoflow.sessions.base import LiveSession

T = TypeVar("T")


class Unreadable(RuntimeError):
    """Stored data this version cannot read back (damaged, or written by something else). Not an
    outage: reading it again fails the same way, so it surfaces as an internal error (500)."""


@dataclass(frozen=True, slots=True)
class SaveRows:
    """Everything a save writes, encoded before any I/O so bad input fails before a transaction opens."""

    revision: int
    document: str
    seqs: list[int]
    """The appended messages' seqs, beside their namespaces and encoded bodies."""
    message_namespaces: list[str]
    bodies: list[str]
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
    if not _plainly_in_order(appended, session.next_seq):
        _check_appended(appended, session.next_seq)
    return 1 if expected_revision is None else expected_revision + 1


def _plainly_in_order(appended: Sequence[tuple[str, Message]], next_seq: int) -> bool:
    """The common case, checked cheaply (a save checks every message it appends): plain pairs of a
    namespace and a message, stamped in increasing order below ``next_seq``."""
    previous = -1
    for item in appended:
        if type(item) is not tuple or len(item) != 2:
            return False
        namespace, message = item
        if type(namespace) is not str or type(message) is not Message or not namespace or "\x00" in namespace:
            return False
        seq = message.seq
        if not previous < seq < next_seq:
            return False
        previous = seq
    return True


def _check_appended(appended: Sequence[tuple[str, Message]], next_seq: int) -> None:
    """Check each appended pair in full, raising ``ValueError`` with the first problem's reason."""
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
        if message.seq >= next_seq:
            raise ValueError(f"appended[{index}] has seq {message.seq} but session.next_seq is {next_seq}")
        previous = message.seq


def prepare_save(
    session: Session, expected_revision: int | None, appended: Sequence[tuple[str, Message]]
) -> SaveRows:
    """Validate a save's arguments and encode the rows it writes (before any I/O)."""
    revision = check_save(session, expected_revision, appended)
    return SaveRows(
        revision,
        document_json(session, revision),
        [message.seq for _, message in appended],
        [namespace for namespace, _ in appended],
        [_encode(MESSAGE_ADAPTER, message) for _, message in appended],
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
        "flow_version": session.flow_version,
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


_WITHOUT_MESSAGES = {"memory": {"__all__": {"messages"}}}


def document_json(session: Session, revision: int) -> str:
    """The session without message bodies (each namespace keeps its start and summary), at
    ``revision``."""
    saved = session.revision
    session.revision = revision  # for the encoding only, which cannot be interrupted
    try:
        return _encode(SESSION_ADAPTER, session, exclude=_WITHOUT_MESSAGES)
    finally:
        session.revision = saved


Live = dict[str, tuple[list[int], list[str]]]
"""A session's live messages as stored: per namespace, their seqs and bodies, in seq order."""


def group_rows(rows: Iterable[Sequence[Any]]) -> tuple[str | None, Live]:
    """Split the rows of a load, ``(seq, namespace, body)`` in any order, into the document (the
    row without a namespace) and the live messages."""
    document: str | None = None
    groups: dict[str, list[tuple[int, str]]] = {}
    for seq, namespace, body in rows:
        if namespace is None:
            document = body
            continue
        group = groups.get(namespace)
        if group is None:
            group = groups[namespace] = []
        group.append((seq, body))
    live: Live = {}
    for namespace, group in groups.items():
        group.sort()  # seqs are unique, so bodies are never compared; in order already, one pass
        live[namespace] = ([seq for seq, _ in group], [body for _, body in group])
    return document, live


def restore_session(document: str | None, live: Live, decoded: DecodedMemory | None = None) -> Session:
    """Rebuild a session from its document and its live messages.

    ``decoded`` spares parsing the messages an earlier load of this session already parsed.
    """
    if document is None:
        raise Unreadable("stored session is not readable: its document is missing")
    session = parse_document(document)
    for namespace, (_, bodies) in live.items():
        held = session.memory.get(namespace)
        if held is None:
            raise Unreadable(
                f"stored session is not readable: messages of an unknown namespace {namespace!r}"
            )
        if decoded is None:
            held.messages.extend(decode_bodies(bodies))
        else:
            held.messages.extend(decoded.messages(session.id, namespace, bodies))
    return session


def live_session(session_id: str, document: str) -> LiveSession:
    """A stored session read from its document alone (no messages), or why it cannot be."""
    try:
        return LiveSession(session_id, restore_session(document, {}))
    except Unreadable as exc:
        return LiveSession(session_id, None, str(exc))


def parse_document(document: str) -> Session:
    """The session a stored document holds (its memory without messages)."""
    try:
        return SESSION_ADAPTER.validate_json(document)
    except ValidationError as exc:
        raise Unreadable(f"stored session is not readable: {_describe(exc)}") from exc


class DecodedMemory:
    """The messages of recently loaded namespaces, with the stored bodies they were parsed from.

    A conversation's next load reads the same live messages plus the few its last turn added, and
    parsing them is most of a load's cost. When a load's bodies begin with the bodies parsed
    before, those messages are reused and only the rest is parsed. What is kept is a function of
    the stored text alone, so nothing can go stale; messages are immutable, so loads may share them.
    Bounded by ``limit`` namespaces and ``max_chars`` of stored text.
    """

    def __init__(self, limit: int = 512, max_chars: int = 8_000_000) -> None:
        self._entries: Bounded[tuple[str, str], tuple[list[str], tuple[Message, ...]]] = Bounded(
            limit, max_chars
        )

    def messages(self, session_id: str, namespace: str, bodies: list[str]) -> tuple[Message, ...]:
        key = (session_id, namespace)
        known = self._entries.get(key)
        if known is not None and bodies[: len(known[0])] == known[0]:  # same objects: pointer compares
            rest = bodies[len(known[0]) :]
            if not rest:
                return known[1]
            parsed = known[1] + tuple(decode_bodies(rest))
        else:
            parsed = tuple(decode_bodies(bodies))
        self._entries.put(key, (bodies, parsed), sum(map(len, bodies)))
        return parsed

    def forget(self, session_id: str) -> None:
        self._entries.drop(lambda key: key[0] == session_id)


K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """A least-recently-used map bounded by entries and by the summed sizes given with them, safe
    to use from several threads (loads may run on several: ``run_sync`` from many)."""

    def __init__(self, limit: int, max_size: int) -> None:
        self.limit = limit
        self.max_size = max_size
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V, size: int) -> None:
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._size -= previous[1]
            if size > self.max_size // 4:
                return  # one huge entry would push out all the others
            self._entries[key] = (value, size)
            self._size += size
            while len(self._entries) > self.limit or self._size > self.max_size:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._size -= dropped

    def drop(self, which: Callable[[K], bool] | None = None) -> None:
        """Forget the entries whose key ``which`` selects, or all of them."""
        with self._lock:
            for key in [key for key in self._entries if which is None or which(key)]:
                self._size -= self._entries.pop(key)[1]


def decode_bodies(bodies: list[str]) -> list[Message]:
    """The messages of stored bodies."""
    # One parse of a JSON array is much cheaper than one parse call per message.
    try:
        messages = MESSAGES_ADAPTER.validate_json("[" + ",".join(bodies) + "]")
    except ValidationError as exc:
        raise Unreadable(f"stored session is not readable: {_describe(exc)}") from exc
    if len(messages) != len(bodies):
        raise Unreadable("stored session is not readable: a message row holds more than one message")
    return messages


def decode_messages(bodies: Iterable[str]) -> list[Message]:
    try:
        return MESSAGES_ADAPTER.validate_json("[" + ",".join(bodies) + "]")
    except ValidationError as exc:
        raise Unreadable(f"stored message is not readable: {_describe(exc)}") from exc


def encode_record(record: LogRecord) -> str:
    if not isinstance(record, LogRecord):
        raise TypeError(f"record_error() needs a LogRecord, not {type(record).__name__}")
    return _encode(LOG_ADAPTER, record)


def decode_records(bodies: Iterable[str]) -> list[LogRecord]:
    try:
        return [LOG_ADAPTER.validate_json(body) for body in bodies]
    except ValidationError as exc:
        raise Unreadable(f"stored error record is not readable: {_describe(exc)}") from exc


def listing_query(
    table: str,
    mark: Callable[[str], str],
    filters: dict[str, str | None],
    limit: int,
    offset: int,
    errors: tuple[str, bool] | None = None,
) -> tuple[str, dict[str, object]]:
    """The session listing query over ``table`` with the given filters, newest first.

    ``mark`` writes a named placeholder in the driver's style (``:name`` or ``%(name)s``).
    ``errors`` is (the table of error records, whether a session must have one or have none).
    """
    check_page(limit, offset)
    conditions = [f"{column} = {mark(column)}" for column, value in filters.items() if value is not None]
    if errors is not None:
        records, wanted = errors
        # The records' index on (session_id, id) answers this without reading a record.
        found = f"EXISTS (SELECT 1 FROM {records} AS err WHERE err.session_id = listed.id)"
        conditions.append(found if wanted else f"NOT {found}")
    where = " AND ".join(conditions)
    query = (
        "SELECT id, flow, status, current_step, principal, revision, turns, created_at, updated_at"
        f" FROM {table} AS listed {'WHERE ' + where if where else ''}"
        f" ORDER BY updated_at DESC, id LIMIT {mark('limit')} OFFSET {mark('offset')}"
    )
    return query, {**filters, "limit": limit, "offset": offset}


MAX_INTEGER = 2**63 - 1
"""The largest integer the SQL stores keep (a signed 64-bit column)."""


def check_page(limit: int, offset: int) -> None:
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INTEGER:
            raise ValueError(f"{name} must be an integer from 0 to 2**63 - 1, not {value!r}")


def _describe(exc: ValidationError) -> str:
    """The first problem, without the stored value it found (it may be private text)."""
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "the top"
    return f"{exc.error_count()} problem(s), first at {where}: {first['msg']}"


def _encode(adapter: TypeAdapter[T], value: T, exclude: dict[str, Any] | None = None) -> str:
    try:
        return adapter.dump_json(value, exclude=exclude).decode()
    except PydanticSerializationError as exc:
        # Typically a lone surrogate in some text, or a state value that is not JSON.
        raise ValueError(f"cannot store this value as JSON: {exc}") from exc
