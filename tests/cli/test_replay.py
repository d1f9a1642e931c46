"""``picoflow replay`` on a store ``picoflow eval --store`` recorded (the orders demo's scenario):
no difference and exit 0 unchanged, a divergence and exit 1 after a prompt change, the report as
JSON, and one-line errors (exit 2) that leave the store as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from picoflow.replay import ReplayReport
from picoflow_demos.orders import flow as orders_flow
from replay_support import ENV, SCENARIOS, dump

from .support import invoke


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    played = invoke("eval", str(SCENARIOS / "orders.yaml"), "--model", "scripted", "--store", url)
    assert played.exit_code == 0, played.output
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PICOFLOW_ORDERS_DB", str(tmp_path / "replay-orders.sqlite3"))
    return url


def test_replay_of_unchanged_code_prints_no_difference_and_exits_0(store: str) -> None:
    support = invoke("sessions", "list", "--store", store, "--status", "completed", "--wide").output.split()
    session_id = support[support.index("orders") - 1]
    result = invoke("replay", session_id, "--store", store)
    assert result.exit_code == 0, result.output
    assert result.output == (
        "replay: no fallback model; tools run; approval-gated tools never run\n"
        f"same {session_id} (orders): 13 turns, 13 same\n"
        "SAME 1/1 sessions replayed as recorded\n"
    )


def test_replay_after_a_prompt_change_names_the_turn_and_exits_1(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = orders_flow.Support.prompt
    monkeypatch.setattr(orders_flow.Support, "prompt", lambda self: "Answer tersely.\n" + original(self))
    result = invoke("replay", "--store", store, "--flow", "orders", "--status", "completed")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    session_id = lines[1].split()[1]
    assert lines == [
        "replay: no fallback model; tools run; approval-gated tools never run",
        f"diverged {session_id} (orders): 13 turns, 1 diverged, 12 not replayed",
        '  turn 1 "Hi! What\'s the status of order 40006?": diverged',
        "    diverged at: step Support: the system prompt",
        "DIFFERS 0/1 sessions replayed as recorded",
    ]
    as_json = invoke("replay", session_id, "--store", store, "--json")
    assert as_json.exit_code == 1
    report = ReplayReport.model_validate_json(as_json.output)
    assert [(t.turn, t.status, t.diverged) for t in report.sessions[0].turns][:2] == [
        (1, "diverged", "step Support: the system prompt"),
        (2, "not_replayed", None),
    ]


def test_what_cannot_be_replayed_ends_in_one_line_with_exit_2(store: str, tmp_path: Path) -> None:
    before = dump(store)
    unknown = invoke("replay", "zzz", "--store", store)
    assert (unknown.exit_code, unknown.output) == (
        2,
        "error: no session zzz in this store: `picoflow sessions list` shows them "
        "(is --store the right one?)\n",
    )
    flow = invoke("replay", "--store", store, "--flow", "nope")
    assert (flow.exit_code, flow.output) == (
        2,
        "error: no flow named 'nope' among the flows given "
        "(known: hotel, orders, products, travel, invoice)\n",
    )
    missing = tmp_path / "elsewhere.sqlite3"
    absent = invoke("replay", "--store", f"sqlite:///{missing}")
    assert absent.exit_code == 2 and absent.output.startswith(f"error: no session store at {missing}")
    assert not missing.exists()
    assert dump(store) == before
