"""``picoflow eval`` through typer's CliRunner: the shipped scenarios, exit codes, report, judge, store."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import picoflow_demos
from picoflow import cli
from picoflow.sessions import SQLiteStore

runner = CliRunner()
SHIPPED = Path(picoflow_demos.__file__).parent / "scenarios"
SHOP = "tests.evals.shop:ShopFlow"

BASKET = """\
name: basket
turns:
  - user: two apples please
    scripted: [{tool: add, args: {item: apple, quantity: 2}}]
    expect: {reply_contains: "Added 2 apple", step: Shop}
  - user: and a pear
    scripted: [{tool: add, args: {item: pear}}]
    expect: {reply_contains: "(?i)banana", judge: The reply confirms the pear.}
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.console, "width", 200)
    for name in ("PICOFLOW_FLOWS", "PICOFLOW_STORE", "PICOFLOW_MODEL", "PICOFLOW_ORDERS_DB"):
        monkeypatch.delenv(name, raising=False)


def invoke(*args: str) -> Any:
    return runner.invoke(cli.app, ["eval", *args])


def basket(tmp_path: Path, text: str = BASKET) -> str:
    path = tmp_path / "basket.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_shipped_scenarios_pass_with_their_scripted_responses(tmp_path: Path) -> None:
    """What CI runs: every scenario shipped with the demos, played with its scripted responses."""
    report = tmp_path / "report.json"
    result = invoke(str(SHIPPED), "--model", "scripted", "--runs", "2", "--report", str(report))
    assert result.exit_code == 0, result.output
    written = json.loads(report.read_text(encoding="utf-8"))
    shipped = {
        s["name"]: (s["flow"], s["runs_passed"], [t["pass_rate"] for t in s["turns"]])
        for s in written["scenarios"]
    }
    # Two runs of each, the orders runs each in a database of its own.
    assert shipped["orders-support"] == ("orders", 2, [1.0] * 13)
    assert shipped["orders-refund-decided"] == ("orders", 2, [1.0] * 6)
    assert shipped["invoice-pdf-01"] == ("invoice", 2, [1.0] * 3)
    assert shipped["products-lookup"] == ("products", 2, [1.0] * 4)
    # The travel plan's sub-steps run side by side: their responses are scripted per step.
    assert shipped["travel-plan"] == ("travel", 2, [1.0] * 4)
    assert shipped["travel-dates"] == ("travel", 2, [1.0] * 3)
    # The hotel guests who write Spanish, German and French: ten each, answered in their language.
    for language in ("es", "de", "fr"):
        guests = {name: result for name, result in shipped.items() if name.startswith(f"hotel-{language}-")}
        assert len(guests) == 10 and all(result[:2] == ("hotel", 2) for result in guests.values())
    # A booking is two turns: the guest's choice, which waits, and their approval.
    assert shipped["hotel-es-all-in-one"] == ("hotel", 2, [1.0] * 4)
    assert shipped["hotel-de-out-of-order-double-bed-parking"] == ("hotel", 2, [1.0] * 7)
    assert shipped["hotel-fr-goodbye-while-asked"] == ("hotel", 2, [1.0] * 2)
    assert written["runs_passed"] == written["runs"] == 2 * len(shipped)
    lines = result.output.splitlines()
    progress = [line.split("  ")[0] for line in lines if line.startswith(("✓", "✗"))]
    assert [line for line in progress if "products-lookup" in line] == [
        f"✓ products-lookup run {run}/2 turn {turn}/4" for run in (1, 2) for turn in range(1, 5)
    ]
    assert len(progress) == sum(len(turns) * 2 for _, _, turns in shipped.values())
    assert all(line.startswith("✓") for line in progress)
    assert lines[-2:] == [
        f"PASS {2 * len(shipped)}/{2 * len(shipped)} runs passed (100%); minimum 100%",
        f"report written to {report}",
    ]
    assert "PICOFLOW_ORDERS_DB" not in os.environ and "ORDERS_FLOW_CURRENT_DATE" not in os.environ
    assert "TRAVEL_FLOW_CURRENT_DATE" not in os.environ


def test_the_exit_status_follows_the_minimum_pass_rate(tmp_path: Path) -> None:
    failing = invoke(basket(tmp_path), "--flows", SHOP, "--flow", "shop", "--model", "scripted")
    assert failing.exit_code == 1, failing.output
    assert "✗ basket run 1/1 turn 2/2" in failing.output and "reply_contains: (?i)banana" in failing.output
    # Under a failed turn, what the model answered: the proposal the flow was given.
    lines = failing.output.splitlines()
    failed_at = next(i for i, line in enumerate(lines) if line.startswith("✗"))
    assert lines[failed_at + 1] == '    Shop: add({"item": "pear"})'
    assert failing.output.splitlines()[-1] == "FAIL 0/1 runs passed (0%); minimum 100%"
    tolerated = invoke(
        basket(tmp_path), "--flows", SHOP, "--flow", "shop", "--model", "scripted", "--min-pass", "0"
    )
    assert (
        tolerated.exit_code == 0
        and tolerated.output.splitlines()[-1] == "PASS 0/1 runs passed (0%); minimum 0%"
    )


