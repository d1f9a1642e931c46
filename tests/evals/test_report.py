"""The result as data: the JSON report, and the tables printed at the end of an eval."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from picoflow.evals import EvalResult, Timing, load_scenarios, run_eval
from picoflow.evals import runner as eval_runner
from picoflow.evals.report import print_result, write_report
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel

from .shop import ShopFlow

SCENARIO = """\
name: apples
flow: shop
turns:
  - user: hello
    expect: {reply_contains: "^Hello"}
  - user: two apples please
    expect: {tool_called: {name: add, args: {item: apple}}, model_calls: 1}
  - user: thanks
    expect: {judge: The reply is polite.}
"""
# Seconds each turn takes, run after run: the first turn of a run is the slow one.
DURATIONS = [4.0, 1.0, 2.0, 1.0, 3.0, 1.5]


class Clock:
    """``time.perf_counter`` for the runner: each turn (two readings) lasts the next of ``DURATIONS``."""

    def __init__(self) -> None:
        self.now = 100.0
        self.durations: Iterator[float] = iter(DURATIONS)
        self.reading = 0

    def perf_counter(self) -> float:
        self.reading += 1
        if self.reading % 2 == 0:
            self.now += next(self.durations)
        return self.now


def forgetful(request: ModelRequest) -> Any:
    """Calls the tool in the first run only."""
    said = next(m.content for m in reversed(request.messages) if m.role == "user")
    if said == "hello":
        forgetful.runs += 1  # type: ignore[attr-defined]
        return "Hello!"
    if said == "two apples please":
        return ToolCall("add", {"item": "apple"}) if forgetful.runs == 1 else "Apples are out."  # type: ignore[attr-defined]
    return "You're welcome."


@pytest.fixture
async def result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EvalResult:
    path = tmp_path / "apples.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    monkeypatch.setattr(eval_runner, "time", SimpleNamespace(perf_counter=Clock().perf_counter))
    forgetful.runs = 0  # type: ignore[attr-defined]
    return await run_eval(load_scenarios(path), [ShopFlow], model=FunctionModel(forgetful), runs=2)


def test_timings() -> None:
    assert Timing.of([]) is None
    assert Timing.of([3.0]) == Timing(1, 3.0, 3.0, 3.0)
    assert Timing.of([5.0, 1.0, 2.0, 4.0, 3.0]) == Timing(
        5, 3.0, 5.0, 5.0
    )  # nearest rank: p90 of 5 is the max
    assert Timing.of([float(n) for n in range(1, 21)]) == Timing(20, 10.5, 18.0, 20.0)


async def test_the_json_report_holds_every_run_and_turn(result: EvalResult, tmp_path: Path) -> None:
    path = tmp_path / "out" / "report.json"
    write_report(result, path)
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report == result.as_json()
    [scenario] = report["scenarios"]
    ids = [run.pop("session_id") for run in scenario["runs"]]
    assert len(set(ids)) == 2 and all(isinstance(one, str) for one in ids)
    assert scenario.pop("source") == str(tmp_path / "apples.yaml")
    entered = {"kind": "entered", "step": "Shop", "from": None}
    hello = turn(1, "hello", "Hello!", 8, 2, [("reply_contains: ^Hello", "passed")], events=[entered])
    polite = {
        "name": "judge: The reply is polite.",
        "expected": "The reply is polite.",
        "actual": None,
        "note": "no judge model (--judge)",
    }
    assert report == {
        "model": "function:test",
        "judge": None,
        "runs_per_scenario": 2,
        "runs": 2,
        "runs_passed": 1,
        "run_pass_rate": 0.5,
        "categories": {"-": {"scenarios": 1, "scenarios_passed": 0, "runs": 2, "runs_passed": 1}},
        "unscored_checks": 2,
        "judge_usage": None,
        "scenarios": [
            {
                "name": "apples",
                "category": "",
                "flow": "shop",
                "runs_passed": 1,
                "run_pass_rate": 0.5,
                "pass": None,
                "runs_needed": 2,
                "passed": False,
                "stability": "flaky",
                "turns": [
                    {
                        "turn": 1,
                        "user": "hello",
                        "pass_rate": 1.0,
                        "most_failed": None,
                        "timing": {"count": 2, "median": 2.5, "p90": 4.0, "max": 4.0},
                    },
                    {
                        "turn": 2,
                        "user": "two apples please",
                        "pass_rate": 0.5,
                        "most_failed": {"name": "tool_called: add", "runs": 1},
                        "timing": {"count": 2, "median": 2.0, "p90": 3.0, "max": 3.0},
                    },
                    {
                        "turn": 3,
                        "user": "thanks",
                        "pass_rate": 1.0,
                        "most_failed": None,
                        "timing": {"count": 2, "median": 1.75, "p90": 2.0, "max": 2.0},
                    },
                ],
                "timing": {"count": 6, "median": 1.75, "p90": 4.0, "max": 4.0},
                "timing_after_first_turn": {"count": 4, "median": 1.75, "p90": 3.0, "max": 3.0},
                "usage": {
                    "input_tokens": 84,
                    "output_tokens": 21,
                    "reasoning_tokens": 0,
                    "cached_input_tokens": 0,
                    "cache_creation_tokens": 0,
                    "model_calls": 6,
                    "tool_calls": 1,
                    "total_tokens": 105,
                },
                "runs": [
                    {
                        "run": 1,
                        "passed": True,
                        "turns": [
                            {**hello, "seconds": 4.0},
                            turn(
                                2,
                                "two apples please",
                                "Added 1 apple.",
                                14,
                                5,
                                [("tool_called: add", "passed"), ("model_calls", "passed")],
                                seconds=1.0,
                                tool_calls=1,
                                answer='add({"item": "apple"})',  # the reply is code's
                                events=[
                                    {
                                        "kind": "tool",
                                        "step": "Shop",
                                        "name": "add",
                                        "args": {"item": "apple"},
                                        "ok": True,
                                        "result": "Accepted.",
                                    }
                                ],
                            ),
                            turn(
                                3,
                                "thanks",
                                "You're welcome.",
                                21,
                                4,
                                [("judge: The reply is polite.", "unscored")],
                                seconds=2.0,
                                unscored=[polite],
                            ),
                        ],
                    },
                    {
                        "run": 2,
                        "passed": False,
                        "turns": [
                            {**hello, "seconds": 1.0},
                            turn(
                                2,
                                "two apples please",
                                "Apples are out.",
                                14,
                                4,
                                [("tool_called: add", "failed"), ("model_calls", "passed")],
                                seconds=3.0,
                                failed=[
                                    {
                                        "name": "tool_called: add",
                                        "expected": {"name": "add", "args": {"item": "apple"}},
                                        "actual": [],
                                    }
                                ],
                            ),
                            turn(
                                3,
                                "thanks",
                                "You're welcome.",
                                19,
                                4,
                                [("judge: The reply is polite.", "unscored")],
                                seconds=1.5,
                                unscored=[polite],
                            ),
                        ],
                    },
                ],
            }
        ],
    }


def turn(
    index: int,
    user: str,
    reply: str,
    tokens_in: int,
    tokens_out: int,
    checks: list[tuple[str, str]],
    *,
    seconds: float = 0.0,
    tool_calls: int = 0,
    failed: list[dict[str, Any]] | None = None,
    unscored: list[dict[str, Any]] | None = None,
    answer: str | None = None,
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One turn of a run as the report writes it (the shop flow neither fails nor completes here)."""
    return {
        "turn": index,
        "user": user,
        "passed": not failed,
        "reply": reply,
        "step": "Shop",
        "completed": False,
        "seconds": seconds,
        "model_calls": 1,
        "tool_calls": tool_calls,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "error": None,
        "model_answers": [f"Shop: {answer or reply}"],
        "verdicts": [],  # the shop flow reads no slots
        "began_in": "Shop",
        "events": [*(events or []), {"kind": "said", "text": reply}],
        "failed": failed or [],
        "unscored": unscored or [],
        "checks": [{"name": name, "status": status} for name, status in checks],
    }


