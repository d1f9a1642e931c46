"""Every kind of expectation, passing and failing, on a small flow played with scripted responses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from picoflow.evals import SCRIPTED, Check, load_scenarios, run_eval
from picoflow.evals.checks import lookup, matches

from .shop import ShopFlow

SCRIPT = """\
name: basket
flow: shop
caller: {principal: ann}
turns:
  - user: two apples please
    scripted:
      - {tool: add, args: {item: unicorn}}
      - {tool: add, args: {item: apple, quantity: 2}}
    expect:
      %s
  - user: pay now
    scripted: [{tool: checkout}, "Thank you, goodbye!"]
    expect:
      %s
"""

PASSING_1 = """\
      step: Shop
      completed: false
      state:
        Shop.basket.0.item: apple
        Shop.basket: [{quantity: 2}]
        Shop.basket.-1: {$exact: {item: apple, quantity: 2}}
        Shop.basket.0.colour: {$absent: true}
        Shop.basket.0.quantity: {$absent: false}
        Paid.items: {$absent: true}
      reply_contains: ["(?i)added 2 apple", "^Added"]
      reply_not_contains: ["(?i)unicorn"]
      tool_called:
        - {name: add, args: {item: unicorn}, ok: false}
        - {name: add, args: {item: apple, quantity: 2, colour: {$absent: true}}, ok: true}
        - add
      tool_not_called: [checkout, {name: add, args: {item: pear}}]
      model_calls: {min: 2, max: 2}"""
PASSING_2 = """\
      step: Paid
      completed: true
      state: {Paid.items: 1, Paid.note: {$regex: "^paid by "}}
      tool_called: checkout
      model_calls: 2"""

FAILING_1 = """\
      step: Paid
      completed: true
      state:
        Shop.basket.0.item: pear
        Shop.basket: [{quantity: 2}, {quantity: 1}]
        Shop.basket.0: {$exact: {item: apple}}
        Shop.basket.-1.item: {$absent: true}
        Shop.basket.5: {$absent: false}
        Shop.basket.0.quantity: 2.0
      reply_contains: ["(?i)pear"]
      reply_not_contains: ["apple"]
      tool_called:
        - {name: add, args: {item: unicorn}, ok: true}
        - {name: add, args: {quantity: 3}}
        - checkout
      tool_not_called: [add]
      model_calls: {max: 1}"""
FAILING_2 = """\
      step: Shop
      completed: false
      state: {Paid.items: true, Paid.note: {$regex: "^unpaid"}}
      model_calls: {min: 3}"""

MADE_1 = [
    {"name": "add", "args": {"item": "unicorn"}, "ok": False},
    {"name": "add", "args": {"item": "apple", "quantity": 2}, "ok": True},
]


async def play(tmp_path: Path, first: str, second: str, monkeypatch: pytest.MonkeyPatch) -> list[list[Check]]:
    path = tmp_path / "basket.yaml"
    path.write_text(SCRIPT % (first.strip(), second.strip()), encoding="utf-8")
    monkeypatch.setenv("SHOP_NOTE", "paid by card")
    result = await run_eval(load_scenarios(path), [ShopFlow], model=SCRIPTED)
    [run] = result.scenarios[0].runs
    return [list(turn.checks) for turn in run.turns]


async def test_every_expectation_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = await play(tmp_path, PASSING_1, PASSING_2, monkeypatch)
    basket = [{"item": "apple", "quantity": 2}]
    assert first == [
        Check("step", "passed", "Shop", "Shop"),
        Check("completed", "passed", False, False),
        Check("state: Shop.basket.0.item", "passed", "apple", "apple"),
        Check("state: Shop.basket", "passed", [{"quantity": 2}], basket),
        Check("state: Shop.basket.-1", "passed", {"$exact": basket[0]}, basket[0]),
        Check("state: Shop.basket.0.colour", "passed", {"$absent": True}, None, "the path is absent"),
        Check("state: Shop.basket.0.quantity", "passed", {"$absent": False}, 2),
        Check("state: Paid.items", "passed", {"$absent": True}, None, "the path is absent"),
        Check("reply_contains: (?i)added 2 apple", "passed", "(?i)added 2 apple", "Added 2 apple."),
        Check("reply_contains: ^Added", "passed", "^Added", "Added 2 apple."),
        Check("reply_not_contains: (?i)unicorn", "passed", "(?i)unicorn", None),
        Check(
            "tool_called: add", "passed", {"name": "add", "args": {"item": "unicorn"}, "ok": False}, MADE_1
        ),
        Check(
            "tool_called: add",
            "passed",
            {
                "name": "add",
                "args": {"item": "apple", "quantity": 2, "colour": {"$absent": True}},
                "ok": True,
            },
            MADE_1,
        ),
        Check("tool_called: add", "passed", {"name": "add"}, MADE_1),
        Check("tool_not_called: checkout", "passed", {"name": "checkout"}, []),
        Check("tool_not_called: add", "passed", {"name": "add", "args": {"item": "pear"}}, []),
        Check("model_calls", "passed", "2", 2),
    ]
    made_2 = [{"name": "checkout", "args": {}, "ok": True}]
    assert second == [
        Check("step", "passed", "Paid", "Paid"),
        Check("completed", "passed", True, True),
        Check("state: Paid.items", "passed", 1, 1),
        Check("state: Paid.note", "passed", {"$regex": "^paid by "}, "paid by card"),
        Check("tool_called: checkout", "passed", {"name": "checkout"}, made_2),
        Check("model_calls", "passed", "2", 2),
    ]


async def test_every_expectation_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = await play(tmp_path, FAILING_1, FAILING_2, monkeypatch)
    apple = {"item": "apple", "quantity": 2}
    assert first == [
        Check("step", "failed", "Paid", "Shop"),
        Check("completed", "failed", True, False),
        Check("state: Shop.basket.0.item", "failed", "pear", "apple"),
        Check("state: Shop.basket", "failed", [{"quantity": 2}, {"quantity": 1}], [apple]),
        Check("state: Shop.basket.0", "failed", {"$exact": {"item": "apple"}}, apple),
        Check("state: Shop.basket.-1.item", "failed", {"$absent": True}, "apple"),
        Check("state: Shop.basket.5", "failed", {"$absent": False}, None, "the path is absent"),
        Check("state: Shop.basket.0.quantity", "passed", 2.0, 2),  # JSON numbers: 2 and 2.0 are one value
        Check("reply_contains: (?i)pear", "failed", "(?i)pear", "Added 2 apple."),
        Check("reply_not_contains: apple", "failed", "apple", "apple"),
        Check("tool_called: add", "failed", {"name": "add", "args": {"item": "unicorn"}, "ok": True}, MADE_1),
        Check("tool_called: add", "failed", {"name": "add", "args": {"quantity": 3}}, MADE_1),
        Check("tool_called: checkout", "failed", {"name": "checkout"}, MADE_1),
        Check("tool_not_called: add", "failed", {"name": "add"}, MADE_1),
        Check("model_calls", "failed", "at most 1", 2),
    ]
    assert second == [
        Check("step", "failed", "Shop", "Paid"),
        Check("completed", "failed", False, True),
        Check("state: Paid.items", "failed", True, 1),  # true is not 1 in JSON
        Check("state: Paid.note", "failed", {"$regex": "^unpaid"}, "paid by card"),
        Check("model_calls", "failed", "at least 3", 2),
    ]


@pytest.mark.parametrize(
    ("expected", "actual", "result"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, True),
        ({"a": {"b": [1, {"c": "x"}]}}, {"a": {"b": [1, {"c": "x", "d": 0}], "e": 1}}, True),
        ({"a": {"b": [1]}}, {"a": {"b": [1, 2]}}, False),
        ({"$exact": {"a": 1}}, {"a": 1, "b": 2}, False),
        ({"$exact": [1, 2.0]}, [1, 2], True),
        ({"a": None}, {"a": None}, True),
        ({"a": None}, {}, False),
        ({"a": {"$absent": True}}, {"a": None}, False),
        ({"$regex": "\\d"}, 5, False),
        (1, True, False),
        (False, 0, False),
        ("1", 1, False),
        ({"a": 1}, "not an object", False),
    ],
)
def test_matchers(expected: Any, actual: Any, result: bool) -> None:
    assert matches(expected, actual) is result


def test_state_paths() -> None:
    states = {"Shop": {"basket": [{"item": "apple"}, {"item": "pear"}], "dotted": {"x": 1}}}
    assert lookup(states, "Shop.basket.1.item") == "pear"
    assert lookup(states, "Shop.basket.-2.item") == "apple"
    assert lookup(states, "Shop") == states["Shop"]
    assert lookup(states, "Other") == {}  # a step that stored nothing has an empty state
    assert not matches(1, lookup(states, "Shop.basket.2"))
    assert matches({"$absent": True}, lookup(states, "Shop.basket.item"))
    assert matches({"$absent": True}, lookup(states, "Shop.dotted.x.y"))
