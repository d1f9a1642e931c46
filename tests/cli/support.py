"""The ``picoflow`` command through typer's CliRunner (no terminal, no network, no real model)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from picoflow import cli
from picoflow.messages import ToolCall
from picoflow.session import Session
from picoflow.sessions import open_store

runner = CliRunner()


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(cli.app, list(args), input=input, env=env)


def write_script(path: Path, items: list[Any]) -> str:
    """A ``--model scripted:FILE`` choice playing ``items`` (text, ToolCall, or lists of calls)."""

    def encode(item: Any) -> Any:
        if isinstance(item, ToolCall):
            return {"tool": item.name, "args": dict(item.args) if not isinstance(item.args, str) else {}}
        if isinstance(item, list):
            return [encode(call) for call in item]
        return item

    path.write_text(json.dumps([encode(item) for item in items]), encoding="utf-8")
    return f"scripted:{path}"


def stored_sessions(url: str, *sessions: Session) -> None:
    """Save ``sessions`` into the store at ``url`` before a command reads them."""

    async def save() -> None:
        opened = open_store(url)
        try:
            for session in sessions:
                await opened.save(session, expected_revision=None)
        finally:
            await opened.close()

    asyncio.run(save())
