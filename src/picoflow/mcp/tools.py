"""An engine's MCP servers: one connection per server, and flows completed with the servers' tools.

A flow that lists MCP servers is built without their tools (they are only known once the servers
answer). ``MCPTools.resolve`` asks each server for its tools once, checks them as native tools are
checked when a flow is built, and returns the flow with every step's MCP tools added as ordinary
``ToolSpec``s, whose handler calls the server. From then on the runner treats them like ``@tool``s:
validation before the call, the time limit, one tool message per call.

The engine holds one ``MCPTools``: the connection (the one module importing the ``mcp`` SDK) and
the schema checks stay private to this package.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from picoflow.exceptions import FlowDefinitionError, ToolSourceUnavailable
from picoflow.flow import FlowSpec, StepSpec, check_tool_schemas
from picoflow.mcp._schema import mcp_tool_spec
from picoflow.mcp.servers import MCPServer
from picoflow.tools import ToolSpec

if TYPE_CHECKING:
    from picoflow.mcp._connection import Connection


class MCPTools:
    """The MCP connections of one engine."""

    def __init__(self) -> None:
        self._connections: dict[int, Connection] = {}

    def connection(self, server: MCPServer) -> Connection:
        connection = self._connections.get(id(server))
        if connection is None:
            try:
                from picoflow.mcp._connection import Connection
            except ImportError as exc:
                raise FlowDefinitionError(str(exc)) from exc
            connection = self._connections[id(server)] = Connection(server)
        return connection

    async def resolve(self, spec: FlowSpec) -> FlowSpec:
        """``spec`` with the tools of its MCP servers (``ToolSourceUnavailable`` when one of them
        cannot be reached, ``FlowDefinitionError`` when a tool cannot be offered)."""
        listings = await asyncio.gather(
            *(self.connection(server).tool_list() for server in spec.mcp_servers), return_exceptions=True
        )
        listed: dict[int, Sequence[Any]] = {}
        for server, listing in zip(spec.mcp_servers, listings, strict=True):
            if isinstance(listing, BaseException):
                if isinstance(listing, ToolSourceUnavailable | FlowDefinitionError):
                    raise listing
                raise ToolSourceUnavailable(f"MCP server {server.label} failed: {listing!r}") from listing
            listed[id(server)] = listing
        steps = {
            name: self._with_tools(step, listed, f"flow {spec.name}, step {name}")
            if step.mcp_servers
            else step
            for name, step in spec.steps.items()
        }
        return dataclasses.replace(spec, steps=steps, mcp_servers=())

    def _with_tools(self, step: StepSpec, listed: dict[int, Sequence[Any]], where: str) -> StepSpec:
        tools = dict(step.tools)
        added: list[str] = []
        for server in step.mcp_servers:
            offered = {tool.name: tool for tool in listed[id(server)]}
            missing = sorted((server.allow or frozenset()) - offered.keys())
            if missing:
                raise FlowDefinitionError(
                    f"{where}: MCP server {server.label} offers no tool {missing[0]!r} (it offers: "
                    f"{', '.join(sorted(offered)) or 'none'})"
                )
            for tool in offered.values():
                if server.allow is not None and tool.name not in server.allow:
                    continue
                name = server.tool_name(tool.name)
                if name in tools:
                    raise FlowDefinitionError(
                        f"{where}: MCP server {server.label} offers {name!r}, a name the step already "
                        "uses; give the server a prefix= or leave the tool out with allow="
                    )
                tools[name] = self._spec(server, tool, name, f"{where}, MCP server {server.label},")
                added.append(name)
        built = dataclasses.replace(
            step,
            tools=tools,
            definitions=tuple(spec.definition for spec in tools.values()),
            exposed=frozenset(tools),
            mcp_tools=tuple(added),
        )
        check_tool_schemas(built, where)
        return built

    def _spec(self, server: MCPServer, tool: Any, name: str, where: str) -> ToolSpec:
        connection = self.connection(server)
        remote = tool.name

        async def call_mcp_tool(step: Any, arguments_json: dict[str, Any], picoflow_context: Any) -> str:
            return await connection.call(remote, name, arguments_json, picoflow_context)

        hints = tool.annotations
        return mcp_tool_spec(
            name=name,
            description=(tool.description or "").strip(),
            schema=tool.input_schema,
            handler=call_mcp_tool,
            where=where,
            timeout=None,  # the connection times the call itself, not the server's (re)start
            concurrent=bool(hints is not None and hints.read_only_hint),
        )

    async def aclose(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(connection.aclose() for connection in connections))
