"""``@tool`` and ``@tools``: how a step tells the model what it may propose, and who handles it.

A ``@tool`` method is both the definition the model sees (name, docstring, argument schema from
the signature) and the handler that runs once the arguments have been validated. Parameters
typed ``RunContext`` are injected and hidden from the schema. ``@tools([...])`` marks a group
handler that owns a model response whose set of tool names is exactly that set.

Decorators only mark functions; the schemas are built when the flow is built, after the module
has finished loading, so annotations may refer to classes defined further down.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

from picoflow._schema import build_args_model, describe_validation_error, json_schema, strict_variant
from picoflow.approvals import Approvers
from picoflow.exceptions import FlowDefinitionError, ToolError
from picoflow.messages import ToolCall, ToolDefinition

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_MARK = "__picoflow_tool__"
_GROUP_MARK = "__picoflow_tools_group__"
_GROUP_SCOPE = "__picoflow_tools_scope__"


@dataclass(frozen=True, slots=True)
class _ToolMark:
    name: str | None
    description: str | None
    strict: bool | None
    exclusive: bool
    scope: dict[str, Any]
    """Names visible where the tool was declared (for classes defined inside a function)."""
    concurrent: bool = False
    timeout: float | None = None
    idempotent: bool = False
    approval: ApprovalRule | None = None
    grounded: bool | None = None


Policy = Callable[[Any, Any], Any]
"""``policy(ctx, args)``: who must approve this call (``True`` the session's principal, a role
name or several, an ``Approvers``), or None when it may run at once. ``args`` are the validated
arguments (attributes named as the handler's parameters); ``ctx`` is the ``RunContext``."""

DEFAULT_APPROVAL_SECONDS = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """How a tool's calls are approved (``@tool(approval=...)``)."""

    policy: Policy | None = None
    """Decides per call; None: every call needs the session principal's approval."""
    approvers: tuple[str, ...] = ()
    """Roles that may decide besides the session's principal, when the principal must approve."""
    summary: str | Callable[..., str] | None = None
    """What will happen, in words: a ``str.format`` template over the arguments, or a function of
    the validated arguments (``fn(args)``), or of the ``RunContext`` and the arguments
    (``fn(ctx, args)``, as a policy: to name what the deps say, such as an order's amount). None:
    the tool and its arguments."""
    seconds: float = DEFAULT_APPROVAL_SECONDS
    """How long the approval may wait for a decision."""
    summary_takes_context: bool = False
    """The summary function is ``fn(ctx, args)``."""

    def approvers_for(self, ctx: Any, args: BaseModel) -> Approvers | None:
        """Who must approve this call, or None when it may run without approval."""
        decided = True if self.policy is None else self.policy(ctx, args)
        if decided is None or decided is False:
            return None
        if decided is True:
            return Approvers(principal=True, roles=self.approvers)
        if isinstance(decided, Approvers):
            return decided
        if isinstance(decided, str):
            return Approvers(principal=False, roles=(decided,))
        if isinstance(decided, Iterable) and all(isinstance(role, str) for role in decided):
            roles = tuple(decided)
            if roles:
                return Approvers(principal=False, roles=roles)
        raise TypeError(
            "an approval policy returns None (no approval), True (the session's principal), a role "
            f"name, several role names or an Approvers, not {decided!r:.60}"
        )

    def summary_of(self, tool: str, args: BaseModel, ctx: Any = None) -> str:
        """The summary of a call, written by code (``ctx``: the ``RunContext`` of the call)."""
        values = args.model_dump(mode="json")
        if self.summary is None:
            shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
            return f"{tool}({shown})"
        if isinstance(self.summary, str):
            return self.summary.format(**values)
        text = self.summary(ctx, args) if self.summary_takes_context else self.summary(args)
        if not isinstance(text, str) or not text.strip():
            raise TypeError(f"the summary of {tool} must be a non-empty string")
        return text.strip()


def _approval_rule(
    approval: bool | Policy | None,
    approvers: Iterable[str],
    summary: str | Callable[..., str] | None,
    seconds: float | None,
) -> ApprovalRule | None:
    roles = tuple(approvers)
    if approval is None or approval is False:
        if roles or summary is not None or seconds is not None:
            raise FlowDefinitionError(
                "@tool(approvers=, approval_summary=, approval_seconds=) need approval="
            )
        return None
    if approval is not True and not callable(approval):
        raise FlowDefinitionError(
            f"@tool(approval=...) takes True or a policy(ctx, args), not {approval!r:.60}"
        )
    if any(not isinstance(role, str) or not role.strip() for role in roles):
        raise FlowDefinitionError("@tool(approvers=...) takes role names")
    if summary is not None and not (isinstance(summary, str) or callable(summary)):
        raise FlowDefinitionError(
            "@tool(approval_summary=...) takes a format string or a function of the arguments"
        )
    check_timeout(seconds, "@tool(approval_seconds=...)")
    return ApprovalRule(
        None if approval is True else approval,
        roles,
        summary,
        DEFAULT_APPROVAL_SECONDS if seconds is None else float(seconds),
        callable(summary) and _positional_parameters(summary) >= 2,
    )


def _positional_parameters(fn: Callable[..., Any]) -> int:
    """How many positional arguments ``fn`` takes (two or more for ``*args``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: a function of the arguments
        return 1
    kinds = [p.kind for p in parameters]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return 2
    return sum(
        k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds
    )


def _declaring_scope() -> dict[str, Any]:
    # Frame 0 is this function, 1 the decorator, 2 the class body, 3 what encloses the class.
    # Annotations naming classes local to a function can only be resolved with that function's
    # locals, which are gone by the time the flow is built.
    scope: dict[str, Any] = {}
    frame: FrameType | None = sys._getframe(2)
    for _ in range(2):
        if frame is None:
            break
        if frame.f_locals is not frame.f_globals:
            scope = {**frame.f_locals, **scope}
        frame = frame.f_back
    return scope


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(
    name: str | None = None,
    /,
    *,
    description: str | None = None,
    strict: bool | None = None,
    exclusive: bool = False,
    concurrent: bool = False,
    timeout: float | None = None,
    idempotent: bool = False,
    approval: bool | Policy | None = None,
    approvers: Iterable[str] = (),
    approval_summary: str | Callable[..., str] | None = None,
    approval_seconds: float | None = None,
    grounded: bool | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn_or_name: Any = None,
    /,
    *,
    description: str | None = None,
    strict: bool | None = None,
    exclusive: bool = False,
    concurrent: bool = False,
    timeout: float | None = None,
    idempotent: bool = False,
    approval: bool | Policy | None = None,
    approvers: Iterable[str] = (),
    approval_summary: str | Callable[..., str] | None = None,
    approval_seconds: float | None = None,
    grounded: bool | None = None,
) -> Any:
    """Expose a step method to the model as a tool.

    ``@tool`` uses the method's name; ``@tool("alias")`` exposes it under another name.
    ``description`` replaces the docstring summary; ``strict=False`` never asks the provider for
    strict schema decoding (by default it is used whenever the schema allows it).
    ``exclusive=True`` runs the tool only when it is the sole call of a model response: mixed with
    other calls, nothing in that response runs and the model is asked to call it alone (for side
    effects such as a booking, which must not ride along with other calls).
    ``concurrent=True`` (for read-only tools) lets calls of it that come together in one response
    run at the same time; every other call runs in order, and results are applied in the
    response's order. ``timeout=`` (seconds) stops an ``async`` handler that takes longer: the
    model is told the tool timed out and a warning is recorded (``Step.tool_timeout`` and
    ``Flow.tool_timeout`` give a default; a plain ``def`` handler cannot be stopped, so it takes none).
    ``idempotent=True`` says running the handler twice does no more than running it once: a durable
    executor (``picoflow.temporal``) may then retry it after a lost worker; other tools never are.

    ``approval=True`` makes every call wait for the session principal's decision
    (``FlowEngine.decide``) before it runs; ``approvers=("staff",)`` lets those roles decide too.
    ``approval=policy`` decides per call: ``policy(ctx, args)`` returns who must approve, or None to
    run at once. ``approval_summary`` says what will happen (``"Refund {amount} on order {order}"``,
    a function of the arguments, or ``fn(ctx, args)`` to read the deps); ``approval_seconds`` is how
    long a decision may take (a day).

    ``grounded=True`` sends a call back to the model when an argument that is an option, a text or
    a number is not borne out by what the user said in the step (``picoflow.slots.arguments``):
    the model may not choose for the user. ``grounded=False`` never does (arguments taken from a
    list code showed, an id). By default (None) the grounding profile of the step's model decides:
    the embedded model's checks them, a hosted model's does not.
    """
    if callable(fn_or_name):
        setattr(fn_or_name, _TOOL_MARK, _ToolMark(None, description, strict, exclusive, _declaring_scope()))
        return fn_or_name
    if fn_or_name is not None and (not isinstance(fn_or_name, str) or not fn_or_name.strip()):
        raise FlowDefinitionError(f"@tool(...) takes a tool name string, got {fn_or_name!r}")
    check_timeout(timeout, "@tool(timeout=...)")
    rule = _approval_rule(approval, approvers, approval_summary, approval_seconds)

    scope = _declaring_scope()

    def mark(fn: F) -> F:
        setattr(
            fn,
            _TOOL_MARK,
            _ToolMark(
                fn_or_name,
                description,
                strict,
                exclusive,
                scope,
                concurrent,
                timeout,
                idempotent,
                rule,
                grounded,
            ),
        )
        return fn

    return mark


def timed_out(name: str, seconds: float) -> ToolError:
    """The refusal of a call stopped at its time limit: what the model is told (never the arguments)
    and the warning the session keeps."""
    return ToolError(
        f"{name} did not finish within {seconds:g} seconds and was stopped; it gave no result.",
        warning=("tool_timeout", f"tool {name} did not finish within {seconds:g} s and was stopped"),
    )


def check_timeout(timeout: object, where: str) -> None:
    """A timeout is None or a positive, finite number of seconds."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
        raise FlowDefinitionError(f"{where} takes a positive number of seconds, not {timeout!r}")


def tools(names: Iterable[str]) -> Callable[[F], F]:
    """Make a method the handler of every model response whose tool names are exactly ``names``.

    The handler receives the validated calls (``list[ValidCall]``) and must return an outcome
    (``go``, ``stay`` or ``direct``); the individual handlers of those tools are not run.
    """
    group = frozenset(names)
    scope = _declaring_scope()
    if not group or any(not isinstance(name, str) or not name for name in group):
        raise FlowDefinitionError("@tools([...]) needs a non-empty list of tool names")

    def mark(fn: F) -> F:
        setattr(fn, _GROUP_MARK, group)
        setattr(fn, _GROUP_SCOPE, scope)
        return fn

    return mark


def declare_tool(name: str, args: type[BaseModel], description: str) -> ToolSpec:
    """A tool the model may call that has no handler of its own (a ``@tools`` group handles it)."""
    schema = json_schema(args)
    strict_schema = strict_variant(schema)
    definition = ToolDefinition(name, description, strict_schema or schema, strict=strict_schema is not None)
    return ToolSpec(name, definition, args, (), (), None, False, name)


@dataclass(frozen=True, slots=True)
class ValidCall:
    """A tool call whose arguments passed validation, as given to a group handler."""

    id: str
    name: str
    args: BaseModel

    def arguments(self) -> dict[str, Any]:
        return {name: getattr(self.args, name) for name in type(self.args).model_fields}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A built tool: its model-facing definition and how to call its handler."""

    name: str
    definition: ToolDefinition
    args_model: type[BaseModel]
    params: tuple[str, ...]
    context_params: tuple[str, ...]
    handler: Callable[..., Any] | None
    is_async: bool
    attribute: str
    """Name of the method on the step class ('' for declared tools)."""
    exclusive: bool = False
    """Runs only as the sole call of a response."""
    concurrent: bool = False
    """May run at the same time as other concurrent calls of its response (read-only by contract)."""
    timeout: float | None = None
    """Seconds its (async) handler may take before it is stopped; None: no limit."""
    idempotent: bool = False
    """Running it again after a lost worker is harmless (a durable executor may retry it)."""
    approval: ApprovalRule | None = None
    """Its calls wait for a decision before they run (see ``@tool(approval=...)``)."""
    grounded: bool | None = None
    """Its arguments must be borne out by what the user said (see ``@tool(grounded=...)``); None:
    as the grounding profile of the step's model says."""

    @property
    def labels(self) -> dict[str, str]:
        """A person's label for each argument the tool titles (``Annotated[str, Field(title="Room
        type")]``): what an approval card shows for the argument's name."""
        fields = self.args_model.model_fields
        return {name: field.title for name, field in fields.items() if name in self.params and field.title}

    def validate(self, call: ToolCall) -> BaseModel | str:
        """The validated arguments, or the error text for the model."""
        if isinstance(call.args, str):
            return (
                f"Invalid arguments for {self.name}: they are not a JSON object. "
                f"Send the arguments as one JSON object matching the schema of {self.name}."
            )
        try:
            # model_validate's own work, without its Python frame: every call of every turn passes here.
            validated: BaseModel = self.args_model.__pydantic_validator__.validate_python(call.args)
            return validated
        except ValidationError as error:
            return describe_validation_error(error, tool=self.name)


@dataclass(frozen=True, slots=True)
class ToolGroup:
    names: frozenset[str]
    handler: Callable[..., Any]
    is_async: bool
    context_params: tuple[str, ...]
    attribute: str


def _class_members(cls: type) -> Iterable[tuple[str, Any]]:
    """Attributes of ``cls`` with subclasses overriding their bases (nearest definition wins)."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        for attribute, value in vars(klass).items():
            if attribute not in seen:
                seen.add(attribute)
                yield attribute, value


def collect_tools(step_cls: type, *, where: str) -> tuple[dict[str, ToolSpec], list[ToolGroup]]:
    """Build every ``@tool`` and ``@tools`` of a step class (inherited ones included)."""
    specs: dict[str, ToolSpec] = {}
    groups: list[ToolGroup] = []
    for attribute, value in _class_members(step_cls):
        fn = value.__func__ if isinstance(value, staticmethod | classmethod) else value
        mark = getattr(fn, _TOOL_MARK, None)
        if isinstance(mark, _ToolMark):
            name = mark.name or attribute
            here = f"{where} tool {name!r}"
            if name in specs:
                raise FlowDefinitionError(
                    f"{here}: two methods ({specs[name].attribute} and {attribute}) define the same tool name"
                )
            model_name = "".join(part.title() for part in name.split("_")) + "Args"
            args_model, params, injected, summary = build_args_model(
                fn, model_name=model_name, where=here, scope=mark.scope
            )
            description = mark.description or summary
            if not description:
                raise FlowDefinitionError(
                    f"{here}: give the tool a docstring; the model needs to know its use"
                )
            schema = json_schema(args_model)
            strict_schema = None if mark.strict is False else strict_variant(schema)
            definition = ToolDefinition(
                name, description, strict_schema or schema, strict=strict_schema is not None
            )
            is_async = inspect.iscoroutinefunction(fn)
            if mark.timeout is not None and not is_async:
                raise FlowDefinitionError(
                    f"{here}: timeout= needs an async handler (a plain def cannot be stopped once it runs)"
                )
            specs[name] = ToolSpec(
                name,
                definition,
                args_model,
                params,
                injected,
                fn,
                is_async,
                attribute,
                exclusive=mark.exclusive,
                concurrent=mark.concurrent,
                timeout=mark.timeout,
                idempotent=mark.idempotent,
                approval=mark.approval,
                grounded=mark.grounded,
            )
        group = getattr(fn, _GROUP_MARK, None)
        if isinstance(group, frozenset):
            _, params, injected, _ = build_args_model(
                fn, model_name="GroupArgs", where=f"{where} @tools", scope=getattr(fn, _GROUP_SCOPE, None)
            )
            if len(params) != 1:
                raise FlowDefinitionError(
                    f"{where} @tools handler {attribute}: take exactly one parameter (the list of calls) "
                    "besides self and RunContext parameters"
                )
            groups.append(ToolGroup(group, fn, inspect.iscoroutinefunction(fn), injected, attribute))
    return specs, groups


def add_declared(specs: dict[str, ToolSpec], declared: Iterable[ToolSpec], *, where: str) -> None:
    for spec in declared:
        if spec.name in specs:
            raise FlowDefinitionError(f"{where} tool {spec.name!r}: declared and also defined by a method")
        specs[spec.name] = spec


def arguments_of(spec: ToolSpec, args: BaseModel) -> Mapping[str, Any]:
    return {name: getattr(args, name) for name in spec.params}
