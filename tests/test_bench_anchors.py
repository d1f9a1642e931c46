"""bench/anchors.py and bench/overhead.py play the turn they time: each side answers what the
script says, in a new conversation and in one that goes on, and a framework that is not installed
is skipped with the line that says how to install it. The rival frameworks are not picoflow's
dependencies, so only picoflow and the hand-written loop run here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"picoflow_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


anchors = load("anchors")


@pytest.mark.parametrize("side", ["hand_side", "picoflow_side"])
async def test_a_side_answers_a_new_conversation_and_one_that_goes_on(side: str) -> None:
    turn = getattr(anchors, side)()
    reply, session = await turn(None)
    assert reply == anchors.ANSWER
    again, same = await turn(session)
    assert (again, same) == (anchors.ANSWER, session)


async def test_the_hand_loop_tells_the_model_the_field_and_keeps_the_conversation() -> None:
    model = anchors.HandStand()
    sessions: dict[int, list[dict[str, object]]] = {}
    assert await anchors.hand_loop(model, anchors.QUESTION, "C-1", sessions) == anchors.ANSWER
    (conversation,) = sessions.values()
    roles = [message["role"] for message in conversation]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    refused, found = conversation[3]["content"], conversation[5]["content"]
    assert str(refused).startswith("Invalid arguments: since:")
    assert found == '[{"id": 2, "status": "refunded"}, {"id": 3, "status": "refunded"}]'


async def test_the_measurements_run_on_the_sides_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(anchors, "settle", lambda: None)  # no gc.freeze in the test process
    sides = {anchors.HAND: anchors.hand_side(), "picoflow": anchors.picoflow_side()}
    samples = await anchors.per_turn(sides, turns=4, block=2)
    assert {name: len(values) for name, values in samples.items()} == {anchors.HAND: 4, "picoflow": 4}
    rates = await anchors.throughput(sides, sessions=3, turns_each=2, rounds=1)
    assert all(rate > 0 for rate in rates.values())
    grown = await anchors.growth(sides, conversations=1, length=3)
    assert {name: len(series) for name, series in grown.items()} == {anchors.HAND: 3, "picoflow": 3}


def test_a_missing_framework_is_skipped_with_the_requirements_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing() -> None:
        raise ModuleNotFoundError("No module named 'langgraph'", name="langgraph")

    monkeypatch.setattr(
        anchors, "SIDES", {anchors.HAND: (anchors.hand_side, None), "LangGraph": (missing, "x")}
    )
    sides, versions = anchors.build_sides()
    assert list(sides) == [anchors.HAND]
    assert versions == {}
    assert capsys.readouterr().out == (
        "LangGraph skipped (langgraph is not installed): pip install -r bench/requirements-anchors.txt\n"
    )
