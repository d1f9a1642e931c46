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
from collections.abc import Sequence

from picoflow.attachments import Attachment
from picoflow.context import Caller
from picoflow.exceptions import SessionNotFound
from picoflow.server.errors import ApiError, engine_call
from picoflow.server.state import Access
from picoflow.server.streams import Feed, open_turn

__all__ = ["MAX_THREAD_ID", "check_thread_id", "open_thread_turn", "thread_session_id"]

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


async def open_thread_turn(
    access: Access,
    flow: str,
    message: str,
    surface: str,
    thread_id: str,
    caller: Caller | None = None,
    attachments: Sequence[Attachment] = (),
) -> tuple[str, Feed]:
    """Start a turn of ``flow`` in the caller's session of ``thread_id``, creating the session with
    its first turn; returns the session id and the turn's feed (``Feed.refused`` holds a refusal).

    The usual turn continues a session and costs nothing more than a native one: the session is
    created only when the turn finds none (and a thread whose first turns race finds the session
    the other created)."""
    caller = caller or access.caller
    session_id = thread_session_id(caller.principal, surface, thread_id)
    feed = await open_turn(access.state, flow, message, session_id, caller, attachments)
    refused = feed.refused
    if refused is None or not refused.is_a(SessionNotFound):
        return session_id, feed
    try:
        async with engine_call(session_id):
            await access.engine.create_session(flow, caller=caller, session_id=session_id)
    except ApiError as exc:
        if exc.status != 409:  # 409: the same thread's other first turn created it
            raise
    return session_id, await open_turn(access.state, flow, message, session_id, caller, attachments)
