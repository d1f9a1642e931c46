"""An MCP tool as a ``ToolSpec``: its server's JSON Schema checked and turned into a Pydantic model.

The model sees the server's schema as the server wrote it (in strict form when strict mode keeps
its meaning, as for ``@tool``s). picoflow validates the arguments with a Pydantic model built from
that schema before the call, so a wrong call gets the same correction as a native tool's: the field
and the rule, never the value. A schema using a keyword picoflow cannot validate is refused when the
tools are registered, naming the tool and the keyword (``allow=`` can leave the tool out).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from picoflow._schema import strict_variant
from picoflow.exceptions import FlowDefinitionError
from picoflow.messages import ToolDefinition
from picoflow.tools import ToolSpec

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What every provider accepts as a tool name."""

ARGUMENTS = "arguments_json"
CONTEXT = "picoflow_context"

# Keywords that only describe (or that the server alone checks, such as "format"): no validation here.
_DESCRIPTIVE = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "format",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentEncoding",
        "contentMediaType",
        "uniqueItems",
    }
)
_VALIDATED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "definitions",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
_CONSTRAINTS = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "multipleOf": "multiple_of",
    "minItems": "min_length",
    "maxItems": "max_length",
}
_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": None}


class MCPArguments(BaseModel):
    """Validated arguments of an MCP tool call; fields carry the schema's names as aliases."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, protected_namespaces=())

    @property
    def arguments_json(self) -> dict[str, Any]:
        """The arguments to send: what the model gave, as validated, without unset optional ones."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class _Refused(Exception):
    pass


class _Converter:
    def __init__(self, root: Mapping[str, Any], model_name: str) -> None:
        self.defs: dict[str, Any] = {**root.get("definitions", {}), **root.get("$defs", {})}
        self.model_name = model_name
        self.models = 0
        self.resolving: set[str] = set()

    def annotation(self, node: Any, where: str) -> Any:
        if node is True or node == {}:
            return Any
        if not isinstance(node, Mapping):
            raise _Refused(f"{where} is not a schema")
        unknown = sorted(k for k in node if k not in _VALIDATED and k not in _DESCRIPTIVE and k[:2] != "x-")
        if unknown:
            raise _Refused(f"{where} uses {unknown[0]!r}, which picoflow cannot validate")
        if "$ref" in node:
            return self._ref(node["$ref"], where)
        if "enum" in node or "const" in node:
            values = tuple(node["enum"]) if "enum" in node else (node["const"],)
            if not values or not all(v is None or isinstance(v, str | int | float | bool) for v in values):
                raise _Refused(f"{where} has an enum or const that is not a list of plain values")
            return Literal[values]
        for combinator in ("anyOf", "oneOf", "allOf"):
            if combinator in node:
                options = node[combinator]
                if not isinstance(options, list) or not options:
                    raise _Refused(f"{where}: {combinator} must be a non-empty list")
                if combinator == "allOf" and len(options) > 1:
                    raise _Refused(f"{where} combines several schemas with 'allOf'")
                members = [self.annotation(option, where) for option in options]
                return members[0] if len(members) == 1 else Union[tuple(members)]  # noqa: UP007
        kind = node.get("type")
        if isinstance(kind, list):
            rest = {key: value for key, value in node.items() if key != "type"}
            return Union[tuple(self.annotation({**rest, "type": one}, where) for one in kind)]  # noqa: UP007
        if kind is None:
            return Any
        if kind == "object":
            return self.object_model(node, where)
        if kind == "array":
            items = self.annotation(node.get("items", True), f"{where}[]")
            return self._constrained(list[items], node, where)  # type: ignore[valid-type]
        if kind not in _SCALARS:
            raise _Refused(f"{where} has an unknown type {kind!r}")
        return self._constrained(_SCALARS[kind], node, where)

    def _ref(self, ref: Any, where: str) -> Any:
        match = re.fullmatch(r"#/(?:\$defs|definitions)/([^/]+)", ref if isinstance(ref, str) else "")
        if match is None or match.group(1) not in self.defs:
            raise _Refused(f"{where} refers to {ref!r}, which is not among the schema's definitions")
        name = match.group(1)
        if name in self.resolving:
            raise _Refused(f"{where}: definition {name!r} refers to itself")
        self.resolving.add(name)
        try:
            return self.annotation(self.defs[name], where)
        finally:
            self.resolving.discard(name)

    def _constrained(self, base: Any, node: Mapping[str, Any], where: str) -> Any:
        constraints = {_CONSTRAINTS[key]: node[key] for key in _CONSTRAINTS if key in node}
        if not constraints:
            return base
        try:
            return Annotated[base, Field(**constraints)]
        except Exception as exc:
            raise _Refused(f"{where} has constraints picoflow cannot use ({exc})") from exc

    def object_model(self, node: Mapping[str, Any], where: str, *, top: bool = False) -> Any:
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        if not isinstance(properties, Mapping):
            raise _Refused(f"{where}: 'properties' is not an object")
        if not properties and isinstance(extra, Mapping):
            return dict[str, self.annotation(extra, f"{where}.*")]  # type: ignore[misc]
        required = node.get("required", [])
        if not isinstance(required, list) or not set(required) <= set(properties):
            raise _Refused(f"{where}: 'required' names properties it does not define")
        fields: dict[str, Any] = {}
        for index, (name, schema) in enumerate(properties.items()):
            annotation = self.annotation(schema, f"{where}.{name}" if where else name)
            default = ... if name in required else None
            fields[f"p{index}"] = (annotation, Field(default, alias=name))
        self.models += 1
        model_name = self.model_name if top else f"{self.model_name}{self.models}"
        config = ConfigDict(extra="forbid" if extra in (None, False) else "allow", protected_namespaces=())
        try:
            if top:  # the arguments themselves: they know how to be sent
                return create_model(model_name, __base__=MCPArguments, **fields)
            return create_model(model_name, __config__=config, **fields)
        except Exception as exc:
            raise _Refused(f"{where or 'the arguments'} do not form a valid model ({exc})") from exc


