"""What happened in a turn, as a scenario asserts it: the turn's events as plain records, the
assertions written on them, and the checks that compare the two.

A turn's ``TurnEvent`` stream (``picoflow.events``) becomes a list of records, each a JSON mapping
with a ``kind``:

* ``entered`` (``step``, ``from``) and ``left`` (``step``, ``to``): the conversation moved;
* ``field_set`` (``step``, ``field``, ``value``; ``repaired`` naming the rule that repaired it)
  and ``field_dropped`` (``step``, ``field``, ``value``, ``rule``): a reading's verdicts;
* ``tool`` (``step``, ``name``, ``args``, ``ok``, ``result``): a call and its outcome (``ok`` false:
  refused or failed; a call refused before it ran has no ``args``);
* ``approval_requested`` (``step``, ``tool``, ``args``) and ``approval_decided`` (``tool``,
  ``args``, ``decision``: approved, denied, expired, withdrawn; ``by``);
* ``pattern`` (``step``, ``name``, ``detail``): a repair pattern took over (``picoflow.repairs``);
* ``handoff`` (``step``, ``reason``): the conversation was handed to a person (``Handoff``);
* ``said`` (``text``): the turn's reply, last.

Events of a sub-step run carry ``parent`` (the call or step that ran it).

An assertion is a one-key mapping, the kind and what to match, with short forms for the usual
case::

    events:                       # each must happen, in this order (others may come between)
      - entered: Results
      - field_set: {max_price: 350}
      - field_dropped: {check_in: written_dates}
      - tool: {name: search_hotels, args: {city: Paris}, ok: true}
      - approval_requested: book_room
      - handoff: {reason: {$regex: "(?i)refund"}}
      - said: "(?i)which hotel"
    events_any_order: [...]       # each must happen, in any order
    no_events:                    # none may happen
      - tool: book_room
      - said: "(?i)sorry"

What follows the kind is a matcher on the record (``checks.matches``: a subset of keys, ``$regex``,
``$absent``, ``$exact``). A failed assertion shows the events around the place it was looked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from picoflow.events import EventRecords

__all__ = [
    "EVENT_KINDS",
    "EventLog",
    "describe_event",
    "normalize_assertion",
    "window",
]

_Shorten = Callable[[Any], dict[str, Any]]


def _named(key: str) -> _Shorten:
    """``kind: text`` stands for ``kind: {key: text}``."""

    def shorten(value: Any) -> dict[str, Any]:
        if isinstance(value, str):
            return {key: value}
        if isinstance(value, Mapping):
            return dict(value)
        raise ValueError(f"write the {key} as text, or a mapping of what to match")

    return shorten


def _field_with(second: str, keys: frozenset[str]) -> _Shorten:
    """``kind: name`` stands for ``{field: name}``; ``kind: {name: x}`` for ``{field: name, second: x}``
    unless the mapping uses the record's own keys."""

    def shorten(value: Any) -> dict[str, Any]:
        if isinstance(value, str):
            return {"field": value}
        if isinstance(value, Mapping):
            if set(value) <= keys:
                return dict(value)
            if len(value) == 1:
                [(name, wanted)] = value.items()
                return {"field": name} if wanted is None else {"field": name, second: wanted}
        raise ValueError(f"write a field's name, or {{field: {second}}} with one field")

    return shorten


def _said(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"text": {"$regex": value}}
    if isinstance(value, Mapping):
        return dict(value)
    raise ValueError("write a regular expression the reply must match")


#: The kinds an assertion may name, and how each short form becomes a matcher on the record.
EVENT_KINDS: dict[str, _Shorten] = {
    "entered": _named("step"),
    "left": _named("step"),
    "field_set": _field_with("value", frozenset({"field", "value", "step", "repaired"})),
    "field_dropped": _field_with("rule", frozenset({"field", "value", "step", "rule"})),
    "tool": _named("name"),
    "approval_requested": _named("tool"),
    "approval_decided": _named("tool"),
    "handoff": _named("reason"),
    "said": _said,
    "pattern": _named("name"),
}


def normalize_assertion(item: Any) -> dict[str, Any]:
    """``{kind: short form}`` as ``{"kind": kind, "match": matcher}``; ValueError says what is wrong."""
    if isinstance(item, Mapping) and set(item) == {"kind", "match"}:
        return {"kind": item["kind"], "match": dict(item["match"])}
    if not isinstance(item, Mapping) or len(item) != 1:
        raise ValueError(
            f"an event assertion is one kind and what to match ({{entered: Results}}); kinds: "
            f"{', '.join(EVENT_KINDS)}"
        )
    [(kind, value)] = item.items()
    if kind not in EVENT_KINDS:
        raise ValueError(f"{kind!r} is not a kind of event; kinds: {', '.join(EVENT_KINDS)}")
    try:
        return {"kind": kind, "match": EVENT_KINDS[kind](value if value is not None else {})}
    except ValueError as exc:
        raise ValueError(f"{kind}: {exc}") from None


class EventLog(EventRecords):
    """Collects a turn's events as records (an ``on_event`` listener), in the order they came."""

    __slots__ = ()

    def close(self, reply: str) -> list[dict[str, Any]]:
        """The turn's records, its reply last."""
        if reply:
            self.records.append({"kind": "said", "text": reply})
        return self.records


def describe_event(record: Mapping[str, Any], width: int = 70) -> str:
    """One line for a record: ``tool search_hotels({"city": "Paris"}) ok``."""
    kind = record["kind"]
    if kind in ("entered", "left"):
        other = record.get("from") if kind == "entered" else record.get("to")
        arrow = f" (from {other})" if kind == "entered" and other else f" (to {other})" if other else ""
        text = f"{kind} {record['step']}{arrow}"
    elif kind == "field_set":
        text = f"field_set {record['field']}={_short(record.get('value'))}"
        if record.get("repaired"):
            text += f" (repaired: {record['repaired']})"
    elif kind == "field_dropped":
        text = f"field_dropped {record['field']}={_short(record.get('value'))} ({record.get('rule')})"
    elif kind == "tool":
        outcome = {True: "ok", False: "refused", None: "no result"}[record.get("ok")]
        args = _short(record["args"]) if "args" in record else "…"
        text = f"tool {record['name']}({args}) {outcome}"
    elif kind in ("approval_requested", "approval_decided"):
        text = f"{kind} {record['tool']}({_short(record.get('args'))})"
        if kind == "approval_decided":
            text += f" {record.get('decision')}"
    elif kind == "said":
        text = f"said {_short(record.get('text'))}"
    else:
        rest = {key: value for key, value in record.items() if key != "kind"}
        text = f"{kind} {_short(rest)}"
    return text if len(text) <= width else text[: width - 1] + "…"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 48 else text[:47] + "…"


def window(records: Sequence[Mapping[str, Any]], at: int, before: int = 2, after: int = 3) -> list[str]:
    """The records around position ``at`` as lines, ``at`` marked (where the assertion looked)."""
    if not records:
        return ["(the turn emitted no events)"]
    start, stop = max(0, at - before), min(len(records), at + after + 1)
    lines = [f"{'→' if i == at else ' '} {i + 1}. {describe_event(records[i])}" for i in range(start, stop)]
    if at >= len(records):
        lines.append(f"→ (end: {len(records)} event(s) in all)")
    return lines
