"""Flow pictures derived from the code: SVG for the page, Mermaid for the CLI."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import pytest

from picoflow import Flow, FlowEngine, LogicStep, Step, TerminateStep, go, tool
from picoflow.diagram import _CHAR_WIDTH, flow_mermaid, flow_svg
from picoflow_demos import FLOWS
from picoflow_demos.hotel import HotelFlow

SVG = "{http://www.w3.org/2000/svg}"


class Intake(Step):
    """Collect the request."""

    @tool
    def submit(self) -> object:
        """Submit it."""
        return go(Route)


class Route(LogicStep):
    """Decide where it goes."""

    def run_logic(self) -> object:
        return go(Review)


class Review(Step):
    """Review <carefully> & decide."""

    @tool
    def reopen(self) -> object:
        """Back to intake."""
        return go(Intake)

    @tool
    def approve(self) -> object:
        """Approve."""
        return go(Done)


class Done(TerminateStep):
    """Finished."""


class Ticket(Flow):
    name = "ticket.v2"
    steps = [Intake, Route, Review, Done]


def nodes(svg: str) -> dict[str, dict[str, str]]:
    root = ET.fromstring(svg)
    return {g.attrib["data-step"]: g.attrib for g in root.iter(f"{SVG}g") if "data-step" in g.attrib}


def test_svg_is_well_formed_with_the_current_step_highlighted() -> None:
    svg = flow_svg(Ticket.spec(), current="Review", visited=["Intake", "Route", "Review"])
    steps = nodes(svg)
    assert list(steps) == ["Intake", "Route", "Review", "Done"]
    assert steps["Review"]["class"] == "step conversational current visited"
    assert steps["Review"]["aria-current"] == "step"
    assert steps["Intake"]["class"] == "step conversational visited start"
    assert steps["Route"]["class"] == "step logic visited"
    assert steps["Done"]["class"] == "step terminal"
    assert [g for g in steps.values() if "current" in g["class"]] == [steps["Review"]]
    # Descriptions become tooltips, escaped.
    assert "<title>Review &lt;carefully&gt; &amp; decide.</title>" in svg
    edges = {
        (g.attrib["data-source"], g.attrib["data-target"])
        for g in ET.fromstring(svg).iter(f"{SVG}g")
        if "data-source" in g.attrib
    }
    assert edges == {
        ("Intake", "Route"),
        ("Route", "Review"),
        ("Review", "Intake"),
        ("Review", "Done"),
        ("Intake", "Done"),
    }


def test_steps_are_ranked_top_to_bottom_from_the_start() -> None:
    root = ET.fromstring(flow_svg(Ticket.spec()))
    tops = {
        g.attrib["data-step"]: float(rect.attrib["y"])
        for g in root.iter(f"{SVG}g")
        if "data-step" in g.attrib
        for rect in g.iter(f"{SVG}rect")
    }
    assert tops["Intake"] < tops["Route"] < tops["Review"] < tops["Done"]


def test_hotel_diagram_has_every_transition_labelled() -> None:
    svg = flow_svg(HotelFlow.spec(), current="Compare")
    for via in ("on_complete", "correction", "compare", "show_list", "goodbye, book"):
        assert f">{via}</text>" in svg
    assert nodes(svg)["Compare"]["class"].split()[:3] == ["step", "conversational", "current"]


def test_mermaid_text() -> None:
    assert flow_mermaid(Ticket.spec(), current="Route") == (
        "flowchart TD\n"
        "    start((start))\n"
        '    Intake["Intake"]\n'
        '    Route{{"Route"}}\n'
        '    Review["Review"]\n'
        '    Done(["Done"])\n'
        "    start --> Intake\n"
        "    Intake -->|submit| Route\n"
        "    Intake -.->|terminate_session| Done\n"
        "    Route -->|run_logic| Review\n"
        "    Review -->|reopen| Intake\n"
        "    Review -->|approve| Done\n"
        "    classDef current fill:#fde68a,stroke:#b45309,stroke-width:2px\n"
        "    class Route current\n"
    )


class Scout(Step):
    """Look around."""


class Weather(LogicStep):
    """The weather, from code."""

    def run_logic(self) -> object:
        return None


class Planner(Step):
    """Plan."""

    @tool
    async def survey(self) -> str:
        """Send the scouts."""
        answers = await self.run_steps({"north": (Scout, "north"), "sky": (Weather, None)})
        more = await self.batch(Scout, ["east", "west"])
        return str((answers, more))

    @tool
    async def ask_once(self) -> str:
        """One scout."""
        return str(await self.run_step(Scout, "south"))


class Planning(Flow):
    name = "planning"
    steps = [Planner, Scout, Weather, TerminateStep]


def test_sub_steps_are_read_from_the_code_and_drawn_dotted_without_terminate_edges() -> None:
    spec = Planning.spec()
    assert {(t.source, t.target, t.via) for t in spec.sub_steps} == {
        ("Planner", "Scout", "survey"),
        ("Planner", "Weather", "survey"),
        ("Planner", "Scout", "ask_once"),
    }
    # Scout and Weather only ever run as sub-steps: they never end the conversation.
    assert {(t.source, t.target) for t in spec.transitions} == {("Planner", "TerminateStep")}
    svg = ET.fromstring(flow_svg(spec))
    runs = {
        (g.get("data-source"), g.get("data-target"))
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "sub-step"
    }
    assert runs == {("Planner", "Scout"), ("Planner", "Weather")}
    # Side by side, their labels would overlap: they show on hover.
    runs_edges = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "sub-step"]
    assert sorted(t.text or "" for g in runs_edges for t in g.iter(f"{SVG}title")) == [
        "survey runs",
        "survey runs, ask_once runs",
    ]
    assert not [t for g in runs_edges for t in g.iter(f"{SVG}text")]
    mermaid = flow_mermaid(spec)
    assert "    Planner -.->|survey runs, ask_once runs| Scout\n" in mermaid
    assert "    Planner -.->|survey runs| Weather\n" in mermaid


def _text_boxes(svg: str) -> list[tuple[float, float, float, float, str]]:
    """Each ``<text>``'s box (left, right, top, bottom) as the diagram sizes text, and its words."""
    boxes = []
    pattern = r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="(\w+)"[^>]*>([^<]*)</text>'
    for found in re.finditer(pattern, svg):
        x, y, anchor, words = float(found[1]), float(found[2]), found[3], found[4]
        width = len(words) * _CHAR_WIDTH
        left = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
        boxes.append((left, left + width, y - 10, y + 2, words))
    return boxes


@pytest.mark.parametrize("flow", FLOWS, ids=lambda flow: flow.name)
def test_no_two_labels_of_a_demo_flow_overlap(flow: type[Flow]) -> None:
    # Back edges side by side (the invoice flow has three into its Desk) once wrote their labels
    # on one line, over each other.
    boxes = _text_boxes(flow_svg(FlowEngine([flow]).flow(flow.name)))
    assert len(boxes) >= len(FlowEngine([flow]).flow(flow.name).steps)
    clashes = [
        (a[4], b[4])
        for a, b in itertools.combinations(boxes, 2)
        if a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
    ]
    assert clashes == []


def test_a_handoff_step_is_drawn_as_its_own_kind() -> None:
    from picoflow_demos.orders.flow import OrdersFlow

    spec = OrdersFlow.spec()
    assert nodes(flow_svg(spec))["OrdersStaff"]["class"].split()[:2] == ["step", "handoff"]
    assert nodes(flow_svg(spec))["Support"]["class"].split()[:2] == ["step", "conversational"]
    assert '    OrdersStaff[/"OrdersStaff"/]' in flow_mermaid(spec)
