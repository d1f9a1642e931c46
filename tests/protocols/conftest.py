"""What the protocol tests share: live servers for the hotel demo (scripted), a refund desk whose
refunds wait for approval, and the protocols' own clients (npm packages under ``js/``, installed by
``scripts/test-services.sh``, run offline with the machine's Node).

Keys: ``cust-key`` is principal ``cust-1``, ``other-key`` is ``cust-2``, ``staff-key`` is ``sup-9``
with the ``staff`` role (``tests/server/approvals_support.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.server.approvals_support import (
    CUSTOMER,
    KEYS,
    OTHER,
    STAFF,
    RefundFlow,
    Refunds,
    clock,
    fresh_ledger,
)
from tests.server.support import DeskFlow, DeskModel, serving

from picoflow import FlowEngine
from picoflow.models import ScriptedModel, ToolCall
from picoflow.sessions import MemoryStore
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel.scripted import CONVERSATION, CURRENT_DATE, model_script

__all__ = [
    "CONVERSATION",
    "CUSTOMER",
    "KEYS",
    "OTHER",
    "SMALL_REFUND",
    "STAFF",
    "Refunds",
    "desk_engine",
    "fresh_ledger",
    "hotel_engine",
    "live",
    "node",
    "refund_engine",
]

JS = Path(__file__).parent / "js"
SMALL_REFUND = ToolCall("refund", {"order_id": 40001, "amount": 25.5}, "c1")
"""A refund the customer may approve (up to $100)."""


@pytest.fixture(autouse=True)
def _hotel_today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)


@pytest.fixture(autouse=True)
def _every_test_has_a_fresh_ledger(fresh_ledger: None) -> None:
    """Every protocol test starts and ends with an empty refund ledger (``fresh_ledger``)."""


def hotel_engine(turns: int | None = None) -> tuple[FlowEngine, ScriptedModel]:
    """The hotel demo on the model answers of its scripted conversation (the first ``turns``
    turns' worth, or all of it): play ``CONVERSATION[i].user`` in order."""
    script = (
        model_script() if turns is None else [item for turn in CONVERSATION[:turns] for item in turn.model]
    )
    model = ScriptedModel(script)
    return FlowEngine([HotelFlow], store=MemoryStore(), model=model), model


def refund_engine(script: Sequence[Any]) -> tuple[FlowEngine, ScriptedModel]:
    """The refund desk (flow ``refunds``) on ``script``: ``[SMALL_REFUND]`` proposes a refund that
    waits for the customer's decision; the next answer is the model's reply after it ran."""
    model = ScriptedModel(list(script))
    return FlowEngine([RefundFlow], store=MemoryStore(), model=model, clock=clock), model


def desk_engine() -> FlowEngine:
    """The server tests' help desk (flow ``desk``): "who am I" calls a tool, "table" answers a
    Markdown table through ``direct()``, "down" makes the provider fail (503), "bye" ends."""
    return FlowEngine([DeskFlow], store=MemoryStore(), model=DeskModel())


@asynccontextmanager
async def live(engine: FlowEngine, **settings: Any) -> AsyncIterator[str]:
    """``engine`` served by uvicorn on a free loopback port with the test keys; yields its URL."""
    async with serving(engine, api_keys=KEYS, **settings) as url:
        yield url


def node(script: str, *args: str, stdin: str | None = None, timeout: float = 120) -> Any:
    """Run ``js/<script>`` with Node and return the JSON it prints last; a failure shows its stderr.

    Node runs offline: the packages are in ``js/node_modules``."""
    env = {**os.environ, "NODE_NO_WARNINGS": "1"}
    done = subprocess.run(
        ["node", str(JS / script), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=JS,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"node {script} failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"node {script} printed nothing:\n{done.stderr}"
    return json.loads(lines[-1])
