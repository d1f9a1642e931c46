"""``picoflow flows``, ``picoflow graph`` and the boundary of ``picoflow eval`` (its scenarios are
played in tests/evals/test_cli_eval.py)."""

from __future__ import annotations

from pathlib import Path

import picoflow_demos

from .support import invoke

ORDERS_SCENARIOS = Path(picoflow_demos.__file__).parent / "scenarios" / "orders.yaml"


def test_flows_lists_the_demo_flows() -> None:
    result = invoke("flows")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(
        line.startswith("│ hotel ") and "Explore, Present, Compare, HotelQuestions, Goodbye" in line
        for line in lines
    )
    assert any(line.startswith("│ orders ") for line in lines)
    assert any(line.startswith("│ products ") for line in lines)
    assert any(line.startswith("│ travel ") and "Planner, Hotels, Events, Weather" in line for line in lines)


def test_graph_prints_mermaid_derived_from_the_code() -> None:
    result = invoke("graph", "hotel", "--step", "Compare")
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        "flowchart TD",
        "    start((start))",
        '    Explore["Explore"]',
        '    Present["Present"]',
        '    Compare["Compare"]',
        '    HotelQuestions{{"HotelQuestions"}}',
        '    Goodbye(["Goodbye"])',
        "    start --> Explore",
        "    Explore -->|on_complete| Present",
        "    Explore -->|goodbye| Goodbye",
        "    Explore -.->|digression| HotelQuestions",
        "    HotelQuestions -.->|resume| Explore",
        "    Present -->|goodbye, book| Goodbye",
        "    Present -->|show_list| Present",
        "    Present -->|compare| Compare",
        "    Present -->|correction| Explore",
        "    Compare -->|goodbye, book| Goodbye",
        "    Compare -->|show_list| Present",
        "    Compare -->|compare| Compare",
        "    Compare -->|correction| Explore",
        "    classDef current fill:#fde68a,stroke:#b45309,stroke-width:2px",
        "    class Compare current",
    ]
    unknown = invoke("graph", "nope")
    assert (
        unknown.exit_code == 1
        and "no flow named 'nope'; known: hotel, orders, products, travel" in unknown.output
    )


def test_graph_refuses_a_step_the_flow_does_not_have() -> None:
    result = invoke("graph", "hotel", "--step", "Checkout")
    assert result.exit_code == 1
    assert (
        "hotel has no step 'Checkout'; its steps: Explore, Present, Compare, HotelQuestions, Goodbye"
        in result.output
    )
    bad_flows = invoke("graph", "hotel", "--flows", "no_such_module:Flow")
    assert bad_flows.exit_code == 1 and "cannot import no_such_module" in bad_flows.output


def test_eval_says_in_one_line_why_it_cannot_start_or_report(tmp_path: Path) -> None:
    for args, problem in [
        ([str(tmp_path / "none.yaml")], "no such file or folder"),
        ([str(ORDERS_SCENARIOS), "--store", "mysql://x"], "unknown session store 'mysql'"),
        ([str(ORDERS_SCENARIOS), "--judge", "nowhere:judge"], "unknown model provider 'nowhere'"),
        ([str(ORDERS_SCENARIOS), "--flows", "no_such_module:Flow"], "cannot import no_such_module"),
    ]:
        bad = invoke("eval", *args, "--model", "scripted")
        assert bad.exit_code == 2 and problem in bad.output, bad.output
    # A report that cannot be written is said after the result, not as a traceback.
    unwritable = invoke("eval", str(ORDERS_SCENARIOS), "--model", "scripted", "--report", str(tmp_path))
    assert unwritable.exit_code == 2
    assert "PASS" in unwritable.output and f"cannot write the report {tmp_path}" in unwritable.output
    assert "Traceback" not in unwritable.output
