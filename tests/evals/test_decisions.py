"""Scenarios with decisions: a turn may approve or deny what the turn before left pending, as a
given caller, and expect what a turn ends waiting for, or the refusal it must get."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from picoflow import Flow, RunContext, Step, tool
from picoflow.evals import SCRIPTED, ScenarioError, load_scenarios, run_eval

PAID: list[str | None] = []


class Till(Step):
    """Refund what the customer asks."""

    refunds: ClassVar[list[str | None]] = PAID

    @tool(
        approval=lambda ctx, args: "staff" if args.amount > 100 else True, approval_summary="Refund ${amount}"
    )
    def refund(self, ctx: RunContext[Any], amount: int) -> str:
        """Refund an amount."""
        PAID.append(ctx.idempotency_key)
        return "refunded"


class TillFlow(Flow):
    name = "till"
    steps = [Till]


SCENARIO = """\
flow: till
caller: {principal: cust-1}
turns:
  - user: refund 250 please
    scripted: [[{tool: refund, args: {amount: 250}}]]
    expect: {pending: {name: refund, args: {amount: 250}}, pending_count: 1}
  - decide: {decision: approve}
    expect: {refused: approval_not_allowed}
  - decide: {decision: approve, reason: receipt checked, caller: {principal: sam, visibilities: [staff]}}
    scripted: ["Refunded."]
    expect: {reply_contains: Refunded, pending_count: 0, tool_called: {name: refund, ok: true}}
  - decide: {decision: deny}
    expect: {pending_count: 0}
"""


async def test_a_scenario_decides_as_its_callers(tmp_path: Path) -> None:
    PAID.clear()
    path = tmp_path / "till.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    result = await run_eval(load_scenarios(path), [TillFlow], model=SCRIPTED)
    (run,) = result.scenarios[0].runs
    assert [(t.user, t.passed) for t in run.turns] == [
        ("refund 250 please", True),
        ("[approve #1]", True),
        ("[approve #1: receipt checked]", True),
        ("[deny #1]", False),
    ]
    assert len(PAID) == 1 and PAID[0] is not None and PAID[0].startswith("apr_")
    (failed,) = run.turns[3].checks
    assert (failed.name, failed.status, failed.actual) == ("decide", "failed", [])


def test_a_turn_is_a_message_or_a_decision(tmp_path: Path) -> None:
    for turn, problem in [
        ("{user: hi, decide: {decision: approve}}", "a turn is a message (user: ...) or a decision"),
        ("{decide: {decision: maybe}}", "decide.decision"),
        ("{decide: {decision: approve, approval: 0}}", "decide.approval"),
    ]:
        path = tmp_path / "bad.yaml"
        path.write_text(f"flow: till\nturns: [{turn}]\n", encoding="utf-8")
        with pytest.raises(ScenarioError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            load_scenarios(path)
