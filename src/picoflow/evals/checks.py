"""Checking a turn's expectations against what the engine reports and what the session stored.

Values in ``state`` and tool ``args`` are *matchers*:

* a mapping matches when every key it names matches (other keys may exist: a subset match);
* a list matches a list of the same length, item by item;
* any other value matches an equal JSON value (``1`` equals ``1.0``, but never ``true``);
* ``{$absent: true}`` matches a key that is missing, ``{$absent: false}`` one that is there;
* ``{$regex: pattern}`` matches text that ``re.search`` finds the pattern in;
* ``{$exact: value}`` matches an equal value, mappings included (no subset).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from picoflow.engine import TurnResult
from picoflow.evals.events import describe_event, window
from picoflow.evals.scenario import EventAssertion, Expectations, ToolExpectation
from picoflow.messages import Message
from picoflow.session import Session

__all__ = [
    "Check",
    "CheckStatus",
    "Observation",
    "SeenCall",
    "check_turn",
    "event_checks",
    "lookup",
    "matches",
]

CheckStatus = Literal["passed", "failed", "unscored"]

_MISSING = object()


@dataclass(frozen=True, slots=True)
class Check:
    """One expectation of one turn, and how it went."""

    name: str
    """What was checked, e.g. ``step``, ``state: Support.refund.status``, ``tool_called: get_order``."""
    status: CheckStatus
    expected: Any
    actual: Any
    note: str = ""
    """Why it was not scored, or the judge's reason."""

    @property
    def kind(self) -> str:
        """The expectation's kind (``state``, ``tool_called``, ...), without its subject."""
        return self.name.split(":", 1)[0]


@dataclass(frozen=True, slots=True)
class SeenCall:
    """A tool call the model made during the turn, and whether its result was an error."""

    name: str
    args: Mapping[str, Any] | str
    ok: bool | None
    """None when no result was recorded for it."""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": self.args if isinstance(self.args, str) else dict(self.args),
            "ok": self.ok,
        }


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything known about a turn once it is over."""

    result: TurnResult
    session: Session | None
    """The stored session after the turn (None when no session exists)."""
    new_messages: Sequence[Message]
    """Messages the turn appended to the session (none when the turn failed: nothing was committed)."""
    error_detail: str | None = None
    """What the store's error record says about a failed turn (the reply only has the public text)."""
    earlier: Sequence[Message] = ()
    """The messages before the turn: a decision runs calls an earlier turn proposed."""
    verdicts: Sequence[Mapping[str, Any]] = ()
    """The verdicts of the turn's readings (``ReadingJudged`` events), each with its step."""
    events: Sequence[Mapping[str, Any]] = ()
    """The turn's events as records (``evals.events.EventLog``), its reply last."""

    @property
    def error(self) -> str | None:
        """``kind: detail`` of a failed turn."""
        error = self.result.error
        if error is None:
            return None
        return f"{error.kind}: {self.error_detail or error.message}"

    @property
    def step(self) -> str | None:
        return self.session.current_step if self.session is not None else self.result.step

    @property
    def completed(self) -> bool:
        return self.session.status == "completed" if self.session is not None else self.result.completed

    def calls(self) -> list[SeenCall]:
        """The calls the model made this turn, and those of an earlier turn answered in this one
        (proposed, then run or refused by a decision)."""
        results = {m.tool_call_id: not m.is_error for m in self.new_messages if m.role == "tool"}
        answered = [
            SeenCall(call.name, call.args, results[call.id])
            for message in self.earlier
            if message.role == "assistant"
            for call in message.tool_calls
            if call.id in results
        ]
        return answered + [
            SeenCall(call.name, call.args, results.get(call.id))
            for message in self.new_messages
            if message.role == "assistant"
            for call in message.tool_calls
        ]


def check_turn(expect: Expectations, seen: Observation) -> list[Check]:
    """Every expectation except ``judge`` (scored separately, by a model), in the order of the schema."""
    checks: list[Check] = []
    if expect.refused is not None:
        kind = seen.result.error.kind if seen.result.error is not None else None
        checks.append(_compare("refused", expect.refused, kind))
    elif seen.error is not None:
        checks.append(Check("error", "failed", "no error", seen.error))
    if expect.step is not None:
        checks.append(_compare("step", expect.step, seen.step))
    if expect.completed is not None:
        checks.append(_compare("completed", expect.completed, seen.completed))
    states = seen.session.states if seen.session is not None else {}
    for path, expected in expect.state.items():
        found = lookup(states, path)
        status = _status(matches(expected, found))
        if found is _MISSING:
            checks.append(Check(f"state: {path}", status, expected, None, "the path is absent"))
        else:
            checks.append(Check(f"state: {path}", status, expected, found))
    reply = seen.result.message
    for pattern in expect.reply_contains:
        checks.append(
            Check(f"reply_contains: {pattern}", _status(bool(re.search(pattern, reply))), pattern, reply)
        )
    for pattern in expect.reply_not_contains:
        found_text = re.search(pattern, reply)
        actual = found_text.group(0) if found_text else None
        checks.append(Check(f"reply_not_contains: {pattern}", _status(found_text is None), pattern, actual))
    calls = seen.calls()
    made = [call.as_json() for call in calls]
    for wanted in expect.tool_called:
        ok = any(_call_matches(wanted, call) for call in calls)
        checks.append(Check(f"tool_called: {wanted.name}", _status(ok), _expected_call(wanted), made))
    for unwanted in expect.tool_not_called:
        hits = [call.as_json() for call in calls if _call_matches(unwanted, call)]
        checks.append(
            Check(f"tool_not_called: {unwanted.name}", _status(not hits), _expected_call(unwanted), hits)
        )
    asked = [SeenCall(a.tool, a.args, None) for a in seen.result.pending]
    for wanted in expect.pending:
        ok = any(_call_matches(wanted, call) for call in asked)
        checks.append(
            Check(
                f"pending: {wanted.name}", _status(ok), _expected_call(wanted), [a.as_json() for a in asked]
            )
        )
    if expect.pending_count is not None:
        count = len(asked)
        checks.append(
            Check(
                "pending_count",
                _status(expect.pending_count.holds(count)),
                expect.pending_count.describe(),
                count,
            )
        )
    checks.extend(_reading_checks(expect, seen.verdicts))
    checks.extend(event_checks(expect, seen.events))
    if expect.model_calls is not None:
        count = seen.result.usage.model_calls
        checks.append(
            Check(
                "model_calls", _status(expect.model_calls.holds(count)), expect.model_calls.describe(), count
            )
        )
    return checks


