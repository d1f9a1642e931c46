"""Per-scenario pass policies: ``runs:`` and ``pass: all | majority | N``, judged per scenario and
per category, beside ``--min-pass`` for the scenarios that set none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from picoflow import cli
from picoflow.evals import ScenarioError, load_scenarios, run_eval
from picoflow.evals.report import print_result
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel

from .shop import ShopFlow

SCENARIOS = """\
name: steady
category: basket
runs: 3
pass: all
turns:
  - user: one pear
    expect: {reply_contains: "Added 1 pear"}
---
name: wobbly
category: basket
runs: 3
pass: {policy}
turns:
  - user: two apples
    expect: {reply_contains: "Added 2 apple"}
"""


class Wobbly:
    """Adds the pear every time; the apples only in the runs listed."""

    def __init__(self, apple_runs: set[int]) -> None:
        self.apple_runs = apple_runs
        self.apples_asked = 0

    def __call__(self, request: ModelRequest) -> Any:
        said = next(m.content for m in reversed(request.messages) if m.role == "user")
        if said == "one pear":
            return ToolCall("add", {"item": "pear"})
        self.apples_asked += 1
        if self.apples_asked in self.apple_runs:
            return ToolCall("add", {"item": "apple", "quantity": 2})
        return "We are out of apples."


async def play(tmp_path: Path, policy: str, apple_runs: set[int]) -> Any:
    path = tmp_path / "basket.yaml"
    path.write_text(SCENARIOS.replace("{policy}", policy), encoding="utf-8")
    model = FunctionModel(Wobbly(apple_runs))
    return await run_eval(load_scenarios(path), [ShopFlow], model=model, default_flow="shop")


@pytest.mark.parametrize(
    ("policy", "apple_runs", "passed"),
    [
        ("all", {1, 2, 3}, True),
        ("all", {1, 3}, False),
        ("majority", {1, 3}, True),
        ("majority", {2}, False),
        ("1", {2}, True),
        ("2", {2}, False),
        ("2", {1, 2}, True),
    ],
)
async def test_a_scenario_passes_by_its_policy(
    tmp_path: Path, policy: str, apple_runs: set[int], passed: bool
) -> None:
    result = await play(tmp_path, policy, apple_runs)
    steady, wobbly = result.scenarios
    assert [len(steady.runs), len(wobbly.runs)] == [3, 3]  # the scenario's runs, not run_eval's 1
    assert steady.passed and steady.stability == "stable"
    assert wobbly.runs_passed == len(apple_runs) and wobbly.passed is passed
    assert wobbly.stability == ("stable" if len(apple_runs) == 3 else "flaky")
    # The eval passes when every scenario meets its policy; --min-pass judges no run here.
    assert result.verdict(min_pass=1.0) is passed
    assert result.categories_passed() == {"basket": 1 + passed}


async def test_the_report_says_each_policy_and_the_verdict(tmp_path: Path) -> None:
    result = await play(tmp_path, "majority", {1, 3})
    console = Console(record=True, width=100)
    print_result(console, result, min_pass=1.0)
    lines = [" ".join(line.split()) for line in console.export_text().splitlines() if line.strip("─ ")]
    assert "runs passed 2/3 (67%); pass: majority (2/3) met, flaky" in lines
    assert "runs passed 3/3 (100%); pass: all (3/3) met, stable" in lines
    assert "steady basket 3/3 all (3/3) passed (stable)" in lines
    assert "wobbly basket 2/3 majority (2/3) passed (flaky)" in lines
    assert "basket 2/2 5/6 83%" in lines
    assert lines[-1] == "PASS 5/6 runs passed (83%); 2/2 scenario(s) met their pass policy"
    report = result.as_json()
    wobbly = report["scenarios"][1]
    assert {key: wobbly[key] for key in ("pass", "runs_needed", "passed", "stability", "runs_passed")} == {
        "pass": "majority",
        "runs_needed": 2,
        "passed": True,
        "stability": "flaky",
        "runs_passed": 2,
    }
    assert report["categories"] == {
        "basket": {"scenarios": 2, "scenarios_passed": 2, "runs": 6, "runs_passed": 5}
    }


async def test_min_pass_judges_only_the_scenarios_without_a_policy(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    unruled = "---\nname: free\nturns:\n  - user: two apples\n    expect: {reply_contains: Added 2 apple}\n"
    path.write_text(SCENARIOS.replace("{policy}", "majority") + unruled, encoding="utf-8")
    model = FunctionModel(Wobbly({1, 3}))  # apples in the wobbly scenario's runs 1 and 3, never after
    result = await run_eval(load_scenarios(path), [ShopFlow], model=model, default_flow="shop", runs=2)
    steady, wobbly, free = result.scenarios
    assert [len(steady.runs), len(wobbly.runs), len(free.runs)] == [3, 3, 2]
    assert free.runs_passed == 0 and result.unruled_pass_rate() == 0.0
    assert not result.verdict(min_pass=0.5) and result.verdict(min_pass=0.0)
    console = Console(record=True, width=140)
    print_result(console, result, min_pass=0.5)
    last = " ".join(console.export_text().splitlines()[-1].split())
    assert last == (
        "FAIL 5/8 runs passed (62%); minimum 50% of the runs of scenarios without a pass policy (0%); "
        "2/2 scenario(s) met their pass policy"
    )


def test_a_policy_that_cannot_be_met_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nruns: 2\npass: 3\nturns: [{user: hi}]\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"pass: 3 cannot be met in 2 run\(s\)"):
        load_scenarios(path)
    path.write_text(
        "name: x\npass: majority\nturns: [{user: hi}]\n---\nname: y\npass: 0\nturns: [{user: hi}]\n"
    )
    with pytest.raises(ScenarioError, match="pass"):
        load_scenarios(path)


async def test_a_policy_beyond_the_runs_asked_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\npass: 3\nturns: [{user: one pear}]\n", encoding="utf-8")
    model = FunctionModel(Wobbly(set()))
    with pytest.raises(ScenarioError, match=r"pass: 3 cannot be met in 2 run\(s\)"):
        await run_eval(load_scenarios(path), [ShopFlow], model=model, default_flow="shop", runs=2)
    assert model.requests == []


def test_the_command_exits_by_the_policies(tmp_path: Path) -> None:
    path = tmp_path / "basket.yaml"
    scripted = SCENARIOS.replace("{policy}", "majority").replace(
        'expect: {reply_contains: "Added 1 pear"}',
        'scripted: [{tool: add, args: {item: pear}}]\n    expect: {reply_contains: "Added 1 pear"}',
    )
    path.write_text(scripted.split("---")[0], encoding="utf-8")
    report = tmp_path / "report.json"
    runner = CliRunner()
    args = [
        "eval",
        str(path),
        "--flows",
        "tests.evals.shop:ShopFlow",
        "--flow",
        "shop",
        "--model",
        "scripted",
    ]
    played = runner.invoke(cli.app, [*args, "--report", str(report)])
    assert played.exit_code == 0, played.output
    assert json.loads(report.read_text(encoding="utf-8"))["scenarios"][0]["stability"] == "stable"
    path.write_text(scripted.split("---")[0].replace("Added 1 pear", "Added 2 pear"), encoding="utf-8")
    failed = runner.invoke(cli.app, args)
    assert failed.exit_code == 1, failed.output
    assert "FAIL 0/3 runs passed (0%); 0/1 scenario(s) met their pass policy" in " ".join(
        failed.output.split()
    )
