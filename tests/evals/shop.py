"""A small flow the eval tests talk to: a basket, a checkout, and a goodbye."""

from __future__ import annotations

import os

from picoflow import Direct, Flow, Go, Step, TerminateStep, ToolError, direct, go, tool
from picoflow.models import FunctionModel


class Shop(Step):
    """Take the customer's order."""

    @tool
    def add(self, item: str, quantity: int = 1) -> Direct:
        """Add an item to the basket."""
        if item == "unicorn":
            raise ToolError("We do not sell unicorns.")
        basket = [*self.state.get("basket", []), {"item": item, "quantity": quantity}]
        return direct(f"Added {quantity} {item}.").with_state(basket=basket)

    @tool
    def checkout(self) -> Go:
        """Pay for the basket."""
        return go(Paid).with_state(items=len(self.state.get("basket", [])), note=os.environ.get("SHOP_NOTE"))


class Paid(TerminateStep):
    """Thank the customer."""


class ShopFlow(Flow):
    name = "shop"
    steps = [Shop, Paid]


def approving() -> FunctionModel:
    """A judge that passes every reply (for ``--judge python:tests.evals.shop:approving``)."""
    return FunctionModel(lambda request: '{"verdict": "pass", "reason": "Fine."}', name="function:approving")
