"""Step state keeps JSON values, so every store reads back what a step wrote."""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel

from picoflow import LogicStep, Step, TerminateStep
from picoflow.step import StepState


class Room(BaseModel):
    kind: str
    night: date


def test_state_stores_json_values_and_reads_them_back_typed() -> None:
    raw: dict[str, object] = {}
    state = StepState(raw)
    state["room"] = Room(kind="suite", night=date(2027, 8, 1))
    state.merge({"nights": [date(2027, 8, 1)]})
    assert raw == {"room": {"kind": "suite", "night": "2027-08-01"}, "nights": ["2027-08-01"]}
    assert state.get_as("room", Room) == Room(kind="suite", night=date(2027, 8, 1))
    assert state.get_as("nights", list[date]) == [date(2027, 8, 1)]
    assert state.get_as("missing", Room) is None
    del state["nights"]
    assert list(state) == ["room"] and len(state) == 1


def test_names_namespaces_and_kinds() -> None:
    class Explore(Step):
        """Explore the options."""

        memory = "hotel-explore"

    class Decide(LogicStep):
        pass

    class Bye(TerminateStep):
        pass

    assert Explore.name == "Explore" and Explore.namespace() == "hotel-explore"
    assert Decide.name == "Decide" and Decide.is_logic and not Decide.terminate_tool
    assert Bye.name == "Bye" and Bye.is_terminal and Bye.namespace() == "terminate"
