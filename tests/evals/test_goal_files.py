"""The demos' goal files (``*-goals.yaml``): each loads, holds at least six goals, and names only steps
the flow has and state keys its code writes, so a goal can be done."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import picoflow_demos
from picoflow.evals import load_scenarios
from picoflow.evals.simulator import check_goal_names
from picoflow_demos import FLOWS

SCENARIOS = Path(picoflow_demos.__file__).parent / "scenarios"
SPECS = {flow.spec().name: flow for flow in FLOWS}


@pytest.mark.parametrize("demo", ["hotel", "orders", "travel"])
def test_each_goal_names_real_steps_and_state_keys(demo: str) -> None:
    goals = load_scenarios(SCENARIOS / f"{demo}-goals.yaml")
    assert len(goals) >= 6 and all(goal.goal is not None and not goal.turns for goal in goals)
    # Most goals are done on the state code writes; one a judge decides is the exception.
    judged_only = [g.name for g in goals if g.goal is not None and not g.goal.done.checked_each_turn]
    assert len(judged_only) <= 1, judged_only
    flow = SPECS[demo]
    spec = flow.spec()
    # Every key a state path names is written somewhere in the demo's code (its package), or kept by
    # SlotStep itself (form, known, locale).
    package = Path(inspect.getfile(flow)).parent
    code = "\n".join(path.read_text(encoding="utf-8") for path in package.glob("*.py"))
    for scenario in goals:
        assert scenario.flow == demo and scenario.category
        check_goal_names(scenario, spec)  # raises on a step the flow does not have
        done = scenario.goal.done if scenario.goal is not None else None
        assert done is not None
        for path in done.state:
            for key in path.split(".")[1:]:
                if key.isdigit() or key in ("form", "known", "locale"):
                    continue
                assert re.search(rf"\b{key}\b", code), f"{scenario.name}: {path}: no {key!r} in {package}"
