"""Playing scenarios against a flow, run after run, and checking every turn.

Each run plays every turn of a scenario in a fresh session. A failed turn does not stop the run:
the later turns are still played and checked, so each turn's pass rate means something on its
own. All runs share one engine (so a local model is loaded once) and one store, an in-memory one
unless the caller passes another, so an eval never touches an application's sessions.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from picoflow.approvals import Approval
from picoflow.engine import ANY_PRINCIPAL, FlowEngine, TurnResult
from picoflow.evals.checks import Check, Observation, check_turn
from picoflow.evals.events import EventLog
from picoflow.evals.judge import Judge, render_transcript
from picoflow.evals.results import EvalResult, RunRecord, ScenarioResult, TurnRecord
from picoflow.evals.scenario import Scenario, ScenarioError, Turn, runs_needed
from picoflow.events import ReadingJudged, TurnEvent
from picoflow.exceptions import ScriptExhausted
from picoflow.flow import Flow, FlowSpec
from picoflow.messages import Message, ModelRequest, ModelResponse
from picoflow.models.base import Model, ResponseDone, StreamEvent
from picoflow.models.catalog import ModelSelection
from picoflow.models.fallback import FallbackModel, as_model
from picoflow.models.scripted import ScriptedModel
from picoflow.sessions.base import SessionStore
from picoflow.sessions.memory import MemoryStore
from picoflow.usage import Usage, UsageLimits

__all__ = ["SCRIPTED", "TurnReporter", "run_eval"]

#: ``model=SCRIPTED`` plays each turn's ``scripted:`` responses from the scenario file.
SCRIPTED = "scripted"

#: Called after every turn with the scenario, the run number (1-based) and the turn's record.
TurnReporter = Callable[[Scenario, int, TurnRecord], None]


class _Noted(Model):
    """Passes every request to the eval's model and notes what it answered, turn by turn: a step
    that erases its memory leaves no trace of the reading it was given in the transcript."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name, self.context_window, self.output_reserve = (
            inner.name,
            inner.context_window,
            inner.output_reserve,
        )
        self.reads_images, self.time_limit = inner.reads_images, inner.time_limit
        self.grounding = inner.grounding
        self._noted: list[str] = []

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.request(request)
        self._note(request, response)
        return response

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self.inner.request_stream(request):
            if isinstance(event, ResponseDone):
                self._note(request, event.response)
            yield event

    async def aclose(self) -> None:
        await self.inner.aclose()

    def take(self) -> tuple[str, ...]:
        """What was answered since the last take ("Explore: {...}", "Refund: refund({...})")."""
        taken, self._noted = tuple(self._noted), []
        return taken

    def _note(self, request: ModelRequest, response: ModelResponse) -> None:
        calls = [f"{call.name}({call.args_json()})" for call in response.tool_calls]
        self._noted.append(
            f"{request.step or '-'}: " + " ".join([*([response.text] if response.text else []), *calls])
        )


