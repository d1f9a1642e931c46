"""One recorded turn as a replay uses it: the model answers it holds, each under its request as
the timeline recorded it, and the tool calls that ran in it.

A timeline keeps a model request compactly (``picoflow.timeline.ModelEntry``): the system prompt
only when it changed, and only the messages a request adds to the previous one of its step. Here
each request is made whole again, per (sub-step run, step), and compared with a request asked now
the way the timeline recorded it: a text the recording cut (longer than ``max_text_chars``) fits
when it begins the same and is as long; a part it hid (``[secret]``, ``[redacted]``) never fits.
An answer the recording cut or hid a part of is never given: it would not be the model's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from picoflow.context import PrincipalFilter
from picoflow.engine import LOCAL_TOOLS, CallResult, LocalExecutor, SessionTurns, ToolJob
from picoflow.exceptions import ModelError
from picoflow.flow import StepSpec
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall
from picoflow.models.base import Model
from picoflow.outcomes import Outcome, direct, direct_to, go
from picoflow.request_diff import describe_difference
from picoflow.step import Step
from picoflow.timeline import (
    REDACTED,
    SECRET,
    CallShown,
    FileShown,
    Left,
    MessageShown,
    ModelEntry,
    StateEntry,
    ToolEntry,
    TurnTimeline,
)
from picoflow.usage import Usage

_CUT = re.compile(r"… \[\d+ more characters\]")
_CUT_END = re.compile(r"(.*)… \[(\d+) more characters\]", re.DOTALL)
NOT_RUN_GATED = (
    "Not run in replay: {tool} needs a person's approval, and the recording holds no run of this "
    "call to stand in for it."
)
NOT_RUN_TOOLS = "Not run in replay: tools do not run, and the recording holds no run of this call."


class NotRecorded(ModelError):
    """A model request the recording does not hold, with no fallback model to ask."""

    kind = "replay_diverged"
    retryable = False
    recorded = False  # what the replay reports, in its own words: not a failure to log as one


def _kept_whole(*texts: str) -> bool:
    """Nothing of ``texts`` was cut or hidden when the timeline was recorded."""
    return not any(SECRET in text or REDACTED in text or _CUT.search(text) for text in texts)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _shown_text(shown: MessageShown) -> str:
    return _canonical(shown.model_dump(mode="json"))


def fits(recorded: Any, asked: Any) -> bool:
    """Whether ``asked`` is what the timeline recorded as ``recorded`` (a cut text: the same start,
    and as many characters after it as the mark says)."""
    if isinstance(recorded, str) and isinstance(asked, str):
        if recorded == asked:
            return True
        cut = _CUT_END.fullmatch(recorded)
        return (
            cut is not None
            and asked.startswith(cut.group(1))
            and len(asked) - len(cut.group(1)) == int(cut.group(2))
        )
    if isinstance(recorded, dict) and isinstance(asked, dict):
        return recorded.keys() == asked.keys() and all(fits(recorded[k], asked[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(asked, list):
        return len(recorded) == len(asked) and all(fits(r, a) for r, a in zip(recorded, asked, strict=True))
    return bool(recorded == asked)


def shown(message: Message) -> MessageShown:
    """``message`` as a timeline shows it in a model request."""
    return MessageShown(
        role=message.role,
        content=message.content,
        kind=message.kind or None,
        name=message.name if message.role == "tool" else None,
        is_error=message.is_error if message.role == "tool" else False,
        tool_calls=[
            CallShown(id=c.id, name=c.name, args=to_jsonable_python(c.args, fallback=repr))
            for c in message.tool_calls
        ],
        files=[
            FileShown(name=ref.name, media_type=ref.media_type, size=ref.size) for ref in message.attachments
        ],
    )


@dataclass(frozen=True, slots=True)
class Parts:
    """A request's parts, compared as they are (``picoflow.request_diff.RequestParts``)."""

    step: str | None
    system: str | None
    messages: tuple[str, ...]
    tools: Mapping[str, str]
    output: str | None
    role: str = "flow"

    @staticmethod
    def of(request: ModelRequest) -> Parts:
        return Parts(
            request.step,
            request.system,
            tuple(_shown_text(shown(message)) for message in request.messages),
            {tool.name: tool.name for tool in request.tools},
            request.output.name if request.output is not None else None,
        )

    def fit(self, asked: Parts) -> Parts:
        """``asked`` with each part that fits this recorded one written as recorded: what is left
        different is what differs."""
        messages = tuple(
            mine
            if index < len(self.messages) and _fits_text(mine := self.messages[index], theirs)
            else theirs
            for index, theirs in enumerate(asked.messages)
        )
        system = self.system if fits(self.system, asked.system) else asked.system
        return Parts(asked.step, system, messages, asked.tools, asked.output)


def _fits_text(recorded: str, asked: str) -> bool:
    return recorded == asked or fits(json.loads(recorded), json.loads(asked))


