"""Handoffs over HTTP: the staff queue of sessions awaiting a human, taking one, replying in it and
handing it back (``/v1/handoffs``), and the messages a page polls for
(``GET /v1/sessions/{session_id}/messages?after=SEQ``), which work across server processes sharing
one store.

Who may act is the engine's to say, from the caller the request authenticated: only callers with
the engine's staff visibility (403 for others). A session that is unknown is a 404; one not
awaiting a human, taken by another member of staff, not taken yet, or changed at the same moment by
another request, a 409; refused input (an empty text, an unknown step) a 422 naming the body field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Query

from picoflow.engine import MAX_OFFSET
from picoflow.exceptions import InvalidInput
from picoflow.server.errors import ApiError, engine_call, not_found
from picoflow.server.schemas import (
    HandBackRequest,
    HandoffOut,
    MessageOut,
    MessagesOut,
    SessionSummary,
    StaffMessageRequest,
    TakeRequest,
)
from picoflow.server.state import AccessDep

__all__ = ["hand_back", "list_handoffs", "reply", "session_messages", "take"]


@asynccontextmanager
async def staff_call(session_id: str | None = None) -> AsyncIterator[None]:
    """As ``engine_call``, with refused body fields named where they travel (``body.text``)."""
    try:
        async with engine_call(session_id):
            try:
                yield
            except InvalidInput as error:
                if error.field in ("text", "step", "note"):
                    raise ApiError(
                        error.status,
                        error.kind,
                        error.message,
                        fields=[(f"body.{error.field}", error.message)],
                    ) from None
                raise
    except ApiError as error:
        if error.kind == "handoff_not_found":  # one answer for every session that is not there
            raise not_found(session_id) from None
        raise


async def list_handoffs(
    access: AccessDep,
    flow: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[HandoffOut]:
    """The sessions awaiting a human, oldest first, each with its summary (written by the flow's
    code) and who took it. Staff only (403)."""
    async with staff_call():
        queue = await access.engine.handoffs(caller=access.caller, flow=flow, limit=limit)
    return [HandoffOut.from_queued(item) for item in queue]


async def take(session_id: str, access: AccessDep, body: TakeRequest | None = None) -> HandoffOut:
    """Take a session awaiting a human: it is yours to reply in and hand back. One another member of
    staff took is refused (409) unless ``force``."""
    async with staff_call(session_id):
        taken = await access.engine.take(
            session_id, caller=access.caller, force=body.force if body is not None else False
        )
    return HandoffOut.from_queued(taken)


async def reply(session_id: str, body: StaffMessageRequest, access: AccessDep) -> MessageOut:
    """Write to the user of a session you took: an assistant message of kind ``staff``, with you as
    its ``author``, in the transcript the user reads."""
    async with staff_call(session_id):
        message = await access.engine.reply_as_staff(session_id, body.text, caller=access.caller)
    return MessageOut.from_message(message, None, session_id)


async def hand_back(
    session_id: str, access: AccessDep, body: HandBackRequest | None = None
) -> SessionSummary:
    """Give a session you took back to the flow, in ``step`` (by default the one it was handed off
    from): its status is ``running`` again and the user's next message is answered by the model."""
    given = body or HandBackRequest()
    async with staff_call(session_id):
        info = await access.engine.hand_back(session_id, given.step, caller=access.caller, note=given.note)
    return SessionSummary(
        id=info.id,
        flow=info.flow,
        status=info.status,
        step=info.current_step,
        turns=info.turns,
        created_at=info.created_at,
        updated_at=info.updated_at,
    )


async def session_messages(
    session_id: str,
    access: AccessDep,
    after: Annotated[int, Query(ge=-1, le=MAX_OFFSET, description="Only messages after this seq.")] = -1,
) -> MessagesOut:
    """The messages the user saw after ``after`` (a message's ``seq``), oldest first, with the
    session's status and step: what a page polls while a person answers. The session's owner reads
    them, and staff while it awaits a human."""
    async with engine_call(session_id):
        found = await access.engine.messages(session_id, after=after, caller=access.caller)
    if found is None:
        raise not_found(session_id)
    session, messages = found
    return MessagesOut(
        session_id=session.id,
        status=session.status,
        step=session.current_step,
        messages=[MessageOut.from_message(message, "html", session.id) for message in messages],
    )