class _Playback(Model):
    """Plays the ``scripted:`` responses of the turn being played, and notices what a turn left unused.

    A turn's script is one list, played in the order the steps ask, or a list per step (for parallel
    sub-steps, whose order scheduling decides).
    """

    name = "scripted:scenario"
    # The scripted responses stand in for the embedded model, as a ScriptedModel does.
    grounding = "small"

    def __init__(self) -> None:
        self.start_run()

    def start_run(self) -> None:
        # One model of each kind per run keeps tool call ids unique within a session (call_1, call_2,
        # ...; call_Hotels_1, ... for scripts per step), whichever kind each turn uses.
        self._listed = ScriptedModel([], name=self.name)
        self._by_step = ScriptedModel({}, name=self.name)
        self._turn = 0
        self._given: int | dict[str, int] = 0
        self._asked: dict[str, int] = {}

    def start_turn(self, turn: Turn) -> None:
        self._turn += 1
        script = turn.script()
        if isinstance(script, dict):
            self._given = {step: len(items) for step, items in script.items()}
            self._asked = dict.fromkeys(script, 0)
            self._by_step.extend(script)
        else:
            self._given = len(script)
            self._listed.extend(script)

    def leftover(self) -> Check | None:
        """Responses of this turn the flow did not ask for, as a failed check; dropped so the next turn
        starts in step."""
        unused = self._listed.drop_remaining() + self._by_step.drop_remaining()
        if not unused:
            return None
        given = self._given if isinstance(self._given, int) else sum(self._given.values())
        detail = f"{unused} scripted response(s) of this turn were not asked for"
        if isinstance(self._given, dict):
            left = {step: count - self._asked[step] for step, count in self._given.items()}
            detail += " (" + ", ".join(f"{step}: {count}" for step, count in left.items() if count) + ")"
        return Check("scripted", "failed", given, given - unused, detail)

    async def request(self, request: ModelRequest) -> ModelResponse:
        if isinstance(self._given, int):
            if self._listed.remaining == 0:
                raise ScriptExhausted(
                    f"turn {self._turn} has {self._given} scripted response(s) and step {request.step} "
                    "asked for one more",
                    step=request.step,
                )
            return await self._listed.request(request)
        step = request.step or ""
        if step not in self._given:
            raise ScriptExhausted(
                f"turn {self._turn} has no scripted responses for step {request.step} (scripted: "
                f"{', '.join(self._given)})",
                step=request.step,
            )
        if self._asked[step] == self._given[step]:
            raise ScriptExhausted(
                f"turn {self._turn} has {self._given[step]} scripted response(s) for step {step} and it "
                "asked for one more",
                step=request.step,
            )
        self._asked[step] += 1
        return await self._by_step.request(request)


async def run_eval(
    scenarios: Sequence[Scenario],
    flows: Sequence[type[Flow]],
    *,
    model: Model | str | ModelSelection | None = None,
    runs: int = 1,
    judge: Model | None = None,
    default_flow: str | None = None,
    store: SessionStore | None = None,
    deps: Any = None,
    limits: UsageLimits | None = None,
    on_turn: TurnReporter | None = None,
) -> EvalResult:
    """Play every scenario ``runs`` times and check each turn's expectations.

    Args:
        scenarios: From ``load_scenarios``.
        flows: The flow classes the scenarios talk to.
        model: The model of every step (``"local"``, ``"openai:gpt-4.1-mini"``, a ``Model``...);
            ``SCRIPTED`` plays the scenarios' ``scripted:`` responses; None keeps each flow's own.
        runs: Plays of each scenario, each in a fresh session (a scenario's own ``runs:`` wins).
        judge: Scores ``judge:`` criteria; without one they are reported as not scored.
        default_flow: The flow of scenarios that do not name one.
        store: Where the sessions go (an in-memory store, closed at the end, by default).
        deps: Application dependencies for the tools, as in ``FlowEngine``.
        limits: Per-turn budgets overriding the flows' own.
        on_turn: Told about every turn as soon as it is checked (progress output).

    Raises ``ScenarioError`` before anything runs when a scenario names an unknown flow, step or tool.
    """
    if runs < 1:
        raise ValueError("runs must be at least 1")
    playback = _Playback() if model == SCRIPTED else None
    chosen = playback or (as_model(model) if model is not None else None)
    # A fallback list keeps its own recovery (the engine asks its next member), so it goes unwrapped
    # and its answers unnoted; a flow's own models (model=None) are not noted either.
    noted = _Noted(chosen) if chosen is not None and not isinstance(chosen, FallbackModel) else None
    engine = FlowEngine(flows, store=store or MemoryStore(), model=noted or chosen, deps=deps, limits=limits)
    planned = [(scenario, _flow_of(engine, scenario, default_flow)) for scenario in scenarios]
    for scenario, spec in planned:
        _check_names(scenario, spec)
        policy, planned_runs = scenario.pass_policy, scenario.runs_or(runs)
        if policy is not None and runs_needed(policy, planned_runs) > planned_runs:
            raise ScenarioError(f"{scenario.source}: pass: {policy} cannot be met in {planned_runs} run(s)")
        if playback is not None and not scenario.scripted:
            raise ScenarioError(
                f"{scenario.source}: no turn has scripted responses to play with the scripted model"
            )
    referee = Judge(judge) if judge is not None else None
    result = EvalResult(
        model=_describe(model), judge=judge.name if judge is not None else None, runs_per_scenario=runs
    )
    try:
        for scenario, spec in planned:
            records = []
            for number in range(1, scenario.runs_or(runs) + 1):
                records.append(await _play(engine, scenario, spec, number, playback, noted, referee, on_turn))
            result.scenarios.append(ScenarioResult(scenario, spec.name, tuple(records)))
    finally:
        if store is None:
            await engine.store.close()
    if referee is not None:
        result.judge_usage = referee.usage
    return result


