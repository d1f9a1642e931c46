"""Scenarios assert what happened in a turn: steps entered and left, fields set or dropped by a
named rule, tools and their outcome, approvals requested and decided, what was said and not said.

Each kind is played twice on a demo flow with scripted model answers: once as written (the
assertion holds), once with the answer changed so that the event never happens (the assertion fails,
and the failure shows the turn's events around the place it looked).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from picoflow.evals import ScenarioError, load_scenarios, run_eval
from picoflow.evals.events import describe_event
from picoflow.evals.report import ProgressPrinter
from picoflow.evals.results import TurnRecord
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.orders import OrdersFlow

HOTEL = """\
name: {name}
flow: hotel
env: {{HOTEL_FLOW_CURRENT_DATE: "2027-07-15"}}
turns:
"""
ORDERS = """\
name: {name}
flow: orders
env: {{ORDERS_FLOW_CURRENT_DATE: "2026-11-20", PICOFLOW_ORDERS_DB: "{{run_dir}}/orders.sqlite3"}}
caller: {{principal: C-1001}}
turns:
"""
REFUND_40004 = (
    """['{"orders": [40004], "status": "any", "since": null, "until": null, "action": "refund"}', """
    """{tool: refund, args: {order_id: 40004}}]"""
)
LOOKUP_40004 = """['{"orders": [40004], "status": "any", "since": null, "until": null, "action": "order"}']"""
PORTLAND = '{"field": "in_portland", "quote": "Portland", "value": true}'
OVER_BUDGET = '{"field": "max_price", "quote": "max 900", "value": 900}'
WITHIN_BUDGET = '{"field": "max_price", "quote": "max 700", "value": 700}'


def reading(*items: str) -> str:
    found = '{"found": [' + ", ".join(items) + "]}"
    return f"'{found}'"


# kind: (flow header, the turns as played, the turns with the event missing, the failing check)
CASES: dict[str, tuple[str, str, str, str]] = {
    "step entered and left": (
        ORDERS,
        f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
    expect:
      events: [{{left: {{step: Support, to: Refund}}}}, {{entered: {{step: Refund, from: Support}}}}]
""",
        f"""\
  - user: Please refund order 40004.
    scripted: {LOOKUP_40004}
    expect:
      events: [{{left: {{step: Support, to: Refund}}}}, {{entered: {{step: Refund, from: Support}}}}]
""",
        'events: left {"step": "Support", "to": "Refund"}',
    ),
    "field set": (
        HOTEL,
        f"""\
  - user: Hi, a stay in Portland, max 700
    scripted: [{reading(PORTLAND, WITHIN_BUDGET)}]
    expect:
      events_any_order: [{{field_set: {{max_price: 700}}}}, {{field_set: {{in_portland: true}}}}]
""",
        f"""\
  - user: Hi, a stay in Portland, max 700
    scripted: [{reading(PORTLAND)}, {reading(PORTLAND)}]
    expect:
      events_any_order: [{{field_set: {{max_price: 700}}}}, {{field_set: {{in_portland: true}}}}]
""",
        'events_any_order: field_set {"field": "max_price", "value": 700}',
    ),
    "field dropped by a rule": (
        HOTEL,
        f"""\
  - user: Hi, a stay in Portland, max 700
    scripted: [{reading(PORTLAND, OVER_BUDGET)}, {reading(PORTLAND, OVER_BUDGET)}]
    expect:
      events: [{{field_dropped: {{max_price: quoted}}}}]
      no_events: [{{field_set: max_price}}]
""",
        f"""\
  - user: Hi, a stay in Portland, max 700
    scripted: [{reading(PORTLAND, WITHIN_BUDGET)}]
    expect:
      events: [{{field_dropped: {{max_price: quoted}}}}]
""",
        'events: field_dropped {"field": "max_price", "rule": "quoted"}',
    ),
    "tool and its outcome": (
        ORDERS,
        f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
  - decide: {{decision: approve}}
    expect:
      events: [{{tool: {{name: refund, args: {{order_id: 40004}}, ok: true}}}}]
""",
        f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
  - decide: {{decision: deny}}
    expect:
      events: [{{tool: {{name: refund, args: {{order_id: 40004}}, ok: true}}}}]
""",
        'events: tool {"name": "refund", "args": {"order_id": 40004}, "ok": true}',
    ),
    "approval requested": (
        ORDERS,
        f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
    expect:
      events: [{{entered: Refund}}, {{approval_requested: {{tool: refund, args: {{order_id: 40004}}}}}}]
""",
        f"""\
  - user: Please refund order 40004.
    scripted: {LOOKUP_40004}
    expect:
      events: [{{approval_requested: {{tool: refund, args: {{order_id: 40004}}}}}}]
""",
        'events: approval_requested {"tool": "refund", "args": {"order_id": 40004}}',
    ),
    "approval decided": (
        ORDERS,
        f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
  - decide: {{decision: approve}}
    expect:
      events:
        - approval_decided: {{tool: refund, decision: approved, by: C-1001}}
        - tool: refund
        - entered: Support
""",
        f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
  - decide: {{decision: deny}}
    expect:
      events:
        - approval_decided: {{tool: refund, decision: approved, by: C-1001}}
""",
        'events: approval_decided {"tool": "refund", "decision": "approved", "by": "C-1001"}',
    ),
    "repair pattern": (
        HOTEL,
        """\
  - user: Hi
    scripted: ['{"found": []}']
  - user: Sorry, what?
    scripted: ['{"found": [{"field": "repair", "quote": "Sorry, what", "value": "repeat"}]}']
    expect:
      events: [{pattern: repeat}, {said: "Is your stay in the Portland area"}]
""",
        """\
  - user: Hi
    scripted: ['{"found": []}']
  - user: Hmm
    scripted: ['{"found": []}']
    expect:
      events: [{pattern: repeat}, {said: "Is your stay in the Portland area"}]
""",
        "events: pattern repeat",
    ),
    "said": (
        ORDERS,
        f"""\
  - user: What's the status of order 40004?
    scripted: {LOOKUP_40004}
    expect:
      events: [{{said: "^Order #40004: shipped"}}]
""",
        """\
  - user: What's the status of order 40004?
    scripted: ['{"orders": [40006], "status": "any", "since": null, "until": null, "action": "order"}']
    expect:
      events: [{said: "^Order #40004: shipped"}]
""",
        "events: said ^Order #40004: shipped",
    ),
    "not said": (
        ORDERS,
        f"""\
  - user: What's the status of order 40004?
    scripted: {LOOKUP_40004}
    expect:
      no_events: [{{said: "(?i)waiting for approval"}}, {{approval_requested: refund}}]
""",
        f"""\
  - user: What's the status of order 40004?
    scripted: {REFUND_40004}
    expect:
      no_events: [{{said: "(?i)waiting for approval"}}]
""",
        "no_events: said (?i)waiting for approval",
    ),
}


async def play(tmp_path: Path, header: str, turns: str, name: str) -> list[TurnRecord]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(header.format(name=name) + turns, encoding="utf-8")
    result = await run_eval(load_scenarios(path), [HotelFlow, OrdersFlow], model="scripted")
    [scenario] = result.scenarios
    [run] = scenario.runs
    return list(run.turns)


@pytest.mark.parametrize("kind", list(CASES))
async def test_an_event_assertion_holds_and_fails_when_the_event_is_missing(
    tmp_path: Path, kind: str
) -> None:
    header, played, missing, failing = CASES[kind]
    turns = await play(tmp_path, header, played, "played")
    assert all(turn.passed for turn in turns), [turn.failures for turn in turns]
    asserted = [check for turn in turns for check in turn.checks if check.kind in EVENT_KINDS]
    assert asserted and all(check.status == "passed" for check in asserted)

    turns = await play(tmp_path, header, missing, "missing")
    last = turns[-1]
    check = last.failures[0]
    assert check.name == failing
    # The failure shows the turn's events where the assertion looked, one line each.
    assert isinstance(check.actual, list) and check.actual
    for line in check.actual:
        if line.endswith("in all)"):
            continue
        number, described = line.lstrip("→ ").split(". ", 1)
        assert described == describe_event(last.events[int(number) - 1])
    printed = io.StringIO()
    ProgressPrinter(Console(file=printed, width=200), runs=1)(
        load_scenarios(tmp_path / "missing.yaml")[0], 1, last
    )
    assert check.note in printed.getvalue() and check.actual[0].strip() in printed.getvalue()


EVENT_KINDS = {"events", "events_any_order", "no_events"}


async def test_in_order_means_in_order(tmp_path: Path) -> None:
    turns = f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
    expect:
      events: [{{approval_requested: refund}}, {{entered: Refund}}]
"""
    [turn] = await play(tmp_path, ORDERS, turns, "order")
    [check] = turn.failures
    assert check.name == "events: entered Refund"
    assert check.note == "it happened (event 3), but before the event an earlier assertion matched"
    assert check.actual == [
        "  3. entered Refund (from Support)",
        '  4. approval_requested refund({"order_id": 40004})',
        f"→ 5. {describe_event(turn.events[4])}",
    ]
    # The same two in any order hold.
    any_order = turns.replace("events:", "events_any_order:")
    [turn] = await play(tmp_path, ORDERS, any_order, "any")
    assert turn.passed, turn.failures


async def test_the_whole_turn_is_recorded_in_order(tmp_path: Path) -> None:
    turns = f"""\
  - user: Please refund order 40004.
    scripted: {REFUND_40004}
  - decide: {{decision: approve}}
"""
    first, second = await play(tmp_path, ORDERS, turns, "recorded")
    [approval] = [record["approval"] for record in first.events if record["kind"] == "approval_requested"]
    assert first.began_in == "Support" and second.began_in == "Refund"
    assert list(first.events) == [
        {"kind": "entered", "step": "Support", "from": None},
        {"kind": "left", "step": "Support", "to": "Refund"},
        {"kind": "entered", "step": "Refund", "from": "Support"},
        {
            "kind": "approval_requested",
            "step": "Refund",
            "tool": "refund",
            "args": {"order_id": 40004},
            "approval": approval,
        },
        {
            "kind": "said",
            "text": "Waiting for approval: Refund order #40004 (placed 2026-10-11, $89.00) in full to the "
            "original payment method (the customer must approve)",
        },
    ]
    assert list(second.events) == [
        {
            "kind": "approval_decided",
            "step": "Refund",
            "tool": "refund",
            "args": {"order_id": 40004},
            "decision": "approved",
            "by": "C-1001",
        },
        {
            "kind": "tool",
            "step": "Refund",
            "name": "refund",
            "args": {"order_id": 40004},
            "ok": True,
            "result": "Accepted.",
        },
        {"kind": "left", "step": "Refund", "to": "Support"},
        {"kind": "entered", "step": "Support", "from": "Refund"},
        {
            "kind": "said",
            "text": "Done: order #40004 is refunded. $89.00 goes back to your original payment method "
            "within 5 to 10 business days.",
        },
    ]


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ("events: [{entered: Nowhere}]", "expect.events entered: no step 'Nowhere' in flow orders"),
        ("no_events: [{tool: charge}]", "expect.no_events tool: no tool 'charge' in flow orders"),
        (
            "events_any_order: [{approval_decided: {tool: wire}}]",
            "expect.events_any_order approval_decided: no tool 'wire' in flow orders",
        ),
    ],
)
async def test_names_the_flow_lacks_are_refused_before_anything_runs(
    tmp_path: Path, expect: str, message: str
) -> None:
    path = tmp_path / "typo.yaml"
    turn = f"  - user: hi\n    expect: {{{expect}}}\n"
    path.write_text(ORDERS.format(name="typo") + turn, encoding="utf-8")
    with pytest.raises(ScenarioError, match=message):
        await run_eval(load_scenarios(path), [OrdersFlow], model="scripted")


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ("[{entred: Support}]", "'entred' is not a kind of event; kinds: entered, left, field_set"),
        ("[{entered: Support, tool: x}]", "an event assertion is one kind and what to match"),
        ("[{said: 3}]", "said: write a regular expression the reply must match"),
        ("[{field_set: {a: 1, b: 2}}]", "field_set: write a field's name, or {field: value} with one field"),
        ("[{tool: {args: {$regex: 1}}}]", "expect.events[0].match: $regex takes a regular expression"),
    ],
)
def test_a_malformed_assertion_says_what_is_wrong(tmp_path: Path, events: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(ORDERS.format(name="bad") + f"  - user: hi\n    expect: {{events: {events}}}\n")
    with pytest.raises(ScenarioError, match=re.escape(message)):
        load_scenarios(path)
