"""Pictures of a flow drawn from its code: an SVG for the chat page and Mermaid text for docs.

Both come from ``FlowSpec.transitions`` (and ``sub_steps``, drawn dotted: a step running another
as a sub-step), which the flow builder derives from the ``go(...)`` calls in
each step, so the picture cannot drift from what the flow does.

The SVG layout is layered top to bottom, which suits a narrow side panel: steps are ranked by their
distance from the start step, the terminal step sits alone at the bottom, edges to the next rank go
straight down, and edges that skip ranks or go back up are routed around the left and right sides
so they never cross a box. Every ``terminate_session`` edge (and a repair pattern's handoff,
cancel or digression) is drawn faint and unlabelled: it exists
from nearly every step and would otherwise bury the interesting edges.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from picoflow.flow import FlowSpec, StepSpec

__all__ = ["flow_mermaid", "flow_svg"]

TERMINATE_VIA = "terminate_session"
FAINT_VIAS = frozenset({TERMINATE_VIA, "handoff", "cancel", "digression", "resume"})
"""Edges most steps may have (ending the session, the repair patterns' handoff, cancel and
digression, and the resume that ends a digression): drawn faint and unlabelled in the SVG, so
they do not bury the flow's own."""

_NODE_HEIGHT = 40
_RANK_GAP = 64
_NODE_GAP = 28
_CHAR_WIDTH = 7.6
_LANE_GAP = 16
_MARGIN = 16

_COLORS = {
    "fill": "#ffffff",
    "stroke": "#64748b",
    "text": "#0f172a",
    "visited": "#e0f2fe",
    "current_fill": "#fde68a",
    "current_stroke": "#b45309",
    "edge": "#475569",
    "muted": "#cbd5e1",
    "label": "#334155",
}


@dataclass(slots=True)
class _Node:
    name: str
    rank: int
    width: float
    x: float = 0.0
    y: float = 0.0

    @property
    def center(self) -> float:
        return self.x + self.width / 2


@dataclass(slots=True)
class _Edge:
    source: str
    target: str
    labels: list[str] = field(default_factory=list)
    terminate_only: bool = True
    """Every way along it is one of ``FAINT_VIAS``."""
    faint: str = TERMINATE_VIA
    """The way a faint edge is named in Mermaid."""
    runs: bool = False
    """The source runs the target as a sub-step (it does not move there)."""


def _ranks(spec: FlowSpec) -> dict[str, int]:
    """Breadth-first distance from the start step; the terminal step goes last, unreachable ones before it."""
    forward: dict[str, list[str]] = {name: [] for name in spec.steps}
    for edge in (*spec.transitions, *spec.sub_steps):
        if edge.target != spec.terminate:
            forward[edge.source].append(edge.target)
    ranks = {spec.start: 0}
    queue = deque([spec.start])
    while queue:
        here = queue.popleft()
        for target in forward[here]:
            if target not in ranks:
                ranks[target] = ranks[here] + 1
                queue.append(target)
    deepest = max(ranks.values())
    for name in spec.steps:
        if name not in ranks and name != spec.terminate:
            deepest += 1
            ranks[name] = deepest
    if spec.terminate is not None and spec.terminate != spec.start:
        ranks[spec.terminate] = deepest + 1
    return ranks


def _edges(spec: FlowSpec) -> list[_Edge]:
    grouped: dict[tuple[str, str], _Edge] = {}
    for transition in spec.transitions:
        edge = grouped.setdefault(
            (transition.source, transition.target), _Edge(transition.source, transition.target)
        )
        if transition.via not in FAINT_VIAS:
            edge.terminate_only = False
            if transition.via not in edge.labels:
                edge.labels.append(transition.via)
        else:
            edge.faint = transition.via
    edges = list(grouped.values())
    runs: dict[tuple[str, str], _Edge] = {}
    for call in spec.sub_steps:
        edge = runs.setdefault(
            (call.source, call.target), _Edge(call.source, call.target, [], False, runs=True)
        )
        if f"{call.via} runs" not in edge.labels:
            edge.labels.append(f"{call.via} runs")
    return edges + list(runs.values())


def _kind(step: StepSpec) -> str:
    if step.cls.is_handoff:  # a person takes over here: drawn apart from the steps code runs
        return "handoff"
    return "terminal" if step.is_terminal else "logic" if step.is_logic else "conversational"


def _text_width(text: str) -> float:
    return len(text) * _CHAR_WIDTH


