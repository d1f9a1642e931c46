"""Building sessions the way the engine does, for the store tests and their worker processes.

Messages are stamped with the session's ``next_seq`` and added to live memory; each turn bumps
``turns`` and a state counter, so a stored session can be checked for being exactly a committed turn.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg

from picoflow.messages import Message, ToolCall
from picoflow.session import Session
from picoflow.sessions import MemoryStore, SessionStore, open_store

Appended = list[tuple[str, Message]]


def new_session(
    session_id: str, *, flow: str = "demo", step: str = "ask", principal: str | None = None
) -> Session:
    session = Session(id=session_id, flow=flow, current_step=step, principal=principal)
    session.sequence.append(step)
    return session


def append(session: Session, namespace: str, message: Message, appended: Appended) -> Message:
    live = session.namespace(namespace)  # first, so a new namespace starts at this message
    stamped = message.stamped(step=session.current_step, seq=session.next_seq)
    session.next_seq += 1
    live.messages.append(stamped)
    appended.append((namespace, stamped))
    return stamped


def play_turn(
    session: Session, tag: str, *, namespace: str = "ask", tool_result: str | None = None
) -> Appended:
    """One committed-turn's worth of changes: four messages and a little state."""
    appended: Appended = []
    call = ToolCall("lookup", {"query": tag, "filters": {"tags": [tag], "limit": 3}}, id=f"call-{tag}")
    append(session, namespace, Message.user(f"user {tag}"), appended)
    append(session, namespace, Message.assistant("", [call]), appended)
    append(session, namespace, Message.tool(call, tool_result or f"result {tag}"), appended)
    append(session, namespace, Message.assistant(f"answer {tag}"), appended)
    session.turns += 1
    state = session.state_of(session.current_step)
    state["count"] = session.turns
    state["last"] = tag
    session.updated_at = time.time()
    return appended


BIG_RESULT = "row, " * 50_000
"""A 250 KB tool result: writes that take long enough for a kill to land inside them."""


def crash_turn(session: Session) -> Appended:
    """The crash test's turn: memory is erased before every turn that follows a multiple of 7."""
    if session.turns % 7 == 0:
        erase(session, "ask")
    return play_turn(session, f"t{session.turns + 1}", tool_result=BIG_RESULT)


def erase(session: Session, namespace: str) -> None:
    """What ``erase_memory()`` does: history stays in the transcript, the live window restarts."""
    ns = session.namespace(namespace)
    ns.messages.clear()
    ns.start = session.next_seq


def tag_of(message: Message) -> str:
    return message.content.split(" ", 1)[1] if message.role == "user" else ""


@dataclass
class Backend:
    """Where a test's sessions live; ``open()`` gives another store on the same data."""

    kind: str
    url: str | None
    """``None`` for memory, which cannot be shared beyond this process."""
    sqlite_path: Path | None = None
    postgres_url: str | None = None
    """The server, without the test's schema."""
    schema: str | None = None
    opened: list[SessionStore] = field(default_factory=list)
    _memory: MemoryStore | None = None

    def open(self, *, auto_upgrade: bool = True) -> SessionStore:
        if self.url is None:
            if self._memory is None:
                self._memory = MemoryStore()
            return self._memory
        store = open_store(self.url, auto_upgrade=auto_upgrade)
        self.opened.append(store)
        return store

    def url_with(self, **params: str) -> str:
        assert self.url is not None
        return self.url + ("&" if "?" in self.url else "?") + urlencode(params)

    def sql(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Run SQL on the backing database directly; ``{p}`` is the table qualifier, ``?`` a parameter."""
        if self.kind == "sqlite":
            assert self.sqlite_path is not None
            with contextlib.closing(sqlite3.connect(self.sqlite_path, isolation_level=None)) as conn:
                return conn.execute(query.format(p=""), params).fetchall()
        assert self.postgres_url is not None
        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            cursor = conn.execute(query.format(p=f'"{self.schema}".').replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()
        if self._memory is not None:
            await self._memory.close()
