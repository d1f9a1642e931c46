"""What an eval measured: every turn of every run, and the rates and timings drawn from them.

A turn passes when none of its checks failed (unscored judge criteria do not count either way); a
run passes when every turn passed. ``EvalResult.as_json()`` is the ``--report`` document.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from picoflow.evals.checks import Check
from picoflow.evals.scenario import PassPolicy, Scenario, runs_needed
from picoflow.usage import Usage

__all__ = ["EvalResult", "RunRecord", "ScenarioResult", "Timing", "TurnRecord"]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn of one run."""

    index: int
    """1-based position in the scenario."""
    user: str
    reply: str
    step: str | None
    completed: bool
    seconds: float
    """Wall time of ``engine.run`` (judging excluded)."""
    usage: Usage
    checks: tuple[Check, ...]
    error: str | None = None
    """``kind: message`` of a failed turn."""
    answers: tuple[str, ...] = ()
    """What the model answered this turn, as the transcript keeps it ("Explore: {...}"): where a
    check failed, the reading the flow was given."""
    verdicts: tuple[Mapping[str, Any], ...] = ()
    """What grounding decided of each item the turn's readings held (``Verdict.to_json()``, with
    the step): kept, dropped by a named rule, or repaired."""
    events: tuple[Mapping[str, Any], ...] = ()
    """What happened in the turn, as records (``picoflow.evals.events``), its reply last."""
    began_in: str | None = None
    """The step the turn began in (the flow's start step for the first)."""

    @property
    def passed(self) -> bool:
        return all(check.status != "failed" for check in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.status == "failed"]

    @property
    def check_counts(self) -> tuple[int, int]:
        """Checks passed, and checks scored (unscored judge criteria count in neither)."""
        scored = [check for check in self.checks if check.status != "unscored"]
        return sum(check.status == "passed" for check in scored), len(scored)

    def as_json(self) -> dict[str, Any]:
        return {
            "turn": self.index,
            "user": self.user,
            "passed": self.passed,
            "reply": self.reply,
            "step": self.step,
            "completed": self.completed,
            "seconds": round(self.seconds, 3),
            "model_calls": self.usage.model_calls,
            "tool_calls": self.usage.tool_calls,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "error": self.error,
            "model_answers": list(self.answers),
            "verdicts": [dict(verdict) for verdict in self.verdicts],
            "began_in": self.began_in,
            "events": [dict(record) for record in self.events],
            "failed": [_check_json(check) for check in self.failures],
            "unscored": [_check_json(check) for check in self.checks if check.status == "unscored"],
            "checks": [{"name": check.name, "status": check.status} for check in self.checks],
        }


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One play of a scenario, in a fresh session."""

    index: int
    session_id: str | None
    turns: tuple[TurnRecord, ...]
    transcript: tuple[Mapping[str, Any], ...] = ()
    """A simulated user's run (``goal:``): who said what, in order (``role``, ``text``, ``turn``;
    the assistant's ``step``; ``last: true`` on the message the user said was their last)."""

    @property
    def passed(self) -> bool:
        return all(turn.passed for turn in self.turns)

    def as_json(self) -> dict[str, Any]:
        data = {
            "run": self.index,
            "passed": self.passed,
            "session_id": self.session_id,
            "turns": [turn.as_json() for turn in self.turns],
        }
        if self.transcript:
            data["transcript"] = [dict(entry) for entry in self.transcript]
        return data


