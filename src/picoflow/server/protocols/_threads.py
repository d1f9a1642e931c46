"""Conversations named by the client: a protocol's thread, chat or context id mapped to a session.

AG-UI's ``threadId``, the AI SDK's chat id and A2A's ``contextId`` are chosen by the client, and two
clients may well choose the same one. The session a thread id names is therefore derived from the
principal the API key authenticated, the protocol and the id together: the same principal finds its
conversation again with the same id; another principal using that id reaches a session of its own,
never that one. Nothing is stored to map one to the other, and the first turn of a thread creates
its session.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from picoflow.attachments import Attachment
from picoflow.exceptions import SessionNotFound
from picoflow.results import TurnError
from picoflow.server.errors import ApiError, engine_call, turn_error
from picoflow.server.protocols._requests import Decision
from picoflow.server.protocols._writer import LOST, StreamWriter
from picoflow.server.state import Access, with_config
from picoflow.server.streams import Feed, open_turn

__all__ = ["MAX_THREAD_ID", "Thread", "check_thread_id", "thread_session_id"]

MAX_THREAD_ID = 200
"""Longest thread id a client may choose (characters)."""


def check_thread_id(thread_id: object, field: str) -> str:
    """The client's thread id, or a 422 naming ``field`` when it is empty, too long or not text."""
    if not isinstance(thread_id, str) or not thread_id.strip():
        problem = f"{field} must be a non-empty string"
        raise ApiError(422, "invalid_input", problem, fields=[(field, "required")])
    if len(thread_id) > MAX_THREAD_ID:
        raise ApiError(
            422,
            "invalid_input",
            f"{field} is longer than {MAX_THREAD_ID} characters",
            fields=[(field, "too long")],
        )
    return thread_id


def thread_session_id(principal: str | None, surface: str, thread_id: str) -> str:
    """The session id of ``thread_id`` on ``surface`` (``ag-ui``, ``ai-sdk``, ``a2a``) for
    ``principal``: a digest of the three, so no one can name another principal's session."""
    material = "\x00".join((surface, principal or "", thread_id)).encode("utf-8")
    return f"{surface.replace('-', '')}-{hashlib.sha256(material).hexdigest()[:40]}"


class Thread:
    """The caller's conversation that a client's thread id names on one surface: its session, a
    turn in it (the first creates the session), the decisions on its pending approvals."""

    __slots__ = ("access", "caller", "session_id")

    def __init__(
        self, access: Access, surface: str, thread_id: str, config: Mapping[str, Any] | None = None
    ) -> None:
        self.access = access
        self.caller = with_config(access.caller, config)
        """The principal the API key authenticated, with the request's ``config``."""
        self.session_id = thread_session_id(self.caller.principal, surface, thread_id)

    async def create(self, flow: str) -> None:
        """Create the thread's session of ``flow``, as its first turn does (a thread whose first
        turns race finds the session the other created)."""
        try:
            async with engine_call(self.session_id):
                await self.access.engine.create_session(flow, caller=self.caller, session_id=self.session_id)
        except ApiError as exc:
            if exc.status != 409:  # 409: the same thread's other first turn created it
                raise

    async def turn(
        self, flow: str, message: str, attachments: Sequence[Attachment] = (), *, fields: Mapping[str, str]
    ) -> Feed:
        """Start a turn of ``flow`` in the thread's session, creating the session with its first
        turn; the turn's feed once the engine accepted it. A refusal is the request's plain HTTP
        error, naming the request field (``fields``: by the engine's field) at fault.

        The usual turn continues a session and costs nothing more than a native one: the session
        is created only when the turn finds none."""
        state, caller = self.access.state, self.caller
        feed = await open_turn(state, flow, message, self.session_id, caller, attachments)
        if feed.refused is not None and feed.refused.is_a(SessionNotFound):
            await self.create(flow)
            feed = await open_turn(state, flow, message, self.session_id, caller, attachments)
        if feed.refused is not None:
            raise turn_error(feed.refused, self.session_id, fields=fields)
        return _started(feed)

    async def decide(
        self,
        decisions: Sequence[Decision],
        writer: StreamWriter,
        refusal: Callable[[TurnError, str, Decision], ApiError],
        stop: Callable[[ApiError], None] | None = None,
    ) -> AsyncIterator[Feed]:
        """Take ``decisions`` one after another, the last resuming the turn: the first now, its
        refusal raised (``refusal(error, session_id, decision)``: the request's plain HTTP error),
        each later one as the stream reaches it, ``writer.last`` telling whether the feed it writes
        is the request's last.

        A later decision refused ends the stream: its feed tells the engine's refusal, or, with
        ``stop``, ``stop`` is told ``refusal``'s and the writer's ``broken()`` ends the stream."""
        first = await decisions[0].open(self.access.state, self.session_id, self.caller)
        if first.refused is not None:
            raise refusal(first.refused, self.session_id, decisions[0])
        _started(first)

        async def feeds() -> AsyncIterator[Feed]:
            writer.last = len(decisions) == 1
            yield first
            for n, decision in enumerate(decisions[1:], 2):
                feed = await decision.open(self.access.state, self.session_id, self.caller)
                if feed.refused is not None and stop is not None:
                    stop(refusal(feed.refused, self.session_id, decision))
                    return
                writer.last = n == len(decisions)
                yield feed

        return feeds()


def _started(feed: Feed) -> Feed:
    if feed.first is None:  # the run ended without a result (a bug, logged where it happened)
        raise ApiError(500, "internal", LOST)
    return feed