def flow_svg(spec: FlowSpec, *, current: str | None = None, visited: Iterable[str] = ()) -> str:
    """An SVG of the flow's steps and transitions, ``current`` highlighted and ``visited`` shaded.

    Colours are presentation attributes rather than a ``<style>`` element, so the SVG can be
    inlined into a page without its rules leaking into the page.
    """
    ranks = _ranks(spec)
    by_rank: dict[int, list[_Node]] = {}
    for name in spec.steps:
        node = _Node(name, ranks[name], max(110.0, _text_width(name) + 28))
        by_rank.setdefault(node.rank, []).append(node)
    nodes = {node.name: node for row in by_rank.values() for node in row}
    edges = _edges(spec)

    def side(edge: _Edge) -> str:
        source, target = nodes[edge.source], nodes[edge.target]
        if edge.source == edge.target or target.rank <= source.rank:
            return "right"
        return "down" if target.rank == source.rank + 1 else "left"

    left_edges = [edge for edge in edges if side(edge) == "left"]
    right_edges = [edge for edge in edges if side(edge) == "right"]
    label_room_left = max((_text_width(", ".join(e.labels)) for e in left_edges), default=0.0)
    label_room_right = max((_text_width(", ".join(e.labels)) for e in right_edges), default=0.0)
    row_width = max(sum(n.width for n in row) + _NODE_GAP * (len(row) - 1) for row in by_rank.values())
    left_pad = _MARGIN + len(left_edges) * _LANE_GAP + label_room_left + (6 if left_edges else 0)
    top = _MARGIN + 18
    for rank in sorted(by_rank):
        row = by_rank[rank]
        width = sum(n.width for n in row) + _NODE_GAP * (len(row) - 1)
        x = left_pad + (row_width - width) / 2
        for node in row:
            node.x, node.y = x, top + rank * (_NODE_HEIGHT + _RANK_GAP)
            x += node.width + _NODE_GAP
    # Right-hand lanes start beyond the labels of the straight edges, so no two labels overlap.
    right = left_pad + row_width
    for edge in edges:
        if side(edge) == "down" and edge.labels:
            middle = (nodes[edge.source].center + nodes[edge.target].center) / 2
            right = max(right, middle + 8 + _text_width(", ".join(edge.labels)) + 2)
    width = right + len(right_edges) * _LANE_GAP + label_room_right + _MARGIN + 6
    height = top + (max(by_rank) + 1) * (_NODE_HEIGHT + _RANK_GAP) - _RANK_GAP + _MARGIN

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flow-diagram" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        f'aria-label="Steps of flow {escape(spec.name)}" data-flow="{escape(spec.name)}" '
        'font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="13">',
        f"<title>Flow {escape(spec.name)}</title>",
        "<defs>",
        _marker("pf-arrow", _COLORS["edge"]),
        _marker("pf-arrow-muted", _COLORS["muted"]),
        "</defs>",
    ]
    start = nodes[spec.start]
    parts.append(
        f'<path class="start-marker" d="M {start.center:.1f} {start.y - 18:.1f} V {start.y - 2:.1f}" '
        f'stroke="{_COLORS["edge"]}" stroke-width="1.5" marker-end="url(#pf-arrow)" fill="none"/>'
    )
    lanes = {"left": 0, "right": 0}
    for edge in edges:
        parts.append(_edge_svg(edge, nodes, side(edge), lanes, left_pad, right))
    seen = set(visited)
    for name, node in nodes.items():
        parts.append(_node_svg(spec.steps[name], node, name == current, name in seen, name == spec.start))
    parts.append("</svg>")
    return "\n".join(parts)


def _marker(marker_id: str, color: str) -> str:
    return (
        f'<marker id="{marker_id}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse">'
        f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{color}"/></marker>'
    )


