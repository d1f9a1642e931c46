"""What an eval's suites exercised of each flow, and what they never did (``picoflow eval --coverage``).

Read from the turns' events (``picoflow.evals.events``), against what the flow's code declares
(``FlowSpec``):

* **steps**: a step is exercised when a turn entered it or began in it;
* **transitions**: a ``from → to`` pair of the flow graph (``FlowSpec.transitions``: each ``go(...)``
  of a tool or hook) is exercised when a turn left ``from`` for ``to``, whichever tool or hook did it;
* **tools**: a step's tool is exercised when a call to it was made in that step (run, refused, or
  proposed for approval);
* **repair patterns**: ``pattern`` events (``name``, ``step``), as a step × pattern matrix.

Each item says which suites (scenario files) exercised it, so a suite's blind spots show as well as
the union's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from picoflow._schema import literal_options
from picoflow.evals.results import EvalResult, TurnRecord
from picoflow.flow import FlowSpec

__all__ = ["Coverage", "FlowCoverage", "print_coverage"]

TERMINATE = "terminate_session"


@dataclass(slots=True)
class _Seen:
    """The suites that exercised one item (empty: never)."""

    suites: set[str] = field(default_factory=set)

    def as_json(self) -> list[str]:
        return sorted(self.suites)


@dataclass(slots=True)
class FlowCoverage:
    """One flow: every step, transition and tool its code declares, and who exercised each."""

    flow: str
    steps: dict[str, _Seen]
    transitions: dict[tuple[str, str], _Seen]
    vias: dict[tuple[str, str], tuple[str, ...]]
    """The tools and hooks each transition is declared through."""
    tools: dict[tuple[str, str], _Seen]
    loops: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Steps that go to themselves, and through what: not moves (the conversation stays), so no
    event shows them and they are not counted."""
    patterns: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    """(step, pattern) pairs that fired; a pattern's row lists the steps it fired in."""
    suites: set[str] = field(default_factory=set)

    @staticmethod
    def declared(spec: FlowSpec) -> FlowCoverage:
        vias: dict[tuple[str, str], list[str]] = {}
        loops: dict[str, list[str]] = {}
        for transition in spec.transitions:
            if transition.source == transition.target:  # going to itself moves nowhere: no event
                loops.setdefault(transition.source, []).append(transition.via)
            else:
                vias.setdefault((transition.source, transition.target), []).append(transition.via)
        # A step only ever run as a sub-step answers its caller: it is never offered terminate_session.
        only_sub = {t.target for t in spec.sub_steps} - {spec.start} - {t.target for t in spec.transitions}
        return FlowCoverage(
            flow=spec.name,
            steps={name: _Seen() for name in spec.steps},
            transitions={pair: _Seen() for pair in vias},
            vias={pair: tuple(dict.fromkeys(names)) for pair, names in vias.items()},
            tools={
                (step, tool): _Seen()
                for step, one in spec.steps.items()
                for tool in one.tools
                if not (tool == TERMINATE and step in only_sub)
            },
            loops={step: tuple(dict.fromkeys(names)) for step, names in loops.items()},
            patterns={pair: _Seen() for pair in _declared_patterns(spec)},
        )

    def note(self, suite: str, turn: TurnRecord) -> None:
        """Count what ``turn`` (of a scenario in ``suite``) exercised."""
        self.suites.add(suite)
        if turn.began_in in self.steps:
            self.steps[turn.began_in].suites.add(suite)
        for record in turn.events:
            kind = record.get("kind")
            if kind == "entered" and record.get("step") in self.steps:
                self.steps[record["step"]].suites.add(suite)
            elif kind == "left":
                pair = (str(record.get("step")), str(record.get("to")))
                self.transitions.setdefault(pair, _Seen()).suites.add(suite)
            elif kind in ("tool", "approval_requested"):
                name = record.get("name") if kind == "tool" else record.get("tool")
                pair = (str(record.get("step")), str(name))
                if pair in self.tools:  # a tool of an MCP server or a sub-step's own is counted elsewhere
                    self.tools[pair].suites.add(suite)
            elif kind == "pattern":
                pair = (str(record.get("step")), str(record.get("name")))
                self.patterns.setdefault(pair, _Seen()).suites.add(suite)

    def missed_steps(self) -> list[str]:
        return [name for name, seen in self.steps.items() if not seen.suites]

    def missed_transitions(self) -> list[tuple[str, str]]:
        return [pair for pair, seen in self.transitions.items() if not seen.suites and pair in self.vias]

    def missed_tools(self) -> list[tuple[str, str]]:
        return [pair for pair, seen in self.tools.items() if not seen.suites]

    def missed_patterns(self) -> list[tuple[str, str]]:
        """(step, pattern) pairs a step can fire by what it declares, never fired."""
        return [pair for pair, seen in self.patterns.items() if not seen.suites]

    def undeclared_transitions(self) -> list[tuple[str, str]]:
        """Moves seen that the flow graph does not show (a ``go`` the code reader could not see)."""
        return [pair for pair in self.transitions if pair not in self.vias]

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per kind: items exercised, items declared."""
        declared = {pair: seen for pair, seen in self.transitions.items() if pair in self.vias}
        return {
            kind: (sum(bool(seen.suites) for seen in items.values()), len(items))
            for kind, items in (("steps", self.steps), ("transitions", declared), ("tools", self.tools))
        }

    def as_json(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "flow": self.flow,
            "suites": sorted(self.suites),
            "summary": {kind: {"covered": done, "declared": total} for kind, (done, total) in counts.items()},
            "steps": {name: seen.as_json() for name, seen in self.steps.items()},
            "transitions": [
                {
                    "from": source,
                    "to": target,
                    "via": list(self.vias.get((source, target), ())),
                    "declared": (source, target) in self.vias,
                    "suites": seen.as_json(),
                }
                for (source, target), seen in self.transitions.items()
            ],
            "tools": [
                {"step": step, "tool": tool, "suites": seen.as_json()}
                for (step, tool), seen in self.tools.items()
            ],
            "patterns": [
                {"step": step, "pattern": name, "suites": seen.as_json()}
                for (step, name), seen in self.patterns.items()
            ],
            "loops": [{"step": step, "via": list(vias)} for step, vias in self.loops.items()],
            "missed": {
                "steps": self.missed_steps(),
                "transitions": [{"from": s, "to": t} for s, t in self.missed_transitions()],
                "tools": [{"step": s, "tool": t} for s, t in self.missed_tools()],
                "patterns": [{"step": s, "pattern": p} for s, p in self.missed_patterns()],
            },
        }


@dataclass(slots=True)
class Coverage:
    """Every flow an eval talked to."""

    flows: dict[str, FlowCoverage]

    @staticmethod
    def of(result: EvalResult, specs: Iterable[FlowSpec]) -> Coverage:
        known = {spec.name: spec for spec in specs}
        flows: dict[str, FlowCoverage] = {}
        for scenario in result.scenarios:
            spec = known.get(scenario.flow)
            if spec is None:
                continue
            covered = flows.setdefault(spec.name, FlowCoverage.declared(spec))
            suite = scenario.scenario.suite
            for run in scenario.runs:
                for turn in run.turns:
                    covered.note(suite, turn)
        return Coverage(flows)

    def as_json(self) -> dict[str, Any]:
        return {name: flow.as_json() for name, flow in self.flows.items()}


def print_coverage(console: Console, coverage: Coverage) -> None:
    """Per flow: what was covered of each kind, by which suite, what never was, and the step ×
    pattern matrix when patterns fired. Fits 80 columns."""
    for flow in coverage.flows.values():
        _print_flow(console, flow)


def _print_flow(console: Console, flow: FlowCoverage) -> None:
    counts = flow.counts()
    table = Table(title=f"coverage of flow {escape(flow.flow)}", box=box.SIMPLE_HEAD)
    table.add_column("suite", overflow="fold", ratio=1)
    for kind in counts:
        table.add_column(kind, justify="right", no_wrap=True)
    table.add_row("all suites", *(_ratio(done, total) for done, total in counts.values()))
    declared = {pair: seen for pair, seen in flow.transitions.items() if pair in flow.vias}
    for suite in sorted(flow.suites):
        cells = [
            _ratio(sum(suite in seen.suites for seen in items.values()), len(items))
            for items in (flow.steps, declared, flow.tools)
        ]
        table.add_row(escape(suite), *cells)
    console.print(table)
    missed = [
        *(f"step {name}" for name in flow.missed_steps()),
        *(f"{source} → {target} (via {', '.join(flow.vias[(source, target)])})"
          for source, target in flow.missed_transitions()),
        *(f"tool {step}.{tool}" for step, tool in flow.missed_tools()),
        *(f"pattern {step}.{pattern}" for step, pattern in flow.missed_patterns()),
    ]  # fmt: skip
    if missed:
        console.print(f"  [yellow]never exercised ({len(missed)}):[/yellow]")
        for line in missed:
            console.print(f"    {escape(line)}", soft_wrap=True)
    else:
        console.print("  [green]every step, transition, tool and declared pattern was exercised[/green]")
    for step, vias in flow.loops.items():
        console.print(
            f"  [dim]not counted: {escape(step)} → itself (via {escape(', '.join(vias))}) stays[/dim]"
        )
    for source, target in flow.undeclared_transitions():
        console.print(f"  [dim]also moved {escape(source)} → {escape(target)} (not in the flow graph)[/dim]")
    if flow.patterns:
        _print_patterns(console, flow)


def _print_patterns(console: Console, flow: FlowCoverage) -> None:
    patterns = sorted({name for _, name in flow.patterns})
    steps = [step for step in flow.steps if any((step, name) in flow.patterns for name in patterns)]
    console.print("  repair patterns × steps (suites that fired it):")
    matrix = Table(box=box.SIMPLE_HEAD)
    matrix.add_column("step", no_wrap=True)
    for name in patterns:
        matrix.add_column(escape(_clip(name, 12)), justify="center", no_wrap=True)
    for step in steps:
        marks = [
            str(len(flow.patterns[(step, name)].suites)) if (step, name) in flow.patterns else ""
            for name in patterns
        ]
        matrix.add_row(escape(step), *marks)
    console.print(matrix)


def _declared_patterns(spec: FlowSpec) -> list[tuple[str, str]]:
    """The patterns each step declares it can fire: a ``SlotStep``'s ``repairs_from`` options, and
    ``no_progress`` for a step that asks questions (a tool's ``repair(...)`` shows when it fires)."""
    found: list[tuple[str, str]] = []
    for name, step in spec.steps.items():
        cls: Any = step.cls
        policy = cls.repairs or spec.cls.repairs
        field = getattr(cls, "repairs_from", None)
        slots = getattr(cls, "slots", None)
        options = list(literal_options(slots.model_fields.get(field))) if field and slots else []
        if getattr(cls, "questions", ()):
            options.append("no_progress")
        found += [(name, str(option)) for option in options if policy.allows(option)]
    return found


def _ratio(done: int, total: int) -> str:
    return f"{done}/{total}" if total else "-"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
