"""Measure how often a flow behaves: play YAML scenarios against a model, run after run.

```python
from picoflow.evals import load_scenarios, run_eval

scenarios = load_scenarios("src/picoflow_demos/scenarios/orders.yaml")
result = await run_eval(scenarios, [OrdersFlow], model="local", runs=5)
print(result.pass_rate, result.scenarios[0].turn_pass_rate(1))
```

``picoflow eval`` is the same from the command line, with a table and a JSON report.
"""

from picoflow.evals.checks import Check
from picoflow.evals.judge import Judge, Verdict
from picoflow.evals.loading import load_scenarios
from picoflow.evals.results import EvalResult, RunRecord, ScenarioResult, Timing, TurnRecord
from picoflow.evals.runner import SCRIPTED, run_eval
from picoflow.evals.scenario import Expectations, Scenario, ScenarioError, Turn

__all__ = [
    "SCRIPTED",
    "Check",
    "EvalResult",
    "Expectations",
    "Judge",
    "RunRecord",
    "Scenario",
    "ScenarioError",
    "ScenarioResult",
    "Timing",
    "Turn",
    "TurnRecord",
    "Verdict",
    "load_scenarios",
    "run_eval",
]
