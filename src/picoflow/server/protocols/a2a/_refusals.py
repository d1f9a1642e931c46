"""Refusals: a turn, a run or a request the engine or the server refused before it started, as the
JSON-RPC error A2A names for it, with the field of the request at fault."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, UnsupportedOperationError

from picoflow.exceptions import FlowMismatch, FlowNotFound, RunError
from picoflow.results import TurnError
from picoflow.server.errors import ApiError
from picoflow.server.protocols.a2a._requests import _Said

_FIELDS: Final[Mapping[str, str]] = {
    "message": "message.parts",
    "attachments": "message.parts",
    "session_id": "message.contextId",
}


def _refusal(status: int, kind: str, message: str, *, retryable: bool, where: str | None) -> A2AError:
    """The JSON-RPC error of a turn refused before it started: what the caller sent is at fault
    (invalid params), or the state of the conversation is (a failed precondition: it ended, another
    turn is running, the approval was decided), or a dependency failed (internal, maybe retryable)."""
    data: dict[str, Any] = {"kind": kind, "retryable": "true" if retryable else "false"}
    if status >= 500:
        return InternalError(message, data=data)
    if status in (403, 409):
        return UnsupportedOperationError(message, data=data)
    if where is not None:
        data["errors"] = [{"field": where, "message": message}]
    return InvalidParamsError(message, data=data)


def _no_skill(skill: str) -> A2AError:
    message = f"no skill {skill!r}: the agent card lists them"
    return _refusal(404, FlowNotFound.kind, message, retryable=False, where="metadata.skill")


def _turn_refusal(error: TurnError, said: _Said, skill: str) -> A2AError:
    if error.is_a(FlowNotFound):
        return _no_skill(skill)
    if error.is_a(FlowMismatch):  # the context belongs to another skill: the message named the wrong one
        return _refusal(422, error.kind, error.message, retryable=False, where="metadata.skill")
    if error.field is None:
        where = None
    elif said.decision is not None:
        where = f"{said.decision.where}.{error.field}"
    else:
        where = _FIELDS.get(error.field, error.field)
    return _refusal(error.status, error.kind, error.message, retryable=error.retryable, where=where)


def _run_refusal(error: RunError, skill: str) -> A2AError:
    if isinstance(error, FlowNotFound):
        return _no_skill(skill)
    field = getattr(error, "field", None)
    where = None if field is None else _FIELDS.get(field, field)
    return _refusal(error.status, error.kind, error.public_text, retryable=error.retryable, where=where)


def _api_refusal(error: ApiError) -> A2AError:
    where = error.fields[0][0] if error.fields else None
    return _refusal(error.status, error.kind, error.message, retryable=error.retryable, where=where)
