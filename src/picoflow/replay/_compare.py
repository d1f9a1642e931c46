"""A recorded turn and its replay, part by part: how it ended, the reply, the step it ended in, each
step's state key by key, the tool calls and the approvals. Both sides are timelines recorded the
same way (texts cut and secrets hidden alike), so equal behaviour reads as equal values."""

from __future__ import annotations

from typing import Any

from picoflow.replay.report import Difference
from picoflow.results import TurnResult
from picoflow.timeline import (
    ApprovalDecidedEntry,
    ApprovalRequestedEntry,
    StateEntry,
    ToolEntry,
    TurnTimeline,
)


def _ending(turn: TurnTimeline) -> str:
    return turn.outcome if turn.error is None else f"{turn.outcome}: {turn.error.kind}"


def _states(turn: TurnTimeline) -> dict[str, Any]:
    """``Step.key`` → what the turn did to it (added, removed or changed, and the value after)."""
    found: dict[str, Any] = {}
    for entry in turn.entries:
        if isinstance(entry, StateEntry):
            for change in entry.changes:
                found[f"{entry.step}.{change.key}"] = (
                    {"removed": True} if change.removed else {"after": change.after}
                )
    return found


def _tool_calls(turn: TurnTimeline) -> list[dict[str, Any]]:
    return [
        {"name": entry.name, "args": entry.args, "ok": entry.ok}
        for entry in turn.entries
        if isinstance(entry, ToolEntry)
    ]


def _approvals(turn: TurnTimeline) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for entry in turn.entries:
        if isinstance(entry, ApprovalRequestedEntry):
            found.append({"requested": entry.tool, "args": entry.args})
        elif isinstance(entry, ApprovalDecidedEntry):
            found.append({"decided": entry.tool, "decision": entry.decision, "by": entry.by})
    return found


def compare(recorded: TurnTimeline, replayed: TurnTimeline) -> list[Difference]:
    """Every part of ``replayed`` that is not as ``recorded``, in a fixed order."""
    differences: list[Difference] = []
    if _ending(recorded) != _ending(replayed):
        differences.append(Difference(part="outcome", recorded=_ending(recorded), replayed=_ending(replayed)))
    if recorded.reply != replayed.reply:
        differences.append(Difference(part="reply", recorded=recorded.reply, replayed=replayed.reply))
    if recorded.step != replayed.step:
        differences.append(Difference(part="step", recorded=recorded.step, replayed=replayed.step))
    before, after = _states(recorded), _states(replayed)
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old != new:
            differences.append(
                Difference(part="state", key=key, recorded=_state_value(old), replayed=_state_value(new))
            )
    if _tool_calls(recorded) != _tool_calls(replayed):
        differences.append(
            Difference(part="tool_calls", recorded=_tool_calls(recorded), replayed=_tool_calls(replayed))
        )
    if _approvals(recorded) != _approvals(replayed):
        differences.append(
            Difference(part="approvals", recorded=_approvals(recorded), replayed=_approvals(replayed))
        )
    return differences


def _state_value(change: Any) -> Any:
    """A state key's value after the turn, for the report: "(unchanged)" or "(removed)" when so."""
    if change is None:
        return "(unchanged)"
    if change.get("removed"):
        return "(removed)"
    return change["after"]


def refused(recorded: TurnTimeline, result: TurnResult) -> list[Difference]:
    """The differences of a replayed turn refused before it ran (no timeline was recorded)."""
    kind = result.error.kind if result.error is not None else "no timeline"
    return [Difference(part="outcome", recorded=_ending(recorded), replayed=f"refused: {kind}")]
