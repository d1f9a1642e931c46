"""Simulated users: a model plays the user of a scenario's ``goal:`` until the goal is done.

The model is asked, turn after turn, for what the user types next. It is shown the conversation
with the roles swapped, as a chat model expects to see its own side: the assistant's replies come
as the messages it answers, its own earlier messages as its answers. Its prompt says plainly that
it is the customer and never the assistant, and it answers with a structured output,
``{"message": "...", "finished": true|false}``: finished when it has what it wanted or the assistant
cannot help further. A small model still slips out of its role at times, so code checks too: an
empty message, or one that repeats the assistant's last reply nearly word for word, is asked again
once with a reminder; a second slip ends the run ("the simulated user left its role").

``done`` is checked after every turn (its step, completed and state parts, with the matchers of
``Expectations.state``); its judge question is asked once, when the conversation is over.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from picoflow._schema import json_schema, strict_variant
from picoflow.evals.checks import Check, lookup, matches
from picoflow.evals.results import EvalResult, RunRecord, ScenarioResult
from picoflow.evals.scenario import Goal, GoalDone, Scenario, ScenarioError
from picoflow.flow import FlowSpec
from picoflow.messages import Message, ModelRequest, OutputSchema
from picoflow.models.base import Model
from picoflow.usage import Usage

__all__ = [
    "SimulatedUser",
    "UserLeft",
    "UserTurn",
    "check_goal_names",
    "goal_check",
    "transcript_markdown",
    "unmet",
    "write_transcripts",
]

SYSTEM = """You play a user who writes to a company's assistant, to test the assistant. You are the \
user: the customer. You are never the assistant.

Who you are: {persona}
What you know:
{knows}
What you want: {wants}
{language}
The messages you are answering are the assistant's. Write the next message the user types:
- one short message, in the user's own words, as they would type it;
- answer the assistant's questions with what you know; when you do not know something, say so, \
and never make facts up;
- never write as the assistant: do not offer help, list options, confirm anything or repeat the \
assistant's words;
- "finished" is true when this message is your last: you have what you wanted, or the assistant \
cannot help you any further. "message" may then be empty, when you have nothing more to say.

Answer with one JSON object: {{"message": "<what you type next>", "finished": true or false}}."""

#: What the simulator is shown before the conversation starts, in place of an assistant's message.
START = "[The conversation begins. Write your first message to the assistant.]"

REMINDER = (
    "[{problem}. You are the customer, not the assistant: write what you, the customer, type next to "
    "the assistant, in your own words.]"
)

#: A message this similar to the assistant's last reply (0-100, ``rapidfuzz.fuzz.ratio``) is the
#: simulator playing the assistant.
ECHO_RATIO = 90.0


class UserTurn(BaseModel):
    """What the simulated user types next, and whether the conversation is over for them."""

    model_config = ConfigDict(extra="forbid")

    message: str
    finished: bool


def _output_schema() -> OutputSchema:
    schema = json_schema(UserTurn)
    strict = strict_variant(schema)
    return OutputSchema(
        "UserTurn", strict or schema, (UserTurn.__doc__ or "").strip(), strict=strict is not None
    )


class UserLeft(Exception):
    """The simulated user gave no usable message: the run ends, and this is why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def similarity(a: str, b: str) -> float:
    """How alike two texts are, 0 to 100 (``rapidfuzz.fuzz.ratio``; ``difflib``'s ratio without it)."""
    try:
        from rapidfuzz import fuzz
    except ImportError:  # rapidfuzz is not a dependency of picoflow itself
        return 100.0 * difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    return float(fuzz.ratio(a, b))


SENTENCE_END = re.compile(r"(?<=[.?!。？！؟])\s+")
"""Where a reply's sentences end, in the scripts the demos write."""
SHORTEST_ECHO = 20
"""Sentences shorter than this ("One bed.") may be said back by a user in their own right."""


def echoes(said: str, reply: str) -> bool:
    """Whether the user's message repeats the assistant's reply, or one of its sentences ("Which
    hotel would you like to book?" said back to the assistant): the simulator playing the assistant."""
    if similarity(said, reply.strip()) >= ECHO_RATIO:
        return True
    lines = [line.strip() for line in reply.splitlines()]
    parts = {part.strip() for line in lines for part in (line, *SENTENCE_END.split(line))}
    said_back = [part for part in parts if len(part) >= SHORTEST_ECHO]
    return len(said) >= SHORTEST_ECHO and any(similarity(said, part) >= ECHO_RATIO for part in said_back)


