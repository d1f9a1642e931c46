"""The order desk the store benchmarks run: one step that looks an order up, then answers.

Shared by ``bench/long_session.py`` and ``bench/store.py`` (run as scripts, so this folder is on
``sys.path``).
"""

from __future__ import annotations

import re
from typing import Any

from picoflow import Flow, Step, tool
from picoflow.messages import ModelRequest, ToolCall


class Desk(Step):
    """You answer the customer's questions about their orders. Look every order up first."""

    memory = "desk"

    @tool
    def lookup(self, order: int) -> dict[str, Any]:
        """Look an order up by its number."""
        items = [
            {"sku": f"LUM-{order % 97:02d}-{n}", "name": "vibration sensor, 4-20 mA", "qty": n}
            for n in (1, 2)
        ]
        return {"order": order, "status": "shipped", "carrier": "UPS", "placed": "2026-10-03", "items": items}


class DeskFlow(Flow):
    name = "desk"
    steps = [Desk]


def agent(request: ModelRequest) -> ToolCall | str:
    """Looks the order of the question up, then answers."""
    last = request.messages[-1]
    number = int(re.findall(r"\d+", last.content)[0])
    if last.role == "user":
        return ToolCall("lookup", {"order": number})
    return f"Order {number} has shipped with UPS; it left our warehouse on October 3."
