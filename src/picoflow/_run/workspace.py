"""A turn's workspace: its private working copy of the session and the services steps reach.

Nothing here touches the store. The engine commits the workspace's session (and the messages it
appended) only when the whole turn succeeded, so a failure anywhere leaves the stored session as
it was. Steps and the flow object reach the turn through this class (``StepRuntime``,
``FlowRuntime``); everything else of the runner is a function taking it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from picoflow._run.files import TurnFiles
from picoflow._run.observers import NO_OBSERVER, TurnObserver
from picoflow.attachments import AttachmentRef
from picoflow.context import Caller, RunContext
from picoflow.exceptions import HookFailure, RunError
from picoflow.flow import Flow, FlowSpec, StepSpec
from picoflow.memory import compact
from picoflow.messages import Message, MessageKind, Role, ToolCall
from picoflow.outcomes import EXECUTING_STEP, Direct, Go
from picoflow.runtime import StepState, SubSteps
from picoflow.session import LogRecord, Session
from picoflow.step import Step
from picoflow.usage import Usage, UsageLimits

if TYPE_CHECKING:
    from picoflow.models.base import Model

ModelFor = Callable[[StepSpec], "Model"]

HandlerRunner = Callable[["Workspace", StepSpec, ToolCall, "Sequence[ToolCall] | None"], Awaitable[Any]]
"""Runs a tool handler somewhere else (a durable executor's activity) instead of in this process:
given the workspace, the step, the call (and, for a ``@tools`` group, all its calls), it returns
the value dispatch treats as the handler's, having applied to the workspace what the handler did."""

RUNNING_CALL: ContextVar[ToolCall | None] = ContextVar("picoflow_running_call", default=None)
"""The tool call whose handler is running (what a sub-step run started there nests under)."""


_NONE_DEFERRED: frozenset[str] = frozenset()


class Workspace:
    """One turn's state on a private copy of ``session``; the runtime of its steps and flow."""

    substep_input: str | None = None
    """The input of a sub-step run (``SubWorkspace``); the turn itself has none."""

    # Slots: the runner reads and writes these a hundred times a turn.
    __slots__ = (
        "_contexts",
        "_deferred_erase",
        "_flow",
        "_states",
        "_steps",
        "appended",
        "attempt",
        "caller",
        "composer",
        "content_type",
        "deps",
        "files",
        "handler_runner",
        "limits",
        "max_reply_chars",
        "model_for",
        "observer",
        "session",
        "session_id",
        "spec",
        "transitions",
        "usage",
        "warnings",
        "within",
    )

    def __init__(
        self,
        *,
        spec: FlowSpec,
        session: Session,
        caller: Caller,
        deps: Any,
        model_for: ModelFor,
        limits: UsageLimits,
        max_reply_chars: int = 100_000,
        observer: TurnObserver = NO_OBSERVER,
        composer: SubSteps | None = None,
    ) -> None:
        self.spec = spec
        self.session = session
        self.session_id = session.id
        self.caller = caller
        self.deps = deps
        self.model_for = model_for
        self.limits = limits
        self.max_reply_chars = max_reply_chars
        self.observer = observer
        self.composer = composer
        self.files: TurnFiles | None = None
        self.handler_runner: HandlerRunner | None = None
        self.within: str | None = None
        self.usage = Usage()
        self.appended: list[tuple[str, Message]] = []
        self.warnings: list[LogRecord] = []
        self.content_type: str | None = None
        self.transitions = 0
        self.attempt = 1
        self._steps: dict[str, Step] = {}
        self._states: dict[str, StepState] = {}
        self._contexts: dict[str, RunContext[Any]] = {}
        self._deferred_erase: frozenset[str] | None = None
        self._flow: Flow | None = None

    # --- what steps and the flow object reach (StepRuntime, FlowRuntime) --------------------------

    @property
    def flow(self) -> Flow:
        flow = self._flow
        if flow is None:
            flow = self._flow = self.spec.cls(self)
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
        if self._deferred_erase and namespace in self._deferred_erase:
            return ()
        return self.session.namespace(namespace).messages

    def erase(self, namespace: str) -> None:
        if self._deferred_erase is not None:
            # A tool call of this response still waits for its results in some namespace; erasing
            # now could separate them, so the erase happens once the results are written.
            self._deferred_erase = self._deferred_erase | {namespace}
            return
        ns = self.session.namespace(namespace)
        ns.messages = []
        ns.start = self.session.next_seq
        ns.summary = None

    def terminate_target(self) -> str | None:
        return self.spec.terminate

    def context_for(self, step: str) -> RunContext[Any]:
        context = self._contexts.get(step)
        if context is None:
            caller = self.caller
            # Positional, in field order: one context per step and turn, built on the hot path.
            context = self._contexts[step] = RunContext(
                caller.principal,
                caller.visibilities,
                self.deps,
                self.session_id,
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
            step = self._steps[name] = self.spec.steps[name].cls(self)
        return step

    def add(
        self,
        namespace: str,
        step: str,
        role: Role,
        content: str,
        tool_calls: Sequence[ToolCall] = (),
        *,
        call: ToolCall | None = None,
        is_error: bool = False,
        kind: MessageKind | None = None,
        reasoning: Sequence[Mapping[str, Any]] = (),
        remembered_as: str | None = None,
        model: str | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
    ) -> Message:
        """Append a message to ``namespace`` and to the turn's list of new messages."""
        session = self.session
        seq = session.next_seq
        # Look the namespace up first: a new one must start at this message's seq.
        ns = session.memory.get(namespace) or session.namespace(namespace)
        message = Message(
            role,
            content,
            tool_calls if type(tool_calls) is tuple else tuple(tool_calls),
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
        self.appended.append((namespace, message))
        return message

    def warn(self, code: str, message: str, step: str | None) -> None:
        self.warnings.append(LogRecord(code, message, "warning", step, self.session.turns + 1))

    def target(self, outcome: Go | Direct) -> str:
        """The step an outcome leads to; naming no step of the flow is the hook's bug."""
        target = outcome.target_name
        if target not in self.spec.steps:
            raise HookFailure(
                f"go({target!r}) names no step of flow {self.spec.name}", step=self.session.current_step
            )
        return target

    async def hook(self, step: Step, label: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run user code of ``step``; anything it raises fails the turn as a ``HookFailure``."""
        token = EXECUTING_STEP.set(step.name)
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
        finally:
            EXECUTING_STEP.reset(token)
        return value

    def defer_erases(self) -> None:
        """Hold erases until ``apply_erases``: a response's tool results are still to be written."""
        self._deferred_erase = _NONE_DEFERRED

    def apply_erases(self) -> None:
        deferred, self._deferred_erase = self._deferred_erase, None
        for namespace in deferred or ():
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


def held_erases(ws: Workspace) -> frozenset[str] | None:
    """The namespaces whose erase waits for this response's tool results (None: erases are not
    being held now)."""
    return ws._deferred_erase


def hold_erases(ws: Workspace, namespaces: frozenset[str]) -> None:
    """Hold these erases too (made by a handler that ran elsewhere, see ``handler_runner``)."""
    ws._deferred_erase = (ws._deferred_erase or _NONE_DEFERRED) | namespaces


async def compact_memory(ws: Workspace) -> None:
    """At the end of a turn, compact the memory of the namespaces it added messages to, of the
    steps that ask for it."""
    if not ws.spec.compacting:
        return
    touched = {namespace for namespace, _ in ws.appended}
    for spec in ws.spec.compacting:
        policy = spec.cls.compaction
        if policy is None or spec.namespace not in touched:
            continue
        try:
            await compact(ws.session.namespace(spec.namespace), policy)
        except Exception as exc:  # compaction is an optimisation; a failure must not lose the turn
            ws.warn("compaction_skipped", f"memory compaction skipped: {type(exc).__name__}", spec.name)