class SimulatedUser:
    """Asks ``model`` for the user's next message; ``usage`` adds up what that cost."""

    def __init__(self, goal: Goal, model: Model) -> None:
        self.goal = goal
        self.model = model
        self.usage = Usage()
        self._output = _output_schema()
        self._system = system_prompt(goal)

    async def next(self, conversation: Sequence[tuple[str, str]]) -> UserTurn:
        """The user's next message, given the conversation so far as ``(role, text)`` pairs
        (``user``: what the simulated user sent, ``assistant``: the flow's reply).

        Raises ``UserLeft`` when the model's answer is unusable twice, or the model fails.
        """
        messages = swapped(conversation)
        last_reply = next((text for role, text in reversed(conversation) if role == "assistant"), "")
        problem = ""
        for attempt in range(2):
            request = ModelRequest(system=self._system, messages=list(messages), output=self._output)
            try:
                response = await self.model.request(request)
            except Exception as exc:
                raise UserLeft(f"the user model failed: {type(exc).__name__}: {exc}") from exc
            self.usage.add(response.usage)
            text = _without_fences(response.text)
            try:
                turn = UserTurn.model_validate_json(text)
            except ValidationError as error:
                problem = "; ".join(
                    f"{'.'.join(map(str, item['loc'])) or 'answer'}: {item['msg']}" for item in error.errors()
                )
                if attempt == 0:
                    messages += [
                        Message.assistant(response.text),
                        Message.user(f"[That is not the required JSON object ({problem}). Answer again.]"),
                    ]
                    continue
                raise UserLeft(f"the simulated user gave no usable answer ({problem})") from None
            said = turn.message.strip()
            if turn.finished and not said:
                return UserTurn(message="", finished=True)  # nothing more to say: the conversation ends
            if not said:
                problem = "Your message was empty"
            elif last_reply and echoes(said, last_reply):
                problem = "Your message repeated the assistant's reply"
            else:
                return UserTurn(message=said, finished=turn.finished)
            if attempt == 0:
                messages += [Message.assistant(response.text), Message.user(REMINDER.format(problem=problem))]
        raise UserLeft(f"the simulated user left its role ({problem.removeprefix('Your ').lower()})")


def system_prompt(goal: Goal) -> str:
    """The simulator's instructions for ``goal``."""
    if isinstance(goal.knows, Mapping):
        knows = "\n".join(f"- {key}: {value}" for key, value in goal.knows.items()) or "- nothing more"
    else:
        knows = goal.knows.strip() or "nothing more than what you want"
    language = f"You write in {goal.language}.\n" if goal.language else ""
    persona, wants = goal.persona.strip(), goal.wants.strip()
    return SYSTEM.format(persona=persona, knows=knows, wants=wants, language=language)


def swapped(conversation: Sequence[tuple[str, str]]) -> list[Message]:
    """The conversation as the simulator's own chat: the assistant's replies as what it answers, its
    own messages as its answers; it always opens with ``START`` so the roles alternate."""
    messages = [Message.user(START)]
    for role, text in conversation:
        messages.append(Message.assistant(text) if role == "user" else Message.user(text))
    return messages


def _without_fences(text: str) -> str:
    match = re.fullmatch(r"\s*```(?:json)?\s*(.*?)\s*```\s*", text, re.DOTALL)
    return match.group(1) if match else text.strip()


def unmet(done: GoalDone, states: Mapping[str, Any], step: str | None, completed: bool) -> list[str]:
    """The parts of ``done`` checked each turn that do not hold, in words (empty: all hold)."""
    missing: list[str] = []
    if done.step is not None and step != done.step:
        missing.append(f"the step is {step} (done: {done.step})")
    if done.completed is not None and completed is not done.completed:
        missing.append(f"completed is {str(completed).lower()} (done: {str(done.completed).lower()})")
    for path, expected in done.state.items():
        found = lookup(states, path)
        if not matches(expected, found):
            shown = "absent" if matches({"$absent": True}, found) else repr(found)
            missing.append(f"state {path} is {shown} (done: {expected!r})")
    return missing


