"""``picoflow eval --coverage``: which steps, transitions, tools and repair patterns the suites
exercised, per flow and per suite, and what they never did."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

import picoflow_demos
from picoflow import cli
from picoflow.evals import load_scenarios, run_eval
from picoflow.evals.coverage import Coverage, FlowCoverage, print_coverage
from picoflow.evals.results import TurnRecord
from picoflow.usage import Usage

from .shop import ShopFlow

SHIPPED = Path(picoflow_demos.__file__).parent / "scenarios"

BASKET = """\
name: basket
flow: shop
turns:
  - user: two apples please
    scripted: [{tool: add, args: {item: apple, quantity: 2}}]
"""
CHECKOUT = """\
name: checkout
flow: shop
turns:
  - user: a pear please
    scripted: [{tool: add, args: {item: pear}}]
  - user: that's all, let me pay
    scripted: [{tool: checkout}, "Thanks!"]
"""


async def covered(tmp_path: Path, *suites: tuple[str, str]) -> Coverage:
    scenarios = []
    for name, text in suites:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        scenarios += load_scenarios(path)
    result = await run_eval(scenarios, [ShopFlow], model="scripted")
    return Coverage.of(result, [ShopFlow.spec()])


async def test_what_a_suite_never_did_is_named(tmp_path: Path) -> None:
    coverage = await covered(tmp_path, ("basket.yaml", BASKET))
    shop = coverage.flows["shop"]
    assert shop.counts() == {"steps": (1, 2), "transitions": (0, 1), "tools": (1, 3)}
    assert shop.missed_steps() == ["Paid"]
    assert shop.missed_transitions() == [("Shop", "Paid")]
    assert shop.missed_tools() == [("Shop", "checkout"), ("Shop", "terminate_session")]
    console = Console(record=True, width=80)
    print_coverage(console, coverage)
    lines = [line.rstrip() for line in console.export_text().splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines)
    assert [" ".join(line.split()) for line in lines if not line.lstrip().startswith("─")] == [
        "coverage of flow shop",
        "suite steps transitions tools",
        "all suites 1/2 0/1 1/3",
        "basket.yaml 1/2 0/1 1/3",
        "never exercised (4):",
        "step Paid",
        "Shop → Paid (via checkout, terminate_session)",
        "tool Shop.checkout",
        "tool Shop.terminate_session",
    ]


async def test_each_suite_is_counted_apart_and_together(tmp_path: Path) -> None:
    coverage = await covered(tmp_path, ("basket.yaml", BASKET), ("checkout.yaml", CHECKOUT))
    shop = coverage.flows["shop"]
    assert shop.counts() == {"steps": (2, 2), "transitions": (1, 1), "tools": (2, 3)}
    report = shop.as_json()
    assert report["steps"] == {"Shop": ["basket.yaml", "checkout.yaml"], "Paid": ["checkout.yaml"]}
    assert report["transitions"] == [
        {
            "from": "Shop",
            "to": "Paid",
            "via": ["checkout", "terminate_session"],
            "declared": True,
            "suites": ["checkout.yaml"],
        }
    ]
    assert report["missed"] == {
        "steps": [],
        "transitions": [],
        "tools": [{"step": "Shop", "tool": "terminate_session"}],
        "patterns": [],
    }
    assert report["summary"] == {
        "steps": {"covered": 2, "declared": 2},
        "transitions": {"covered": 1, "declared": 1},
        "tools": {"covered": 2, "declared": 3},
    }


def test_a_step_pattern_matrix_shows_the_patterns_that_fired() -> None:
    coverage = Coverage({"shop": _shop_with_patterns()})
    console = Console(record=True, width=80)
    print_coverage(console, coverage)
    text = [" ".join(line.split()) for line in console.export_text().splitlines() if line.strip()]
    start = text.index("repair patterns × steps (suites that fired it):")
    assert [line for line in text[start + 1 :] if not line.startswith("─")] == [
        "step cancel correction",
        "Shop 1 2",
    ]
    assert coverage.as_json()["shop"]["patterns"] == [
        {"step": "Shop", "pattern": "correction", "suites": ["a.yaml", "b.yaml"]},
        {"step": "Shop", "pattern": "cancel", "suites": ["a.yaml"]},
    ]


def _shop_with_patterns() -> FlowCoverage:
    flow = FlowCoverage.declared(ShopFlow.spec())
    for suite, names in (("a.yaml", ("correction", "cancel")), ("b.yaml", ("correction",))):
        events = tuple({"kind": "pattern", "name": name, "step": "Shop"} for name in names)
        flow.note(
            suite, TurnRecord(1, "hi", "", "Shop", False, 0.0, Usage(), (), events=events, began_in="Shop")
        )
    return flow


def test_the_demos_suites_cover_every_step_transition_and_tool(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    played = CliRunner().invoke(
        cli.app, ["eval", str(SHIPPED), "--model", "scripted", "--coverage", "--report", str(report)]
    )
    assert played.exit_code == 0, played.output
    coverage = json.loads(report.read_text(encoding="utf-8"))["coverage"]
    assert set(coverage) == {"hotel", "invoice", "orders", "products", "travel"}
    for flow, covered in coverage.items():
        assert covered["missed"] == {"steps": [], "transitions": [], "tools": [], "patterns": []}, flow
        for kind, counts in covered["summary"].items():
            assert counts["covered"] == counts["declared"], (flow, kind)
    # A step going to itself stays where it is: no event shows it, so it is listed, not counted.
    assert coverage["hotel"]["loops"] == [
        {"step": "Present", "via": ["show_list"]},
        {"step": "Compare", "via": ["compare"]},
    ]
    assert "every step, transition, tool and declared pattern was exercised" in played.output
    # Every pattern the hotel's steps declare was fired by a suite: the search step's (a policy
    # question among them, answered by HotelQuestions), the corrections the list and the tables send
    # back to it, and the list asking which hotel when two are booked at once.
    fired = {(item["step"], item["pattern"]) for item in coverage["hotel"]["patterns"] if item["suites"]}
    assert fired == {
        ("Explore", pattern)
        for pattern in ("cancel", "repeat", "handoff", "skip", "out_of_scope", "no_progress", "correction")
    } | {
        ("Explore", "digression"),
        ("Present", "correction"),
        ("Compare", "correction"),
        ("Present", "clarify"),
    }
    assert coverage["hotel"]["steps"]["HotelQuestions"] == ["hotel-repairs.yaml"]  # the policy questions