def mcp_tool_spec(
    *,
    name: str,
    description: str,
    schema: Any,
    handler: Callable[..., Any],
    where: str,
    timeout: float | None,
    concurrent: bool,
) -> ToolSpec:
    """The ``ToolSpec`` of one MCP tool, or ``FlowDefinitionError`` saying what is wrong with it."""
    here = f"{where} tool {name!r}"
    if not TOOL_NAME.match(name):
        raise FlowDefinitionError(f"{here}: a tool name must match {TOOL_NAME.pattern} for every provider")
    if keyword.iskeyword(name):
        raise FlowDefinitionError(f"{here}: a tool name may not be a Python keyword")
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise FlowDefinitionError(f"{here}: its input schema must be a JSON Schema of type 'object'")
    top = {key: value for key, value in schema.items() if key not in ("$schema", "title")}
    extra = top.get("additionalProperties")
    if extra not in (None, True, False):
        raise FlowDefinitionError(f"{here}: additionalProperties with a schema cannot be validated")
    converter = _Converter(top, "".join(part.title() for part in re.split(r"[_-]", name)) + "Args")
    try:
        args_model = converter.object_model(top, "", top=True)
    except _Refused as refusal:
        raise FlowDefinitionError(f"{here}: its input schema {refusal}; leave it out with allow=") from None
    if extra is True:
        args_model.model_config["extra"] = "allow"
        args_model.model_rebuild(force=True)
    strict_schema = strict_variant(top)
    definition = ToolDefinition(
        name, description or f"Tool {name}.", strict_schema or top, strict=strict_schema is not None
    )
    return ToolSpec(
        name,
        definition,
        args_model,
        (ARGUMENTS,),
        (CONTEXT,),
        handler,
        True,
        "",
        timeout=timeout,
        concurrent=concurrent,
    )
