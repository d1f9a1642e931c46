"""The inspector in the terminal: a session's recorded timeline (``picoflow.timeline``) as rich
renderables that read well in 80 columns. Each turn is a heading (its number, the user's words,
how it ended, time and tokens) over its entries, one short line each, with what a line cannot hold
(a prompt, the messages sent, an answer) indented under it and cut to a few lines."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.text import Text

from picoflow.timeline import (
    ApprovalDecidedEntry,
    ApprovalRequestedEntry,
    Entered,
    Erased,
    FieldDropped,
    FieldSet,
    HandoffEntry,
    Left,
    MessageShown,
    MigratedEntry,
    ModelEntry,
    Omitted,
    PatternEntry,
    Rejected,
    SessionTimeline,
    StateEntry,
    ToolEntry,
    TurnTimeline,
)

__all__ = ["render_timeline"]

SHORT = 160
"""Characters of a prompt, message or answer shown under its entry (the JSON export has them all)."""


def render_timeline(timeline: SessionTimeline) -> RenderableType:
    """Every recorded turn of the session, oldest first."""
    if not timeline.turns:
        return Text(
            "no timeline recorded (recording was off, or the turns are older than the retention)",
            style="dim",
        )
    return Group(*(part for turn in timeline.turns for part in _turn(turn)))


def _turn(turn: TurnTimeline) -> Iterable[RenderableType]:
    ended = {"replied": "green", "paused": "yellow", "failed": "red"}[turn.outcome]
    yield Rule(Text(f"turn {turn.turn} · {turn.outcome}", style=ended), style="dim", align="left")
    usage = turn.usage
    facts = Text(
        f"{turn.duration_ms:.0f} ms · {usage.model_calls} model call(s), {usage.tool_calls} tool call(s), "
        f"{usage.input_tokens} in + {usage.output_tokens} out tokens · {turn.size:,} bytes",
        style="dim",
    )
    yield facts
    said = "decided" if turn.trigger == "decision" else "user"
    yield _line("›", "bold cyan", f"{said}: ", _short(turn.message))
    for entry in turn.entries:
        yield from _entry(entry)
    if turn.error is not None:
        where = f" in {turn.error.step}" if turn.error.step else ""
        yield _line("✗", "bold red", f"failed {turn.error.kind}{where}: ", turn.error.message)
    elif turn.reply:
        yield _line("‹", "magenta", "reply: ", _short(turn.reply))


def _entry(entry: Any) -> Iterable[RenderableType]:
    nested = "  " if entry.parent else ""
    if isinstance(entry, Entered):
        came = f" (from {entry.from_})" if entry.from_ else ""
        yield _line(f"{nested}→", "blue", f"entered {entry.step}{came}")
    elif isinstance(entry, Left):
        return  # the next ``entered`` says where from
    elif isinstance(entry, ModelEntry):
        yield from _model(entry, nested)
    elif isinstance(entry, Rejected):
        yield _line(f"{nested}↺", "yellow", f"rejected by {entry.check}: ", entry.reason)
    elif isinstance(entry, FieldSet | FieldDropped):
        yield _verdict(entry, nested)
    elif isinstance(entry, ToolEntry):
        args = "…" if entry.args is None else _json(entry.args)
        mark, style = ("⚙", "cyan") if entry.ok else ("⚠", "red")
        outcome = {True: "ok", False: "error", None: "no result"}[entry.ok]
        yield _line(f"{nested}{mark}", style, f"{entry.name}({_clip(args, 60)}) {outcome}")
        if entry.result is not None:
            yield _under(nested, _short(entry.result))
    elif isinstance(entry, ApprovalRequestedEntry):
        yield _line(f"{nested}?", "yellow", f"approval asked: {entry.tool}({_clip(_json(entry.args), 50)})")
    elif isinstance(entry, ApprovalDecidedEntry):
        by = f" by {entry.by}" if entry.by else ""
        yield _line(f"{nested}!", "yellow", f"approval {entry.decision}{by}: {entry.tool}")
    elif isinstance(entry, PatternEntry):
        detail = f": {entry.detail}" if entry.detail else ""
        yield _line(f"{nested}⤴", "magenta", f"repair {entry.name} in {entry.step}{detail}")
    elif isinstance(entry, HandoffEntry):
        yield _line(f"{nested}☎", "magenta", f"handed off from {entry.step}: {entry.reason or '-'}")
    elif isinstance(entry, MigratedEntry):
        yield _line(
            "⇪",
            "magenta",
            f"migrated from version {short_version(entry.from_version)} to {short_version(entry.to_version)}",
        )
        for done in entry.changes:
            detail = f" ({done.detail})" if done.detail else ""
            yield _under(nested, _clip(f"{done.action.replace('_', ' ')} {done.step}{detail}", SHORT))
    elif isinstance(entry, Erased):
        yield _line(f"{nested}⌫", "dim", f"memory of {entry.namespace} erased")
    elif isinstance(entry, StateEntry):
        yield _line(f"{nested}Δ", "blue", f"state of {entry.step}")
        for change in entry.changes:
            if change.added:
                text = f"+ {change.key} = {_json(change.after)}"
            elif change.removed:
                text = f"- {change.key} (was {_json(change.before)})"
            else:
                text = f"~ {change.key}: {_json(change.before)} → {_json(change.after)}"
            yield _under(nested, _clip(text, SHORT))
    elif isinstance(entry, Omitted):
        yield _line("…", "dim", f"{entry.entries} more entries ({entry.bytes:,} bytes) not kept")


def short_version(version: str) -> str:
    """A version as a person reads it: a digest by its first 12 characters, "unrecorded" for none."""
    if not version:
        return "(unrecorded)"
    return version[:12] if len(version) == 64 and all(c in "0123456789abcdef" for c in version) else version


def _model(entry: ModelEntry, nested: str) -> Iterable[RenderableType]:
    took = f" {entry.latency_ms:.0f} ms" if entry.latency_ms is not None else ""
    tokens = f" {entry.usage.input_tokens}+{entry.usage.output_tokens} tok" if entry.usage else ""
    attempt = f" attempt {entry.attempt}" if entry.attempt > 1 else ""
    yield _line(f"{nested}◆", "bold", f"model {entry.model} in {entry.step}{attempt}{tokens}{took}")
    if entry.system is not None:
        yield _under(nested, f"system: {_short(entry.system)}", "dim")
    shared = f"{entry.history} earlier message(s), then " if entry.history else ""
    sent = " · ".join(_said(message) for message in entry.messages) or "nothing new"
    yield _under(nested, f"sent: {shared}{_clip(sent, SHORT)}", "dim")
    offered = ", ".join(entry.tools) or "none"
    schema = f"; output {entry.output}" if entry.output else ""
    yield _under(nested, f"tools: {_clip(offered, 100)}{schema}", "dim")
    if entry.error is not None:
        yield _under(nested, f"raised {entry.error}", "red")
        return
    answer = [_clip(entry.text, SHORT)] if entry.text else []
    answer += [f"{call.name}({_clip(_json(call.args), 60)})" for call in entry.tool_calls]
    yield _under(nested, f"answer: {' + '.join(answer) or '(empty)'}")


def _verdict(entry: FieldSet | FieldDropped, nested: str) -> RenderableType:
    value = _clip(_json(entry.value), 40)
    rule = f" by {entry.rule}" if entry.rule else ""
    if isinstance(entry, FieldDropped):
        head = _line(f"{nested}✗", "red", f"dropped {entry.field}={value}{rule}")
    else:
        label = "repaired" if entry.action == "repaired" else "kept"
        head = _line(f"{nested}✓", "green", f"{label} {entry.field}={value}{rule}")
    parts: list[RenderableType] = [head]
    evidence = entry.evidence or {}
    if evidence.get("text"):
        where = f"{evidence.get('source', 'user')} [{evidence.get('start')}:{evidence.get('end')}]"
        parts.append(_under(nested, f"evidence ({where}): “{_clip(str(evidence['text']), 100)}”", "dim"))
    if isinstance(entry, FieldDropped) and entry.why:  # why the rule refused it, for the author
        parts.append(_under(nested, f"why: {_short(entry.why)}", "dim"))
    return parts[0] if len(parts) == 1 else Group(*parts)


def _said(message: MessageShown) -> str:
    text = message.content
    if message.tool_calls:
        text = (text + " " if text else "") + ", ".join(f"→{call.name}" for call in message.tool_calls)
    if message.files:
        text += " [" + ", ".join(f"{f.name} ({f.media_type}, {f.size:,} bytes)" for f in message.files) + "]"
    role = f"{message.role}:{message.name}" if message.name else message.role
    return f"{role}: {_clip(text, 60)}"


def _line(mark: str, style: str, head: str, rest: str = "") -> Text:
    text = Text(f"{mark} ", style=style)
    text.append(head, style=style if style in ("bold", "bold red") else "")
    text.append(rest)
    return text


def _under(nested: str, text: str, style: str = "") -> RenderableType:
    return Padding(Text(text, style=style, overflow="fold"), (0, 0, 0, 4 + len(nested)))


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _short(text: str) -> str:
    return _clip(" ".join(text.split()), SHORT)


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"