def _edge_svg(
    edge: _Edge, nodes: dict[str, _Node], side: str, lanes: dict[str, int], left: float, right: float
) -> str:
    source, target = nodes[edge.source], nodes[edge.target]
    label = ", ".join(edge.labels)
    color = _COLORS["muted"] if edge.terminate_only else _COLORS["edge"]
    marker = "pf-arrow-muted" if edge.terminate_only else "pf-arrow"
    if side == "down":
        x1, y1 = source.center, source.y + _NODE_HEIGHT
        x2, y2 = target.center, target.y
        middle = (y1 + y2) / 2
        path = f"M {x1:.1f} {y1:.1f} C {x1:.1f} {middle:.1f}, {x2:.1f} {middle:.1f}, {x2:.1f} {y2:.1f}"
        label_x, label_y, anchor = (x1 + x2) / 2 + 8, middle + 4, "start"
    else:
        lanes[side] += 1
        if side == "left":
            lane = left - lanes[side] * _LANE_GAP
            x1, x2 = source.x, target.x
        else:
            lane = right + lanes[side] * _LANE_GAP
            x1, x2 = source.x + source.width, target.x + target.width
        # Staggered by lane, so several arrows into one side of a box stay apart.
        stagger = ((lanes[side] - 1) % 3 - 1) * 7
        y1 = source.y + _NODE_HEIGHT / 2 + (6 if side == "right" else stagger)
        y2 = target.y + _NODE_HEIGHT / 2 + (-6 if side == "right" else stagger)
        path = f"M {x1:.1f} {y1:.1f} H {lane:.1f} V {y2:.1f} H {x2:.1f}"
        # Lanes side by side would put their labels on one line, over each other: each lane's label
        # sits a line higher or lower than its neighbour's, along its own vertical segment.
        label_y = (y1 + y2) / 2 + 4 + ((lanes[side] - 1) % 3 - 1) * 13
        label_x, anchor = (lane - 4, "end") if side == "left" else (lane + 4, "start")
    dash = (
        ' stroke-dasharray="4 3"' if edge.terminate_only else ' stroke-dasharray="1.5 3"' if edge.runs else ""
    )
    kind = "sub-step" if edge.runs else "transition"
    out = [
        f'<g class="{kind}" data-source="{escape(edge.source)}" data-target="{escape(edge.target)}">',
        f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.4"{dash} '
        f'marker-end="url(#{marker})"/>',
    ]
    if label and edge.runs:
        # Fan-outs put several such edges side by side: their labels would overlap, so they hover.
        out.append(f"<title>{escape(label)}</title>")
    elif label:
        out.append(
            f'<text x="{label_x:.1f}" y="{label_y:.1f}" text-anchor="{anchor}" font-size="11" '
            # A halo of the page's colour keeps a label legible where another edge's lane crosses it.
            f'fill="{_COLORS["label"]}" stroke="{_COLORS["fill"]}" stroke-width="3" paint-order="stroke">'
            f"{escape(label)}</text>"
        )
    out.append("</g>")
    return "".join(out)


def _node_svg(step: StepSpec, node: _Node, current: bool, visited: bool, start: bool) -> str:
    kind = _kind(step)
    classes = ["step", kind]
    if current:
        classes.append("current")
    if visited:
        classes.append("visited")
    if start:
        classes.append("start")
    fill = _COLORS["current_fill"] if current else _COLORS["visited"] if visited else _COLORS["fill"]
    stroke = _COLORS["current_stroke"] if current else _COLORS["stroke"]
    radius = _NODE_HEIGHT / 2 if kind == "terminal" else 8
    dash = (
        ' stroke-dasharray="5 3"'
        if kind == "logic"
        else ' stroke-dasharray="1 3"'
        if kind == "handoff"
        else ""
    )
    tooltip = step.description or step.name
    aria = ' aria-current="step"' if current else ""
    return (
        f'<g class="{" ".join(classes)}" data-step="{escape(step.name)}"{aria}>'
        f"<title>{escape(tooltip)}</title>"
        f'<rect x="{node.x:.1f}" y="{node.y:.1f}" width="{node.width:.1f}" height="{_NODE_HEIGHT}" '
        f'rx="{radius:.0f}" fill="{fill}" stroke="{stroke}" stroke-width="{2.5 if current else 1.3}"{dash}/>'
        f'<text x="{node.center:.1f}" y="{node.y + _NODE_HEIGHT / 2 + 4.5:.1f}" text-anchor="middle" '
        f'fill="{_COLORS["text"]}" font-weight="{600 if current else 400}">{escape(step.name)}</text>'
        "</g>"
    )


_MERMAID_ID = re.compile(r"[^A-Za-z0-9_]")


def flow_mermaid(spec: FlowSpec, *, current: str | None = None) -> str:
    """A Mermaid ``flowchart`` of the flow (paste into Markdown, or mermaid.live)."""
    ids: dict[str, str] = {}
    for name in spec.steps:
        base = _MERMAID_ID.sub("_", name)
        candidate, n = base, 2
        while candidate in ids.values() or candidate in ("start", "end", "graph", "flowchart"):
            candidate, n = f"{base}_{n}", n + 1
        ids[name] = candidate
    lines = ["flowchart TD", "    start((start))"]
    for name, step in spec.steps.items():
        kind = _kind(step)
        text = f'"{name}"'
        shape = (
            f"([{text}])"
            if kind == "terminal"
            else "{{" + text + "}}"
            if kind == "logic"
            else f"[/{text}/]"
            if kind == "handoff"
            else f"[{text}]"
        )
        lines.append(f"    {ids[name]}{shape}")
    lines.append(f"    start --> {ids[spec.start]}")
    for edge in _edges(spec):
        source, target = ids[edge.source], ids[edge.target]
        if edge.runs:
            lines.append(f"    {source} -.->|{', '.join(edge.labels)}| {target}")
        elif edge.terminate_only:
            lines.append(f"    {source} -.->|{edge.faint}| {target}")
        else:
            lines.append(f"    {source} -->|{', '.join(edge.labels)}| {target}")
    if current is not None and current in ids:
        lines.append("    classDef current fill:#fde68a,stroke:#b45309,stroke-width:2px")
        lines.append(f"    class {ids[current]} current")
    return "\n".join(lines) + "\n"