async def test_the_printed_tables(result: EvalResult) -> None:
    console = Console(record=True, width=120)
    print_result(console, result, min_pass=0.5)
    assert [line.rstrip() for line in console.export_text().splitlines()] == [
        "                      apples · flow shop · model function:test · 2 run(s)",
        "",
        "  #   user                passed     median s   p90 s   max s   calls   failed most",
        " " + "─" * 93,
        "  1   hello               2/2 100%       2.50    4.00    4.00       1",
        "  2   two apples please   1/2 50%        2.00    3.00    3.00       1   tool_called: add (1×)",
        "  3   thanks              2/2 100%       1.75    2.00    2.00       1",
        "",
        "  runs passed     1/2 (50%)",
        "  checks passed   5/6 (83.3%)",
        "  turn time       median 1.75s (1.75s after the first), p90 4.00s, max 4.00s",
        "  usage           6 model calls, 1 tool call",
        "  tokens          105 (84 in, 21 out)",
        "note: 2 judge check(s) were not scored; pass --judge MODEL to score them",
        "checks passed: 5/6 (83.3%)",
        "PASS 1/2 runs passed (50%); minimum 50%",
    ]
    # At 80 columns (a log file): no line is longer, no column is dropped, the short ones are whole.
    narrow = Console(record=True, width=80)
    print_result(narrow, result, min_pass=0.5)
    lines = narrow.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    header = next(line for line in lines if "median s" in line)
    assert header.split()[:8] == ["#", "user", "passed", "median", "s", "p90", "s", "max"]
    assert any("2/2 100%       2.50    4.00    4.00       1" in line for line in lines)
    console = Console(record=True, width=120)
    print_result(console, result, min_pass=0.6)
    assert console.export_text().splitlines()[-1] == "FAIL 1/2 runs passed (50%); minimum 60%"
