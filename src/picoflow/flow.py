"""``Flow``: a named, validated registry of steps, built once and checked before any turn runs.

Building a flow (``FlowEngine(flows=[...])`` does it) checks what can be checked without a model:
every step and namespace name, every tool schema, that no schema exposes an injected argument,
that ``@tools`` groups name real tools, and that every ``go(...)`` target written in the code is a
step of the flow. The same analysis yields the flow's transition graph for diagrams.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, overload

from pydantic import BaseModel

from picoflow._code_targets import go_targets, repair_patterns, sub_step_targets
from picoflow._schema import iter_property_names, json_schema, literal_options, strict_variant
from picoflow.context import INJECTED_NAMES
from picoflow.exceptions import FlowDefinitionError
from picoflow.mcp.servers import MCPServer
from picoflow.messages import OutputSchema, ToolDefinition
from picoflow.repairs import Repairs
from picoflow.runtime import FlowRuntime, StepState
from picoflow.step import Step, validate_namespace
from picoflow.tools import ToolGroup, ToolSpec, add_declared, check_timeout, collect_tools
from picoflow.usage import UsageLimits

if TYPE_CHECKING:
    from picoflow.context import Caller
    from picoflow.exceptions import RunError
    from picoflow.outcomes import Outcome, RetryWith
    from picoflow.session import Session
    from picoflow.step import ModelChoice

FLOW_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
STEP_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True, slots=True)
class Transition:
    """An edge of the flow graph: ``source`` may move to ``target`` via ``via`` (a tool or hook)."""

    source: str
    target: str
    via: str


@dataclass(frozen=True, slots=True)
class StepSpec:
    """A step class as the runner uses it, with everything derivable computed once."""

    cls: type[Step]
    name: str
    namespace: str
    description: str
    tools: dict[str, ToolSpec]
    groups: dict[frozenset[str], ToolGroup]
    definitions: tuple[ToolDefinition, ...]
    exposed: frozenset[str]
    output: OutputSchema | None
    is_logic: bool
    is_terminal: bool
    checks_response: bool
    dynamic_tools: bool
    overrides: frozenset[str]
    """Hooks the step class overrides; the runner skips calling the do-nothing defaults."""
    default_prompt: str
    instructions: str = ""
    """The standing instructions of the step's classes, base first; added after the prompt."""
    gated: frozenset[str] = frozenset()
    """Tools whose calls wait for an approval (``@tool(approval=...)``)."""
    mcp_servers: tuple[MCPServer, ...] = ()
    """MCP servers whose tools the step offers (its own, then its flow's)."""
    mcp_tools: tuple[str, ...] = ()
    """Names of the tools the engine added from the MCP servers (empty until it listed them)."""


@dataclass(frozen=True, slots=True)
class FlowSpec:
    cls: type[Flow]
    name: str
    description: str
    steps: dict[str, StepSpec]
    start: str
    terminate: str | None
    limits: UsageLimits
    transitions: tuple[Transition, ...]
    compacting: tuple[StepSpec, ...] = ()
    """The steps whose memory is compacted after a turn that touched it."""
    sub_steps: tuple[Transition, ...] = ()
    """``source`` runs ``target`` as a sub-step (``run_step``) via ``via``, as read from the code."""
    mcp_servers: tuple[MCPServer, ...] = ()
    """MCP servers whose tools the engine has still to list and add to the steps (empty once done)."""
    version: str = ""
    """The flow's version: the one it declares (``Flow.version``), else the SHA-256 of its
    structure (steps, tools and their schemas, which need approval, slots models). A session stored
    under another version is migrated when it is loaded (``picoflow.versions``)."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Old step names and the steps that carry them on (``Flow.renamed``)."""
    fallback: str | None = None
    """Where a session standing in a step that is gone, unmapped, goes (``Flow.fallback``)."""


class _StructureVersion:
    """``Flow.version`` where a flow declares none: the digest of its structure, read from its spec."""

    @overload
    def __get__(self, instance: None, owner: type[Flow]) -> str: ...

    @overload
    def __get__(self, instance: Flow, owner: type[Flow] | None = None) -> str: ...

    def __get__(self, instance: Flow | None, owner: type[Flow] | None = None) -> str:
        if owner is None:
            assert instance is not None, "Flow.version is read on a flow class or instance"
            owner = type(instance)
        return owner.spec().version


