"""Showing an eval: a line per turn while it runs, then a table per scenario, and the JSON report."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from picoflow.evals.coverage import Coverage
from picoflow.evals.results import EvalResult, ScenarioResult, Timing, TurnRecord
from picoflow.evals.scenario import Scenario

__all__ = ["ProgressPrinter", "goal_table", "print_result", "write_report"]

EVENT_CHECKS = frozenset({"events", "events_any_order", "no_events"})


class ProgressPrinter:
    """Prints each turn as soon as it is checked: a local model may take minutes per run."""

    def __init__(self, console: Console, runs: int) -> None:
        self.console = console
        self.runs = runs

    def __call__(self, scenario: Scenario, run: int, turn: TurnRecord) -> None:
        mark = "[green]✓[/green]" if turn.passed else "[red]✗[/red]"
        of = len(scenario.turns) if scenario.goal is None else f"≤{scenario.goal.max_turns}"
        where = f"{escape(scenario.name)} run {run}/{self.runs} turn {turn.index}/{of}"
        line = f"{mark} [dim]{where}[/dim] {turn.seconds:5.1f}s {escape(turn.step or '-')}"
        if turn.failures:
            line += " [red]" + escape(", ".join(check.name for check in turn.failures)) + "[/red]"
        self.console.print(line)
        for check in turn.checks:  # how a simulated user's conversation ended, or where a replay diverged
            if check.name in ("goal", "replay") and check.note:
                self.console.print(f"    [dim]{check.name}: {escape(check.note)}[/dim]", soft_wrap=True)
        if turn.failures:  # what the model answered, so a failure shows the reading behind it
            for answer in turn.answers:
                self.console.print(f"    [dim]{escape(answer)}[/dim]", soft_wrap=True)
        for check in turn.failures:  # an event assertion shows the events where it looked
            if check.kind in EVENT_CHECKS and isinstance(check.actual, list):
                self.console.print(f"    [red]{escape(check.name)}[/red]: {escape(check.note)}")
                for line in check.actual:
                    self.console.print(f"      [dim]{escape(str(line))}[/dim]", soft_wrap=True)
        for verdict in turn.verdicts:  # a drop or a repair is never silent
            if verdict["action"] != "kept":
                self.console.print(
                    f"    [yellow]{escape(describe_verdict(verdict))}[/yellow]", soft_wrap=True
                )


def describe_verdict(verdict: Mapping[str, Any]) -> str:
    """One line for a verdict: "dropped max_price (numbers_written)", "repaired min_price -> max_price"."""
    action, name, rule = verdict["action"], verdict["field"], verdict.get("rule")
    if action == "repaired" and "read_as" in verdict:
        was = verdict["read_as"]
        moved = f"{was['field']} -> {name}" if was["field"] != name else name
        return f"repaired {moved}: {was['value']!r} -> {verdict['value']!r} ({rule})"
    return f"{action} {name}: {verdict['value']!r}" + (f" ({rule})" if rule else "")


def print_result(console: Console, result: EvalResult, min_pass: float) -> None:
    """A table per scenario (pass rate, most failed check and timings per turn), then the verdict."""
    for scenario in result.scenarios:
        _print_scenario(console, result, scenario)
    if result.unscored:
        console.print(
            f"[yellow]note:[/yellow] {result.unscored} judge check(s) were not scored"
            + (
                "; pass --judge MODEL to score them"
                if result.judge is None
                else " (the judge gave no verdict)"
            )
        )
    if result.user_model is not None:
        usage = result.user_usage
        spent = f"{usage.model_calls} calls, {usage.total_tokens:,} tokens"
        console.print(f"[dim]simulated users {escape(result.user_model)}: {spent}[/dim]")
    if result.judge is not None:
        usage = result.judge_usage
        spent = f"{usage.model_calls} calls, {usage.total_tokens:,} tokens"
        console.print(f"[dim]judge {escape(result.judge)}: {spent}[/dim]")
    categories = result.categories()
    if len(result.scenarios) > 1:
        _print_overview(console, result, categories)
    console.print(f"checks passed: {checks_line(result.check_counts())}")
    verdict = "[green]PASS[/green]" if result.verdict(min_pass) else "[red]FAIL[/red]"
    ruled = [scenario for scenario in result.scenarios if scenario.policy is not None]
    line = f"{verdict} {result.runs_passed}/{result.runs} runs passed ({_percent(result.pass_rate)})"
    if len(ruled) < len(result.scenarios):
        line += f"; minimum {_percent(min_pass)}"
        if ruled:
            share = _percent(result.unruled_pass_rate() or 0.0)
            line += f" of the runs of scenarios without a pass policy ({share})"
    if ruled:
        met = sum(scenario.passed for scenario in ruled)
        line += f"; {met}/{len(ruled)} scenario(s) met their pass policy"
    console.print(line)


def _print_overview(
    console: Console, result: EvalResult, categories: dict[str, tuple[int, int, int]]
) -> None:
    """One line per scenario, then (when the scenarios name categories) the pass rate per category."""
    table = Table(title=f"{len(result.scenarios)} scenarios", box=box.SIMPLE_HEAD)
    table.add_column("scenario", overflow="fold", ratio=3)
    table.add_column("category", overflow="fold", ratio=1)
    table.add_column("runs passed", justify="right", no_wrap=True)
    table.add_column("pass", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for scenario in result.scenarios:
        rate = f"{scenario.runs_passed}/{len(scenario.runs)}"
        verdict = f"{'passed' if scenario.passed else 'failed'} ({scenario.stability})"
        table.add_row(
            escape(scenario.scenario.name),
            escape(scenario.scenario.category or "-"),
            rate if scenario.runs_passed == len(scenario.runs) else f"[red]{rate}[/red]",
            _policy(scenario),
            verdict if scenario.passed else f"[red]{verdict}[/red]",
        )
    console.print(table)
    if set(categories) == {""}:
        return
    passed_per_category = result.categories_passed()
    table = Table(title="pass rate per category", box=box.SIMPLE_HEAD)
    for heading in ("category", "scenarios passed", "runs passed", "rate"):
        table.add_column(heading, justify="left" if heading == "category" else "right", no_wrap=True)
    for category, (count, passed, runs) in categories.items():
        rate = _percent(passed / runs if runs else 0.0)
        table.add_row(
            escape(category or "-"), f"{passed_per_category[category]}/{count}", f"{passed}/{runs}", rate
        )
    console.print(table)


def _policy(scenario: ScenarioResult) -> str:
    """``all``, ``majority`` or ``≥N``, with the runs that needs (``majority 2/3``)."""
    policy = scenario.policy
    if policy is None:
        return "-"
    named = f"≥{policy}" if isinstance(policy, int) else policy
    return f"{named} ({scenario.needed}/{len(scenario.runs)})"


def _print_scenario(console: Console, result: EvalResult, scenario: ScenarioResult) -> None:
    title = (
        f"{escape(scenario.scenario.name)} · flow {escape(scenario.flow)} · model {escape(result.model)} · "
        f"{len(scenario.runs)} run(s)"
    )
    rows: list[tuple[str, ...]] = []
    for index, turn in enumerate(scenario.scenario.turns, 1):
        records = scenario.turns_at(index)
        passed = sum(record.passed for record in records)
        rate = f"{passed}/{len(records)} {_percent(scenario.turn_pass_rate(index))}"
        worst = scenario.most_failed(index)
        timing = Timing.of([record.seconds for record in records])
        calls = sum(record.usage.model_calls for record in records) / len(records) if records else 0
        rows.append((
            str(index), escape(turn.said), rate if passed == len(records) else f"[red]{rate}[/red]",
            *_seconds(timing), f"{calls:g}", escape(f"{worst[0]} ({worst[1]}×)") if worst else "",
        ))  # fmt: skip
    # No vertical rules, and the short columns never cut (their width is their widest cell): the
    # table fits 80 columns (a log file), the messages and failures take what is left, and it grows
    # on a wide terminal. Calls are a mean over the runs: "1", or "1.5" when runs differ.
    table = Table(title=title, box=box.SIMPLE_HEAD)
    fixed = {"#": 0, "passed": 2, "median s": 3, "p90 s": 4, "max s": 5, "calls": 6}
    widths = {
        heading: max([len(heading), *(len(Text.from_markup(row[column]).plain) for row in rows)])
        for heading, column in fixed.items()
    }
    # What is left after the short columns and each column's padding (3 a column, 2 at the edges).
    left = console.width - sum(widths.values()) - 3 * (len(fixed) + 2) - 2
    saying = max(len(Text.from_markup(row[1]).plain) for row in rows) if rows else 4
    user = max(8, min(saying, 40, left * 2 // 3))
    table.add_column("#", justify="right", no_wrap=True, min_width=widths["#"])
    table.add_column("user", overflow="ellipsis", no_wrap=True, width=user)
    for heading in ("passed", "median s", "p90 s", "max s", "calls"):
        table.add_column(
            heading,
            justify="left" if heading == "passed" else "right",
            no_wrap=True,
            min_width=widths[heading],
        )
    failures = max((len(row[7]) for row in rows), default=0)
    table.add_column("failed most", overflow="fold", min_width=max(8, min(left - user, failures)))
    for row in rows:
        table.add_row(*row)
    if scenario.scenario.goal is not None:
        table = goal_table(title, scenario)
    console.print(table)
    runs = f"{scenario.runs_passed}/{len(scenario.runs)} ({_percent(scenario.pass_rate)})"
    if scenario.policy is not None:
        outcome = "met" if scenario.passed else "[red]not met[/red]"
        runs += f"; pass: {_policy(scenario)} {outcome}, {scenario.stability}"
    console.print(f"  runs passed     {runs}")
    console.print(f"  checks passed   {checks_line(scenario.check_counts())}")
    timing, later = scenario.timing(), scenario.timing(skip_first=True)
    if timing is not None:
        median, p90, slowest = _seconds(timing)
        after = f" ({later.median:.2f}s after the first)" if later else ""
        console.print(f"  turn time       median {median}s{after}, p90 {p90}s, max {slowest}s")
    usage = scenario.usage()
    counted = f"{_count(usage.model_calls, 'model call')}, {_count(usage.tool_calls, 'tool call')}"
    console.print(f"  usage           {counted}")
    console.print(
        f"  tokens          {usage.total_tokens:,} ({usage.input_tokens:,} in, {usage.output_tokens:,} out)"
    )


def goal_table(title: str, scenario: ScenarioResult) -> Table:
    """A simulated user's runs: a row per run with its turn count and how the conversation ended."""
    table = Table(title=f"{title} · goal", box=box.SIMPLE_HEAD)
    table.add_column("run", justify="right", no_wrap=True)
    table.add_column("passed", no_wrap=True)
    table.add_column("turns", justify="right", no_wrap=True)
    table.add_column("calls", justify="right", no_wrap=True)
    table.add_column("ended", overflow="fold", min_width=20, ratio=3)
    for run in scenario.runs:
        ended = next((c for t in run.turns for c in t.checks if c.name == "goal"), None)
        failed = [c.name for t in run.turns for c in t.failures if c.name != "goal"]
        note = (ended.note if ended is not None else "") + (
            f" (failed: {', '.join(failed)})" if failed else ""
        )
        calls = sum(turn.usage.model_calls for turn in run.turns)
        table.add_row(
            str(run.index),
            "yes" if run.passed else "[red]no[/red]",
            str(len(run.turns)),
            str(calls),
            escape(note),
        )
    return table


def write_report(result: EvalResult, path: Path, *, coverage: Coverage | None = None) -> None:
    """The whole result as JSON: per run, per turn, every failed check with expected and actual (and
    what the suites covered of each flow, when measured)."""
    document = result.as_json()
    if coverage is not None:
        document["coverage"] = coverage.as_json()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


def checks_line(counts: tuple[int, int]) -> str:
    """``N/M (P%)``: checks passed of checks scored, to a tenth of a percent (a field accuracy)."""
    passed, scored = counts
    return f"{passed}/{scored} ({passed / scored if scored else 0.0:.1%})"


def _seconds(timing: Timing | None) -> tuple[str, str, str]:
    if timing is None:
        return ("-", "-", "-")
    return (f"{timing.median:.2f}", f"{timing.p90:.2f}", f"{timing.max:.2f}")


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'' if number == 1 else 's'}"


def _percent(rate: float) -> str:
    return f"{rate:.0%}"
