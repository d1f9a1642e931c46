"""Replaying stored sessions against the current code: yesterday's conversations as a regression
test (``picoflow replay``).

Each session is read from its store, never written to, and played again turn by turn on a fresh
in-memory engine holding the current code of its flow:

* the user's messages are the stored ones (the transcript), and each decision on an approval is
  made again, the same way, by the same principal (with the approvers' roles for staff);
* a model request the recording holds (the same step, system prompt, messages, tools and output,
  compared as the timeline recorded them) gets the recorded answer; any other goes to the
  fallback model given, or, without one, ends that session's replay as ``diverged``, saying what
  differs (the system prompt, message 3 of 5, a tool added...);
* an approval-gated tool never runs: its recorded run in the same turn stands in for it (what the
  model was told, where the conversation went, the reply and the state it left), or the model is
  told it did not run; tools without approval run against the current code, as the flow's own
  code does (their reads see today's data), unless ``run_tools=False``;
* each replayed turn is compared with the recorded one: how it ended, the reply, the step, each
  step's state key by key, the tool calls and the approvals (``ReplayReport``).
"""

from picoflow.replay.replayer import (
    RecordedSession,
    ReplayError,
    load_recorded,
    replay_session,
    replay_sessions,
)
from picoflow.replay.report import (
    Difference,
    ReplayReport,
    SessionReplay,
    TurnReplay,
    replay_schema,
)

__all__ = [
    "Difference",
    "RecordedSession",
    "ReplayError",
    "ReplayReport",
    "SessionReplay",
    "TurnReplay",
    "load_recorded",
    "replay_schema",
    "replay_session",
    "replay_sessions",
]
