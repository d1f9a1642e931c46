"""Scenario files: a conversation in YAML, with what each turn must achieve.

```yaml
name: refund-once
flow: orders
env: {ORDERS_FLOW_CURRENT_DATE: "2026-11-20", PICOFLOW_ORDERS_DB: "{run_dir}/orders.sqlite3"}
caller: {principal: C-1001, visibilities: [partner], config: {}}
turns:
  - user: Please refund order 40004
    attach: [receipts/40004.pdf]          # optional: files sent with the message, beside this file
    scripted: [{tool: refund_order, args: {order_id: 40004}}]
    expect:
      step: ApproveRefund
      state: {ApproveRefund.order_id: 40004, Support.refund: {$absent: true}}
      tool_called: {name: refund_order, args: {order_id: 40004}, ok: true}
```

``load_scenarios`` (``picoflow.evals.loading``) validates files whole before anything runs; a mistake
is a ``ScenarioError`` naming the file, the turn and the field. Value matchers (``state`` values and
tool ``args``) are described in ``picoflow.evals.checks``.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from picoflow.attachments import Attachment, AttachmentLimits, check_attachments
from picoflow.context import Caller
from picoflow.evals.events import normalize_assertion
from picoflow.exceptions import AttachmentRefused, AttachmentTooLarge
from picoflow.messages import ToolCall

__all__ = [
    "CallerSpec",
    "CountRange",
    "Decision",
    "Expectations",
    "Goal",
    "GoalDone",
    "Scenario",
    "ScenarioError",
    "ScriptedCall",
    "ToolExpectation",
    "Turn",
]

#: Operators a matcher mapping may use instead of a literal value.
OPERATORS = frozenset({"$absent", "$regex", "$exact"})


class ScenarioError(Exception):
    """A scenario that cannot be played; the message names the file, the turn and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CallerSpec(_Strict):
    """Who talks to the flow: becomes ``picoflow.context.Caller``."""

    principal: str | None = None
    visibilities: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)

    def caller(self) -> Caller:
        return Caller(principal=self.principal, visibilities=frozenset(self.visibilities), config=self.config)


class ScriptedCall(_Strict):
    """One tool call of a scripted model response."""

    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)

    def tool_call(self) -> ToolCall:
        return ToolCall(self.tool, self.args)