def test_a_judge_scores_the_criteria(tmp_path: Path) -> None:
    judged = invoke(
        basket(tmp_path), "--flows", SHOP, "--flow", "shop", "--model", "scripted",
        "--judge", "python:tests.evals.shop:approving", "--min-pass", "0",
    )  # fmt: skip
    assert judged.exit_code == 0, judged.output
    assert "not scored" not in judged.output
    assert "judge function:approving: 1 calls, " in judged.output


def test_sessions_go_to_the_store_given(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'eval.sqlite3'}"
    stored = invoke(
        basket(tmp_path), "--flows", SHOP, "--flow", "shop", "--model", "scripted", "--store", url
    )
    assert stored.exit_code == 1, stored.output
    sessions = asyncio.run(SQLiteStore(tmp_path / "eval.sqlite3").list_sessions())
    assert [(info.flow, info.turns) for info in sessions] == [("shop", 2)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yaml"], "error: missing.yaml: no such file or folder"),
        (["{bad}"], "error: {bad}: turn 1 ('hi'), expect.stepp: unknown field; expected one of: step,"),
        (["{basket}", "--flows", SHOP], "error: {basket}: name the flow in the file (flow: ...) or with"),
        (["{basket}", "--flows", SHOP, "--flow", "shoe"], "error: {basket}: no flow named 'shoe'"),
        (["{basket}", "--flows", SHOP, "--model", "nope:x"], "error: unknown model provider 'nope'"),
        (
            ["{basket}", "--flows", SHOP, "--judge", "python:no:judge"],
            "error: cannot load the model python:no",
        ),
        (["{basket}", "--flows", "nowhere:Flow"], "error: cannot import nowhere"),
    ],
)
def test_a_bad_setup_exits_with_status_2(tmp_path: Path, args: list[str], message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("flow: shop\nturns: [{user: hi, expect: {stepp: Shop}}]\n", encoding="utf-8")
    names = {"{bad}": str(bad), "{basket}": basket(tmp_path)}
    result = invoke(*[names.get(arg, arg) for arg in args])
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()).startswith(message.format(bad=bad, basket=names["{basket}"]))


def test_options_are_checked_before_anything_runs(tmp_path: Path) -> None:
    for option, value in (("--min-pass", "1.5"), ("--runs", "0")):
        refused = invoke(basket(tmp_path), "--flows", SHOP, "--model", "scripted", option, value)
        assert refused.exit_code == 2 and f"Invalid value for '{option}'" in refused.output


CATEGORIZED = """\
name: terse
category: terse
turns:
  - user: two apples please
    scripted: [{tool: add, args: {item: apple, quantity: 2}}]
    expect: {reply_contains: "Added 2 apple"}
---
name: chatty
category: chatty
turns:
  - user: and a pear, if you would be so kind
    scripted: [{tool: add, args: {item: pear}}]
    expect: {reply_contains: "(?i)banana"}
---
name: terse-again
category: terse
turns:
  - user: one pear
    scripted: [{tool: add, args: {item: pear}}]
    expect: {reply_contains: "Added 1 pear"}
"""


def test_the_report_gives_a_pass_rate_per_category(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = ("--flows", SHOP, "--flow", "shop", "--model", "scripted", "--runs", "2", "--min-pass", "0")
    played = invoke(basket(tmp_path, CATEGORIZED), *args, "--report", str(report))
    assert played.exit_code == 0, played.output
    rows = [" ".join(line.split()) for line in played.output.splitlines() if line.strip("─ ")]
    start = rows.index("pass rate per category")
    assert rows[start + 1 : start + 4] == [
        "category scenarios passed runs passed rate",
        "terse 2/2 4/4 100%",
        "chatty 0/1 0/2 0%",
    ]
    assert "terse terse 2/2 - passed (stable)" in rows and "chatty chatty 0/2 - failed (failing)" in rows
    assert json.loads(report.read_text(encoding="utf-8"))["categories"] == {
        "terse": {"scenarios": 2, "scenarios_passed": 2, "runs": 4, "runs_passed": 4},
        "chatty": {"scenarios": 1, "scenarios_passed": 0, "runs": 2, "runs_passed": 0},
    }
    only = invoke(basket(tmp_path, CATEGORIZED), *args, "--category", "chatty")
    assert only.exit_code == 0 and "terse" not in only.output and "chatty run 2/2 turn 1/1" in only.output
    unknown = invoke(basket(tmp_path, CATEGORIZED), *args, "--category", "typos")
    assert unknown.exit_code == 2
    assert "no scenario of category typos; the categories are chatty, terse" in " ".join(
        unknown.output.split()
    )
