"""The MCP servers of an engine's flows: started, their tools listed once and added to the flows'
steps in the registry, and stopped with the engine."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping

from picoflow.flow import FlowSpec
from picoflow.mcp.tools import MCPTools


class FlowServers:
    """The MCP servers of the flows in ``registry`` (the engine's own, live)."""

    def __init__(self, registry: MutableMapping[str, FlowSpec]) -> None:
        self.registry = registry
        self._tools = MCPTools()
        self._lock: asyncio.Lock | None = None  # made in the event loop that first lists tools

    async def start(self) -> None:
        """Start the servers of every registered flow and list their tools."""
        for spec in list(self.registry.values()):
            if spec.mcp_servers:
                await self.with_tools(spec)

    async def with_tools(self, spec: FlowSpec) -> FlowSpec:
        """``spec`` with its servers' tools, listed once and kept in the registry."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            current = self.registry.get(spec.name, spec)
            if current.mcp_servers:
                current = await self._tools.resolve(current)
                if spec.name in self.registry:
                    self.registry[spec.name] = current
            return current

    async def aclose(self) -> None:
        """Stop the servers (their processes too)."""
        await self._tools.aclose()