@dataclass(slots=True)
class _Answer:
    """One recorded request, made whole, and its answer."""

    parts: Parts
    entry: ModelEntry
    whole: bool
    """Nothing of the answer was cut or hidden."""
    used: bool = False

    @property
    def answered(self) -> bool:
        return self.entry.error is not None or self.entry.latency_ms is not None

    def response(self) -> ModelResponse:
        entry = self.entry
        if entry.error is not None:
            raise ModelError(f"as recorded: {entry.error}", step=entry.step)
        usage = entry.usage
        return ModelResponse(
            text=entry.text,
            tool_calls=[
                ToolCall(c.name, c.args if c.args is not None else {}, c.id) for c in entry.tool_calls
            ],
            usage=Usage(
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
            ),
            finish_reason=entry.finish_reason,
            model=entry.model,
            answered_by=entry.answered_by,
        )


def _answers(turn: TurnTimeline) -> list[_Answer]:
    previous: dict[tuple[str | None, str], tuple[str | None, list[str]]] = {}
    found: list[_Answer] = []
    for entry in turn.entries:
        if not isinstance(entry, ModelEntry):
            continue
        key = (entry.parent, entry.step)
        before = previous.get(key)
        system = entry.system if entry.system is not None or before is None else before[0]
        messages = (before[1][: entry.history] if before is not None else []) + [
            _shown_text(message) for message in entry.messages
        ]
        previous[key] = (system, messages)
        parts = Parts(entry.step, system, tuple(messages), {name: name for name in entry.tools}, entry.output)
        answer = _canonical([entry.text, [c.model_dump() for c in entry.tool_calls]])
        found.append(_Answer(parts, entry, _kept_whole(answer)))
    return found


@dataclass(slots=True)
class RecordedTurn:
    """One recorded turn while it is replayed: which of its answers and tool runs were used."""

    timeline: TurnTimeline
    answers: list[_Answer] = field(init=False)
    tools: list[tuple[int, ToolEntry]] = field(init=False)
    tools_used: set[int] = field(default_factory=set)
    recorded_answers: int = 0
    fallback_answers: int = 0
    missed: str | None = None
    """What the first request the recording did not hold differs in."""

    def __post_init__(self) -> None:
        self.answers = _answers(self.timeline)
        self.tools = [
            (index, entry)
            for index, entry in enumerate(self.timeline.entries)
            if isinstance(entry, ToolEntry) and entry.ok is not None
        ]

    # --- model answers --------------------------------------------------------------------------

    def answer(self, request: ModelRequest) -> ModelResponse | None:
        """The recorded answer to ``request``, or None (``missed`` then says what differs)."""
        asked = Parts.of(request)
        for answer in self.answers:
            if (
                answer.used
                or not answer.whole
                or not answer.answered
                or answer.parts != answer.parts.fit(asked)
            ):
                continue
            answer.used = True
            self.recorded_answers += 1
            return answer.response()
        if self.missed is None:
            self.missed = self._differs(asked)
        return None

    def _differs(self, asked: Parts) -> str:
        unused = [answer for answer in self.answers if not answer.used]
        same_step = [answer for answer in unused if answer.parts.step == asked.step]
        where = f"step {asked.step}"
        if not (same_step or unused):
            return f"{where}: the recording asked no more in this turn"
        nearest = (same_step or unused)[0]
        said = describe_difference(nearest.parts, nearest.parts.fit(asked))
        if said == "the request" and not nearest.whole:
            said = "the answer, which the recording cut or hid part of (it cannot be given)"
        elif said == "the request" and not nearest.answered:
            said = "the request, which the recording holds no answer to"
        return f"{where}: {said}"

    # --- tool calls -----------------------------------------------------------------------------

    def stand_in(
        self, job: ToolJob, state_of: Callable[[str], MutableMapping[str, Any]], not_run: str
    ) -> Any:
        """What an approval-gated call (or, with tools off, any call) gives instead of running:
        the recorded run of the same call in this turn, as its outcome (what the model was told,
        where the conversation went, the reply and the destination's state), or ``not_run``."""
        call = job.calls[0]
        wanted = _canonical(to_jsonable_python(call.args, fallback=repr))
        for index, entry in self.tools:
            if index in self.tools_used or entry.name != call.name or _canonical(entry.args) != wanted:
                continue
            self.tools_used.add(index)
            return self._recorded_outcome(index, entry, call, state_of)
        return CallResult(call, not_run.format(tool=call.name), is_error=True)

    def _recorded_outcome(
        self,
        index: int,
        entry: ToolEntry,
        call: ToolCall,
        state_of: Callable[[str], MutableMapping[str, Any]],
    ) -> Any:
        content = entry.result or ""
        if not entry.ok:
            return CallResult(call, content, is_error=True)
        destination: str | None = None
        asked_after = False
        for later in self.timeline.entries[index + 1 :]:
            if later.parent != entry.parent:
                continue
            if isinstance(later, ModelEntry):
                asked_after = True
                break
            if isinstance(later, Left) and destination is None and later.step == entry.step:
                destination = later.to
        ended_here = not asked_after and entry.parent is None and self.timeline.outcome == "replied"
        if destination is not None:  # what the handler did to its own step's state, as recorded
            own = state_of(entry.step)
            for key, value in _state_after(self.timeline, entry.step, own).items():
                own[key] = value
            for key in _removed(self.timeline, entry.step):
                own.pop(key, None)
        outcome: Outcome
        if ended_here:
            reply = self.timeline.reply
            outcome = direct_to(destination, reply) if destination else direct(reply)
        elif destination is not None:
            outcome = go(destination)
        else:
            return CallResult(call, content)
        values = _state_after(self.timeline, destination or entry.step, state_of(destination or entry.step))
        if values:
            outcome = outcome.with_state(values)
        return outcome.with_tool_feedback(content)