async def _play(
    engine: FlowEngine,
    scenario: Scenario,
    spec: FlowSpec,
    number: int,
    playback: _Playback | None,
    noted: _Noted | None,
    judge: Judge | None,
    on_turn: TurnReporter | None,
) -> RunRecord:
    caller = scenario.caller.caller()
    flow = spec.name
    began_in: str | None = spec.start  # the step each turn begins in (for coverage)
    session_id: str | None = None
    committed = 0  # seq of the first message a turn may append: earlier ones belong to earlier turns
    records: list[TurnRecord] = []
    pending: tuple[Approval, ...] = ()  # what the last turn left waiting for a decision
    if playback is not None:
        playback.start_run()
    with _environment(scenario.env):
        for index, turn in enumerate(scenario.turns, 1):
            if playback is not None:
                playback.start_turn(turn)
            started = time.perf_counter()
            decide = turn.decide
            verdicts: list[Mapping[str, Any]] = []
            log = EventLog()
            heard = _heard(verdicts, log)
            if decide is None:
                files = scenario.attachments(index)
                result = await engine.run(
                    flow, turn.said, session_id, caller=caller, attachments=files, on_event=heard
                )
            elif session_id is None or decide.approval > len(pending):
                missing = Check(
                    "decide", "failed", f"pending approval #{decide.approval}", [a.tool for a in pending]
                )
                record = TurnRecord(
                    index, turn.said, "", None, False, 0.0, Usage(), (missing,), began_in=began_in
                )
                records.append(record)
                if on_turn is not None:
                    on_turn(scenario, number, record)
                continue
            else:
                who = decide.caller.caller() if decide.caller is not None else caller
                chosen = pending[decide.approval - 1]
                result = await engine.decide(
                    session_id, chosen.id, decide.decision, decide.reason, caller=who, on_event=heard
                )
            seconds = time.perf_counter() - started
            if result.error is None or decide is None:
                pending = result.pending  # a refused decision leaves the approvals as they were
            session_id = result.session_id or session_id
            seen, messages = await _observe(engine, result, session_id, committed)
            events = tuple(log.close(result.message))
            seen = replace(seen, verdicts=tuple(verdicts), events=events)
            if seen.session is not None:
                committed = seen.session.next_seq
            checks = check_turn(turn.expect, seen)
            if playback is not None and (unused := playback.leftover()):
                checks.append(unused)
            transcript = render_transcript(messages)
            for criterion in turn.expect.judge:
                checks.append(await _judged(judge, criterion, transcript, result.message))
            record = TurnRecord(
                index=index,
                user=turn.said,
                reply=result.message,
                step=seen.step,
                completed=seen.completed,
                seconds=seconds,
                usage=result.usage,
                checks=tuple(checks),
                error=seen.error,
                answers=noted.take() if noted is not None else (),
                verdicts=tuple(verdicts),
                events=events,
                began_in=began_in,
            )
            records.append(record)
            began_in = seen.step or began_in
            if on_turn is not None:
                on_turn(scenario, number, record)
    return RunRecord(number, session_id, tuple(records))


def _heard(verdicts: list[Mapping[str, Any]], log: EventLog) -> Callable[[TurnEvent], None]:
    """An ``on_event`` listener keeping every event as a record, and the verdicts of the turn's
    own readings, each with its step."""

    def heard(event: TurnEvent) -> None:
        log(event)
        if isinstance(event, ReadingJudged) and event.parent is None:
            verdicts.extend({**verdict, "step": event.step} for verdict in event.verdicts)

    return heard


