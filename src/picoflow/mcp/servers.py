"""``MCPServer``: a Model Context Protocol server whose tools a step offers next to its ``@tool``s.

Attach servers to a step or a flow (``mcp_servers = [MCPServer.stdio("mcp-server-time")]``). The
engine owns each server: it starts it once (at ``await engine.start()`` or on the first turn), lists
its tools and checks their schemas as it checks native ones, shares the connection between all
sessions, starts it again after a crash, and stops it in ``engine.aclose()``.

This module is only configuration and imports nothing of the ``mcp`` SDK; the connection lives in
``picoflow.mcp._connection``, which needs ``pip install 'picoflow-ai[mcp]'``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from picoflow.context import RunContext
from picoflow.exceptions import FlowDefinitionError
from picoflow.tools import check_timeout

PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")

CallerValues = Callable[[RunContext[Any]], Mapping[str, Any]]
"""Computes values sent with each call from the caller's context (never from the model)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class MCPServer:
    """An MCP server as code configures it. Build it with ``MCPServer.stdio`` or ``MCPServer.http``.

    Instances compare by identity: each one is one server process (or connection) per engine, shared
    by every step and flow that lists it.
    """

    transport: Literal["stdio", "http"]
    """How picoflow talks to the server: a subprocess over stdio, or streamable HTTP."""
    command: str = ""
    """stdio: the program to start."""
    args: tuple[str, ...] = ()
    """stdio: its arguments."""
    env: Mapping[str, str] | None = None
    """stdio: environment variables added to the SDK's safe default environment."""
    cwd: str | None = None
    """stdio: its working directory."""
    url: str = ""
    """http: the endpoint (``http://host:port/mcp``)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """http: headers sent with every request (an API key of the application, say)."""
    prefix: str = ""
    """Put before each tool name (``prefix_toolname``), to keep names of several servers apart."""
    allow: frozenset[str] | None = None
    """The server's tool names to offer (its own names, without the prefix); None offers all."""
    timeout: float | None = 30.0
    """Seconds one call may take once the server is up (its start is ``startup_timeout``'s); past
    it the model is told the tool timed out, a ``tool_timeout`` warning is recorded and the server
    is restarted. None: no limit."""
    startup_timeout: float = 30.0
    """Seconds the server may take to start and answer the handshake."""
    caller_headers: CallerValues | None = None
    """http: HTTP headers computed per call from the ``RunContext`` (the caller's identity)."""
    caller_meta: CallerValues | None = None
    """Request ``_meta`` entries computed per call from the ``RunContext`` (any transport)."""

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Iterable[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        prefix: str = "",
        allow: Iterable[str] | None = None,
        timeout: float | None = 30.0,
        startup_timeout: float = 30.0,
        caller_meta: CallerValues | None = None,
    ) -> MCPServer:
        """A server picoflow starts as a subprocess and talks to over its stdin and stdout."""
        if not isinstance(command, str) or not command.strip():
            raise FlowDefinitionError("MCPServer.stdio needs the command that starts the server")
        server = cls(
            transport="stdio",
            command=command,
            args=tuple(args),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            prefix=prefix,
            allow=frozenset(allow) if allow is not None else None,
            timeout=timeout,
            startup_timeout=startup_timeout,
            caller_meta=caller_meta,
        )
        server.check()
        return server

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        prefix: str = "",
        allow: Iterable[str] | None = None,
        timeout: float | None = 30.0,
        startup_timeout: float = 30.0,
        caller_headers: CallerValues | None = None,
        caller_meta: CallerValues | None = None,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url``."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise FlowDefinitionError(f"MCPServer.http needs an http:// or https:// URL, not {url!r}")
        server = cls(
            transport="http",
            url=url,
            headers=dict(headers or {}),
            prefix=prefix,
            allow=frozenset(allow) if allow is not None else None,
            timeout=timeout,
            startup_timeout=startup_timeout,
            caller_headers=caller_headers,
            caller_meta=caller_meta,
        )
        server.check()
        return server

    @property
    def label(self) -> str:
        """How messages and warnings name the server."""
        return self.url if self.transport == "http" else " ".join([self.command, *self.args])

    def tool_name(self, name: str) -> str:
        """The name the model sees for the server's tool ``name``."""
        return f"{self.prefix}_{name}" if self.prefix else name

    def check(self) -> None:
        where = f"MCP server {self.label}"
        if self.prefix and not PREFIX.match(self.prefix):
            raise FlowDefinitionError(f"{where}: prefix {self.prefix!r} must match {PREFIX.pattern}")
        check_timeout(self.timeout, f"{where}: timeout")
        check_timeout(self.startup_timeout, f"{where}: startup_timeout")
        if self.allow is not None and not self.allow:
            raise FlowDefinitionError(f"{where}: allow= lists no tool; leave the server out instead")

    def __repr__(self) -> str:
        return f"MCPServer.{self.transport}({self.label!r})"