@dataclass(frozen=True, slots=True)
class Timing:
    """Turn durations in seconds."""

    count: int
    median: float
    p90: float
    max: float

    @staticmethod
    def of(seconds: Sequence[float]) -> Timing | None:
        if not seconds:
            return None
        ordered = sorted(seconds)
        # Nearest rank: with 5 runs the p90 is the slowest, not a value between two runs.
        p90 = ordered[max(0, -(-9 * len(ordered) // 10) - 1)]
        return Timing(len(ordered), statistics.median(ordered), p90, ordered[-1])

    def as_json(self) -> dict[str, Any]:
        return {"count": self.count, "median": _r(self.median), "p90": _r(self.p90), "max": _r(self.max)}


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """Every run of one scenario."""

    scenario: Scenario
    flow: str
    runs: tuple[RunRecord, ...]

    @property
    def runs_passed(self) -> int:
        return sum(run.passed for run in self.runs)

    @property
    def pass_rate(self) -> float:
        return self.runs_passed / len(self.runs) if self.runs else 0.0

    @property
    def policy(self) -> PassPolicy | None:
        """The scenario's ``pass:`` (None: its runs count toward the eval's minimum share)."""
        return self.scenario.pass_policy

    @property
    def needed(self) -> int:
        """Runs that must pass: by the policy, or all of them."""
        return runs_needed(self.policy or "all", len(self.runs))

    @property
    def passed(self) -> bool:
        """Whether enough runs passed: its policy's number, or every run without one."""
        return bool(self.runs) and self.runs_passed >= self.needed

    @property
    def stability(self) -> str:
        """``stable`` (every run passed), ``failing`` (none did) or ``flaky`` (some did)."""
        if self.runs_passed == len(self.runs):
            return "stable"
        return "failing" if self.runs_passed == 0 else "flaky"

    def turns_at(self, index: int) -> list[TurnRecord]:
        """Turn ``index`` (1-based) of every run."""
        return [run.turns[index - 1] for run in self.runs if len(run.turns) >= index]

    def turn_pass_rate(self, index: int) -> float:
        turns = self.turns_at(index)
        return sum(turn.passed for turn in turns) / len(turns) if turns else 0.0

    def most_failed(self, index: int) -> tuple[str, int] | None:
        """The check of turn ``index`` that failed in the most runs, and in how many."""
        counts = Counter(check.name for turn in self.turns_at(index) for check in turn.failures)
        return counts.most_common(1)[0] if counts else None

    def timing(self, *, skip_first: bool = False) -> Timing | None:
        return Timing.of([turn.seconds for run in self.runs for turn in run.turns[1 if skip_first else 0 :]])

    def check_counts(self) -> tuple[int, int]:
        """Checks passed and checks scored over every turn of every run: how much of what was
        expected held, finer than whole turns (one matcher per extracted field gives field accuracy)."""
        return _summed(turn.check_counts for run in self.runs for turn in run.turns)

    def usage(self) -> Usage:
        total = Usage()
        for run in self.runs:
            for turn in run.turns:
                total.add(turn.usage)
        return total

    def as_json(self) -> dict[str, Any]:
        timing, later = self.timing(), self.timing(skip_first=True)
        return {
            "name": self.scenario.name,
            "category": self.scenario.category,
            "source": self.scenario.source,
            "flow": self.flow,
            "runs_passed": self.runs_passed,
            "run_pass_rate": _r(self.pass_rate),
            "pass": self.policy,
            "runs_needed": self.needed,
            "passed": self.passed,
            "stability": self.stability,
            "turns": [
                {
                    "turn": index,
                    "user": turn.said,
                    "pass_rate": _r(self.turn_pass_rate(index)),
                    "most_failed": _most_failed_json(self.most_failed(index)),
                    "timing": _timing_json(Timing.of([t.seconds for t in self.turns_at(index)])),
                }
                for index, turn in enumerate(self.scenario.turns, 1)
            ],
            "timing": _timing_json(timing),
            "timing_after_first_turn": _timing_json(later),
            "usage": self.usage().as_dict(),
            **({"goal": self.scenario.goal.model_dump(mode="json")} if self.scenario.goal else {}),
            "runs": [run.as_json() for run in self.runs],
        }


@dataclass(slots=True)
class EvalResult:
    """The whole eval: what was run with what, and every scenario's runs."""

    model: str
    judge: str | None
    runs_per_scenario: int
    scenarios: list[ScenarioResult] = field(default_factory=list)
    judge_usage: Usage = field(default_factory=Usage)
    user_model: str | None = None
    """The model that played the simulated users (``goal:`` scenarios), if any did."""
    user_usage: Usage = field(default_factory=Usage)

    @property
    def runs(self) -> int:
        return sum(len(result.runs) for result in self.scenarios)

    @property
    def runs_passed(self) -> int:
        return sum(result.runs_passed for result in self.scenarios)

    @property
    def pass_rate(self) -> float:
        """Passed runs over all runs of all scenarios."""
        return self.runs_passed / self.runs if self.runs else 0.0

    def unruled_pass_rate(self) -> float | None:
        """Passed runs over the runs of the scenarios without a ``pass:`` policy (None: there are none)."""
        unruled = [result for result in self.scenarios if result.policy is None]
        runs = sum(len(result.runs) for result in unruled)
        return sum(result.runs_passed for result in unruled) / runs if runs else None

    def verdict(self, min_pass: float) -> bool:
        """Whether the eval passes: every scenario with a ``pass:`` policy meets it, and the runs of
        the others pass in at least the share ``min_pass``."""
        rate = self.unruled_pass_rate()
        ruled = all(result.passed for result in self.scenarios if result.policy is not None)
        return ruled and (rate is None or rate >= min_pass)

    @property
    def unscored(self) -> int:
        """Checks left unscored (judge criteria without a judge, or without a verdict)."""
        return sum(
            check.status == "unscored"
            for result in self.scenarios
            for run in result.runs
            for turn in run.turns
            for check in turn.checks
        )

    def categories(self) -> dict[str, tuple[int, int, int]]:
        """Per category (in the order first met; scenarios without one under ``""``): scenarios,
        runs passed and runs."""
        found: dict[str, tuple[int, int, int]] = {}
        for result in self.scenarios:
            scenarios, passed, runs = found.get(result.scenario.category, (0, 0, 0))
            found[result.scenario.category] = (
                scenarios + 1,
                passed + result.runs_passed,
                runs + len(result.runs),
            )
        return found

    def categories_passed(self) -> dict[str, int]:
        """Per category: the scenarios that passed (by their policy, or every run)."""
        found: dict[str, int] = {}
        for result in self.scenarios:
            category = result.scenario.category
            found[category] = found.get(category, 0) + result.passed
        return found

    def check_counts(self) -> tuple[int, int]:
        """Checks passed and checks scored over every scenario."""
        return _summed(result.check_counts() for result in self.scenarios)

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "judge": self.judge,
            "runs_per_scenario": self.runs_per_scenario,
            "runs": self.runs,
            "runs_passed": self.runs_passed,
            "run_pass_rate": _r(self.pass_rate),
            "categories": {
                category or "-": {
                    "scenarios": count,
                    "scenarios_passed": self.categories_passed()[category],
                    "runs": runs,
                    "runs_passed": passed,
                }
                for category, (count, passed, runs) in self.categories().items()
            },
            "unscored_checks": self.unscored,
            "judge_usage": self.judge_usage.as_dict() if self.judge is not None else None,
            **(
                {"user_model": self.user_model, "user_usage": self.user_usage.as_dict()}
                if self.user_model is not None
                else {}
            ),
            "scenarios": [result.as_json() for result in self.scenarios],
        }


def _summed(counts: Iterable[tuple[int, int]]) -> tuple[int, int]:
    passed = scored = 0
    for turn_passed, turn_scored in counts:
        passed += turn_passed
        scored += turn_scored
    return passed, scored


def _check_json(check: Check) -> dict[str, Any]:
    data: dict[str, Any] = {"name": check.name, "expected": check.expected, "actual": check.actual}
    if check.note:
        data["note"] = check.note
    return data


def _most_failed_json(found: tuple[str, int] | None) -> dict[str, Any] | None:
    return {"name": found[0], "runs": found[1]} if found else None


def _timing_json(timing: Timing | None) -> dict[str, Any] | None:
    return timing.as_json() if timing else None


def _r(value: float) -> float:
    return round(value, 3)
