"""Outcomes are immutable values that can be built anywhere, outside any turn."""

from __future__ import annotations

import dataclasses

import pytest

from picoflow import Reject, Step, direct, go, stay
from picoflow.outcomes import Direct, Go, Stay


class Target(Step):
    """Target."""


def test_builders_return_new_values_in_any_order() -> None:
    base = go(Target)
    a = base.with_state(x=1).with_prompt("p").with_tool_feedback("ok")
    b = base.with_tool_feedback("ok").with_prompt("p").with_state({"x": 1})
    assert a == b and base.state is None and a.target_name == "Target"
    assert go(" Target ").target_name == "Target"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.prompt = "changed"  # type: ignore[misc]
    merged = base.with_state(x=1).with_state({"y": 2}, z=3)
    assert merged.state == {"x": 1, "y": 2, "z": 3}


def test_stay_and_direct_are_plain_values_built_outside_any_turn() -> None:
    assert stay("again") == Stay(feedback="again")
    assert direct({"a": 1}) == Direct(content='{"a":1}', content_type="application/json")
    assert direct("x").target_name is None  # the step that returns it answers
    assert stay() == Stay(feedback="Accepted.")


def test_invalid_values_are_refused() -> None:
    with pytest.raises(ValueError, match="empty name"):
        go("  ")
    with pytest.raises(ValueError, match="type/subtype"):
        go(Target).with_content_type("json")
    with pytest.raises(ValueError, match="reason"):
        Reject("  ")
    assert isinstance(go("Target"), Go)
