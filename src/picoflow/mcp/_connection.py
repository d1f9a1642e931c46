"""The connection to one MCP server, through the official ``mcp`` SDK (the only module importing it).

The SDK's transports (``stdio_client``, ``streamable_http_client``) and ``ClientSession`` are anyio
context managers that must be entered and left in one task. So each open connection has a task of
its own that enters them, holds them while the connection serves, and leaves them when told to stop
or when the connection is retired. Calls from any turn share the one ``ClientSession`` (it matches
concurrent requests to their answers). A call that fails because the server broke, or that is
abandoned (timed out or cancelled), retires the connection: its server is stopped, and the next call
starts a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Generator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, cast

from pydantic_core import to_json

from picoflow.context import RunContext
from picoflow.exceptions import ToolError, ToolSourceUnavailable
from picoflow.mcp.servers import MCPServer
from picoflow.tools import timed_out

try:
    import httpx2
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp import types as mcp_types
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("MCP servers need the mcp SDK: pip install 'picoflow-ai[mcp]'") from exc

logger = logging.getLogger("picoflow")

SERVER_FAILED = "mcp_server_failed"
_CONNECTION_CLOSED = -32000

_CALLER_HEADERS: ContextVar[Mapping[str, str] | None] = ContextVar("picoflow_mcp_headers", default=None)
"""Headers of the call being sent. The SDK hands a request to its HTTP writer in the sender's
context, so the request's auth flow reads the headers of the turn that made the call."""


class _CallerHeaders(httpx2.Auth):
    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        headers = _CALLER_HEADERS.get()
        if headers:
            request.headers.update(headers)
        yield request


class _Live:
    """One open connection: its session, and the task holding the SDK's contexts."""

    __slots__ = ("session", "stop", "task")

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def usable(self) -> bool:
        if self.session is None or self.stop.is_set() or self.task is None or self.task.done():
            return False
        # The SDK marks its dispatcher closed when the server's output ends (the process died).
        dispatcher = getattr(self.session, "_dispatcher", None)
        return not getattr(dispatcher, "_closed", False)


class Connection:
    """An engine's connection to ``server``: opened on first need, reopened after a failure."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._live: _Live | None = None
        self._lock: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def tool_list(self) -> Sequence[mcp_types.Tool]:
        """Every tool the server offers (all pages)."""
        live = await self._session()
        assert live.session is not None
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            while True:
                params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await live.session.list_tools(params=params)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools
        except Exception as exc:
            self._retire(live)
            raise ToolSourceUnavailable(
                f"MCP server {self.server.label} did not list its tools: {_describe(exc)}"
            ) from exc

    async def call(self, name: str, shown_as: str, arguments: dict[str, Any], ctx: RunContext[Any]) -> str:
        """Call tool ``name``: its result as the tool message's text, or ``ToolError`` (the server's
        error result, or its failure, with a warning)."""
        server = self.server
        meta = cast(Any, dict(server.caller_meta(ctx))) if server.caller_meta is not None else None
        headers = server.caller_headers(ctx) if server.caller_headers is not None else None
        try:
            live = await self._session()
        except ToolSourceUnavailable as exc:
            raise _failed(shown_as, exc.message) from exc
        assert live.session is not None
        token = _CALLER_HEADERS.set({k: str(v) for k, v in headers.items()}) if headers else None
        limit = asyncio.timeout(server.timeout)
        try:
            async with limit:
                result = await live.session.call_tool(name, arguments, meta=meta)
        except TimeoutError as exc:
            if not limit.expired():
                self._retire(live)
                raise _failed(shown_as, f"MCP server {server.label}: {_describe(exc)}") from exc
            # Nothing says the server will ever answer this call: start afresh for the next one.
            self._retire(live)
            assert server.timeout is not None
            raise timed_out(shown_as, server.timeout) from None
        except asyncio.CancelledError:
            # Timed out or abandoned: nothing says the server will ever answer, so start afresh.
            self._retire(live)
            raise
        except MCPError as exc:
            if exc.code == _CONNECTION_CLOSED:
                self._retire(live)
            raise _failed(shown_as, f"MCP server {server.label}: {_describe(exc)}") from exc
        except Exception as exc:
            self._retire(live)
            raise _failed(shown_as, f"MCP server {server.label}: {_describe(exc)}") from exc
        finally:
            if token is not None:
                _CALLER_HEADERS.reset(token)
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"{shown_as} failed without saying why.")
        return text

    async def aclose(self) -> None:
        """Stop the server (every connection still closing included)."""
        if self._live is not None:
            self._retire(self._live)
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, self.server.startup_timeout)

    # --- the connection's own task ------------------------------------------------------------

    async def _session(self) -> _Live:
        live = self._live
        if live is not None and live.usable:
            return live
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            live = self._live
            if live is None or not live.usable:
                if live is not None:
                    self._retire(live)
                live = self._live = await self._open()
            return live

    async def _open(self) -> _Live:
        live = _Live()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._hold(live, ready), name=f"picoflow MCP {self.server.label}")
        live.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.server.startup_timeout)
        except BaseException as exc:
            live.stop.set()
            task.cancel()
            # Nobody waits for ``ready`` any more: the failure the task may still set on it is seen here.
            ready.add_done_callback(_observed)
            if isinstance(exc, Exception):
                raise ToolSourceUnavailable(
                    f"MCP server {self.server.label} did not start: {_describe(exc)}"
                ) from exc
            raise
        return live

    async def _hold(self, live: _Live, ready: asyncio.Future[None]) -> None:
        try:
            async with self._transport() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                live.session = session
                ready.set_result(None)
                await live.stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            elif isinstance(exc, Exception):
                logger.warning("picoflow: MCP server %s closed: %s", self.server.label, _describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            live.stop.set()

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        server = self.server
        if server.transport == "stdio":
            params = StdioServerParameters(
                command=server.command, args=list(server.args), env=dict(server.env or {}), cwd=server.cwd
            )
            async with stdio_client(params) as streams:
                yield streams
            return
        auth = _CallerHeaders() if server.caller_headers is not None else None
        async with (
            create_mcp_http_client(headers=dict(server.headers), auth=auth) as client,
            streamable_http_client(server.url, http_client=client) as streams,
        ):
            yield streams

    def _retire(self, live: _Live) -> None:
        if self._live is live:
            self._live = None
        live.stop.set()


def result_text(result: mcp_types.CallToolResult) -> str:
    """A tool result as a tool message: its text blocks, else its structured content as JSON; other
    blocks are named, not inlined."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type} {block.mime_type} not shown]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{getattr(block, 'type', 'content')} not shown]")
    if not parts and result.structured_content is not None:
        return to_json(result.structured_content).decode()
    return "\n".join(parts)


def _failed(shown_as: str, detail: str) -> ToolError:
    return ToolError(
        f"{shown_as} failed: its server stopped or answered wrongly, so its result is unknown. "
        "You may call it again.",
        warning=(SERVER_FAILED, f"tool {shown_as} failed: {detail}"),
    )


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) if not isinstance(exc, MCPError) else exc.error.message
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _observed(future: asyncio.Future[None]) -> None:
    """Mark a future's exception as retrieved (its waiter gave up)."""
    if not future.cancelled():
        future.exception()
