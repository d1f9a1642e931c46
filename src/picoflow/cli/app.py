"""The ``picoflow`` command tree: the root (``--version``), and where each command is mounted; each
command lives in the module named for it."""

from __future__ import annotations

from typing import Annotated

import typer

import picoflow
from picoflow.cli.approvals import approvals_app
from picoflow.cli.chat import chat
from picoflow.cli.flows import eval_scenarios, graph, list_flows
from picoflow.cli.handoffs import handoffs_app
from picoflow.cli.loading import console
from picoflow.cli.mcp import mcp_app
from picoflow.cli.replay import replay
from picoflow.cli.serve import serve
from picoflow.cli.sessions import db_app, sessions_app
from picoflow.cli.worker import worker

app = typer.Typer(
    name="picoflow",
    help="Serve picoflow flows over HTTP, chat with them in the terminal, inspect flows and sessions.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    # A crash report must never print local variables: they can hold API keys.
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        console.print(f"picoflow {picoflow.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """picoflow: conversational LLM applications as a flow of steps."""


# Each command's line in `picoflow --help` is its own short help, written to fit 80 columns: the
# first sentence of a docstring would be cut off mid-word.
app.command(short_help="Serve the flows over HTTP, with the chat page.")(serve)
app.command(short_help="Chat with a flow in the terminal.")(chat)
app.command("flows", short_help="List the flows with their steps.")(list_flows)
app.command(short_help="Print a flow's steps and transitions (Mermaid).")(graph)
app.command("eval", short_help="Play scenario files against a model and score them.")(eval_scenarios)
app.command(short_help="Run turns on Temporal, as a durable worker.")(worker)
app.command(short_help="Replay stored sessions against the current code, as a diff.")(replay)
app.add_typer(sessions_app, name="sessions", short_help="Inspect stored sessions.")
app.add_typer(approvals_app, name="approvals", short_help="Decide the calls waiting for approval.")
app.add_typer(handoffs_app, name="handoffs", short_help="Take over conversations handed to a person.")
app.add_typer(db_app, name="db", short_help="Manage the session store's schema.")
app.add_typer(mcp_app, name="mcp", short_help="Serve the flows as MCP tools.")


def main() -> None:
    app()