@dataclass(frozen=True, slots=True)
class Ending:
    """How a simulated conversation ended, before the judge's question."""

    turns: int
    why: str
    """In words: "done held after turn 3", "the turn limit (12) was reached"..."""
    failed: bool


def goal_check(
    done: GoalDone, ending: Ending, answer: tuple[bool | None, str] | None, *, judge_missing: bool
) -> Check:
    """The final ``goal`` check of a run: failed when the conversation ended without done holding
    (or the judge said no), unscored when only a judge could tell and there is none."""
    expected = done.model_dump(exclude_none=True, exclude_defaults=True)
    notes = [ending.why]
    status: Any = "failed" if ending.failed else "passed"
    if done.judge is not None and not ending.failed:
        if judge_missing:
            notes.append("the judge's question was not asked: no judge model (--judge)")
            status = "unscored"
        elif answer is None or answer[0] is None:
            status = "unscored"
            notes.append(f"the judge gave no answer ({answer[1] if answer else 'not asked'})")
        else:
            notes.append(f"judge: {'yes' if answer[0] else 'no'}, {answer[1]}")
            status = "passed" if answer[0] else "failed"
    return Check("goal", status, expected, {"turns": ending.turns}, "; ".join(notes))


def check_goal_names(scenario: Scenario, spec: FlowSpec) -> None:
    """Refuse steps in ``done`` the flow does not have (its step, its state paths)."""
    if scenario.goal is None:
        return
    done = scenario.goal.done
    named = [("goal.done.step", done.step)] if done.step is not None else []
    named += [(f"goal.done.state.{path}", path.split(".", 1)[0]) for path in done.state]
    for where, step in named:
        if step not in spec.steps:
            raise ScenarioError(
                f"{scenario.source}, {where}: no step {step!r} in flow {spec.name}; steps: "
                f"{', '.join(spec.steps)}"
            )


def transcript_markdown(result: ScenarioResult, run: RunRecord) -> str:
    """One simulated run as a page a person reads: the goal, the outcome, then who said what."""
    scenario = result.scenario
    goal = scenario.goal
    assert goal is not None
    final = next((c for t in reversed(run.turns) for c in t.checks if c.name in ("goal", "replay")), None)
    outcome = "passed" if run.passed else "failed"
    lines = [
        f"# {scenario.name}, run {run.index}",
        "",
        f"- flow: {result.flow}",
        f"- persona: {goal.persona}",
        f"- wants: {goal.wants}",
        f"- done: {goal.done.model_dump(exclude_none=True, exclude_defaults=True)}",
        f"- result: **{outcome}** after {len(run.turns)} turn(s)"
        + (f": {final.note}" if final is not None and final.note else ""),
    ]
    failures = [f"{c.name} (turn {t.index})" for t in run.turns for c in t.failures if c.name != "goal"]
    if failures:
        lines.append(f"- failed checks: {', '.join(failures)}")
    lines.append("")
    for entry in run.transcript:
        text = str(entry.get("text", ""))
        if entry.get("role") == "user":
            last = ", their last message" if entry.get("last") else ""
            lines += [f"**User** (turn {entry.get('turn')}{last}):", "", _quoted(text or "(nothing)"), ""]
        else:
            step = f", {entry['step']}" if entry.get("step") else ""
            label = f"**Assistant** (turn {entry.get('turn')}{step})"
            lines += [f"{label}:", "", _quoted(text or "(nothing)"), ""]
    return "\n".join(lines).rstrip() + "\n"


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines() or [""])


def write_transcripts(result: EvalResult, folder: Path) -> list[Path]:
    """A Markdown file per simulated run (``<scenario>-run<N>.md``) in ``folder``; the files written."""
    written: list[Path] = []
    for scenario in result.scenarios:
        if scenario.scenario.goal is None:
            continue
        for run in scenario.runs:
            folder.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9._-]+", "-", scenario.scenario.name).strip("-") or "scenario"
            path = folder / f"{name}-run{run.index}.md"
            path.write_text(transcript_markdown(scenario, run), encoding="utf-8")
            written.append(path)
    return written
