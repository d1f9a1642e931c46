"""Tasks and their events, as JSON: a task as this agent keeps it, the status and artifact updates
that move it, what a ``working`` update tells of a turn's items (``PROGRESS``), how a turn's result
ends a task; and where tasks are kept, in memory per principal."""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from picoflow.approvals import Approval
from picoflow.events import ApprovalDecided, HandedOff, StepEntered, ToolCalled, ToolReturned
from picoflow.exceptions import TurnCancelled
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnResult
from picoflow.server.protocols._writer import LOST, EventWriter
from picoflow.server.protocols.a2a._wire import (
    _AGENT,
    CANCELED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    WORKING,
    Wire,
)

REPLY: Final = "reply"
"""The id and name of the artifact holding a turn's reply."""
MAX_TASKS: Final = 1000
"""Tasks kept per principal, the most recent: an older task's id is not found any more."""


def _now() -> tuple[int, str]:
    """Now in nanoseconds (to the microsecond) and as protobuf writes a ``Timestamp``."""
    micros = time.time_ns() // 1000
    seconds, fraction = divmod(micros, 1_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if fraction == 0:
        stamp += "Z"
    elif fraction % 1000 == 0:
        stamp += f".{fraction // 1000:03d}Z"
    else:
        stamp += f".{fraction:06d}Z"
    return micros * 1000, stamp


def _text(text: str, media_type: str = "") -> Wire:
    return {"text": text, "mediaType": media_type} if media_type else {"text": text}


def _data(data: object) -> Wire:
    return {"data": data, "mediaType": "application/json"}


def _agent(task_id: str, context_id: str, parts: list[Wire]) -> Wire:
    return {
        "messageId": str(uuid.uuid4()),
        "contextId": context_id,
        "taskId": task_id,
        "role": _AGENT,
        "parts": parts,
    }


@dataclass(slots=True, eq=False)
class _Task:
    """A task as this agent keeps it: its parts already as JSON values, none changed once written
    (a new status, history entry or artifact replaces or joins them), so a snapshot copies lists only."""

    id: str
    context_id: str
    owner: str
    """The principal whose task it is."""
    status: Wire
    stamp: int
    """The status's timestamp in nanoseconds, for ``ListTasks``."""
    history: list[Wire] = field(default_factory=list)
    artifacts: list[Wire] = field(default_factory=list)
    metadata: Wire = field(default_factory=dict)

    @property
    def state(self) -> str:
        state: str = self.status["state"]
        return state

    def wire(self, history_length: int | None = None) -> Wire:
        """The task as JSON, its history cut to its last ``history_length`` messages when given."""
        task: Wire = {"id": self.id, "contextId": self.context_id, "status": self.status}
        if self.artifacts:
            task["artifacts"] = list(self.artifacts)
        history = self.history
        if history_length is not None:
            history = history[-history_length:] if history_length else []
        if history:
            task["history"] = list(history)
        task["metadata"] = dict(self.metadata)
        return task


def _status(task: _Task, state: str, parts: list[Wire] | None = None) -> Wire:
    """Move ``task`` to ``state`` (its last status message joins the history) and tell it."""
    message = task.status.get("message")
    if message is not None:
        task.history.append(message)
    status: Wire = {"state": state}
    if parts:
        status["message"] = _agent(task.id, task.context_id, parts)
    task.stamp, status["timestamp"] = _now()
    task.status = status
    return {"statusUpdate": {"taskId": task.id, "contextId": task.context_id, "status": status}}


def _working(task_id: str, context_id: str, data: Wire) -> Wire:
    """A ``working`` update telling one thing the turn did (the task's own status stays)."""
    status = {"state": WORKING, "message": _agent(task_id, context_id, [_data(data)]), "timestamp": _now()[1]}
    return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status}}


def _approval(approval: Approval) -> Wire:
    return {
        "event": "approval_requested",
        "approval_id": approval.id,
        "tool": approval.tool,
        "args": dict(approval.args),
        "summary": approval.summary,
        "approvers": approval.approvers.describe(),
        "expires_at": approval.expires_at,
    }


