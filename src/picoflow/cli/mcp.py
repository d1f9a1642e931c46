"""``picoflow mcp serve``: the flows as MCP tools, over stdio (for a client that starts the server) or
streamable HTTP.

Over stdio, stdout carries the protocol and nothing else: what this command says goes to stderr.
The SDK (``picoflow-ai[mcp]``) is imported only when the command runs."""

from __future__ import annotations

import asyncio
import enum
from typing import Annotated

import typer
from rich.markup import escape

import picoflow
from picoflow.cli.loading import (
    USER_ERRORS,
    FlowsOpt,
    ModelOpt,
    StoreOpt,
    build_engine,
    describe_model,
    errors,
    fail,
    needs_extra,
)

mcp_app = typer.Typer(
    help="Model Context Protocol: serve the flows as MCP tools.", no_args_is_help=True, rich_markup_mode=None
)


class Transport(enum.StrEnum):
    """How MCP clients reach the server."""

    stdio = "stdio"
    http = "http"


@mcp_app.command("serve")
def serve(
    transport: Annotated[
        Transport, typer.Option(help="stdio: the client starts this command; http: streamable HTTP at /mcp.")
    ] = Transport.stdio,
    host: Annotated[
        str, typer.Option(help="Address to bind (http); 127.0.0.1 keeps it on this machine.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            help="Port to listen on (http); 0 picks a free one.", min=0, max=65535, metavar="<port>"
        ),
    ] = 8765,
    principal: Annotated[
        str,
        typer.Option(
            help="Who MCP callers are to the flows (RunContext.principal); their sessions are its. Over "
            "http with API keys (PICOFLOW_API_KEYS / PICOFLOW_API_KEYS_FILE), each key's principal instead."
        ),
    ] = "mcp",
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            metavar="ROLE",
            help="A role the callers hold (e.g. staff: they may decide approvals naming it); repeatable. "
            "With API keys, each key's visibilities instead.",
        ),
    ] = None,
    open_mode: Annotated[
        bool,
        typer.Option(
            "--open", help="Allow serving http on an address other machines can reach (no authentication)."
        ),
    ] = False,
    store: StoreOpt = None,
    model: ModelOpt = None,
    flows: FlowsOpt = None,
) -> None:
    """Serve each flow as an MCP tool FLOW(message, session_id?) answering the reply, the session id and
    whether the conversation completed (and the calls waiting for approval, which decide_approval
    decides as the same caller); sessions are kept in the store."""
    with needs_extra("mcp", "picoflow mcp serve needs the MCP SDK"):
        from picoflow.server import mcp as mcp_serve
        from picoflow.server.auth import is_loopback, load_api_keys

    if not principal.strip():
        raise fail("--principal must not be empty", code=2)
    roles = [name.strip() for name in role or ()]
    if not all(roles):
        raise fail("--role must not be empty", code=2)
    try:
        keys = load_api_keys() if transport is Transport.http else {}
    except ValueError as exc:
        raise fail(str(exc), code=2) from None
    if transport is Transport.http and not keys and not open_mode and not is_loopback(host):
        raise fail(
            f"refusing to serve MCP on {host} without authentication: anyone who can reach this "
            "address could use the flows and read their sessions. Set API keys (PICOFLOW_API_KEYS), "
            "bind to 127.0.0.1, or pass --open to accept the risk.",
            code=2,
        )
    try:
        engine = build_engine(flows, store, model)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    names = ", ".join(spec.name for spec in engine.flows)
    say(f"[bold]picoflow-ai[/bold] {picoflow.__version__} serving {escape(names)} as MCP tools")
    say(f"  transport  {transport.value}")
    say(f"  model      {escape(describe_model(model))}")
    say(f"  store      {escape(repr(engine.store))}")
    say(f"  principal  {escape(principal) if not keys else f'each API key its own ({len(keys)} keys)'}")
    if roles and not keys:
        say(f"  roles      {escape(', '.join(roles))}")

    def report(line: str) -> None:
        say(f"  [dim]{escape(line)}[/dim]")

    if transport is Transport.stdio:
        work = mcp_serve.serve_stdio(engine, principal=principal, roles=roles, report=report)
    else:
        work = mcp_serve.serve_http(
            engine, host=host, port=port, principal=principal, roles=roles, report=report, api_keys=keys
        )
    try:
        asyncio.run(work)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None


def say(text: str) -> None:
    """A line for the person running the server, on stderr (stdout may be the protocol's)."""
    errors.print(text, soft_wrap=True)
