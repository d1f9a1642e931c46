"""``Step``, ``LogicStep`` and ``TerminateStep``: the stages of a conversation.

A step is read top to bottom: what it is for (docstring), what it remembers (``memory``, ``state``),
what it tells the model (``prompt``), what the model may propose (``@tool`` methods) and where
each proposal leads (the outcome each handler returns). Step instances live for one turn; what
must outlive the turn goes in ``self.state`` (durable, JSON values).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, overload

from pydantic import BaseModel, TypeAdapter

from picoflow.messages import Message, ModelResponse
from picoflow.outcomes import Direct, Go, Outcome, Reject, Repair, RetryWith, direct, direct_to, go, repair
from picoflow.repairs import Repairs, counts, keep
from picoflow.runtime import FlowView, StepRuntime, StepState
from picoflow.tools import ToolSpec, tool

if TYPE_CHECKING:
    from picoflow.approvals import Approval
    from picoflow.context import Caller, RunContext
    from picoflow.exceptions import RunError
    from picoflow.mcp.servers import MCPServer
    from picoflow.memory import Compaction
    from picoflow.models.base import Model
    from picoflow.models.catalog import ModelSelection

    ModelChoice = str | ModelSelection | Model | Sequence[str | ModelSelection | Model]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
Request = tuple[Any, Any] | tuple[Any, Any, Any]
"""A sub-step request: ``(step, input)`` or ``(step, input, output model)``."""

NAMESPACE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")


class Step:
    """A conversational stage: its own prompt, tools, state and memory.

    Override ``prompt()`` (the class docstring is used when you don't; ``instructions`` are added
    after it), add ``@tool`` methods, and optionally the hooks ``on_enter``, ``on_exit``,
    ``on_crossing``, ``on_response`` and ``check_response``. Every hook may be ``async``.
    """

    #: Step name used in sessions, transitions and diagrams. Defaults to the class name.
    name: ClassVar[str] = "Step"
    #: Memory namespace; steps sharing one share their history. Defaults to the step name.
    memory: ClassVar[str] = ""
    #: Model for this step: ``"provider:name"``, a ``ModelSelection`` or a ``Model``, or a list of
    #: them to fall back on in order (see ``FallbackModel``); None = the flow's.
    model: ClassVar[ModelChoice | None] = None
    #: Pydantic model the final answer must match (structured output); ``on_response`` gets it parsed.
    output: ClassVar[type[BaseModel] | None] = None
    #: Standing instructions: added after the system prompt on every model call, whatever
    #: ``prompt()`` (or a ``with_prompt`` override) returns. Each class of the step's hierarchy adds
    #: its own, base classes' first, so a base class's rules (a ``SlotStep``'s reading rules) stay
    #: when a subclass writes its own prompt or instructions.
    instructions: ClassVar[str] = ""
    #: Seconds an async tool handler of this step may take unless ``@tool(timeout=)`` says otherwise.
    tool_timeout: ClassVar[float | None] = None
    #: Model attempts per call (empty, rejected or malformed responses are retried up to this).
    max_attempts: ClassVar[int] = 3
    #: Expose ``terminate_session`` when the flow has a ``TerminateStep``.
    terminate_tool: ClassVar[bool] = True
    #: The locales the user may write in (BCP 47 tags, "en", "es", "de-DE"; ``picoflow.locale``):
    #: the user's numbers are read as they write them (in digits and in words) when tool arguments
    #: and readings are checked against their words. None declared: every plausible reading.
    locales: ClassVar[tuple[str, ...]] = ()
    #: User message added when the conversation enters this step without one.
    crossing_message: ClassVar[str] = "Continue."
    #: MCP servers whose tools this step offers next to its ``@tool``s (see ``picoflow.mcp.MCPServer``).
    mcp_servers: ClassVar[Sequence[MCPServer]] = ()
    #: Tools without a handler of their own (see ``declare_tool``), handled by a ``@tools`` group.
    declared_tools: ClassVar[Sequence[ToolSpec]] = ()
    #: Optional compaction of this step's memory (see ``picoflow.memory.Compaction``).
    compaction: ClassVar[Compaction | None] = None
    #: Most tokens (estimated) of messages this step's memory may hold; past it, the oldest exchanges
    #: are folded into the summary (with ``compaction``) or dropped before the model is called. None:
    #: only the model's context window bounds it.
    memory_budget: ClassVar[int | None] = None
    #: Memory of a run as a sub-step (``run_step``): "fresh" starts empty every run; "kept" goes on
    #: from this step's namespace, so each run sees the ones before.
    substep_memory: ClassVar[Literal["fresh", "kept"]] = "fresh"
    #: This step's repair policy (``picoflow.repairs.Repairs``); None: the flow's (``Flow.repairs``).
    repairs: ClassVar[Repairs | None] = None
    is_logic: ClassVar[bool] = False
    is_terminal: ClassVar[bool] = False
    is_handoff: ClassVar[bool] = False
    """A step where a person takes the conversation over (``Handoff``): the ``handoff`` repair
    pattern goes to the flow's first such step unless its policy names one."""
    takes_corrections: ClassVar[bool] = False
    """A correction made in a later step comes back here (``SlotStep``: the step holds what the
    user said), unless the policy names a step (``Repairs.correct_in``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def __init__(self, runtime: StepRuntime) -> None:
        self._runtime = runtime
        self.state: StepState = runtime.state_for(self.name)

    # --- what the step can read and change -------------------------------------------------

    @classmethod
    def namespace(cls) -> str:
        return cls.memory or cls.name

    @property
    def flow(self) -> FlowView:
        """The flow object of this turn (an instance of the step's ``Flow`` subclass)."""
        return self._runtime.flow

    @property
    def session_id(self) -> str:
        return self._runtime.session_id

    @property
    def caller(self) -> Caller:
        return self._runtime.caller

    @property
    def context(self) -> RunContext[Any]:
        """What tools get injected (principal, visibilities, deps, usage), for use in any hook."""
        return self._runtime.context_for(self.name)

    @property
    def attempt(self) -> int:
        """Which attempt of the current model call this is (1 to ``max_attempts``), e.g. for a
        ``check_response`` that corrects once and then accepts."""
        return self._runtime.attempt

    @property
    def messages(self) -> Sequence[Message]:
        """The live memory of this step's namespace."""
        return self._runtime.messages_of(self.namespace())

    @property
    def last_user_message(self) -> str | None:
        """What the user last said in this step's memory (for forwarding with ``with_message``)."""
        for message in reversed(self.messages):
            if message.is_from_user:
                return message.content
        return None

    @property
    def input(self) -> str | None:
        """In a sub-step run (``run_step``): the input it was given, as text (JSON for a model or
        data). None when the step runs in the conversation itself."""
        return self._runtime.substep_input

    def input_as(self, kind: type[T]) -> T:
        """The sub-step run's input validated as ``kind`` (a pydantic model, ``list[...]``, ...);
        raises ``ValueError`` when there is none or it does not fit."""
        if self.input is None:
            raise ValueError(f"step {self.name} is not running as a sub-step: it has no input")
        return TypeAdapter(kind).validate_json(self.input)

    def state_of(self, step: type[Step] | str) -> StepState:
        """Another step's durable state, for reading or writing."""
        return self._runtime.state_for(step if isinstance(step, str) else step.name)

    def erase_memory(self) -> None:
        """Forget this namespace's messages (they stay in the session transcript)."""
        self._runtime.erase(self.namespace())

    # --- sub-steps ----------------------------------------------------------------------------

    async def run_step(
        self, step: type[Step] | str, input: Any = None, *, output: type[BaseModel] | None = None
    ) -> Any:
        """Run ``step`` (of this flow or another registered one) as a sub-agent and return its
        answer: its ``output`` model (or ``output=``) validated, else its text.

        ``input`` is its user message (a model, dict or list is sent as JSON). The run has its own
        memory and bounded loop; its usage counts in this turn's. It answers and ends: it may not
        ``go()`` elsewhere. A failure raises ``SubStepFailed``, which leaves nothing behind.
        """
        answers = await _sub_steps(self, [(step, input, output)], None)
        return answers[0]

    @overload
    async def run_steps(self, requests: Mapping[K, Request], *, concurrency: int = 4) -> dict[K, Any]: ...

    @overload
    async def run_steps(self, requests: Sequence[Request], *, concurrency: int = 4) -> list[Any]: ...

    async def run_steps(self, requests: Any, *, concurrency: int = 4) -> Any:
        """Run ``(step, input)`` sub-steps, up to ``concurrency`` at a time: their answers in order,
        or by key when ``requests`` is a mapping (``{"hotels": (Hotels, trip), ...}``).

        Every run goes to its end; if any failed, ``SubStepsFailed`` then holds each answer or
        failure (``.results``, and ``.by_key`` for a mapping), so the others' answers are not lost.
        """
        if isinstance(requests, Mapping):
            keys = list(requests)
            items = [_request(requests[key]) for key in keys]
            answers = await _sub_steps(self, items, concurrency, keys)
            return dict(zip(keys, answers, strict=True))
        return await _sub_steps(self, [_request(item) for item in requests], concurrency)

    async def batch(
        self, step: type[Step] | str, inputs: Iterable[Any], *, concurrency: int = 4
    ) -> list[Any]:
        """``run_steps`` of one step over many inputs."""
        return await _sub_steps(self, [(step, item, None) for item in inputs], concurrency)

    # --- what the step tells the model ------------------------------------------------------

    def prompt(self) -> str:
        """The system prompt, rebuilt before every model call. Defaults to the class docstring.

        The step's ``instructions`` follow it in the request; there is no need to repeat them."""
        return (type(self).__doc__ or "").strip()

    def active_tools(self) -> Collection[str] | None:
        """Names of the tools to expose now; None exposes all of them."""
        return None

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        """What of this step's memory the model is shown in the next request (default: all of it).

        ``memory`` is as the model would see it: a reply kept with ``remember_as`` by its note
        (``self.messages`` holds the whole text). What this returns is sent as it is.

        Override it to show less, e.g. ``since_last_user(memory)`` for a step whose model only needs
        the user's latest words: a small local model then reads a short prompt each turn. Keep a tool
        call and its results together (``since_last_user`` does).
        """
        return memory

    @classmethod
    def parse_output(cls, text: str) -> Any:
        """Turn the model's final answer into the value ``on_response`` gets (when ``output`` is set).

        Raise ``ValueError`` (a pydantic ``ValidationError`` is one) to have the model answer again;
        the message is sent to it as the correction, so it must not quote the answer.
        """
        if cls.output is None:
            return text
        return cls.output.model_validate_json(text)

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: str) -> dict[str, Any]:
        """Bring this step's stored ``state`` (JSON values), written under version ``from_version``
        of the flow ("" for a session stored before versions were recorded), to what this code
        reads, and return it. Called once per session and step when a session stored under another
        version is loaded, before the turn runs; what it returns is committed with the turn (a
        failed turn stores nothing). A state it cannot carry can be returned empty: the step starts
        over. Raising makes the session's turns fail (``MigrationFailed``); ``picoflow sessions
        check`` lists them before a deploy. By default the state is kept as it is.

        It must decide from its arguments alone (no clock, no I/O): ``sessions check`` runs it
        without changing anything, and a durable executor may run it again.
        """
        return state

    # --- hooks -------------------------------------------------------------------------------

    def on_enter(self) -> Any:
        """The conversation moved into this step (not called when a step routes to itself)."""

    def on_exit(self) -> Any:
        """The conversation is leaving this step."""

    def on_crossing(self, prior: str | None) -> Any:
        """Return the user message to add on entering this step mid-turn, or None for none.

        By default ``crossing_message`` is added when the step's memory does not already end with a
        user message (for instance one forwarded with ``with_message``).
        """
        messages = self.messages
        if messages and messages[-1].role == "user":
            return None
        return self.crossing_message

    def check_response(self, response: ModelResponse) -> Reject | Any | None:
        """Acceptance gate: runs on every model response before any tool executes.

        Return None to accept, or ``Reject(reason)`` to have the model answer again with the
        reason as a correction. PicoFlow's booleans work too: ``True`` vetoes (with a generic
        reason), ``False`` accepts. Should be free of side effects.
        """
        return None

    def on_model_error(self, error: RunError) -> Outcome | RetryWith | None:
        """A model call of this step failed for good (after the adapter's retries, any fallback
        model and the step's attempts): ``error`` is a ``ModelError`` or ``AttemptsExhausted``.

        Return ``direct("…")`` to answer the user instead, ``go(Step)`` to carry on elsewhere,
        ``call(tool, **args)`` to propose one of this step's tool calls in code (waiting for its
        approval, if it needs one), ``stay("…")`` to ask the model once more with that correction,
        ``retry_with(model)`` to ask another model once, or None to let the turn fail (the flow's
        own ``on_model_error`` is asked next).
        """
        return None

    def on_denied(self, approval: Approval) -> Outcome | None:
        """A call of this step waiting for approval was denied: return an outcome to route
        (``direct``, ``go``), or None to tell the model it was not run, with the reason if one was
        given. ``approval`` says what was asked, who decided and why (``approval.status``).

        Also called when a new message came before the decision (``withdrawn``) or after the
        approval's time (``expired``): then only where the outcome leads (``go(Step)``,
        ``direct_to(Step, ...)``) and the state it carries (``with_state``) count, and the new
        message is answered there."""
        return None

    def on_response(self, response: Any) -> str | Outcome | Any:
        """The model answered without tool calls. Return the reply text, or an outcome to route
        (``call(tool, **args)`` proposes one of this step's tool calls in code, as the model would).

        ``response`` is the text, or the parsed ``output`` model when the step declares one.
        """
        return response

    # --- repair patterns -----------------------------------------------------------------------

    @property
    def repair_policy(self) -> Repairs:
        """The policy this step's repairs follow: its own ``repairs``, else the flow's."""
        return self.repairs or self._runtime.flow_repairs()

    @property
    def answer_locale(self) -> str | None:
        """The locale this step answers in (the first declared; a ``SlotStep`` keeps the user's)."""
        return self.locales[0] if self.locales else None

    def question(self) -> str:
        """What this step is waiting for, to ask again after a repair or a digression: by default
        the last message its memory shows the user was sent, else the last one any step sent (a
        ``SlotStep`` asks its pending question)."""
        own = next(
            (
                m.content
                for m in reversed(self.messages)
                if m.role == "assistant" and m.is_shown and m.content
            ),
            None,
        )
        asked = counts(self.state).get("asked_again")
        if own is not None and isinstance(asked, list) and asked[:1] == [own]:
            return str(asked[1])  # that message was a repair's words around the question: the question
        return own or self._runtime.last_shown() or ""

    def _asking_again(self, template: str) -> Direct:
        """A repair's words with the pending question in them (``{question}``); the question is
        kept, so a second repair in a row asks it again rather than the first repair's words."""
        question = self.question()
        said = template.format(question=question).strip()
        kept = counts(self.state)
        kept["asked_again"] = [said, question]
        keep(self.state, kept)
        return direct(said)

    def opening(self) -> str:
        """What this step says first when a cancel brings the conversation back to it (nothing by
        default; a ``SlotStep`` asks its first question)."""
        return ""

    def restart(self) -> None:
        """Forget what this step holds of the activity a cancel ends (by default its whole state)."""
        self.state.clear()

    def given(self) -> Sequence[str]:
        """What the user gave this step that a cancel would throw away (names of fields); a cancel
        asks first when there is any (``Repairs.confirm_cancel``)."""
        return ()

    def on_repair(self, fired: Repair) -> Outcome | Any:
        """The user left the path by ``fired.pattern``: return where the conversation goes. The
        default follows ``repair_policy``; override it for a pattern of your own, and call
        ``super().on_repair(fired)`` for the rest. It may be ``async``."""
        policy = self.repair_policy
        texts = policy.words(self.answer_locale)
        pattern = fired.pattern
        if pattern == "repeat":
            return direct(self._runtime.last_shown() or self.question())
        if pattern == "handoff":
            target = self._runtime.handoff_target(policy.handoff)
            if target is None:
                return self._asking_again(texts.handoff_unavailable)
            return go(target).with_state(reason=fired.detail or "asked for a person")
        if pattern == "cancel":
            return self._cancel(policy, texts.cancelled, texts.confirm_cancel)
        if pattern == "out_of_scope":
            if self._in_a_row("out_of_scope") > policy.max_out_of_scope > 0:
                return repair("handoff", detail="out of scope, again")
            return self._asking_again(texts.out_of_scope)
        if pattern == "clarify":
            if self._in_a_row("clarify") > policy.max_clarifications > 0:
                return repair("handoff", detail="a choice not made clear")
            options = self.listed_options(fired.options)
            said = texts.clarify.format(options=options, question=fired.detail or "")
            return direct(_TRAILING_SPACE.sub("\n", said).strip())
        if pattern == "correction":
            back = self._runtime.correction_target(policy.correct_in, self.name)
            if back is None:  # nothing earlier holds what was said: the question again
                return direct(self.question())
            message = self._runtime.user_message()
            return go(back).with_message(message) if message else go(back)
        if pattern == "digression":
            target = self._runtime.digression_target(policy.digress_to)
            if target is None or target == self.name:
                return self._asking_again(texts.out_of_scope)
            return self.digress(target)
        # skip, no_progress and the others: the question again, unchanged
        return direct(self.question())

    def listed_options(self, options: Sequence[str]) -> str:
        """A clarification's choices as the user reads them (by default numbered on one line:
        "1. #40004 2. #40006"). Override it when the options carry numbers of their own."""
        return " ".join(f"{number}. {option}" for number, option in enumerate(options, 1))

    def digress(self, target: type[Step] | str) -> Go:
        """Answer the user's latest message in ``target`` (an FAQ, a lookup), then come back here:
        ``target`` ends with ``resume(answer)``, and this step asks its question again. Use it from
        ``on_repair`` for a digression of your own."""
        self._runtime.interrupt(self.name)
        said = self._runtime.user_message()
        return go(target).with_message(said) if said else go(target)

    def resume(self, answer: str = "") -> Direct:
        """The digression this step answered is over: ``answer``, then the question of the step it
        interrupted, which the conversation goes back to. With no digression to return from, just
        ``answer``."""
        back = self._runtime.resume_target()
        if back is None or back == self.name:
            return direct(answer or self.question())
        question = self._runtime.step_question(back)
        return direct_to(back, "\n\n".join(part for part in (answer.strip(), question) if part))

    def _in_a_row(self, pattern: str) -> int:
        """How many turns in a row, this one included, ``pattern`` fired in this step."""
        kept = counts(self.state)
        turn = self._runtime.turn
        last = kept.get(f"{pattern}_turn")
        times = int(kept.get(pattern, 0)) + 1 if last == turn - 1 or last == turn else 1
        kept.update({pattern: times, f"{pattern}_turn": turn})
        keep(self.state, kept)
        return times

    def _cancel(self, policy: Repairs, cancelled: str, confirm: str) -> Outcome:
        kept = counts(self.state)
        lost = list(self.given())
        if policy.confirm_cancel and lost and kept.get("confirming") != "cancel":
            kept["confirming"] = "cancel"
            keep(self.state, kept)
            return direct(confirm.format(lost=", ".join(lost), question=self.question()).strip())
        target = self._runtime.cancel_to(policy.cancel_to)
        opening = self._runtime.reset_activity(target)
        return direct_to(target, cancelled.format(question=opening).strip())

    # --- built-in tool -------------------------------------------------------------------------

    @tool
    def terminate_session(self) -> Go:
        """End the conversation. Call this only when the user clearly says they want to stop
        (for example "bye", "end the conversation", "I don't want to continue")."""
        target = self._runtime.terminate_target()
        if target is None:  # pragma: no cover - the tool is only exposed when the flow has one
            raise RuntimeError("this flow has no TerminateStep")
        return go(target)