async def _observe(
    engine: FlowEngine, result: TurnResult, session_id: str | None, committed: int
) -> tuple[Observation, list[Message]]:
    """What the turn left behind, and the session's whole transcript (for the judge)."""
    # The eval reads its own sessions as an operator would, whoever the scenario's caller is.
    session = await engine.get_session(session_id, principal=ANY_PRINCIPAL) if session_id else None
    messages = (
        await engine.transcript(session.id, principal=ANY_PRINCIPAL) if session is not None else None
    ) or []
    detail = None
    if result.error is not None and result.error.reference is not None:
        # The reply holds the public text only; the record filed beside the session says what broke.
        # (Also for a first turn that failed: its record is filed under the id of a session never saved.)
        filed = await engine.session_errors(result.error.reference, principal=ANY_PRINCIPAL)
        detail = filed[-1].message if filed else None
    new = [m for m in messages if m.seq >= committed]
    earlier = [m for m in messages if m.seq < committed]
    return Observation(result, session, new, detail, earlier), messages


async def _judged(judge: Judge | None, criterion: str, transcript: str, reply: str) -> Check:
    name = f"judge: {criterion if len(criterion) <= 60 else criterion[:59] + '…'}"
    if judge is None:
        return Check(name, "unscored", criterion, None, "no judge model (--judge)")
    verdict = await judge.score(criterion, transcript, reply)
    if verdict.passed is None:
        return Check(name, "unscored", criterion, None, verdict.reason)
    outcome = "pass" if verdict.passed else "fail"
    return Check(name, "passed" if verdict.passed else "failed", criterion, outcome, verdict.reason)


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """Set the scenario's variables for one run, ``{run_dir}`` made a fresh folder; restore them after."""
    if not env:
        yield
        return
    saved = {name: os.environ.get(name) for name in env}
    with tempfile.TemporaryDirectory(prefix="picoflow-eval-") as run_dir:
        try:
            for name, value in env.items():
                os.environ[name] = value.replace("{run_dir}", run_dir)
            yield
        finally:
            for name, before in saved.items():
                if before is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = before


def _flow_of(engine: FlowEngine, scenario: Scenario, default_flow: str | None) -> FlowSpec:
    name = scenario.flow or default_flow
    if name is None:
        raise ScenarioError(f"{scenario.source}: name the flow in the file (flow: ...) or with --flow")
    known = {spec.name: spec for spec in engine.flows}
    if name not in known:
        raise ScenarioError(f"{scenario.source}: no flow named {name!r}; known: {', '.join(known) or 'none'}")
    return known[name]


def _check_names(scenario: Scenario, spec: FlowSpec) -> None:
    """Refuse steps and tools the flow does not have: a typo would otherwise fail every run, slowly."""
    steps = ", ".join(spec.steps)
    tools = {name for step in spec.steps.values() for name in step.tools}
    for index, turn in enumerate(scenario.turns, 1):
        expect = turn.expect
        named = [("expect.step", expect.step)] if expect.step is not None else []
        if isinstance(turn.scripted, dict):
            named += [(f"scripted.{step}", step) for step in turn.scripted]
        named += [(f"expect.state.{path}", path.split(".", 1)[0]) for path in expect.state]
        asserted = [
            (f"expect.{group}", item)
            for group in ("events", "events_any_order", "no_events")
            for item in getattr(expect, group)
        ]
        named += [
            (f"{where} {item.kind}", step)
            for where, item in asserted
            for key in ("step", "from", "to")
            if (step := item.subject(key)) is not None
        ]
        for field, step in named:
            if step not in spec.steps:
                raise ScenarioError(
                    f"{scenario.where(index)}, {field}: no step {step!r} in flow {spec.name}; steps: {steps}"
                )
        event_tools = [
            (f"{where} {item.kind}", tool)
            for where, item in asserted
            if (tool := item.subject("name" if item.kind == "tool" else "tool")) is not None
            and item.kind in ("tool", "approval_requested", "approval_decided")
        ]
        for field, names in (
            ("expect.tool_called", [call.name for call in expect.tool_called]),
            ("expect.tool_not_called", [call.name for call in expect.tool_not_called]),
            ("expect.pending", [call.name for call in expect.pending]),
            *(((where, [tool]) for where, tool in event_tools)),
        ):
            for name in names:
                if name not in tools:
                    raise ScenarioError(
                        f"{scenario.where(index)}, {field}: no tool {name!r} in flow "
                        f"{spec.name}; tools: {', '.join(sorted(tools))}"
                    )


def _describe(model: Model | str | ModelSelection | None) -> str:
    if model is None:
        return "each flow's own"
    return model.name if isinstance(model, Model) else str(model)
