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
from pathlib import Path
from typing import Any

from picoflow.approvals import Approval
from picoflow.engine import ANY_PRINCIPAL, FlowEngine, TurnResult
from picoflow.evals.checks import Check, Observation, check_turn
from picoflow.evals.events import EventLog
from picoflow.evals.judge import Judge, render_transcript
from picoflow.evals.recording import Recording
from picoflow.evals.results import EvalResult, RunRecord, ScenarioResult, TurnRecord
from picoflow.evals.scenario import Expectations, GoalDone, Scenario, ScenarioError, Turn, runs_needed
from picoflow.evals.simulator import Ending, SimulatedUser, UserLeft, check_goal_names, goal_check, unmet
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
from picoflow.timeline import TimelineSettings
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
    user_model: Model | str | ModelSelection | None = None,
    record: Path | None = None,
    replay: Path | None = None,
    timeline: TimelineSettings | None = None,
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
        user_model: The model that plays the users of ``goal:`` scenarios; ``model`` by default.
        record: Write every model answer (the flow's, the simulated user's, the judge's) to this
            file, keyed by its request (``picoflow.evals.recording``).
        replay: Answer every request from this recording instead, with no model at all (leave out
            ``model``, ``user_model`` and ``judge``): a request it does not hold ends the run with a
            failed ``replay`` check.
        timeline: Record each turn's timeline with its session (``FlowEngine(timeline=...)``), to
            inspect the runs in ``store`` afterwards.

    Raises ``ScenarioError`` before anything runs when a scenario names an unknown flow, step or tool.
    """
    if runs < 1:
        raise ValueError("runs must be at least 1")
    recording, user, judge, model = _recording_models(model, user_model, judge, record, replay)
    playback = _Playback() if model == SCRIPTED else None
    chosen = playback or (as_model(model) if model is not None else None)
    if user is None and playback is None and chosen is not None and replay is None:
        user = chosen  # one model plays both sides (an embedded model is loaded once)
    if recording is not None and replay is None:
        if chosen is None or isinstance(chosen, FallbackModel):
            raise ValueError("record needs one model (model=...), not the flows' own or a list")
        chosen = recording.recorder(chosen, "flow")
        user = recording.recorder(user, "user") if user is not None else None
        judge = recording.recorder(judge, "judge") if judge is not None else None
    # A fallback list keeps its own recovery (the engine asks its next member), so it goes unwrapped
    # and its answers unnoted; a flow's own models (model=None) are not noted either.
    noted = _Noted(chosen) if chosen is not None and not isinstance(chosen, FallbackModel) else None
    engine = FlowEngine(
        flows,
        store=store or MemoryStore(),
        model=noted or chosen,
        deps=deps,
        limits=limits,
        timeline=timeline,
    )
    planned = [(scenario, _flow_of(engine, scenario, default_flow)) for scenario in scenarios]
    for scenario, spec in planned:
        _check_names(scenario, spec)
        policy, planned_runs = scenario.pass_policy, scenario.runs_or(runs)
        if policy is not None and runs_needed(policy, planned_runs) > planned_runs:
            raise ScenarioError(f"{scenario.source}: pass: {policy} cannot be met in {planned_runs} run(s)")
        check_goal_names(scenario, spec)
        if scenario.goal is not None and (user is None or playback is not None):
            raise ScenarioError(
                f"{scenario.source}: a goal's user is played by a model: give one (--model, --user-model) "
                "or play a recording (--replay FILE); the scripted model has no words for it"
                if replay is None
                else f"{scenario.source}: the recording {replay} holds no simulated user's answers"
            )
        if playback is not None and not scenario.scripted:
            raise ScenarioError(
                f"{scenario.source}: no turn has scripted responses to play with the scripted model"
            )
    referee = Judge(judge) if judge is not None else None
    result = EvalResult(
        model=_describe(chosen if replay is not None else model),
        judge=judge.name if judge is not None else None,
        runs_per_scenario=runs,
    )
    goals = [scenario for scenario, _ in planned if scenario.goal is not None]
    if goals and user is not None:
        result.user_model = user.name
    try:
        for scenario, spec in planned:
            records = []
            for number in range(1, scenario.runs_or(runs) + 1):
                if scenario.goal is not None and user is not None:
                    simulated = SimulatedUser(scenario.goal, user)
                    records.append(
                        await _play_goal(
                            engine, scenario, spec, number, simulated, noted, referee, on_turn, recording
                        )
                    )
                    result.user_usage.add(simulated.usage)
                    continue
                records.append(
                    await _play(engine, scenario, spec, number, playback, noted, referee, on_turn, recording)
                )
            result.scenarios.append(ScenarioResult(scenario, spec.name, tuple(records)))
    finally:
        if store is None:
            await engine.store.close()
        if record is not None and recording is not None:
            recording.save(record)
    if referee is not None:
        result.judge_usage = referee.usage
    return result


def _recording_models(
    model: Model | str | ModelSelection | None,
    user_model: Model | str | ModelSelection | None,
    judge: Model | None,
    record: Path | None,
    replay: Path | None,
) -> tuple[Recording | None, Model | None, Model | None, Model | str | ModelSelection | None]:
    """The recording to make or play, and the user model, judge and model of the eval: with a replay,
    the recording's stand-ins for each."""
    if record is not None and replay is not None:
        raise ValueError("record or replay, not both")
    if replay is None:
        same = user_model is None or (isinstance(user_model, str) and user_model == model)
        user = None if same else as_model(user_model)  # type: ignore[arg-type]
        return (Recording() if record is not None else None), user, judge, model
    if model is not None or user_model is not None or judge is not None:
        raise ValueError("a replay is answered by the recorded models: leave out model, user_model and judge")
    recording = Recording.load(replay)
    user = recording.replayer("user") if recording.has("user") else None
    referee = recording.replayer("judge") if recording.has("judge") else None
    return recording, user, referee, recording.replayer("flow")


async def _play(
    engine: FlowEngine,
    scenario: Scenario,
    spec: FlowSpec,
    number: int,
    playback: _Playback | None,
    noted: _Noted | None,
    judge: Judge | None,
    on_turn: TurnReporter | None,
    recording: Recording | None = None,
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
            if recording is not None:
                recording.at(scenario.name, number, index)
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
            diverged = recording.divergence_check() if recording is not None else None
            if diverged is not None:
                checks.append(diverged)
            record = _turn_record(index, turn.said, result, seen, seconds, checks, noted, began_in)
            records.append(record)
            began_in = seen.step or began_in
            if on_turn is not None:
                on_turn(scenario, number, record)
            if diverged is not None:
                break  # the recording holds nothing further along this run
    return RunRecord(number, session_id, tuple(records))


async def _play_goal(
    engine: FlowEngine,
    scenario: Scenario,
    spec: FlowSpec,
    number: int,
    user: SimulatedUser,
    noted: _Noted | None,
    judge: Judge | None,
    on_turn: TurnReporter | None,
    recording: Recording | None,
) -> RunRecord:
    """One run of a ``goal:`` scenario: the simulated user talks until done holds, it finishes, or
    the turn limit; the last turn's record carries the ``goal`` check (``picoflow.evals.simulator``)."""
    goal = scenario.goal
    assert goal is not None
    caller = scenario.caller.caller()
    flow = spec.name
    began_in: str | None = spec.start
    session_id: str | None = None
    committed = 0
    records: list[TurnRecord] = []
    said: list[tuple[str, str]] = []
    transcript: list[dict[str, Any]] = []
    messages: list[Message] = []
    text: str | None = goal.opening
    last = False  # the user said this message is their last
    with _environment(scenario.env):
        for index in range(1, goal.max_turns + 1):
            if recording is not None:
                recording.at(scenario.name, number, index)
            ending: Ending | None = None
            if text is None:
                ending, text, last = await _simulated(user, said, transcript, index, recording)
            if ending is not None or text is None:  # the user finished or left before this turn
                if records:
                    await _end_goal(records, ending, scenario, number, judge, messages, recording, on_turn)
                else:
                    record = TurnRecord(index, "", "", None, False, 0.0, Usage(), ())
                    records.append(record)
                    await _end_goal(records, ending, scenario, number, judge, messages, recording, on_turn)
                break
            started = time.perf_counter()
            verdicts: list[Mapping[str, Any]] = []
            log = EventLog()
            result = await engine.run(flow, text, session_id, caller=caller, on_event=_heard(verdicts, log))
            seconds = time.perf_counter() - started
            session_id = result.session_id or session_id
            seen, messages = await _observe(engine, result, session_id, committed)
            events = tuple(log.close(result.message))
            seen = replace(seen, verdicts=tuple(verdicts), events=events)
            if seen.session is not None:
                committed = seen.session.next_seq
            checks = check_turn(Expectations(), seen)
            record = _turn_record(index, text, result, seen, seconds, checks, noted, began_in)
            records.append(record)
            began_in = seen.step or began_in
            said += [("user", text), ("assistant", result.message)]
            transcript += [
                {"role": "user", "turn": index, "text": text, **({"last": True} if last else {})},
                {"role": "assistant", "turn": index, "step": seen.step, "text": result.message},
            ]
            states = seen.session.states if seen.session is not None else {}
            missing = unmet(goal.done, states, seen.step, seen.completed)
            if recording is not None and recording.divergence is not None:
                ending = Ending(index, "the replay diverged", True)
            elif goal.done.checked_each_turn and not missing:
                ending = Ending(index, f"done held after turn {index}", False)
            elif seen.completed:
                ending = _incomplete(goal.done, index, missing, "the flow ended the conversation")
            elif last and not asks(result.message):
                ending = _incomplete(goal.done, index, missing, "the simulated user finished")
            elif index == goal.max_turns:
                ending = Ending(index, f"the turn limit ({index}) was reached before done held", True)
            else:
                if recording is not None:
                    recording.at(scenario.name, number, index + 1)
                ending, text, last = await _simulated(user, said, transcript, index + 1, recording)
                if ending is not None:
                    ending = replace(ending, turns=index)
                    if not ending.failed:
                        ending = _incomplete(goal.done, index, missing, "the simulated user finished")
            if ending is not None:
                await _end_goal(records, ending, scenario, number, judge, messages, recording, on_turn)
                break
            if on_turn is not None:
                on_turn(scenario, number, record)
    return RunRecord(number, session_id, tuple(records), tuple(transcript))


QUESTION_MARKS = frozenset("?？¿؟⸮")
"""Question marks of the world's scripts (Latin, full-width, Spanish opening, Arabic)."""


def asks(reply: str) -> bool:
    """Whether the flow's reply asks the user something: then a simulated user who calls their
    message the last is not taken at its word (a small model says so too soon), and goes on."""
    return any(mark in reply for mark in QUESTION_MARKS)


async def _simulated(
    user: SimulatedUser,
    said: list[tuple[str, str]],
    transcript: list[dict[str, Any]],
    turn: int,
    recording: Recording | None,
) -> tuple[Ending | None, str | None, bool]:
    """The user's message of ``turn`` and whether it is their last, or how the conversation ended
    before it (the user finished with nothing more to say, or left its role)."""
    try:
        answer = await user.next(said)
    except UserLeft as left:
        why = "the replay diverged" if recording is not None and recording.divergence else left.reason
        return Ending(turn - 1, why, True), None, False
    if answer.finished and not answer.message:
        return Ending(turn - 1, "the simulated user finished", False), None, False
    return None, answer.message, answer.finished


def _incomplete(done: GoalDone, turn: int, missing: list[str], why: str) -> Ending:
    """The conversation ended on ``why`` at ``turn``: failed when done's turn checks do not hold."""
    if done.checked_each_turn and missing:
        return Ending(turn, f"{why} after turn {turn}, but done did not hold: {'; '.join(missing)}", True)
    return Ending(turn, f"{why} after turn {turn}", False)


async def _end_goal(
    records: list[TurnRecord],
    ending: Ending | None,
    scenario: Scenario,
    number: int,
    judge: Judge | None,
    messages: Sequence[Message],
    recording: Recording | None,
    on_turn: TurnReporter | None,
) -> None:
    """Put the ``goal`` check (and a ``replay`` check, when it diverged) on the last turn, asking the
    judge's question first when done has one."""
    assert scenario.goal is not None and ending is not None
    done = scenario.goal.done
    answer: tuple[bool | None, str] | None = None
    if done.judge is not None and judge is not None and not ending.failed:
        if recording is not None:
            recording.at(scenario.name, number, records[-1].index)
        criterion = f"The answer to this question about the whole conversation is yes: {done.judge}"
        verdict = await judge.score(criterion, render_transcript(messages), records[-1].reply)
        answer = (verdict.passed, verdict.reason)
    checks = [goal_check(done, ending, answer, judge_missing=judge is None)]
    diverged = recording.divergence_check() if recording is not None else None
    if diverged is not None:
        checks.append(diverged)
    last = records[-1]
    records[-1] = replace(last, checks=(*last.checks, *checks))
    if on_turn is not None:
        on_turn(scenario, number, records[-1])


def _turn_record(
    index: int,
    said: str,
    result: TurnResult,
    seen: Observation,
    seconds: float,
    checks: Sequence[Check],
    noted: _Noted | None,
    began_in: str | None,
) -> TurnRecord:
    """The record of a turn played, scripted or simulated: what it did, its checks, and what the
    model answered during it."""
    return TurnRecord(
        index=index,
        user=said,
        reply=result.message,
        step=seen.step,
        completed=seen.completed,
        seconds=seconds,
        usage=result.usage,
        checks=tuple(checks),
        error=seen.error,
        answers=noted.take() if noted is not None else (),
        verdicts=tuple(seen.verdicts),
        events=tuple(seen.events),
        began_in=began_in,
    )


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
        # (Also for a first turn that failed: its record is filed with the session kept before it.)
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
