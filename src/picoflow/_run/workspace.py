"""A turn's workspace: its frozen configuration, its private working copy of the session, and the
services steps reach.

Nothing here touches the store. The engine commits the workspace's session (and the messages it
appended) only when the whole turn succeeded, so a failure anywhere leaves the stored session as
it was. Steps and the flow object reach the turn through this class (``StepRuntime``,
``FlowRuntime``); everything else of the runner is a function taking it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from pydantic_core import to_jsonable_python

from picoflow._frozen import quick_init
from picoflow._run.cancel import NEVER_CANCELLED, JobCancel
from picoflow._run.files import TurnFiles
from picoflow._run.observers import NO_OBSERVER, TurnObserver
from picoflow.attachments import AttachmentRef
from picoflow.context import Caller, RunContext
from picoflow.exceptions import HookFailure, RunError
from picoflow.flow import Flow, FlowSpec, StepSpec
from picoflow.memory import compact
from picoflow.messages import Message, MessageKind, ModelResponse, Role, ToolCall
from picoflow.outcomes import Direct, Go
from picoflow.repairs import Repairs
from picoflow.runtime import StepState, SubSteps
from picoflow.session import LogRecord, Session
from picoflow.step import Step
from picoflow.usage import Usage, UsageLimits

if TYPE_CHECKING:
    from pydantic import BaseModel

    from picoflow.models.base import Model

ModelFor = Callable[[StepSpec], "Model"]

NOTHING_DECIDED: Mapping[str, Any] = MappingProxyType({})

MAX_INTERRUPTED = 8
"""Digressions kept to resume: a digression left without resuming is dropped past this many."""

RUNNING_CALL: ContextVar[ToolCall | None] = ContextVar("picoflow_running_call", default=None)
"""The tool call whose handler is running (what a sub-step run started there nests under)."""


@dataclass(slots=True)
class ToolJob:
    """A response's call (or a ``@tools`` group's calls) validated and ready to run: what crosses
    the ``ToolRunner`` seam."""

    step: str
    calls: tuple[ToolCall, ...]
    """The calls as validated (without any injected name the model sent)."""
    arguments: tuple[BaseModel, ...]
    """Each call's validated arguments, in order."""
    group: bool
    """The calls are one ``@tools`` group's, run by its one handler."""
    key: str | None = None
    """The idempotency key of a call that runs because it was approved (the approval's id)."""


class ToolRunner(Protocol):
    """Where validated tool calls run: here (``_run.dispatch.LOCAL_TOOLS``), or as a durable
    executor's activity. Dispatch validates and authorizes; a runner only runs."""

    async def run(self, ws: Workspace, step: Step, spec: StepSpec, job: ToolJob) -> Any:
        """The handler's value (a refusal ``CallResult`` for a ``ToolError`` or a time limit),
        with what the handler did applied to ``ws``."""
        ...


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnConfig:
    """What a turn runs with; the same from its first step to its last."""

    spec: FlowSpec
    """The flow, with its MCP tools listed."""
    caller: Caller
    """Who asked for the turn (principal, visibilities, config), never the model."""
    deps: Any
    """The application's dependencies, handed to tools in ``RunContext.deps``."""
    model_for: ModelFor
    """The model of a step."""
    limits: UsageLimits
    """The turn's budgets."""
    tools: ToolRunner
    """Where validated tool calls run."""
    max_reply_chars: int = 100_000
    """Longest model response accepted (text plus tool arguments)."""
    observer: TurnObserver = NO_OBSERVER
    """What watches the turn (tracing, an event stream)."""
    composer: SubSteps | None = None
    """What runs sub-steps."""
    clock: Callable[[], float] = time.time
    """The time approvals are asked and decided by (a durable executor's is its workflow's)."""
    cancel: JobCancel = NEVER_CANCELLED
    """The cancel of the job the turn runs in: every tool call and save is a safe point of it."""


