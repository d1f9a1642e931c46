"""The commands about the flows themselves: ``flows`` lists them, ``graph`` draws one (both derived from
the code), ``eval`` measures how often they behave on scenario files."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from picoflow.cli.loading import (
    USER_ERRORS,
    CliError,
    FlowsOpt,
    ModelOpt,
    build_model,
    console,
    fail,
    load_flows,
    timeline_setting,
)
from picoflow.diagram import flow_mermaid
from picoflow.evals import SCRIPTED, EvalResult, ScenarioError, load_scenarios, run_eval
from picoflow.evals.coverage import Coverage, print_coverage
from picoflow.evals.report import ProgressPrinter, print_result, write_report
from picoflow.evals.simulator import write_transcripts
from picoflow.exceptions import PicoflowError
from picoflow.flow import FlowSpec
from picoflow.models.catalog import as_selection, create_model
from picoflow.sessions import open_store


def list_flows(flows: FlowsOpt = None) -> None:
    """List the flows with their steps."""
    table = Table("flow", "start", "steps", "description", title="flows")
    for spec in _specs(flows).values():
        summary = spec.description.splitlines()[0] if spec.description else ""
        table.add_row(spec.name, spec.start, escape(", ".join(spec.steps)), escape(summary))
    console.print(table)


def graph(
    flow: Annotated[str, typer.Argument(help="Name of the flow to draw.")],
    step: Annotated[str | None, typer.Option(help="Highlight this step.")] = None,
    flows: FlowsOpt = None,
) -> None:
    """Print the flow's steps and transitions as a Mermaid flowchart (derived from the code)."""
    specs = _specs(flows)
    if flow not in specs:
        raise fail(f"no flow named {flow!r}; known: {', '.join(specs)}")
    if step is not None and step not in specs[flow].steps:
        raise fail(f"{flow} has no step {step!r}; its steps: {', '.join(specs[flow].steps)}")
    typer.echo(flow_mermaid(specs[flow], current=step), nl=False)


def _specs(flows: str | None) -> dict[str, FlowSpec]:
    """The ``--flows`` built and validated, by name; a flow that cannot be loaded ends the command."""
    try:
        return {spec.name: spec for spec in (flow.spec() for flow in load_flows(flows))}
    except (CliError, PicoflowError) as exc:
        raise fail(str(exc)) from None


def eval_scenarios(
    scenarios: Annotated[Path, typer.Argument(help="A scenario file (YAML) or a folder of them.")],
    flow: Annotated[str | None, typer.Option(help="Flow of the scenarios whose file names none.")] = None,
    model: ModelOpt = None,
    runs: Annotated[
        int, typer.Option(min=1, metavar="<n>", help="Plays of each scenario, each in a fresh session.")
    ] = 1,
    min_pass: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            metavar="<share>",
            help="Share of runs that must pass (of scenarios without a pass: policy); exit 1 below it.",
        ),
    ] = 1.0,
    report: Annotated[Path | None, typer.Option(help="Write the whole result to this JSON file.")] = None,
    judge: Annotated[
        str | None, typer.Option(help="Model that scores judge: criteria (a --model selection).")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(help="Session store URL (default: in memory, so your sessions stay untouched)."),
    ] = None,
    flows: FlowsOpt = None,
    category: Annotated[
        list[str] | None,
        typer.Option(
            metavar="<name>", help="Play only the scenarios of this category (repeat it for several)."
        ),
    ] = None,
    coverage: Annotated[
        bool,
        typer.Option(
            "--coverage",
            help="Print which steps, transitions, tools and repair patterns the suites exercised "
            "(and put it in --report).",
        ),
    ] = False,
    user_model: Annotated[
        str | None,
        typer.Option(help="Model that plays the users of goal: scenarios (default: the --model)."),
    ] = None,
    transcripts: Annotated[
        Path | None,
        typer.Option(
            help="Folder for a Markdown transcript of each simulated run "
            "(default: .picoflow/transcripts/<UTC time>/)."
        ),
    ] = None,
    record: Annotated[
        Path | None, typer.Option(help="Record every model answer to this JSON file, keyed by its request.")
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option(help="Answer every request from this recording (--record), with no model at all."),
    ] = None,
) -> None:
    """Play scenario files against a model, run after run, and measure how often the flow behaves.

    --model scripted plays each turn's scripted: responses from the scenario files; goal: scenarios
    (a simulated user) are set aside then, unless --replay plays them from a recording.
    """
    try:
        loaded = load_scenarios(scenarios)
        if category:
            known = sorted({scenario.category for scenario in loaded if scenario.category})
            missing = [name for name in category if name not in known]
            if missing:
                raise ScenarioError(
                    f"{scenarios}: no scenario of category {', '.join(missing)}; "
                    f"the categories are {', '.join(known) or '(none)'}"
                )
            loaded = [scenario for scenario in loaded if scenario.category in category]
        flow_classes = load_flows(flows)
        chosen = SCRIPTED if (model or "").strip() == SCRIPTED else build_model(model)
        referee = build_model(judge)
        if isinstance(referee, str):
            referee = create_model(as_selection(referee))
        player = build_model(user_model)
        if replay is not None:
            if model or judge or user_model:
                console.print(
                    "[dim]--replay: the recorded models answer; --model, --judge and --user-model "
                    "are not used[/dim]",
                    soft_wrap=True,
                )
            chosen, referee, player = None, None, None
        elif chosen == SCRIPTED and user_model is None:
            goals = [scenario for scenario in loaded if scenario.goal is not None]
            if goals and len(goals) < len(loaded):
                loaded = [scenario for scenario in loaded if scenario.goal is None]
                console.print(
                    f"[dim]{len(goals)} goal scenario(s) set aside: the scripted model has no words for a "
                    "simulated user (--model MODEL, or --replay FILE)[/dim]",
                    soft_wrap=True,
                )
        opened = open_store(store) if store else None
    except (ScenarioError, *USER_ERRORS) as exc:
        raise fail(str(exc), code=2) from None

    async def work() -> EvalResult:
        try:
            return await run_eval(
                loaded, flow_classes, model=chosen, runs=runs, judge=referee, default_flow=flow,
                store=opened, on_turn=ProgressPrinter(console, runs), user_model=player, record=record,
                replay=replay, timeline=timeline_setting() if opened is not None else None,
            )  # fmt: skip
        finally:
            if opened is not None:
                await opened.close()

    try:
        result = asyncio.run(work())
    except (ScenarioError, PicoflowError, ValueError) as exc:
        raise fail(str(exc), code=2) from None
    print_result(console, result, min_pass)
    covered = Coverage.of(result, (cls.spec() for cls in flow_classes)) if coverage else None
    if covered is not None:
        print_coverage(console, covered)
    if any(scenario.scenario.goal is not None for scenario in result.scenarios):
        folder = transcripts or Path(".picoflow", "transcripts", datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
        try:
            write_transcripts(result, folder)
        except OSError as exc:
            raise fail(f"cannot write the transcripts to {folder}: {exc}", code=2) from None
        console.print(f"[dim]transcripts written to {escape(str(folder))}[/dim]")
    if record is not None:
        console.print(f"[dim]recording written to {escape(str(record))}[/dim]")
    if report is not None:
        try:
            write_report(result, report, coverage=covered)
        except OSError as exc:
            raise fail(f"cannot write the report {report}: {exc}", code=2) from None
        console.print(f"[dim]report written to {escape(str(report))}[/dim]")
    if not result.verdict(min_pass):
        raise typer.Exit(1)