class ToolExpectation(_Strict):
    """A tool call to look for among the calls the model made this turn."""

    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    """Matched as a subset: only the keys given are compared (see ``checks.matches``)."""
    ok: bool | None = None
    """True: the call was accepted and ran; False: it was refused (bad arguments, ``ToolError``)."""

    @model_validator(mode="before")
    @classmethod
    def _name_alone(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("args")
    @classmethod
    def _valid_matchers(cls, args: dict[str, Any] | None) -> dict[str, Any] | None:
        if args is not None:
            check_matcher(args)
        return args


class EventAssertion(_Strict):
    """Something that must (or must not) happen in a turn: a kind of event and a matcher on its
    record (see ``picoflow.evals.events``). Written ``{entered: Results}``, ``{tool: {name: x}}``…"""

    kind: str
    match: dict[str, Any]

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return normalize_assertion(value)

    @field_validator("match")
    @classmethod
    def _valid_matcher(cls, match: dict[str, Any]) -> dict[str, Any]:
        check_matcher(match)
        return match

    def describe(self) -> str:
        """``entered Results``, ``tool {"name": "refund", "ok": true}``: the kind and its matcher."""
        values = [
            value["$regex"] if isinstance(value, dict) and list(value) == ["$regex"] else value
            for value in self.match.values()
        ]
        if len(values) == 1 and isinstance(values[0], str):
            shown = values[0]
        else:
            shown = json.dumps(self.match, ensure_ascii=False, default=str)
        return f"{self.kind} {shown if len(shown) <= 60 else shown[:59] + '…'}"

    def subject(self, key: str) -> str | None:
        """The text the assertion names under ``key`` (a step, a tool), when it names one plainly."""
        value = self.match.get(key)
        return value if isinstance(value, str) else None


class CountRange(_Strict):
    """A count: an integer for an exact number, or ``{min, max}`` (either may be left out)."""

    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _exact(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "max": value}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> CountRange:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must not be above max")
        return self

    def holds(self, count: int) -> bool:
        return (self.min is None or count >= self.min) and (self.max is None or count <= self.max)

    def describe(self) -> str:
        if self.min == self.max:
            return str(self.min)
        if self.min is None:
            return f"at most {self.max}"
        if self.max is None:
            return f"at least {self.min}"
        return f"{self.min} to {self.max}"


def _state_matchers(state: dict[str, Any]) -> dict[str, Any]:
    """Each ``"<Step>.<key>[.<key>|.<index>...]": matcher`` of a state check, checked."""
    for path, expected in state.items():
        if not all(path.split(".")):
            raise ValueError(f"{path!r}: a state path is <Step>.<key>[.<key>|.<index>...]")
        try:
            check_matcher(expected)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return state


def _listed(value: Any) -> Any:
    """Let a single item stand for a list of one (``reply_contains: "(?i)yes"``)."""
    return [value] if isinstance(value, str | dict) else value


class Expectations(_Strict):
    """What must hold after a turn. Every field is optional; an empty ``expect`` only needs no error."""

    step: str | None = None
    """The session's current step after the turn."""
    completed: bool | None = None
    state: dict[str, Any] = Field(default_factory=dict)
    """``"<Step>.<key>[.<key>|.<index>...]": matcher`` on the steps' durable state."""
    reply_contains: list[str] = Field(default_factory=list)
    """Regular expressions that must each match the reply (``re.search``; ``(?i)`` ignores case)."""
    reply_not_contains: list[str] = Field(default_factory=list)
    tool_called: list[ToolExpectation] = Field(default_factory=list)
    """Each must match a call the model made this turn."""
    tool_not_called: list[ToolExpectation] = Field(default_factory=list)
    """None may match a call the model made this turn."""
    model_calls: CountRange | None = None
    field_set: dict[str, Any] = Field(default_factory=dict)
    """``field: matcher``: a reading this turn kept (or repaired into) the field with a matching
    value (``{}`` matches any value)."""
    field_dropped: dict[str, str | None] = Field(default_factory=dict)
    """``field: rule``: a reading this turn read the field and grounding dropped it, by that rule
    (``null``: by any rule)."""
    field_not_set: list[str] = Field(default_factory=list)
    """Fields no reading this turn kept."""
    pending: list[ToolExpectation] = Field(default_factory=list)
    """Each must match a call the turn ended waiting for approval on (``TurnResult.pending``):
    its tool, and its arguments as a subset."""
    pending_count: CountRange | None = None
    """How many approvals the turn ended waiting for (0: none)."""
    refused: str | None = None
    """The kind of error the turn must fail with (``approval_not_allowed``, ``approval_decided``…);
    without it, any error fails the turn."""
    judge: list[str] = Field(default_factory=list)
    """Criteria a judge model scores the reply against (``--judge``); not scored without one."""
    events: list[EventAssertion] = Field(default_factory=list)
    """What must happen this turn, in this order (other events may come between); see
    ``picoflow.evals.events`` for the kinds."""
    events_any_order: list[EventAssertion] = Field(default_factory=list)
    """What must happen this turn, in any order."""
    no_events: list[EventAssertion] = Field(default_factory=list)
    """What must not happen this turn."""

    _as_lists = field_validator(
        "reply_contains",
        "reply_not_contains",
        "tool_called",
        "tool_not_called",
        "pending",
        "judge",
        "field_not_set",
        "events",
        "events_any_order",
        "no_events",
        mode="before",
    )(_listed)

    @field_validator("reply_contains", "reply_not_contains")
    @classmethod
    def _regexes(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns

    @field_validator("field_set")
    @classmethod
    def _field_matchers(cls, wanted: dict[str, Any]) -> dict[str, Any]:
        for name, expected in wanted.items():
            try:
                check_matcher(expected)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return wanted

    _paths = field_validator("state")(_state_matchers)

    @field_validator("judge")
    @classmethod
    def _criteria(cls, criteria: list[str]) -> list[str]:
        if not all(criterion.strip() for criterion in criteria):
            raise ValueError("a judge criterion cannot be empty")
        return criteria


ScriptItem = str | ScriptedCall | list[ScriptedCall]


class Decision(_Strict):
    """A decision on an approval the turn before left pending (``engine.decide``), in place of a
    message: the structured yes or no no text can give."""

    decision: Literal["approve", "deny"]
    reason: str | None = None
    approval: int = Field(1, ge=1)
    """Which of the approvals the turn before ended waiting for, in its order (1: the first)."""
    caller: CallerSpec | None = None
    """Who decides (a supervisor: ``{principal: sam, visibilities: [staff]}``); the scenario's
    caller when left out."""


class Turn(_Strict):
    """One user message (or a decision on an approval), the scripted model's responses during that
    turn, and its expectations."""

    user: str | None = Field(None, min_length=1)
    decide: Decision | None = None
    scripted: list[ScriptItem] | dict[str, list[ScriptItem]] = Field(default_factory=list)
    """Model responses played with ``--model scripted``, in order: a text reply, ``{tool, args}``,
    or a list of those (parallel calls) — the format of ``--model scripted:FILE.json``. Or a mapping
    from step name to that step's own list, for turns whose steps ask in an order scheduling decides
    (parallel sub-steps): ``{Hotels: [...], Events: [...]}``."""
    expect: Expectations = Field(default_factory=Expectations)
    attach: list[str] = Field(default_factory=list)
    """Files sent with the message (``engine.run(..., attachments=)``), as paths relative to the
    scenario file; checked when the file is loaded (they exist, their type is accepted)."""

    _as_list = field_validator("attach", mode="before")(_listed)

    @field_validator("attach")
    @classmethod
    def _named(cls, paths: list[str]) -> list[str]:
        if not all(path.strip() for path in paths):
            raise ValueError("an attached file's path cannot be empty")
        return paths

    @field_validator("scripted", mode="before")
    @classmethod
    def _script_shape(cls, script: Any) -> Any:
        # Checked by hand: a union's error lists every alternative, which tells a scenario writer little.
        if isinstance(script, dict) and _is_call(script):
            raise ValueError("scripted is a list of model responses: write one tool call as [{tool: ...}]")
        if isinstance(script, dict):
            for step, items in script.items():
                if not isinstance(step, str) or not step.strip():
                    raise ValueError(f"{step!r}: a step's script is keyed by the step's name")
                if not isinstance(items, list):
                    raise ValueError(f"{step}: a step's script is a list of model responses")
                _check_responses(items, f"{step}: ")
        elif isinstance(script, list):
            _check_responses(script, "")
        else:
            raise ValueError(
                "scripted is a list of model responses, or a mapping from step name to such a list"
            )
        return script

    @model_validator(mode="after")
    def _message_or_decision(self) -> Turn:
        if (self.user is None) == (self.decide is None):
            raise ValueError("a turn is a message (user: ...) or a decision (decide: {decision: approve})")
        if self.decide is not None and self.attach:
            raise ValueError("files go with a message, not with a decision")
        return self

    @property
    def said(self) -> str:
        """The user's message, or the decision in words (``[approve #1: reason]``)."""
        if self.user is not None:
            return self.user
        assert self.decide is not None
        because = f": {self.decide.reason}" if self.decide.reason else ""
        return f"[{self.decide.decision} #{self.decide.approval}{because}]"

    @property
    def responses(self) -> int:
        """How many scripted responses the turn holds (of every step, for a script per step)."""
        if isinstance(self.scripted, dict):
            return sum(len(items) for items in self.scripted.values())
        return len(self.scripted)

    def script(self) -> list[Any] | dict[str, list[Any]]:
        """The responses as ``ScriptedModel`` items: a list, or a list per step."""
        if isinstance(self.scripted, dict):
            return {step: _model_items(items) for step, items in self.scripted.items()}
        return _model_items(self.scripted)


def _check_responses(items: list[Any], where: str) -> None:
    for position, item in enumerate(items, 1):
        calls = item if isinstance(item, list) else [item]
        if isinstance(item, str) or (calls and all(_is_call(call) for call in calls)):
            continue
        extra = sorted(
            {str(key) for call in calls if isinstance(call, dict) for key in call} - {"tool", "args"}
        )
        unknown = f"unknown key(s) {', '.join(extra)}; " if extra else ""
        raise ValueError(
            f"{where}response {position}: {unknown}write a text reply, {{tool: name, args: {{...}}}}, or a "
            "list of such tool calls"
        )


def _model_items(items: list[ScriptItem]) -> list[Any]:
    return [
        item
        if isinstance(item, str)
        else [call.tool_call() for call in item]
        if isinstance(item, list)
        else item.tool_call()
        for item in items
    ]


def _is_call(value: Any) -> bool:
    return isinstance(value, ScriptedCall) or (
        isinstance(value, dict)
        and isinstance(value.get("tool"), str)
        and set(value) <= {"tool", "args"}
        and isinstance(value.get("args", {}), dict)
    )


PassPolicy = Literal["all", "majority"] | Annotated[int, Field(ge=1)]
"""``all`` runs must pass, a ``majority`` (more than half), or at least N runs."""


def runs_needed(policy: PassPolicy, runs: int) -> int:
    """How many of ``runs`` must pass under ``policy``."""
    if policy == "all":
        return runs
    if policy == "majority":
        return runs // 2 + 1
    return policy


class GoalDone(_Strict):
    """What counts as done for a simulated user: the session's step, whether the flow completed, its
    state (matchers as in ``Expectations.state``), checked after every turn; and/or a yes or no
    question the ``--judge`` model answers over the whole conversation once it is over."""

    step: str | None = None
    completed: bool | None = None
    state: dict[str, Any] = Field(default_factory=dict)
    """``"<Step>.<key>[.<key>|.<index>...]": matcher`` on the steps' durable state."""
    judge: str | None = None
    """A yes or no question about the conversation ("Did the assistant book a room under $150?");
    not scored without a judge model."""

    _paths = field_validator("state")(_state_matchers)

    @field_validator("judge")
    @classmethod
    def _question(cls, question: str | None) -> str | None:
        if question is not None and not question.strip():
            raise ValueError("the judge's question cannot be empty")
        return question

    @model_validator(mode="after")
    def _something(self) -> GoalDone:
        if self.step is None and self.completed is None and not self.state and self.judge is None:
            raise ValueError("say what counts as done: step, completed, state and/or judge")
        return self

    @property
    def checked_each_turn(self) -> bool:
        """Whether part of it is checked after every turn (step, completed or state)."""
        return self.step is not None or self.completed is not None or bool(self.state)


class Goal(_Strict):
    """A user a model plays (``goal:`` in place of ``turns:``): who they are, what they know and
    want, and when they have it. The conversation goes on until ``done`` holds, the user says it is
    over, or ``max_turns`` is reached (the run fails, saying so)."""

    persona: str = Field(min_length=1)
    """Who the user is and how they talk ("a retired teacher, polite, writes short messages")."""
    knows: str | dict[str, Any] = ""
    """What the user knows, as text or as facts (``{order: 40004, total: "$89.00"}``)."""
    wants: str = Field(min_length=1)
    done: GoalDone
    max_turns: int = Field(12, ge=1, le=100)
    opening: str | None = Field(None, min_length=1)
    """The user's first message; the model writes it when left out."""
    language: str | None = Field(None, min_length=1)
    """The language the user writes in ("German"); the model's choice when left out."""


class Scenario(_Strict):
    """A conversation to play against a flow, run after run, each in a fresh session."""

    name: str = Field(min_length=1)
    flow: str | None = None
    """The flow to talk to; ``--flow`` (``default_flow=``) names it when the file does not."""
    description: str = ""
    category: str = ""
    """What kind of conversation this is (``all-in-one``, ``typos``, ``goodbye``…): the report gives a
    pass rate per category, so a flow tuned to one way of speaking shows where it breaks."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables set only while a run plays (restored after); ``{run_dir}`` in a value
    becomes a fresh empty folder of that run, e.g. for a database file the flow creates."""
    caller: CallerSpec = Field(default_factory=CallerSpec)
    turns: list[Turn] = Field(default_factory=list, min_length=1)
    goal: Goal | None = None
    """A user a model plays, in place of ``turns`` (``--user-model``)."""
    runs: int | None = Field(None, ge=1)
    """Plays of this scenario; ``--runs`` (``run_eval(runs=)``) when left out."""
    pass_policy: PassPolicy | None = Field(None, alias="pass")
    """When the scenario passes, over its runs: ``all`` of them, a ``majority``, or at least N.
    Left out, its runs count toward ``--min-pass`` (the share of runs of such scenarios)."""

    _source: str = PrivateAttr(default="<scenario>")
    _folder: Path = PrivateAttr(default_factory=Path)
    _file: str = PrivateAttr(default="<scenario>")

    @field_validator("env", mode="before")
    @classmethod
    def _env_text(cls, env: Any) -> Any:
        # YAML reads 2027-07-15 as a date and 3 as a number; a variable's value is their text.
        if not isinstance(env, dict):
            return env
        converted: dict[Any, Any] = {}
        for key, value in env.items():
            if isinstance(value, bool) or not isinstance(value, str | int | float | date):
                raise ValueError(f"{key}: an environment value is text, a number or a date")
            converted[key] = value.isoformat() if isinstance(value, date | datetime) else str(value)
        return converted

    @model_validator(mode="after")
    def _reachable_policy(self) -> Scenario:
        policy = self.pass_policy
        if isinstance(policy, int) and self.runs is not None and policy > self.runs:
            raise ValueError(f"pass: {policy} cannot be met in {self.runs} run(s)")
        return self

    def runs_or(self, default: int) -> int:
        """Plays of this scenario: its own ``runs``, else ``default``."""
        return self.runs or default

    @model_validator(mode="after")
    def _turns_or_goal(self) -> Scenario:
        if self.goal is not None and self.turns:
            raise ValueError("give turns: (the conversation) or goal: (a simulated user), not both")
        if self.goal is None and not self.turns:
            raise ValueError("give turns: (the conversation) or goal: (a simulated user)")
        return self

    @property
    def source(self) -> str:
        """The file (and document) the scenario was read from."""
        return self._source

    @property
    def suite(self) -> str:
        """The name of the file the scenario was read from: the suite it belongs to."""
        return Path(self._file).name

    def with_source(self, source: str) -> Scenario:
        """This scenario, read from ``source`` (named in error messages and reports); its turns'
        ``attach`` paths are relative to that file's folder, and must name files a turn may carry.

        Raises ``ScenarioError`` naming the turn and the file when one does not.
        """
        copy = self.model_copy()
        copy._source = source
        # The loader names the nth document of a file "FILE (document n)"; the folder is FILE's.
        copy._file = re.sub(r" \(document \d+\)$", "", source)
        copy._folder = Path(copy._file).parent
        for index in range(1, len(copy.turns) + 1):
            copy.attachments(index)
        return copy

    def attachments(self, turn: int) -> list[Attachment]:
        """The files of turn ``turn`` (1-based), read from disk; ``ScenarioError`` for a file that is
        missing or that a turn may not carry (its type, its size)."""
        found = []
        for name in self.turns[turn - 1].attach:
            path = self._folder / name
            where = f"{self.where(turn)}, attach: {name}"
            if not path.is_file():
                raise ScenarioError(f"{where}: no such file (paths are relative to the scenario file)")
            found.append(Attachment.from_path(path))
        try:
            check_attachments(found, AttachmentLimits())
        except (AttachmentRefused, AttachmentTooLarge) as refused:
            raise ScenarioError(f"{self.where(turn)}, attach: {refused}") from None
        return found

    @property
    def scripted(self) -> bool:
        """Whether any turn has scripted model responses."""
        return any(turn.responses for turn in self.turns)

    def where(self, turn: int | None = None) -> str:
        """``file: turn 3 ("Please refund…")`` for error messages (``turn`` is 1-based)."""
        if turn is None:
            return self.source
        return f"{self.source}: turn {turn} ({short(self.turns[turn - 1].said)})"


def check_matcher(value: Any) -> None:
    """Refuse a mapping that uses ``$`` operators wrongly (anywhere inside ``value``)."""
    if isinstance(value, list):
        for item in value:
            check_matcher(item)
        return
    if not isinstance(value, dict):
        return
    operators = [key for key in value if isinstance(key, str) and key.startswith("$")]
    if not operators:
        for item in value.values():
            check_matcher(item)
        return
    if len(value) != 1 or operators[0] not in OPERATORS:
        raise ValueError(
            f"a matcher is one of {{$absent: true|false}}, {{$regex: pattern}}, {{$exact: value}}; "
            f"got keys {sorted(map(str, value))}"
        )
    operator, operand = operators[0], value[operators[0]]
    if operator == "$absent" and not isinstance(operand, bool):
        raise ValueError("$absent takes true (the key is missing) or false (present, any value)")
    if operator == "$regex":
        if not isinstance(operand, str):
            raise ValueError("$regex takes a regular expression")
        try:
            re.compile(operand)
        except re.error as exc:
            raise ValueError(f"{operand!r} is not a regular expression: {exc}") from None


def short(text: str, width: int = 40) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[: width - 1] + "…")
