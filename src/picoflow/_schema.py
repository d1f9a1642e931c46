"""Tool argument models from function signatures, their JSON Schemas, and model-safe error text."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema

from picoflow.context import RunContext
from picoflow.exceptions import FlowDefinitionError


class _NoTitles(GenerateJsonSchema):
    """Titles repeat the field names and only cost tokens; leave them out."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        value = super().model_schema(schema)
        value.pop("title", None)
        return value


def literal_options(field: Any) -> tuple[Any, ...]:
    """The options of a ``typing.Literal[...] | None`` field (none for any other)."""
    if field is None:
        return ()
    found: list[Any] = []
    stack = [field.annotation]
    while stack:
        annotation = stack.pop()
        if get_origin(annotation) is typing.Literal:
            found.extend(get_args(annotation))
        else:
            stack.extend(get_args(annotation))
    return tuple(found)


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(schema_generator=_NoTitles)
    schema.pop("title", None)
    return schema


def is_context_annotation(annotation: Any) -> bool:
    return annotation is RunContext or get_origin(annotation) is RunContext


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns|Return|Raises|Yields|Examples?)\s*:\s*$"
)
_PARAM_LINE = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The summary (text before the first section) and Google-style ``Args:`` descriptions."""
    doc = inspect.getdoc(fn) or ""
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            current = None
            continue
        if section is None:
            summary.append(line)
        elif section in {"args", "arguments", "parameters", "params"}:
            match = _PARAM_LINE.match(line)
            if match:
                current = match.group(1).lstrip("*")
                params[current] = match.group(2).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), params


def build_args_model(
    fn: Callable[..., Any],
    *,
    model_name: str,
    where: str,
    skip_first: bool = True,
    scope: Mapping[str, Any] | None = None,
) -> tuple[type[BaseModel], tuple[str, ...], tuple[str, ...], str]:
    """Build the Pydantic model of a tool's model-facing arguments.

    Returns the model, the model-facing parameter names in order, the names of parameters the
    runtime injects (``RunContext``), and the docstring summary.
    """
    try:
        hints = typing.get_type_hints(fn, localns=dict(scope or {}), include_extras=True)
    except Exception as exc:
        raise FlowDefinitionError(f"{where}: cannot resolve its type hints ({exc})") from exc
    signature = inspect.signature(fn)
    summary, param_docs = parse_docstring(fn)
    fields: dict[str, Any] = {}
    names: list[str] = []
    injected: list[str] = []
    parameters = list(signature.parameters.values())
    if skip_first and parameters:
        parameters = parameters[1:]
    for param in parameters:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise FlowDefinitionError(f"{where}: *args/**kwargs cannot be tool arguments; name each one")
        annotation = hints.get(param.name, Any)
        if is_context_annotation(annotation):
            injected.append(param.name)
            continue
        if param.name.startswith("_"):
            raise FlowDefinitionError(f"{where}: argument {param.name!r} must not start with an underscore")
        default: Any = ... if param.default is inspect.Parameter.empty else param.default
        if not isinstance(default, FieldInfo) and param.name in param_docs:
            default = Field(default, description=param_docs[param.name])
        elif isinstance(default, FieldInfo) and default.description is None and param.name in param_docs:
            default.description = param_docs[param.name]
        fields[param.name] = (annotation, default)
        names.append(param.name)
    try:
        model = create_model(
            model_name,
            __config__=ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=False),
            **fields,
        )
    except Exception as exc:
        raise FlowDefinitionError(f"{where}: its arguments do not form a valid schema ({exc})") from exc
    return model, tuple(names), tuple(injected), summary


def iter_property_names(schema: Any) -> Iterator[str]:
    """Every property name anywhere in a JSON Schema (including ``$defs``)."""
    if isinstance(schema, Mapping):
        props = schema.get("properties")
        if isinstance(props, Mapping):
            yield from props
        for value in schema.values():
            yield from iter_property_names(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from iter_property_names(item)


# Keywords OpenAI's strict mode does not accept; a schema using them is sent non-strict.
_STRICT_UNSUPPORTED = frozenset(
    {"default", "patternProperties", "propertyNames", "if", "then", "else", "not"}
)


def strict_variant(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema in OpenAI strict form, or None when strict mode would change its meaning.

    Strict mode needs every property required and ``additionalProperties: false`` on every
    object. Optional arguments (with defaults) would have to become required, which changes what
    the tool accepts, so such schemas are sent non-strict and validated by Pydantic alone.
    """

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, Mapping):
            return node
        if _STRICT_UNSUPPORTED.intersection(node):
            raise _NotStrict
        out = {key: convert(value) for key, value in node.items()}
        if node.get("type") == "object" or "properties" in node:
            props = node.get("properties", {})
            if set(node.get("required", ())) != set(props):
                raise _NotStrict
            if node.get("additionalProperties") not in (None, False):
                raise _NotStrict
            out["additionalProperties"] = False
        return out

    try:
        converted = convert(schema)
    except _NotStrict:
        return None
    return dict(converted)


class _NotStrict(Exception):
    pass


def _loc(parts: tuple[int | str, ...]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# Pydantic's own messages describe the rule (allowed values, bounds, formats) and never quote the
# input, except these. Messages written by validators (value_error, custom types) may quote anything.
_BUILTIN_ERRORS = frozenset(get_args(core_schema.ErrorType))
_QUOTING_BUILTINS = frozenset({"value_error", "assertion_error", "union_tag_invalid"})


def _may_quote_input(error_type: str) -> bool:
    return error_type in _QUOTING_BUILTINS or error_type not in _BUILTIN_ERRORS


def _redact(message: str, value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return message
    if isinstance(value, str | int | float):
        text = str(value)
        if len(text) >= 3 and text in message:
            return message.replace(text, "<submitted value>")
    return message


def redact_error_message(item: ErrorDetails) -> str:
    """The message of one validation error, with the submitted value taken out where it could appear."""
    text = item["msg"]
    return _redact(text, item.get("input")) if _may_quote_input(item["type"]) else text


def describe_validation_error(error: ValidationError, *, tool: str, limit: int = 8) -> str:
    """Say which field broke which rule, so the model can fix its call — never the submitted value."""
    lines: list[str] = []
    items = error.errors(include_url=False, include_context=False)
    for item in items[:limit]:
        where = _loc(tuple(item["loc"])) or "arguments"
        text = redact_error_message(item)
        lines.append(f"- {where}: {text}")
    if len(items) > limit:
        lines.append(f"- ... and {len(items) - limit} more problems")
    return (
        f"Invalid arguments for {tool}:\n"
        + "\n".join(lines)
        + f"\nCorrect the arguments and call {tool} again."
    )


def literal_values(annotation: Any) -> tuple[Any, ...]:
    """The allowed values of a ``Literal[...]`` annotation (empty for anything else)."""
    return get_args(annotation) if get_origin(annotation) is typing.Literal else ()