def _reading_checks(expect: Expectations, verdicts: Sequence[Mapping[str, Any]]) -> list[Check]:
    """The checks on what grounding decided this turn: fields set, dropped by a rule, not set."""
    checks: list[Check] = []
    kept = [v for v in verdicts if v["action"] != "dropped"]
    dropped = [v for v in verdicts if v["action"] == "dropped"]
    shown = [{key: v[key] for key in ("field", "value", "action", "rule") if key in v} for v in verdicts]
    for name, expected in expect.field_set.items():
        ok = any(v["field"] == name and matches(expected, v["value"]) for v in kept)
        checks.append(Check(f"field_set: {name}", _status(ok), expected, shown))
    for name, rule in expect.field_dropped.items():
        ok = any(v["field"] == name and (rule is None or v.get("rule") == rule) for v in dropped)
        checks.append(Check(f"field_dropped: {name}", _status(ok), rule or "any rule", shown))
    for name in expect.field_not_set:
        hits = [v["value"] for v in kept if v["field"] == name]
        checks.append(Check(f"field_not_set: {name}", _status(not hits), None, hits))
    return checks


def event_checks(expect: Expectations, records: Sequence[Mapping[str, Any]]) -> list[Check]:
    """The checks of ``events`` (in order), ``events_any_order`` and ``no_events``. A failed one
    holds the events around the place it looked (``actual``), as lines."""
    checks: list[Check] = []
    cursor = 0  # in order: each assertion is looked for after the event the one before it matched
    for wanted in expect.events:
        name = f"events: {wanted.describe()}"
        found = _first(wanted, records, cursor)
        if found is not None:
            checks.append(Check(name, "passed", wanted.match, describe_event(records[found])))
            cursor = found + 1
            continue
        earlier = _first(wanted, records[:cursor], 0)
        note = (
            f"it happened (event {earlier + 1}), but before the event an earlier assertion matched"
            if earlier is not None
            else "no such event" + (f" after event {cursor}" if cursor else " in the turn")
        )
        checks.append(Check(name, "failed", wanted.match, window(records, cursor), note))
    for wanted in expect.events_any_order:
        found = _first(wanted, records, 0)
        name = f"events_any_order: {wanted.describe()}"
        if found is None:
            checks.append(Check(name, "failed", wanted.match, window(records, 0, 0, 7), "no such event"))
        else:
            checks.append(Check(name, "passed", wanted.match, describe_event(records[found])))
    for unwanted in expect.no_events:
        found = _first(unwanted, records, 0)
        name = f"no_events: {unwanted.describe()}"
        if found is None:
            checks.append(Check(name, "passed", unwanted.match, None))
        else:
            note = f"it happened (event {found + 1})"
            checks.append(Check(name, "failed", unwanted.match, window(records, found), note))
    return checks


def _first(wanted: EventAssertion, records: Sequence[Mapping[str, Any]], start: int) -> int | None:
    for index in range(start, len(records)):
        record = records[index]
        if record.get("kind") == wanted.kind and matches(wanted.match, record):
            return index
    return None


def lookup(states: Mapping[str, Any], path: str) -> Any:
    """The value at ``<Step>.<key>[.<key>|.<index>...]`` in the steps' states, or a missing marker."""
    step, *keys = path.split(".")
    value: Any = states.get(step, {})
    for key in keys:
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and re.fullmatch(r"-?\d+", key) and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        else:
            return _MISSING
    return value


def matches(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` (``_MISSING`` for a missing key) satisfies the matcher ``expected``."""
    if isinstance(expected, Mapping) and len(expected) == 1:
        [(key, operand)] = expected.items()
        if key == "$absent":
            return (actual is _MISSING) is operand
        if key == "$regex":
            return isinstance(actual, str) and re.search(operand, actual) is not None
        if key == "$exact":
            return actual is not _MISSING and _equal(operand, actual)
    if actual is _MISSING:
        return False
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            matches(value, actual.get(key, _MISSING)) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(matches(want, have) for want, have in zip(expected, actual, strict=True))
        )
    return _equal(expected, actual)


def _equal(expected: Any, actual: Any) -> bool:
    # JSON equality: Python's True == 1 would let a flag pass for a count.
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return expected.keys() == actual.keys() and all(_equal(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            _equal(a, b) for a, b in zip(expected, actual, strict=True)
        )
    return bool(expected == actual)


def _call_matches(wanted: ToolExpectation, call: SeenCall) -> bool:
    if call.name != wanted.name or (wanted.ok is not None and call.ok is not wanted.ok):
        return False
    return wanted.args is None or matches(wanted.args, call.args)


def _expected_call(wanted: ToolExpectation) -> dict[str, Any]:
    return wanted.model_dump(exclude_none=True)


def _compare(name: str, expected: Any, actual: Any) -> Check:
    return Check(name, _status(_equal(expected, actual)), expected, actual)


def _status(ok: bool) -> CheckStatus:
    return "passed" if ok else "failed"
