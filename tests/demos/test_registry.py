"""The demo package as the server and CLI see it: five flows, their prompts and data shipped inside."""

from __future__ import annotations

from importlib import resources

import pytest

import picoflow_demos
from picoflow import FlowEngine
from picoflow.models import ScriptedModel
from picoflow_demos.invoice.flow import ASK_FOR_FILE
from picoflow_demos.orders.flow import HELP as ORDERS_HELP
from picoflow_demos.products.flow import HELP as PRODUCTS_HELP
from picoflow_demos.travel.flow import GREETING as TRAVEL_GREETING
from picoflow_demos.travel.flow import WHICH_CITY

FIRST_MESSAGES = {"hotel": "Hi", "orders": "Hi", "products": "Hi", "travel": "Hi", "invoice": "Hi"}
# Each flow's first model only reads the message; code writes the reply.
FIRST_REPLIES = {
    "hotel": '{"found": []}',
    "orders": '{"orders": [], "status": "any", "since": null, "until": null, "action": "other"}',
    "products": '{"codes": [], "words": [], "action": "other"}',
    "travel": '{"found": []}',
    "invoice": '{"action": "other"}',
}
FIRST_SHOWN = {
    "hotel": (
        "Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in the Portland area?"
    ),
    "orders": ORDERS_HELP,
    "products": PRODUCTS_HELP,
    "travel": f"{TRAVEL_GREETING} {WHICH_CITY}",
    "invoice": ASK_FOR_FILE,
}


def test_flows_register_under_their_names() -> None:
    engine = FlowEngine(picoflow_demos.FLOWS)
    assert [spec.name for spec in engine.flows] == ["hotel", "orders", "products", "travel", "invoice"]
    assert all(flow.model is None for flow in picoflow_demos.FLOWS)  # the engine picks the model
    for spec in engine.flows:
        assert spec.terminate is not None, spec.name
        for step in spec.steps.values():
            assert all(definition.description for definition in step.definitions), step.name


@pytest.mark.parametrize(
    ("package", "name"),
    [
        ("picoflow_demos.hotel", "data/hotels.json"),
        ("picoflow_demos.hotel", "explore.md"),
        ("picoflow_demos.hotel", "present.md"),
        ("picoflow_demos.orders", "support.md"),
        ("picoflow_demos.orders", "refund.md"),
        ("picoflow_demos.products", "products.md"),
        ("picoflow_demos.products", "data/catalog.json"),
        ("picoflow_demos.travel", "planner.md"),
        ("picoflow_demos.travel", "hotels.md"),
        ("picoflow_demos.travel", "events.md"),
        ("picoflow_demos.travel", "itinerary.md"),
        ("picoflow_demos.travel", "data/cities.json"),
        ("picoflow_demos.travel", "data/hotels.json"),
        ("picoflow_demos.travel", "data/events.json"),
        ("picoflow_demos.travel", "data/weather.json"),
        ("picoflow_demos.invoice", "extract.md"),
        ("picoflow_demos.invoice", "review.md"),
        ("picoflow_demos.invoice", "assist.md"),
        ("picoflow_demos.invoice", "save.md"),
        ("picoflow_demos.invoice", "data/samples/expected.json"),
        ("picoflow_demos.invoice", "data/samples/pdf-01.pdf"),
        ("picoflow_demos.invoice", "data/samples/png-01.png"),
    ],
)
def test_prompts_and_data_live_in_the_package(package: str, name: str) -> None:
    assert resources.files(package).joinpath(name).is_file()


@pytest.mark.parametrize("flow", ["hotel", "orders", "products", "travel", "invoice"])
async def test_first_request_is_small_enough_for_a_small_local_model(flow: str) -> None:
    model = ScriptedModel([FIRST_REPLIES[flow]])
    engine = FlowEngine(picoflow_demos.FLOWS, model=model)
    result = await engine.run(flow, FIRST_MESSAGES[flow])
    assert result.ok and result.message == FIRST_SHOWN[flow]
    [request] = model.requests
    assert "{{" not in request.system  # every template slot was filled
    # System prompt, message and tool schemas together stay near 1,000 tokens.
    assert request.text_size() < 4_500, request.text_size()
