"""An MCP server (official SDK) that misbehaves on request, for tests/test_mcp.py.

Run over stdio: ``python tests/mcp_servers/misbehaving.py``; or ``app()`` for streamable HTTP.
``MISBEHAVE=schema`` adds a tool whose input schema picoflow cannot validate, ``MISBEHAVE=principal``
one whose schema exposes an argument picoflow injects.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field
from typing_extensions import TypedDict

server = MCPServer("misbehaving")


class Point(TypedDict):
    x: int
    y: int


@server.tool()
def echo(text: Annotated[str, Field(max_length=40)], times: Annotated[int, Field(ge=1, le=3)] = 1) -> str:
    """Repeat the text."""
    return " ".join([text] * times)


@server.tool()
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


@server.tool()
def refuse(reason: str) -> str:
    """Always fails with the reason."""
    raise ValueError(f"refused: {reason}")


@server.tool()
def crash() -> str:
    """Exits the server process in the middle of the call."""
    os._exit(3)


@server.tool()
async def slow() -> str:
    """Never answers."""
    await asyncio.Event().wait()
    return "never"


@server.tool()
def point() -> Point:
    """Returns a point that does not match the output schema it declares."""
    return {"x": 1, "y": 2}


@server.tool()
def whoami(ctx: Context) -> str:
    """Who the server was told the caller is."""
    meta = ctx.request_context.meta or {}
    headers = ctx.headers or {}
    return json.dumps({"meta": meta.get("customer"), "header": headers.get("x-customer")})


def _misbehave(tool: str, parameters: dict[str, Any]) -> None:
    def unusable(**kwargs: Any) -> str:
        return "unreachable"

    server.add_tool(unusable, name=tool, description="A tool with a schema picoflow refuses.")
    registered = server._tool_manager.get_tool(tool)
    assert registered is not None
    registered.parameters = parameters


# The declared output schema says "x" is a string: the SDK's client refuses the result.
_point = server._tool_manager.get_tool("point")
assert _point is not None
_point.fn_metadata.output_schema = {
    "type": "object",
    "properties": {"x": {"type": "string"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
}

if os.environ.get("MISBEHAVE") == "schema":
    _misbehave("negated", {"type": "object", "properties": {"n": {"not": {"type": "string"}}}})
if os.environ.get("MISBEHAVE") == "principal":
    _misbehave("lookup", {"type": "object", "properties": {"principal": {"type": "string"}}})


def app() -> Any:
    return server.streamable_http_app()


if __name__ == "__main__":
    server.run("stdio")