class LogicStep(Step):
    """A step that decides in code, without a model: ``run_logic()`` returns ``go()`` or ``direct()``."""

    is_logic = True
    terminate_tool = False

    def run_logic(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement run_logic()")


class TerminateStep(Step):
    """The end of the conversation. Entering it completes the session; its prompt writes the goodbye."""

    is_terminal = True
    terminate_tool = False
    memory = "terminate"

    def prompt(self) -> str:
        return (
            "The conversation is over because the user asked to end it or the task is done. "
            "Thank the user briefly and say goodbye. Do not discuss anything else."
        )

    def on_crossing(self, prior: str | None) -> Any:
        messages = self.messages
        if messages and messages[-1].role == "user":
            return None
        return "I'm done, thank you."


class Handoff(LogicStep):
    """A person takes over the conversation.

    Any step may ``go(Handoff)``, saying why with ``.with_state(reason="...")``. Entering it puts
    the session in the status ``awaiting_human`` with a summary written by code (the flow, the step
    the user was in, the reason, what the steps' state holds, the user's last messages) for the
    member of staff who takes over, and ends the turn with ``reply``. Until staff hand the
    conversation back (``FlowEngine.hand_back``), the user's messages are kept for staff and no
    model is called; staff replies reach the user through the transcript.

    Subclass it to change what the user is told: ``reply`` (or ``handoff_reply(reason)``), and
    ``waiting_reply`` for each message sent while waiting.
    """

    is_handoff = True

    #: What the user is told when the conversation is handed off.
    reply: ClassVar[str] = "I'm passing this conversation to a member of our team. A person will reply here."
    #: What the user is told of each message sent while waiting ("": nothing, staff will answer).
    waiting_reply: ClassVar[str] = ""

    def handoff_reply(self, reason: str | None) -> str:
        """What the user is told when the conversation is handed off (``reply`` by default)."""
        return self.reply

    def run_logic(self) -> Direct:
        reason = self.state.get("reason")
        return direct(self.handoff_reply(None if reason is None else str(reason)))


async def _sub_steps(
    step: Step,
    requests: list[tuple[Any, Any, Any]],
    concurrency: int | None,
    keys: Sequence[Any] | None = None,
) -> list[Any]:
    runtime = step._runtime
    if runtime.composer is None:
        raise RuntimeError("sub-steps run only in a turn of a FlowEngine")
    return await runtime.composer.run_steps(runtime, step.name, requests, concurrency, keys)


def _request(item: Any) -> tuple[Any, Any, Any]:
    if not isinstance(item, tuple) or len(item) not in (2, 3):
        raise TypeError(f"run_steps takes (step, input) or (step, input, output) tuples, not {item!r:.60}")
    return (item[0], item[1], item[2] if len(item) == 3 else None)


_TRAILING_SPACE = re.compile(r"[ \t]+\n")


def since_last_user(memory: Sequence[Message], *, before: int = 0) -> Sequence[Message]:
    """The messages from the user's latest one on, plus up to ``before`` messages just before it.

    ``before=1`` keeps the question the user answered. Messages before the user's are taken only
    while they are plain replies, so a tool call is never shown without its results.
    """
    start = next((i for i in range(len(memory) - 1, -1, -1) if memory[i].is_from_user), None)
    if start is None:
        return memory
    while before > 0 and start > 0:
        previous = memory[start - 1]
        if previous.role != "assistant" or previous.tool_calls:
            break
        start -= 1
        before -= 1
    return memory[start:]


def validate_namespace(name: str, where: str) -> str | None:
    if not NAMESPACE_PATTERN.match(name):
        return f"{where}: memory namespace {name!r} must match {NAMESPACE_PATTERN.pattern}"
    return None
