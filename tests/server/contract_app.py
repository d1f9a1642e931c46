"""What the HTTP contract test serves with ``picoflow serve``.

``ContractFlow`` with ``model``: a flow of two steps and a model that answers every turn from the
user's words, so that whatever a fuzzer sends, the server's own answers are what is under test.

    picoflow serve --flows server.contract_app:ContractFlow --model python:server.contract_app:model

The demos' flows with ``unreliable_model``: a model that answers some turns and fails others, as
real ones do, so that the fuzzer also meets every way a turn can fail once it started.

    picoflow serve --model python:server.contract_app:unreliable_model
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
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


# --- a model that fails some turns --------------------------------------------------------------------

FAILURES = 8
"""Of every ``FAILURES`` kinds of turn (by a digest of the step and the user's message), one gets
only empty answers (502: no acceptable answer), one a model that raises (502: an unusable answer)
and one a model that cannot be reached (503, with Retry-After); the others a usable answer."""


class Unreachable(ConnectionError):
    """The model's provider cannot be reached."""


def _digest(*parts: str) -> int:
    """The same number for the same words in every process (``hash`` is salted per process)."""
    return int.from_bytes(hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).digest()[:8])


def _said(request: ModelRequest) -> str:
    """What the user said last: the turn's message, the same over every attempt of the turn."""
    return next((message.content for message in reversed(request.messages) if message.is_from_user), "")


async def _unreliable(request: ModelRequest) -> Any:
    said = _said(request)
    kind = _digest(request.step or "", said) % FAILURES
    if kind == 0:
        return ""  # every attempt: the step gives up (AttemptsExhausted)
    if kind == 1:
        raise ValueError("the model's reply is not valid JSON")  # ModelMisbehaved
    if kind == 2:
        raise Unreachable("connection refused")  # ModelError: an outage
    if request.output is not None:
        schema = request.output.schema
        return json.dumps(_instance(schema, schema.get("$defs", {}), said, ""))
    return f"You said {len(said)} characters."


def _instance(schema: Mapping[str, Any], defs: Mapping[str, Any], said: str, where: str) -> Any:
    """A value ``schema`` accepts, chosen by a digest of the user's words and where it goes, so that
    different messages take the flows down different paths (an enum's values, an anyOf's branches)."""
    choice = _digest(said, where)
    if "$ref" in schema:
        return _instance(defs[schema["$ref"].rpartition("/")[2]], defs, said, where)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][choice % len(schema["enum"])]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branches = schema[key]
            return _instance(branches[choice % len(branches)], defs, said, where)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[choice % len(kind)]
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: _instance(properties[name], defs, said, f"{where}.{name}") for name in properties}
    if kind == "array":
        count = max(schema.get("minItems", 0), choice % 3)
        count = min(count, schema.get("maxItems", count))
        return [_instance(schema.get("items", {}), defs, said, f"{where}[{index}]") for index in range(count)]
    if kind == "integer":
        low, high = schema.get("minimum", 0), schema.get("maximum", 40)
        return low + choice % (high - low + 1)
    if kind == "number":
        return float(schema.get("minimum", 0) + choice % 100)
    if kind == "boolean":
        return choice % 2 == 0
    if kind == "null":
        return None
    if schema.get("format") == "date":
        return f"2027-08-{1 + choice % 28:02d}"
    # Text: the user's own words (what a quote must be), as long as the schema lets it be.
    return said[: schema.get("maxLength", len(said))]


def unreliable_model() -> FunctionModel:
    return FunctionModel(_unreliable, name="function:unreliable")
