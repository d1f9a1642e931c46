"""The flow and model the load test serves: each turn makes 2 model calls and runs 1 tool.

Served with ``picoflow serve --flows bench.load_app:FLOWS --model python:bench.load_app:model``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from picoflow import Flow, Step, stay, tool
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel


class Ledger(Step):
    """Record the number of every message the user sends."""

    @tool
    def record(self, n: int = Field(ge=1)) -> Any:
        """Record message number n."""
        self.state["seen"] = [*self.state.get("seen", []), n]
        return stay(f"recorded {n}")


class LoadFlow(Flow):
    name = "load"
    steps = [Ledger]


FLOWS = [LoadFlow]


def answer(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.role == "user":  # "message 7" (or "message 7 again") -> record(7)
        return ToolCall("record", {"n": int(last.content.split()[1])})
    return f"ok, {last.content}"


def model() -> FunctionModel:
    return FunctionModel(answer, name="function:load")