class _Progress(EventWriter[Wire]):
    """What ``working`` updates tell of a turn's items, each as one data part; the model's text
    (its reply comes whole) and approval requests (the final status shows them) tell nothing."""

    __slots__ = ()

    def write(self, item: object) -> Iterator[Wire]:
        parent = getattr(item, "parent", None)
        for data in super().write(item):
            yield data if parent is None else {**data, "parent": parent}

    def on_loading(self, status: LoadStatus) -> Iterator[Wire]:
        yield {"event": "loading", **status.as_dict()}

    def on_step_entered(self, event: StepEntered) -> Iterator[Wire]:
        yield {"event": "step", "step": event.step, "previous": event.previous}

    def on_tool_called(self, event: ToolCalled) -> Iterator[Wire]:
        yield {
            "event": "tool_call",
            "step": event.step,
            "id": event.id,
            "name": event.name,
            "args": dict(event.args),
        }

    def on_tool_returned(self, event: ToolReturned) -> Iterator[Wire]:
        yield {
            "event": "tool_result",
            "step": event.step,
            "id": event.id,
            "name": event.name,
            "content": event.content,
            "is_error": event.is_error,
        }

    def on_approval_decided(self, event: ApprovalDecided) -> Iterator[Wire]:
        approval = event.approval
        yield {
            "event": "approval_decided",
            "approval_id": approval.id,
            "tool": approval.tool,
            "status": approval.status,
            "decided_by": approval.decided_by,
        }

    def on_handed_off(self, event: HandedOff) -> Iterator[Wire]:
        yield {"event": "handoff", "step": event.step, "reason": event.reason}


PROGRESS: Final = _Progress()


def _reply(result: TurnResult) -> Wire:
    if result.content_type == "application/json":
        try:
            return _data(json.loads(result.message))
        except ValueError:
            pass
    return _text(result.message, result.content_type)


def _conclude(task: _Task, result: TurnResult | None) -> list[Wire]:
    """Apply a run's result to its task: the events that end it (or leave it waiting for input)."""
    if result is None:
        return [_status(task, FAILED, [_text(LOST)])]
    error = result.error
    if error is not None and error.is_a(TurnCancelled):  # its turn stopped before it committed
        return [_status(task, CANCELED)]
    if error is not None:
        details: Wire = {
            "event": "error",
            "status": error.status,
            "kind": error.kind,
            "retryable": error.retryable,
        }
        if error.retry_after is not None:
            details["retry_after"] = error.retry_after
        return [_status(task, FAILED, [_text(error.message), _data(details)])]
    if result.pending:
        parts = [_text(result.message, result.content_type), *(_data(_approval(a)) for a in result.pending)]
        return [_status(task, INPUT_REQUIRED, parts)]
    artifact: Wire = {"artifactId": REPLY, "name": REPLY, "parts": [_reply(result)]}
    task.artifacts = [*(kept for kept in task.artifacts if kept["artifactId"] != REPLY), artifact]
    done = _status(task, COMPLETED)
    ended: Wire = {"step": result.step or "", "ended": result.completed}
    task.metadata.update(ended)
    done["statusUpdate"]["metadata"] = ended
    update = {
        "artifactUpdate": {
            "taskId": task.id,
            "contextId": task.context_id,
            "artifact": artifact,
            "lastChunk": True,
        }
    }
    return [update, done]


# --- where tasks are kept -----------------------------------------------------------------------------------


class _Tasks:
    """Tasks in memory by principal, the last ``limit`` of each saved."""

    def __init__(self, limit: int = MAX_TASKS) -> None:
        self._limit = limit
        self._owners: dict[str, OrderedDict[str, _Task]] = {}

    def save(self, task: _Task) -> None:
        kept = self._owners.get(task.owner)
        if kept is None:
            kept = self._owners[task.owner] = OrderedDict()
        kept[task.id] = task
        kept.move_to_end(task.id)
        while len(kept) > self._limit:
            kept.popitem(last=False)

    def get(self, owner: str, task_id: str) -> _Task | None:
        kept = self._owners.get(owner)
        return None if kept is None else kept.get(task_id)

    def of(self, owner: str) -> list[_Task]:
        return list(self._owners.get(owner, {}).values())
