"""What a ``SQLiteStore``'s writer connection knows of recent sessions, so that a load after the
store's own save need not read the database again.

``PRAGMA data_version`` on a connection changes exactly when *another* connection commits to the
file, and every write of a store goes through its writer connection. Each session is kept as read
at some version, with the store's own saves applied since: its document, its live messages already
parsed, and the bodies saved since (parsed at the next load, exactly as if read from the file).
While the version has not moved, nothing but those saves has touched the file, so this is what a
load would read. Any other commit (another process, another store on the file) moves it, and the
next load reads again. The store runs all of this while it holds the writer connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from picoflow.messages import Message
from picoflow.session import Session
from picoflow.sessions import _rows

Read = Callable[[sqlite3.Connection], "tuple[str | None, _rows.Live] | None"]
"""Reads a session's document and live messages from the file (None if there is no such session)."""


@dataclass(slots=True)
class _Known:
    version: int
    document: str
    messages: dict[str, list[Message]]
    """Per namespace, the live messages parsed so far."""
    waiting: dict[str, list[tuple[int, str]]]
    """Per namespace, ``(seq, body)`` of the messages saved since, in seq order, not parsed yet."""
    chars: int
    """About how much text this holds (for the bound)."""


class KnownSessions:
    """Recent sessions as the writer connection last read or wrote them; bounded by ``limit``
    sessions and about ``max_chars`` of text."""

    def __init__(self, limit: int = 256, max_chars: int = 8_000_000) -> None:
        self._entries: _rows.Bounded[str, _Known] = _rows.Bounded(limit, max_chars)

    def load(self, conn: sqlite3.Connection, session_id: str, read: Read) -> Session | None:
        """The session, from what is known if nothing else committed since it was read."""
        version: int = conn.execute("PRAGMA data_version").fetchone()[0]
        known = self._entries.get(session_id)
        if known is None or known.version != version:
            # The version first: a commit landing before the read is then seen as a change next time.
            loaded = read(conn)
            if loaded is None:
                self.forget(session_id)
                return None
            document, live = loaded
            if document is None:
                raise _rows.Unreadable("stored session is not readable: its document is missing")
            waiting = {namespace: list(zip(*pairs, strict=True)) for namespace, pairs in live.items()}
            chars = len(document) + sum(sum(map(len, bodies)) for _, bodies in live.values())
            known = _Known(version, document, {}, waiting, chars)
            self._entries.put(session_id, known, chars)
        try:
            return self._session(known)
        except BaseException:
            self.forget(session_id)
            raise

    def saved(
        self, session_id: str, document: str, starts: dict[str, int], added: list[tuple[str, int, str, str]]
    ) -> None:
        """This store committed a save: ``document``, live ``starts`` per namespace, and the rows
        ``(session_id, seq, namespace, body)`` of the messages it appended."""
        known = self._entries.get(session_id)
        if known is None:
            return
        messages: dict[str, list[Message]] = {}
        waiting: dict[str, list[tuple[int, str]]] = {}
        chars = known.chars + len(document) - len(known.document) + sum(len(body) for *_, body in added)
        for namespace, start in starts.items():
            parsed = known.messages.get(namespace, [])
            pending = known.waiting.get(namespace, [])
            if parsed and parsed[0].seq < start:  # the window moved on (memory erased or compacted)
                chars -= sum(len(message.content) for message in parsed if message.seq < start)
                parsed = [message for message in parsed if message.seq >= start]
            if pending and pending[0][0] < start:
                pending = [entry for entry in pending if entry[0] >= start]
            new = [(seq, body) for _, seq, name, body in added if name == namespace and seq >= start]
            last = pending[-1][0] if pending else parsed[-1].seq if parsed else -1
            if new and new[0][0] <= last:
                self.forget(session_id)  # not after what is known: the next load reads the file
                return
            messages[namespace] = parsed
            if pending or new:
                waiting[namespace] = pending + new
        known.document, known.messages, known.waiting, known.chars = document, messages, waiting, chars
        self._entries.put(session_id, known, chars)

    def forget(self, session_id: str | None = None) -> None:
        """Drop one session, or all of them."""
        self._entries.drop(None if session_id is None else lambda key: key == session_id)

    @staticmethod
    def _session(known: _Known) -> Session:
        session = _rows.parse_document(known.document)
        for namespace, pending in known.waiting.items():
            parsed = _rows.decode_bodies([body for _, body in pending])
            known.messages[namespace] = known.messages.get(namespace, []) + parsed
        known.waiting = {}
        for namespace, messages in known.messages.items():
            held = session.memory.get(namespace)
            if held is None:
                raise _rows.Unreadable(
                    f"stored session is not readable: messages of an unknown namespace {namespace!r}"
                )
            held.messages.extend(messages)
        return session
