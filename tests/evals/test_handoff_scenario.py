"""A scenario asserts a handoff (``events: [{handoff: ...}]``): it holds when the flow hands the
conversation to a person, and fails, showing the turn's events, when it does not."""

from __future__ import annotations

from pathlib import Path

from tests.server.handoff_support import SupportFlow

from picoflow.evals import load_scenarios, run_eval
from picoflow.evals.results import TurnRecord

SCENARIO = """\
name: {name}
flow: support
turns:
  - user: I want to talk to a person
    scripted: [{answer}]
    expect:
      events:
        - handoff: {{reason: {{$regex: "(?i)asked for a person"}}, step: Desk}}
        - said: "(?i)a person will"
"""
ESCALATE = '{tool: escalate, args: {reason: "the customer asked for a person"}}'


async def play(tmp_path: Path, name: str, answer: str) -> TurnRecord:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, answer=answer), encoding="utf-8")
    result = await run_eval(load_scenarios(path), [SupportFlow], model="scripted")
    [scenario] = result.scenarios
    [run] = scenario.runs
    [turn] = run.turns
    return turn


async def test_a_handoff_assertion_holds_and_fails_when_the_flow_does_not_hand_off(tmp_path: Path) -> None:
    handed = await play(tmp_path, "handed", ESCALATE)
    assert handed.passed, handed.failures
    assert [event for event in handed.events if event["kind"] == "handoff"] == [
        {"kind": "handoff", "step": "Desk", "reason": "the customer asked for a person"}
    ]

    kept = await play(tmp_path, "kept", '"I can help you myself."')
    assert not kept.passed
    check = kept.failures[0]
    assert check.name.startswith('events: handoff {"reason": {"$regex": "(?i)asked for a person"}')
    assert (check.note, check.actual) == (
        "no such event in the turn",
        ["→ 1. entered Desk", "  2. said I can help you myself."],
    )
