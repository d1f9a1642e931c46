"""An MCP tool's JSON Schema: checked when tools are registered, turned into the Pydantic model its
arguments are validated with (corrections never quote a value), sent strict when that keeps its
meaning."""

from __future__ import annotations

from typing import Any

import pytest

from picoflow import FlowDefinitionError
from picoflow.mcp import MCPServer
from picoflow.mcp._schema import mcp_tool_spec
from picoflow.messages import ToolCall
from picoflow.tools import ToolSpec


async def never_called(step: Any, **kwargs: Any) -> str:
    raise AssertionError("not called")


def spec_of(schema: Any, name: str = "book") -> ToolSpec:
    return mcp_tool_spec(
        name=name,
        description="Book a room.",
        schema=schema,
        handler=never_called,
        where="test",
        timeout=None,
        concurrent=False,
    )


BOOKING = {
    "type": "object",
    "title": "bookArguments",
    "$defs": {
        "Guest": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "age": {"type": "integer", "minimum": 0},
            },
            "required": ["name"],
        }
    },
    "properties": {
        "hotel-id": {"type": "string", "pattern": "^H[0-9]+$"},
        "guests": {"type": "array", "items": {"$ref": "#/$defs/Guest"}, "minItems": 1},
        "board": {"enum": ["none", "breakfast", "half"]},
        "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}], "default": None},
        "schema": {"type": ["integer", "null"]},
    },
    "required": ["hotel-id", "guests"],
}


def test_valid_arguments_are_sent_as_given_with_the_schemas_names_and_without_unset_ones() -> None:
    spec = spec_of(BOOKING)
    args = spec.validate(ToolCall("book", {"hotel-id": "H12", "guests": [{"name": "Ada"}], "schema": 3}))
    assert not isinstance(args, str)
    assert getattr(args, spec.params[0]) == {"hotel-id": "H12", "guests": [{"name": "Ada"}], "schema": 3}


def test_wrong_arguments_get_the_field_and_the_rule_never_the_value() -> None:
    spec = spec_of(BOOKING)
    error = spec.validate(
        ToolCall(
            "book",
            {
                "hotel-id": "secret-4111",
                "guests": [{"name": "", "age": -4}],
                "board": "full-secret",
                "note": "a very private note that is long",
                "extra": "x",
            },
        )
    )
    assert error == (
        "Invalid arguments for book:\n"
        "- hotel-id: String should match pattern '^H[0-9]+$'\n"
        "- guests[0].name: String should have at least 1 character\n"
        "- guests[0].age: Input should be greater than or equal to 0\n"
        "- board: Input should be 'none', 'breakfast' or 'half'\n"
        "- note: String should have at most 20 characters\n"
        "- extra: Extra inputs are not permitted\n"
        "Correct the arguments and call book again."
    )
    assert "secret" not in error and "private" not in error


def test_the_model_sees_the_servers_schema_strict_only_when_that_keeps_its_meaning() -> None:
    loose = spec_of(BOOKING).definition
    assert not loose.strict
    assert loose.parameters == {k: v for k, v in BOOKING.items() if k != "title"}
    strict = spec_of(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ).definition
    assert strict.strict
    assert strict.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }


def test_a_schema_that_allows_more_properties_passes_them_on() -> None:
    spec = spec_of({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True})
    args = spec.validate(ToolCall("book", {"a": "4", "b": [1]}))
    assert not isinstance(args, str)
    assert getattr(args, spec.params[0]) == {"a": 4, "b": [1]}


@pytest.mark.parametrize(
    ("schema", "name", "problem"),
    [
        ({"type": "string"}, "book", "its input schema must be a JSON Schema of type 'object'"),
        (
            {"type": "object", "properties": {"n": {"not": {"type": "string"}}}},
            "book",
            "its input schema n uses 'not', which picoflow cannot validate; leave it out with allow=",
        ),
        (
            {"type": "object", "properties": {"n": {"allOf": [{"type": "string"}, {"maxLength": 3}]}}},
            "book",
            "its input schema n combines several schemas with 'allOf'",
        ),
        (
            {
                "type": "object",
                "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
                "properties": {"head": {"$ref": "#/$defs/Node"}},
            },
            "book",
            "definition 'Node' refers to itself",
        ),
        (
            {"type": "object", "properties": {"n": {"$ref": "#/$defs/Gone"}}},
            "book",
            "refers to '#/$defs/Gone'",
        ),
        ({"type": "object", "required": ["ghost"]}, "book", "'required' names properties it does not define"),
        ({"type": "object"}, "get.time", "a tool name must match"),
    ],
    ids=["not-an-object", "not", "all-of", "recursive", "dangling-ref", "ghost-required", "dotted-name"],
)
def test_schemas_picoflow_cannot_validate_are_refused_naming_the_problem(
    schema: Any, name: str, problem: str
) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        spec_of(schema, name)
    assert str(refused.value).startswith(f"test tool {name!r}: ")
    assert problem in str(refused.value)


def test_server_configuration_is_checked_when_it_is_written() -> None:
    with pytest.raises(FlowDefinitionError, match="prefix 'my tools' must match"):
        MCPServer.stdio("srv", prefix="my tools")
    with pytest.raises(FlowDefinitionError, match="timeout takes a positive number of seconds"):
        MCPServer.stdio("srv", timeout=0)
    with pytest.raises(FlowDefinitionError, match="needs an http:// or https:// URL"):
        MCPServer.http("ftp://example")
    with pytest.raises(FlowDefinitionError, match="allow= lists no tool"):
        MCPServer.http("http://127.0.0.1:9/mcp", allow=[])
    server = MCPServer.stdio("mcp-server-time", ["--local-timezone", "UTC"], prefix="clock")
    assert (server.label, server.tool_name("get_current_time")) == (
        "mcp-server-time --local-timezone UTC",
        "clock_get_current_time",
    )
