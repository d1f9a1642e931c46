"""What a replay found: per session, per turn, what the current code did differently from the
recording (``picoflow replay --json`` prints a ``ReplayReport``; ``replay_schema()`` is its schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "Difference",
    "Part",
    "ReplayReport",
    "SessionReplay",
    "TurnReplay",
    "TurnStatus",
    "replay_schema",
]

REPORT_VERSION = 1

Part = Literal["outcome", "reply", "step", "state", "tool_calls", "approvals"]
"""What of a turn differs: how it ended (replied, paused for an approval, failed and why), the
reply, the step it ended in, a key of a step's state, the tool calls (name and arguments, in
order), the approvals asked and decided."""

TurnStatus = Literal["same", "differs", "diverged", "not_replayed"]
"""``same``: every part as recorded; ``differs``: some part is not; ``diverged``: the turn could
not be replayed as recorded (a model request the recording does not hold and no fallback model,
or an approval the replay never asked) and the session's replay stopped there; ``not_replayed``:
a turn after the divergence."""


class Difference(BaseModel):
    """One part of a turn, as recorded and as replayed."""

    part: Part
    key: str | None = None
    """For ``state``: ``Step.key`` (a nested key joined by dots, as the timeline records it)."""
    recorded: Any = None
    replayed: Any = None


class TurnReplay(BaseModel):
    """One recorded turn played again."""

    turn: int
    """The turn's number in the session (a failed turn has the number of the turn after it)."""
    trigger: Literal["message", "decision"]
    message: str
    """The user's message, or the decision (``approve apr_…``) as recorded."""
    status: TurnStatus
    recorded_answers: int = 0
    """Model requests answered from the recording."""
    fallback_answers: int = 0
    """Model requests the recording did not hold, answered by the fallback model."""
    diverged: str | None = None
    """The first request the recording did not hold, and what differs in it (or why the turn
    could not be replayed)."""
    differences: list[Difference] = Field(default_factory=list)


class SessionReplay(BaseModel):
    """One stored session played again against the current code."""

    session_id: str
    flow: str
    recorded_version: str = ""
    """The version of the flow the session's last turn ran on ("" before versions were recorded)."""
    replayed_version: str = ""
    """The version of the flow as the current code declares it."""
    status: Literal["same", "differs", "diverged"]
    turns: list[TurnReplay] = Field(default_factory=list)


class ReplayReport(BaseModel):
    """Every session replayed; ``same`` is what a regression test asserts."""

    version: int = REPORT_VERSION
    fallback_model: str | None = None
    """The model that answered requests the recording did not hold (None: such a request ends
    the session's replay as ``diverged``)."""
    tools_run: bool = True
    """Tools without approval ran against the current code (False: answered from the recording)."""
    sessions: list[SessionReplay] = Field(default_factory=list)

    @property
    def same(self) -> bool:
        """No turn of any session differs or diverged."""
        return all(session.status == "same" for session in self.sessions)


def replay_schema() -> dict[str, Any]:
    """The JSON schema of a ``ReplayReport`` as ``picoflow replay --json`` prints it."""
    schema = ReplayReport.model_json_schema(mode="serialization")
    schema["$id"] = f"https://picoflow.dev/schemas/replay-v{REPORT_VERSION}.json"
    return schema
