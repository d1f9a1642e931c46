"""The application the HTTP contract test serves with ``picoflow serve``: a flow of two steps and a
model that answers every turn from the user's words, so that whatever a fuzzer sends, the server's
own answers are what is under test (never a model's failure).

    picoflow serve --flows server.contract_app:ContractFlow --model python:server.contract_app:model
"""

from __future__ import annotations

from typing import Any

from picoflow import Flow, Step, TerminateStep, go, tool
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ToolCall


class Desk(Step):
    """Answer the user."""

    @tool
    def finish(self) -> Any:
        """The user is done."""
        return go(Farewell)


class Farewell(TerminateStep):
    """Say goodbye."""


class ContractFlow(Flow):
    """What the contract test talks to."""

    name = "desk"
    steps = [Desk, Farewell]


async def _answer(request: ModelRequest) -> Any:
    if request.step == "Farewell":
        return "Goodbye!"
    last = request.messages[-1]
    if last.role == "tool":
        return "Done."
    if last.content.strip().casefold() == "bye":
        return ToolCall("finish", {})
    return f"You said {len(last.content)} characters."


def model() -> FunctionModel:
    return FunctionModel(_answer, name="function:contract")
