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


app.command()(serve)
app.command()(chat)
app.command("flows")(list_flows)
app.command()(graph)
app.command("eval")(eval_scenarios)
app.command()(worker)
app.add_typer(sessions_app, name="sessions")
app.add_typer(approvals_app, name="approvals")
app.add_typer(handoffs_app, name="handoffs")
app.add_typer(db_app, name="db")
app.add_typer(mcp_app, name="mcp")


def main() -> None:
    app()
