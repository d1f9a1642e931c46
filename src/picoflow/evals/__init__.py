"""Measure how often a flow behaves: play YAML scenarios against a model, run after run.

```python
from picoflow.evals import load_scenarios, run_eval

scenarios = load_scenarios("src/picoflow_demos/scenarios/orders.yaml")
result = await run_eval(scenarios, [OrdersFlow], model="local", runs=5)
print(result.pass_rate, result.scenarios[0].turn_pass_rate(1))
```

``picoflow eval`` is the same from the command line, with a table and a JSON report. A scenario
may give a ``goal:`` in place of ``turns:``: a model plays its user (``user_model=``). Every model
answer may be recorded (``record=``) and a run replayed from the recording with no model
(``replay=``).
"""

from picoflow.evals.checks import Check
from picoflow.evals.judge import Judge, Verdict
from picoflow.evals.loading import load_scenarios
from picoflow.evals.recording import Recorder, Recording, ReplayDiverged, Replayer
from picoflow.evals.results import EvalResult, RunRecord, ScenarioResult, Timing, TurnRecord
from picoflow.evals.runner import SCRIPTED, run_eval
from picoflow.evals.scenario import Expectations, Goal, GoalDone, Scenario, ScenarioError, Turn
from picoflow.evals.simulator import SimulatedUser, write_transcripts

__all__ = [
    "SCRIPTED",
    "Check",
    "EvalResult",
    "Expectations",
    "Goal",
    "GoalDone",
    "Judge",
    "Recorder",
    "Recording",
    "ReplayDiverged",
    "Replayer",
    "RunRecord",
    "Scenario",
    "ScenarioError",
    "ScenarioResult",
    "SimulatedUser",
    "Timing",
    "Turn",
    "TurnRecord",
    "Verdict",
    "load_scenarios",
    "run_eval",
    "write_transcripts",
]