class Flow:
    """A conversation made of steps. Subclass it, set ``name`` and ``steps``; that's the wiring.

    Flow instances live for one turn, like step instances; ``on_restore_session`` can reset or
    migrate a stored session before a turn uses it.
    """

    #: Registered name of the flow (as clients select it). Defaults to the class name.
    name: ClassVar[str] = "Flow"
    #: The steps; the first is where new sessions start unless ``start`` says otherwise.
    steps: ClassVar[Sequence[type[Step]]] = ()
    #: Step new sessions start in.
    start: ClassVar[type[Step] | str | None] = None
    #: Default model of every step without its own (a list: models to fall back on, in order).
    model: ClassVar[ModelChoice | None] = None
    #: Per-turn budgets.
    limits: ClassVar[UsageLimits] = UsageLimits()
    #: Seconds an async tool handler may take unless its step or ``@tool(timeout=)`` says otherwise.
    tool_timeout: ClassVar[float | None] = None
    #: MCP servers whose tools every conversational step of the flow offers (see ``MCPServer``).
    mcp_servers: ClassVar[Sequence[MCPServer]] = ()
    #: What the flow does when the user leaves the path (``picoflow.repairs``); a step's own
    #: ``repairs`` wins for that step.
    repairs: ClassVar[Repairs] = Repairs()
    #: The flow's version. By default a digest of its structure (its steps, their tools and the
    #: tools' argument schemas, the slots models of its forms), so any change of them is a new
    #: version; declare one (``version = "2025-06"``) to say yourself when it changes. Sessions
    #: record the version they ran on and are migrated when loaded under another one.
    version: ClassVar[str] = _StructureVersion()  # type: ignore[assignment]
    #: Steps renamed since an earlier version, by their old name: ``{"Compare": Review}``. A session
    #: standing in (or holding the state of) an old name is carried on by the new step.
    renamed: ClassVar[Mapping[str, type[Step] | str]] = {}
    #: Where a session goes when the step it stood in is gone and ``renamed`` does not map it; it is
    #: told so (``fallback_message``) and asked the step's opening question. None: such a session
    #: cannot continue (its turns fail with ``MigrationFailed`` until the flow maps its step).
    fallback: ClassVar[type[Step] | str | None] = None
    #: What a session sent to ``fallback`` is told, before the fallback step's opening question.
    fallback_message: ClassVar[str] = (
        "This assistant has been updated since your last message, and the part of the "
        "conversation you were in no longer exists, so we continue from here."
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def __init__(self, runtime: FlowRuntime) -> None:
        self._runtime = runtime

    @property
    def session_id(self) -> str:
        return self._runtime.session_id

    @property
    def caller(self) -> Caller:
        return self._runtime.caller

    def state_of(self, step: type[Step] | str) -> StepState:
        return self._runtime.state_for(step if isinstance(step, str) else step.name)

    def on_model_error(self, error: RunError) -> Outcome | RetryWith | None:
        """A model call failed for good and the step's own ``on_model_error`` let it stand: the same
        choices as there (``error.step`` names the step)."""
        return None

    def on_restore_session(self, session: Session) -> Session | None:
        """Called before a stored session is continued. Return it (possibly changed) to continue,
        or None to discard it and start afresh under the same id (e.g. when it has been idle too long)."""
        return session

    @classmethod
    def spec(cls) -> FlowSpec:
        """The built and validated flow (cached)."""
        cached = cls.__dict__.get("_picoflow_spec")
        if isinstance(cached, FlowSpec):
            return cached
        spec = _build(cls)
        cls._picoflow_spec = spec  # type: ignore[attr-defined]
        return spec


HOOKS = (
    "prompt",
    "on_enter",
    "on_exit",
    "on_crossing",
    "on_response",
    "check_response",
    "active_tools",
    "history",
    "on_model_error",
    "on_denied",
)


def _overrides(cls: type, attribute: str, base: type) -> bool:
    return getattr(cls, attribute) is not getattr(base, attribute)


def _build(cls: type[Flow]) -> FlowSpec:
    where = f"flow {cls.__name__}"
    if not isinstance(cls.name, str) or not FLOW_NAME.match(cls.name):
        raise FlowDefinitionError(f"{where}: name {cls.name!r} must match {FLOW_NAME.pattern}")
    check_timeout(cls.tool_timeout, f"{where}: tool_timeout")
    if not cls.steps:
        raise FlowDefinitionError(f"{where}: list its steps in `steps = [...]`")
    step_classes: dict[str, type[Step]] = {}
    for step_cls in cls.steps:
        if not (isinstance(step_cls, type) and issubclass(step_cls, Step)):
            raise FlowDefinitionError(f"{where}: {step_cls!r} in `steps` is not a Step subclass")
        if not STEP_NAME.match(step_cls.name):
            raise FlowDefinitionError(f"{where}: step name {step_cls.name!r} must match {STEP_NAME.pattern}")
        if step_cls.name in step_classes:
            raise FlowDefinitionError(f"{where}: two steps are named {step_cls.name!r}")
        step_classes[step_cls.name] = step_cls
    terminals = [name for name, step_cls in step_classes.items() if step_cls.is_terminal]
    terminate = terminals[0] if terminals else None
    start = cls.start or cls.steps[0]
    start_name = start if isinstance(start, str) else start.name
    if start_name not in step_classes:
        raise FlowDefinitionError(f"{where}: start step {start_name!r} is not one of its steps")
    _check_repairs(cls, where, step_classes)
    renamed, fallback = _check_versions(cls, where, step_classes)

    specs: dict[str, StepSpec] = {}
    transitions: list[Transition] = []
    sub_steps: list[Transition] = []
    for name, step_cls in step_classes.items():
        here = f"{where}, step {name}"
        specs[name] = _build_step(
            step_cls,
            here,
            has_terminate=terminate is not None,
            tool_timeout=cls.tool_timeout,
            flow_servers=_servers(cls.mcp_servers, where),
        )
        for target, via in go_targets(step_cls):
            if target not in step_classes:
                raise FlowDefinitionError(
                    f"{here}: {via} calls go({target}), but {target!r} is not a step of this flow "
                    f"(steps: {', '.join(step_classes)})"
                )
            transitions.append(Transition(name, target, via))
        # A sub-step of another flow is found when it runs; only this flow's are drawn.
        sub_steps.extend(
            Transition(name, t, via) for t, via in sub_step_targets(step_cls) if t in step_classes
        )
        goodbye = getattr(step_cls, "goodbye", None)  # a SlotStep's field that ends the conversation
        if isinstance(goodbye, str):
            if terminate is None:
                raise FlowDefinitionError(
                    f"{here}: a reading of {goodbye!r} ends the conversation, but the flow has no "
                    "TerminateStep"
                )
            transitions.append(Transition(name, terminate, "goodbye"))
        terminate_tool = specs[name].tools.get("terminate_session")
        if terminate is not None and terminate_tool and terminate_tool.handler is Step.terminate_session:
            transitions.append(Transition(name, terminate, "terminate_session"))
        transitions.extend(_repair_edges(cls, step_cls, step_classes, start_name))
    for sub in sub_steps:
        if specs[sub.target].gated:
            raise FlowDefinitionError(
                f"{where}, step {sub.source}: {sub.via} runs {sub.target} as a sub-step, but its tools "
                f"{', '.join(sorted(specs[sub.target].gated))} need approval, and a sub-step answers at "
                "once: it cannot wait for a decision"
            )
    # A step only ever run as a sub-step never ends the conversation: no terminate_session edge.
    only_sub = {t.target for t in sub_steps} - {start_name} - {t.target for t in transitions}
    transitions = [t for t in transitions if not (t.source in only_sub and t.via == "terminate_session")]
    return FlowSpec(
        version=_declared_version(cls, where) or flow_version(cls.name, specs.values()),
        renamed=renamed,
        fallback=fallback,
        cls=cls,
        name=cls.name,
        description=(cls.__doc__ or "").strip(),
        steps=specs,
        start=start_name,
        terminate=terminate,
        limits=cls.limits,
        transitions=tuple(dict.fromkeys(transitions)),
        compacting=tuple(spec for spec in specs.values() if spec.cls.compaction is not None),
        sub_steps=tuple(dict.fromkeys(sub_steps)),
        mcp_servers=tuple(dict.fromkeys(server for spec in specs.values() for server in spec.mcp_servers)),
    )


def _repair_edges(
    cls: type[Flow], step_cls: type[Step], steps: dict[str, type[Step]], start: str
) -> list[Transition]:
    """Where the repair patterns a step can fire lead (``picoflow.repairs``): to the flow's handoff
    step for a handoff (asked for, or after out-of-scope requests, clarifications, a skipped
    required question or no progress, as the policy says), back to the cancel target for a cancel.
    The patterns are those its code returns (``repair("...")``) and, for a ``SlotStep``, the
    options of its ``repairs_from`` field and ``no_progress``."""
    policy = step_cls.repairs or cls.repairs
    patterns = {pattern for pattern, _ in repair_patterns(step_cls)}
    field = getattr(step_cls, "repairs_from", None)
    slots = getattr(step_cls, "slots", None)
    if isinstance(field, str) and slots is not None:
        patterns |= {str(option) for option in literal_options(slots.model_fields.get(field))}
    if getattr(step_cls, "questions", ()):
        patterns.add("no_progress")
    escalates = {
        "handoff": True,
        "out_of_scope": policy.max_out_of_scope > 0,
        "clarify": policy.max_clarifications > 0,
        "skip": policy.on_required_skip == "handoff",
        "no_progress": policy.on_no_progress == "handoff",
    }
    edges: list[Transition] = []
    handoff = policy.handoff or next((name for name, step in steps.items() if step.is_handoff), None)
    handoff_name = handoff if isinstance(handoff, str) or handoff is None else _named(handoff)
    if handoff_name and policy.allows("handoff") and any(escalates.get(p, False) for p in patterns):
        edges.append(Transition(step_cls.name, handoff_name, "handoff"))
    cancel = policy.cancel_to or start
    cancel_name = cancel if isinstance(cancel, str) else _named(cancel)
    cancels = "cancel" in patterns or ("skip" in patterns and policy.on_required_skip == "cancel")
    if cancels and policy.allows("cancel") and cancel_name != step_cls.name:
        edges.append(Transition(step_cls.name, cancel_name, "cancel"))
    if "digression" in patterns and policy.digress_to is not None and policy.allows("digression"):
        # There and back: the digression's step resumes the step it interrupted.
        answering = _named_step(policy.digress_to)
        edges.append(Transition(step_cls.name, answering, "digression"))
        edges.append(Transition(answering, step_cls.name, "resume"))
    if "correction" in patterns and policy.allows("correction") and not step_cls.takes_corrections:
        # Back to the step declared, else to the one step that takes corrections, when it is one.
        taking = [name for name, step in steps.items() if step.takes_corrections and name != step_cls.name]
        back = policy.correct_in
        target = _named_step(back) if back is not None else (taking[0] if len(taking) == 1 else None)
        if target is not None:
            edges.append(Transition(step_cls.name, target, "correction"))
    return [edge for edge in edges if edge.source != edge.target]


def _named_step(step: str | type) -> str:
    return step if isinstance(step, str) else _named(step)


def _named(step: type) -> str:
    name = getattr(step, "name", None)
    return name if isinstance(name, str) else step.__name__


def _check_repairs(cls: type[Flow], where: str, steps: Iterable[str]) -> None:
    """A repair policy names steps of the flow: a cancel's target, the handoff step."""
    known = set(steps)
    policies = [(where, cls.repairs)] + [
        (f"{where}, step {step.name}", step.repairs) for step in cls.steps if step.repairs is not None
    ]
    for place, policy in policies:
        if not isinstance(policy, Repairs):
            raise FlowDefinitionError(f"{place}: repairs must be a picoflow.Repairs(...)")
        for role in ("cancel_to", "handoff", "correct_in", "digress_to"):
            named = getattr(policy, role)
            if named is None:
                continue
            name = named if isinstance(named, str) else _named(named)
            if name not in known:
                raise FlowDefinitionError(f"{place}: Repairs.{role} names {name!r}, not one of its steps")


def tool_sha256(tool: ToolSpec) -> str:
    """SHA-256 of what a tool is: its definition as the model sees it, and who approves its calls."""
    rule = tool.approval
    shape = {
        "definition": [tool.definition.name, tool.definition.description, tool.definition.parameters],
        "approval": None if rule is None else [rule.policy is None, list(rule.approvers)],
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()


def flow_version(name: str, steps: Iterable[StepSpec]) -> str:
    """The version of a flow that declares none: the SHA-256 of its structure — its steps, in
    order, each step's tools (their definitions, argument schemas included, and who approves
    them) and the schema of its form's slots model. Prompts, hooks and handler code are not part of
    it: changing them changes no stored session's meaning."""
    shape = [
        name,
        [
            [step.name, sorted(tool_sha256(tool) for tool in step.tools.values()), _slots_schema(step.cls)]
            for step in steps
        ],
    ]
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()


def _slots_schema(step_cls: type[Step]) -> dict[str, Any] | None:
    """The JSON schema of a form's slots model (``SlotStep.slots``); None for a step without one."""
    slots = getattr(step_cls, "slots", None)
    return json_schema(slots) if isinstance(slots, type) and issubclass(slots, BaseModel) else None


def _declared_version(cls: type[Flow], where: str) -> str | None:
    """The version the flow (or a base flow) declares; None for the digest of its structure."""
    declared = next((klass.__dict__["version"] for klass in cls.__mro__ if "version" in klass.__dict__), None)
    if declared is None or isinstance(declared, _StructureVersion):
        return None
    if not isinstance(declared, str) or not declared.strip():
        raise FlowDefinitionError(f"{where}: version must be a non-empty string, not {declared!r}")
    return declared.strip()


def _check_versions(
    cls: type[Flow], where: str, steps: Mapping[str, type[Step]]
) -> tuple[dict[str, str], str | None]:
    """``renamed`` maps names the flow no longer has to steps it has; ``fallback`` is a step the
    user can be told where they are in (not a LogicStep, a Handoff or the end)."""
    if not isinstance(cls.renamed, Mapping):
        raise FlowDefinitionError(f'{where}: renamed must be a mapping {{"OldName": NewStep}}')
    renamed: dict[str, str] = {}
    for old, new in cls.renamed.items():
        target = new if isinstance(new, str) else _named(new)
        if not isinstance(old, str) or not STEP_NAME.match(old):
            raise FlowDefinitionError(f"{where}: renamed maps {old!r}, which is not a step name")
        if old in steps:
            raise FlowDefinitionError(
                f"{where}: renamed maps {old!r}, which is still a step of the flow: a stored session in "
                f"it could be in either; give the new step another name"
            )
        if target not in steps:
            raise FlowDefinitionError(f"{where}: renamed maps {old!r} to {target!r}, not one of its steps")
        renamed[old] = target
    fallback = cls.fallback
    if fallback is None:
        return renamed, None
    name = fallback if isinstance(fallback, str) else _named(fallback)
    if name not in steps:
        raise FlowDefinitionError(f"{where}: fallback names {name!r}, not one of its steps")
    chosen = steps[name]
    if chosen.is_logic or chosen.is_terminal:
        kind = "a Handoff" if chosen.is_handoff else "a LogicStep" if chosen.is_logic else "the TerminateStep"
        raise FlowDefinitionError(
            f"{where}: fallback names {name!r}, {kind}; a session sent there is told where it is and "
            "asked the step's opening question, so it must be a conversational step"
        )
    if not isinstance(cls.fallback_message, str) or not cls.fallback_message.strip():
        raise FlowDefinitionError(f"{where}: fallback_message must be the text a session sent there is told")
    return renamed, name


def _servers(servers: object, where: str) -> tuple[MCPServer, ...]:
    if not isinstance(servers, list | tuple) or not all(isinstance(s, MCPServer) for s in servers):
        raise FlowDefinitionError(f"{where}: mcp_servers must be a list of MCPServer.stdio(...) / .http(...)")
    return tuple(servers)


def as_sub_step(flow: FlowSpec, name: str, output: type[BaseModel] | None = None) -> FlowSpec:
    """``flow`` with step ``name`` built to run as a sub-step (``run_step``): without the built-in
    ``terminate_session`` (a sub-step answers its caller; it does not end the conversation) and,
    when ``output`` is given, answering with that model instead of its own ``output``."""
    spec = flow.steps[name]
    step_cls = spec.cls
    if output is not None and output is not step_cls.output:
        step_cls = type(
            step_cls.__name__,
            (step_cls,),
            {
                "output": output,
                "name": step_cls.name,
                "__doc__": step_cls.__doc__,
                "__module__": step_cls.__module__,
                "__qualname__": step_cls.__qualname__,
            },
        )
    elif "terminate_session" not in spec.tools:
        return flow
    built = _build_step(
        step_cls,
        f"flow {flow.name}, step {name} (as a sub-step)",
        has_terminate=False,
        tool_timeout=flow.cls.tool_timeout,
        flow_servers=_servers(flow.cls.mcp_servers, name),
    )
    if spec.mcp_tools:  # the engine's tools of the step's MCP servers come along
        tools = {**built.tools, **{tool: spec.tools[tool] for tool in spec.mcp_tools}}
        built = dataclasses.replace(
            built,
            tools=tools,
            definitions=tuple(t.definition for t in tools.values()),
            exposed=frozenset(tools),
            mcp_tools=spec.mcp_tools,
        )
    return dataclasses.replace(flow, steps={**flow.steps, name: built})


def _check_hooks_are_methods(step_cls: type[Step], where: str) -> None:
    """A hook assigned a value (``prompt = "..."``) would only fail mid-turn; refuse it here."""
    for hook in (*HOOKS, "run_logic"):
        value = getattr(step_cls, hook, None)
        if value is not None and not callable(value):
            hint = (
                ": write `def prompt(self) -> str:` returning the text, or put a fixed prompt in the "
                "class docstring"
                if hook == "prompt"
                else ""
            )
            raise FlowDefinitionError(
                f"{where}: `{hook}` must be a method, not {type(value).__name__} {value!r:.40}{hint}"
            )


def _build_step(
    step_cls: type[Step],
    where: str,
    *,
    has_terminate: bool,
    tool_timeout: float | None = None,
    flow_servers: tuple[MCPServer, ...] = (),
) -> StepSpec:
    namespace = step_cls.namespace()
    _check_settings(step_cls, namespace, where)
    tools, groups = _step_tools(step_cls, where, has_terminate=has_terminate, tool_timeout=tool_timeout)
    own_servers = _servers(step_cls.mcp_servers, where)
    if step_cls.is_logic and (tools or own_servers):
        raise FlowDefinitionError(f"{where}: a LogicStep never calls a model, so it cannot have tools")
    servers = own_servers if step_cls.is_logic or step_cls.is_terminal else own_servers + flow_servers
    return StepSpec(
        cls=step_cls,
        name=step_cls.name,
        namespace=namespace,
        description=(step_cls.__doc__ or "").strip().split("\n")[0],
        tools=tools,
        groups=groups,
        definitions=tuple(spec.definition for spec in tools.values()),
        exposed=frozenset(tools),
        output=output_schema(step_cls.output),
        is_logic=step_cls.is_logic,
        is_terminal=step_cls.is_terminal,
        checks_response=_overrides(step_cls, "check_response", Step),
        dynamic_tools=_overrides(step_cls, "active_tools", Step),
        overrides=frozenset(hook for hook in HOOKS if _overrides(step_cls, hook, Step)),
        default_prompt=(step_cls.__doc__ or "").strip(),
        instructions=_instructions(step_cls, where),
        gated=frozenset(name for name, tool in tools.items() if tool.approval is not None),
        mcp_servers=tuple(dict.fromkeys(servers)),
    )


def _check_settings(step_cls: type[Step], namespace: str, where: str) -> None:
    """The step's class attributes that can be wrong without any tool: names, budgets, hooks."""
    problem = validate_namespace(namespace, where)
    if problem:
        raise FlowDefinitionError(problem)
    if step_cls.max_attempts < 1:
        raise FlowDefinitionError(f"{where}: max_attempts must be at least 1")
    budget = step_cls.memory_budget
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise FlowDefinitionError(f"{where}: memory_budget must be None or a positive number of tokens")
    _check_hooks_are_methods(step_cls, where)
    check_timeout(step_cls.tool_timeout, f"{where}: tool_timeout")


def _step_tools(
    step_cls: type[Step], where: str, *, has_terminate: bool, tool_timeout: float | None
) -> tuple[dict[str, ToolSpec], dict[frozenset[str], ToolGroup]]:
    """The step's tools (time limits set, the built-in ``terminate_session`` where it belongs) and
    its ``@tools`` groups, each owning a set of them."""
    tools, groups = collect_tools(step_cls, where=where)
    add_declared(tools, step_cls.declared_tools, where=where)
    default_timeout = step_cls.tool_timeout if step_cls.tool_timeout is not None else tool_timeout
    if default_timeout is not None:
        # The default stops async handlers only: a plain def cannot be stopped once it runs.
        for name, spec in tools.items():
            if spec.timeout is None and spec.is_async and spec.handler is not None:
                tools[name] = dataclasses.replace(spec, timeout=default_timeout)
    builtin_terminate = tools.get("terminate_session")
    if (
        builtin_terminate is not None
        and builtin_terminate.handler is Step.terminate_session
        and not (has_terminate and step_cls.terminate_tool)
    ):
        del tools["terminate_session"]
    if step_cls.is_logic or step_cls.is_terminal:
        tools = {name: spec for name, spec in tools.items() if spec.handler is not Step.terminate_session}
    _check_injected(tools.values(), where)
    group_map: dict[frozenset[str], ToolGroup] = {}
    for group in groups:
        unknown = sorted(group.names - tools.keys())
        if unknown:
            raise FlowDefinitionError(
                f"{where}: @tools handler {group.attribute} names unknown tools {unknown}; define them with "
                "@tool or declare_tool()"
            )
        if group.names in group_map:
            raise FlowDefinitionError(f"{where}: two @tools handlers own the same set {sorted(group.names)}")
        group_map[group.names] = group
    return tools, group_map


def output_schema(output: type[BaseModel] | None) -> OutputSchema | None:
    """The structured-output schema the model is given, strict when strict mode keeps its meaning."""
    if output is None:
        return None
    schema = json_schema(output)
    strict_schema = strict_variant(schema)
    return OutputSchema(
        output.__name__,
        strict_schema or schema,
        (output.__doc__ or "").strip(),
        strict=strict_schema is not None,
    )


def _instructions(step_cls: type[Step], where: str) -> str:
    """Every class's own ``instructions``, base classes' first, each once."""
    found: list[str] = []
    for klass in reversed(step_cls.__mro__):
        text = klass.__dict__.get("instructions")
        if text is None:
            continue
        if not isinstance(text, str):
            raise FlowDefinitionError(f"{where}: `instructions` must be a string, not {type(text).__name__}")
        if text.strip() and text.strip() not in found:
            found.append(text.strip())
    return "\n\n".join(found)


def check_tool_schemas(step: StepSpec, where: str) -> None:
    """The build-time checks of a step's tool schemas (also run on the tools of MCP servers)."""
    _check_injected(step.tools.values(), where)


def _check_injected(tools: Iterable[ToolSpec], where: str) -> None:
    for spec in tools:
        exposed = INJECTED_NAMES.intersection(iter_property_names(spec.definition.parameters))
        if exposed:
            raise FlowDefinitionError(
                f"{where}, tool {spec.name!r}: argument {sorted(exposed)[0]!r} is injected by the runtime "
                "and must not appear in the model-facing schema; declare a RunContext parameter and read "
                "it from there"
            )