def _removed(turn: TurnTimeline, step: str) -> list[str]:
    """The top-level keys of ``step``'s state the recorded turn removed."""
    return [
        change.key
        for entry in turn.entries
        if isinstance(entry, StateEntry) and entry.step == step
        for change in entry.changes
        if change.removed and "." not in change.key
    ]


def _state_after(turn: TurnTimeline, step: str, current: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level keys of ``step``'s state the recorded turn changed, with the values it left
    (nested changes applied to the current value); removed keys are left out."""
    values: dict[str, Any] = {}
    for entry in turn.entries:
        if not (isinstance(entry, StateEntry) and entry.step == step):
            continue
        for change in entry.changes:
            if change.removed:
                continue
            top, _, rest = change.key.partition(".")
            if not rest:
                values[top] = change.after
                continue
            whole = values.get(top, to_jsonable_python(current.get(top), fallback=repr))
            if not isinstance(whole, dict):
                continue
            whole = json.loads(json.dumps(whole))
            node = whole
            *path, last = rest.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = change.after
            values[top] = whole
    return values


class RecordedModel(Model):
    """Answers each request from the turn being replayed, where it holds the same request; else
    the fallback model answers it, or, without one, the request fails (``NotRecorded``)."""

    def __init__(self, fallback: Model | None) -> None:
        self.fallback = fallback
        self.turn: RecordedTurn | None = None
        self.name = "replay"
        if fallback is not None:
            self.grounding = fallback.grounding
            self.context_window = fallback.context_window
            self.output_reserve = fallback.output_reserve

    async def request(self, request: ModelRequest) -> ModelResponse:
        turn = self.turn
        assert turn is not None, "a replayed turn's recording is set before it runs"
        found = turn.answer(request)
        if found is not None:
            return found
        if self.fallback is None:
            raise NotRecorded(f"not in the recording: {turn.missed}", step=request.step)
        turn.fallback_answers += 1
        return await self.fallback.request(request)

    async def aclose(self) -> None:
        """The fallback model is its owner's to close: it serves every session replayed."""


class ReplayTools:
    """The ``ToolRunner`` of a replay: an approval-gated tool never runs (its recorded run stands
    in for it); the others run against the current code, unless ``run_tools`` is False."""

    def __init__(self, run_tools: bool = True) -> None:
        self.run_tools = run_tools
        self.turn: RecordedTurn | None = None

    async def run(self, ws: Any, step: Step, spec: StepSpec, job: ToolJob) -> Any:
        gated = any(spec.tools[call.name].approval is not None for call in job.calls)
        if not gated and self.run_tools:
            return await LOCAL_TOOLS.run(ws, step, spec, job)
        assert self.turn is not None, "a replayed turn's recording is set before it runs"
        ws.usage.tool_calls += 1
        for call in job.calls:  # what stands in shows as the call would (its arguments, its result)
            ws.config.observer.tool_started(spec.name, call)
        return self.turn.stand_in(
            job,
            ws.state_for,
            NOT_RUN_GATED if gated else NOT_RUN_TOOLS,
        )


class ReplayExecutor:
    """Runs a replay's turns here, their tool calls through ``ReplayTools``."""

    def __init__(self, tools: ReplayTools) -> None:
        self.tools = tools
        self._turns: SessionTurns | None = None

    def _own(self, turns: SessionTurns) -> SessionTurns:
        if self._turns is None:
            self._turns = SessionTurns(turns.host, tools=self.tools)
        return self._turns

    async def take(self, turns: SessionTurns, request: Any, observer: Any) -> Any:
        return await self._own(turns).take(request, observer)

    async def decide(self, turns: SessionTurns, request: Any, observer: Any) -> Any:
        return await self._own(turns).take(request, observer)

    async def cancel(
        self, turns: SessionTurns, session_id: str, revision: int | None, principal: PrincipalFilter
    ) -> str | None:
        return await LocalExecutor().cancel(self._own(turns), session_id, revision, principal)
