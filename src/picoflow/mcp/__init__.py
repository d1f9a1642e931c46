"""MCP servers as a source of tools: ``MCPServer`` configures one, and a step lists it in ``mcp_servers``.

The engine starts each server, lists its tools, checks their schemas as it checks ``@tool``s, and
adds them to the steps, through ``picoflow.mcp.tools.MCPTools``; one connection per server serves
every session (``_connection``, the only module here importing the ``mcp`` SDK,
``pip install 'picoflow-ai[mcp]'``).
Serving flows *to* MCP clients is an edge: ``picoflow.server.mcp``.
"""

from picoflow.mcp.servers import MCPServer

__all__ = ["MCPServer"]