class Workspace:
    """One turn's mutable state on a private copy of ``session``; the runtime of its steps and flow."""

    substep_input: str | None = None
    """The input of a sub-step run (``SubWorkspace``); the turn itself has none."""
    within: str | None = None
    """The label of a sub-step run's messages (``SubWorkspace``); the turn's own have none."""

    # Slots: the runner reads and writes these a hundred times a turn.
    __slots__ = (
        "_contexts",
        "_flow",
        "_states",
        "_steps",
        "appended",
        "attempt",
        "config",
        "content_type",
        "decided",
        "erased_shown",
        "files",
        "held_erases",
        "ran",
        "session",
        "transitions",
        "usage",
        "warnings",
        "withheld",
    )

    def __init__(self, config: TurnConfig, session: Session) -> None:
        self.config = config
        self.session = session
        self.files: TurnFiles | None = None
        self.usage = Usage()
        self.appended: list[tuple[str, Message]] = []
        """Every message the turn added, with the namespace (or sub-step label) that keeps it."""
        self.warnings: list[LogRecord] = []
        self.content_type: str | None = None
        self.transitions = 0
        self.attempt = 1
        self.decided: Mapping[str, str | Any | None] = NOTHING_DECIDED
        """While an approved response runs: each gated call's id with its approval's id (None when
        its policy asked for none), or the refusal that answers it when it was denied."""
        self.held_erases: frozenset[str] | None = None
        """While the conversation moves on after a response's tool calls: the namespaces whose
        erase waits until every result is written (an erase then could separate a call from its
        result). None: erases happen at once."""
        self.ran: set[str] = set()
        """The tool calls that ran this turn, by name and arguments (a call made again is refused)."""
        self.withheld: set[str] = set()
        """Tools no longer offered this turn: a call of theirs held values the user never gave, or
        was made again; the model then answers the user instead of trying once more."""
        self.erased_shown: Message | None = None
        """The newest message the user was sent among those an erase took out of memory this turn."""
        self._steps: dict[str, Step] = {}
        self._states: dict[str, StepState] = {}
        self._contexts: dict[str, RunContext[Any]] = {}
        self._flow: Flow | None = None

    # --- what steps and the flow object reach (StepRuntime, FlowRuntime) --------------------------

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def caller(self) -> Caller:
        return self.config.caller

    @property
    def composer(self) -> SubSteps | None:
        return self.config.composer

    @property
    def flow(self) -> Flow:
        flow = self._flow
        if flow is None:
            flow = self._flow = self.config.spec.cls(self)
        return flow

    def state_for(self, step_name: str) -> StepState:
        state = self._states.get(step_name)
        if state is None:
            state = self._states[step_name] = StepState(self.session.state_of(step_name))
        return state

    def state_by_key(self, key: str) -> StepState:
        """A state by its key in the session (a step's name, or ``flow:step`` for a step of
        another flow run as a sub-step)."""
        return self.state_for(key)

    def messages_of(self, namespace: str) -> Sequence[Message]:
        held = self.held_erases
        if held and namespace in held:
            return ()
        return self.session.namespace(namespace).messages

    def erase(self, namespace: str) -> None:
        if self.held_erases is not None:
            self.held_erases = self.held_erases | {namespace}
            return
        ns = self.session.namespace(namespace)
        for message in reversed(ns.messages):  # what the user last read, for a repeat asked this turn
            if message.role == "assistant" and message.is_shown and message.content:
                if self.erased_shown is None or message.seq > self.erased_shown.seq:
                    self.erased_shown = message
                break
        ns.messages = []
        ns.start = self.session.next_seq
        ns.summary = None
        self.config.observer.memory_erased(namespace)

    def terminate_target(self) -> str | None:
        return self.config.spec.terminate

    # --- what the repair patterns reach (picoflow.repairs) ------------------------------------------

    @property
    def turn(self) -> int:
        return self.session.turns + 1

    def flow_repairs(self) -> Repairs:
        return self.config.spec.cls.repairs

    def last_shown(self) -> str | None:
        """The newest message the user was sent, whichever step's memory holds it (or held it before
        an erase this turn)."""
        shown = [
            message
            for namespace in self.session.memory.values()
            for message in namespace.messages
            if message.role == "assistant" and message.is_shown and message.content
        ]
        newest = max(shown, key=lambda message: message.seq) if shown else None
        erased = self.erased_shown
        if erased is not None and (newest is None or erased.seq > newest.seq):
            newest = erased
        return newest.content if newest is not None else None

    def handoff_target(self, named: str | type | None) -> str | None:
        steps = self.config.spec.steps
        if named is not None:
            return self._known_step(named, "Repairs.handoff")
        return next((name for name, spec in steps.items() if spec.cls.is_handoff), None)

    def cancel_to(self, named: str | type | None) -> str:
        if named is None:
            return self.config.spec.start
        return self._known_step(named, "Repairs.cancel_to")

    def correction_target(self, named: str | type | None, current: str) -> str | None:
        if named is not None:
            target = self._known_step(named, "Repairs.correct_in")
            return target if target != current else None
        steps = self.config.spec.steps
        earlier = (name for name in reversed(self.session.sequence) if name != current)
        return next((name for name in earlier if steps[name].cls.takes_corrections), None)

    def digression_target(self, named: str | type | None) -> str | None:
        return None if named is None else self._known_step(named, "Repairs.digress_to")

    def interrupt(self, step: str) -> None:
        interrupted = self.session.interrupted
        interrupted.append(step)
        del interrupted[:-MAX_INTERRUPTED]

    def resume_target(self) -> str | None:
        interrupted = self.session.interrupted
        return interrupted.pop() if interrupted else None

    def user_message(self) -> str | None:
        return next(
            (
                m.content
                for _, m in reversed(self.appended)
                if m.role == "user" and m.kind in (None, "forwarded")
            ),
            None,
        )

    def step_question(self, name: str) -> str:
        return self.step(name).question()

    def reset_activity(self, target: str) -> str:
        self.session.interrupted.clear()  # what a digression interrupted is dropped with the rest
        sequence = self.session.sequence
        since = max((i for i, name in enumerate(sequence) if name == target), default=len(sequence))
        for name in dict.fromkeys((target, self.session.current_step, *sequence[since:])):
            self.step(name).restart()
        return self.step(target).opening()

    def _known_step(self, named: str | type, where: str) -> str:
        name = named if isinstance(named, str) else getattr(named, "name", named.__name__)
        if name not in self.config.spec.steps:
            raise HookFailure(
                f"{where} names {name!r}, not a step of flow {self.config.spec.name}", step=None
            )
        return name

    def model_of(self, step_name: str) -> Model:
        return self.config.model_for(self.config.spec.steps[step_name])

    def judged(self, step_name: str, verdicts: Sequence[Any]) -> None:
        """A reading's verdicts: the observers see them all; a drop is a session warning too,
        naming the field and the rule (never the value: it may hold private text)."""
        if not verdicts:
            return
        self.config.observer.reading_judged(step_name, tuple(verdicts))
        for verdict in verdicts:
            if verdict.action == "dropped":
                self.warn(
                    "reading_dropped",
                    f"{verdict.field} was read but not kept: rule {verdict.rule}",
                    step_name,
                )

    def context_for(self, step: str) -> RunContext[Any]:
        context = self._contexts.get(step)
        if context is None:
            config = self.config
            caller = config.caller
            # Positional, in field order: one context per step and turn, built on the hot path.
            context = self._contexts[step] = RunContext(
                caller.principal,
                caller.visibilities,
                config.deps,
                self.session.id,
                step,
                self.usage,
                caller.config,
                self.files.incoming if self.files is not None else (),
            )
        return context

    # --- what the runner uses ------------------------------------------------------------------

    def step(self, name: str) -> Step:
        step = self._steps.get(name)
        if step is None:
            step = self._steps[name] = self.config.spec.steps[name].cls(self)
        return step

    def add(self, step: str, role: Role, content: str, kind: MessageKind | None = None) -> Message:
        """A message of ``role`` in ``step``'s memory: an answer written in code, a crossing or a
        correction (what a person or a model said has a helper of its own)."""
        return self._append(step, role, content, kind=kind)

    def add_user(self, step: str, text: str) -> Message:
        """The user's message of this turn, with the files sent with it."""
        return self._append(step, "user", text, attachments=self.files.refs if self.files else ())

    def forward(self, step: str, text: str) -> Message:
        """A user message an outcome forwards to ``step`` (``with_message``)."""
        return self._append(step, "user", text, kind="forwarded")

    def add_response(self, step: str, response: ModelResponse) -> Message:
        """The model's answer as it came: its text, and its calls with the reasoning behind them.

        Reasoning rides along only with tool calls: the provider wants it back while the tool loop
        goes on, and drops it itself once a turn has ended in text."""
        calls = response.tool_calls
        if calls:
            return self._append(
                step,
                "assistant",
                response.text,
                tuple(calls),
                reasoning=response.reasoning,
                model=response.answered_by,
            )
        return self._append(step, "assistant", response.text, model=response.answered_by)

    def add_call(self, step: str, call: ToolCall) -> Message:
        """A call the step's code proposed (``call``), kept where a model's would be, so that its
        result answers a call in the step's memory."""
        return self._append(step, "assistant", "", (call,), kind="call")

    def add_output(self, step: str, response: ModelResponse) -> Message:
        """A structured answer the step's code read and acted on (``output``): kept for the model,
        marked so that no reader takes it for a reply the user was sent."""
        return self._append(step, "assistant", response.text, kind="output", model=response.answered_by)

    def add_reply(self, step: str, text: str, model: str | None) -> Message:
        """The reply the turn ends with, from the model's answer (``model`` wrote it)."""
        return self._append(step, "assistant", text, model=model)

    def add_direct(self, step: str, outcome: Direct) -> Message:
        """A reply written in code (``direct``), so the next turn knows what the user saw."""
        return self._append(step, "assistant", outcome.content, kind="direct", remembered_as=outcome.remember)

    def add_tool_result(self, step: str, call: ToolCall, content: str, is_error: bool) -> Message:
        """The one tool message answering ``call``."""
        return self._append(step, "tool", content, call=call, is_error=is_error)

    def _append(
        self,
        step: str,
        role: Role,
        content: str,
        tool_calls: tuple[ToolCall, ...] = (),
        *,
        call: ToolCall | None = None,
        is_error: bool = False,
        kind: MessageKind | None = None,
        reasoning: Sequence[Mapping[str, Any]] = (),
        remembered_as: str | None = None,
        model: str | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
    ) -> Message:
        session = self.session
        namespace = self.config.spec.steps[step].namespace
        seq, key = self._numbered(namespace)
        # Look the namespace up first: a new one must start at this message's seq.
        ns = session.memory.get(namespace) or session.namespace(namespace)
        message = Message(
            role,
            content,
            tool_calls,
            call.id if call else None,
            call.name if call else None,
            is_error,
            step,
            kind,
            seq,
            time.time(),
            reasoning if type(reasoning) is tuple else tuple(reasoning),
            remembered_as,
            model,
            self.within,
            attachments,
        )
        session.next_seq = seq + 1
        ns.messages.append(message)
        self.appended.append((key, message))
        return message

    def _numbered(self, namespace: str) -> tuple[int, str]:
        """The seq of the message about to be appended to ``namespace``, and what the turn's list of
        new messages files it under."""
        return self.session.next_seq, namespace

    def warn(self, code: str, message: str, step: str | None) -> None:
        self.warnings.append(LogRecord(code, message, "warning", step, self.session.turns + 1))

    def destination(self, outcome: Go | Direct, here: str) -> str:
        """The step ``outcome``, returned by step ``here``, leads to; naming no step of the flow is
        the hook's bug."""
        target = outcome.target_name
        if target is None:
            return here
        if target not in self.config.spec.steps:
            raise HookFailure(f"go({target!r}) names no step of flow {self.config.spec.name}", step=here)
        return target

    async def hook(self, step: Step, label: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run user code of ``step``; anything it raises fails the turn as a ``HookFailure``."""
        try:
            value = fn(*args)
            if inspect.isawaitable(value):
                value = await value
        except RunError:
            raise
        except Exception as exc:
            raise HookFailure(
                f"{label}() of step {step.name} raised {type(exc).__name__}: {exc}", step=step.name
            ) from exc
        return value

    def release_erases(self) -> None:
        """Every tool result of the response is written: do the erases held meanwhile."""
        held, self.held_erases = self.held_erases, None
        for namespace in held or ():
            self.erase(namespace)

    def replace_session(self, session: Session) -> None:
        """Work on ``session`` instead (what ``on_restore_session`` returned), before the turn runs."""
        self.session = session
        self._states.clear()
        self._steps.clear()
        self._contexts.clear()
        self._flow = None

    # --- end of turn -----------------------------------------------------------------------------

    def normalize_states(self) -> None:
        """Bring every state this turn reached back to JSON values (a step may have put a model or a
        date inside a list it changed in place)."""
        for state in self._states.values():
            raw = state.raw
            if not raw:
                continue
            normalized = to_jsonable_python(raw)
            if normalized != raw:
                raw.clear()
                raw.update(normalized)

    def release(self) -> None:
        """Drop the step and flow objects, so the turn's memory is freed at once, not by the GC
        (they point back here). A step object kept beyond the turn still reads its last state."""
        self._steps.clear()
        self._contexts.clear()
        self._flow = None


async def compact_memory(ws: Workspace) -> None:
    """At the end of a turn, compact the memory of the namespaces it added messages to, of the
    steps that ask for it."""
    spec = ws.config.spec
    if not spec.compacting:
        return
    touched = {namespace for namespace, _ in ws.appended}
    for step in spec.compacting:
        policy = step.cls.compaction
        if policy is None or step.namespace not in touched:
            continue
        try:
            await compact(ws.session.namespace(step.namespace), policy)
        except Exception as exc:  # compaction is an optimisation; a failure must not lose the turn
            ws.warn("compaction_skipped", f"memory compaction skipped: {type(exc).__name__}", step.name)
