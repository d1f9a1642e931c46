"""Session ids by unique prefix, like git: ``SessionStore.find_ids`` on every store, and the
``picoflow sessions show`` / ``picoflow chat --session`` commands that use it."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from picoflow import cli
from picoflow.cli import app
from picoflow.session import Session
from picoflow.sessions import SessionStore, open_store

POSTGRES_URL = os.environ.get("PICOFLOW_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
IDS = ["0933f88d-b1", "0933f88d-c2", "0933f_x", "0933fAx", "1"]


async def fill(store: SessionStore) -> None:
    for session_id in IDS:
        await store.save(Session(id=session_id, flow="hotel", current_step="Explore"), expected_revision=None)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    schema = None
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    else:
        schema = f"pf_test_{uuid.uuid4().hex[:16]}"
        url = f"{POSTGRES_URL}?schema={schema}"
    opened = open_store(url)
    for session_id in IDS:
        await opened.save(
            Session(id=session_id, flow="hotel", current_step="Explore"), expected_revision=None
        )
    try:
        yield opened
    finally:
        await opened.close()
        if schema is not None:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_find_ids_matches_prefixes_literally_in_id_order(store: SessionStore) -> None:
    # Byte order on every store: digits, then capitals, then '_'.
    assert await store.find_ids("0933f") == ["0933f88d-b1", "0933f88d-c2", "0933fAx", "0933f_x"]
    assert await store.find_ids("0933f", limit=2) == ["0933f88d-b1", "0933f88d-c2"]
    # '_' is a character like any other, not a wildcard.
    assert await store.find_ids("0933f_") == ["0933f_x"]
    assert await store.find_ids("0933f88d-c") == ["0933f88d-c2"]
    assert await store.find_ids("1") == ["1"]
    assert await store.find_ids("2") == []


def test_sessions_show_takes_a_unique_prefix_and_names_an_ambiguous_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"

    async def prepare() -> None:
        opened = open_store(url)
        for session_id in IDS:
            await opened.save(
                Session(id=session_id, flow="hotel", current_step="Explore"), expected_revision=None
            )
        await opened.close()

    asyncio.run(prepare())
    runner = CliRunner()
    shown = runner.invoke(app, ["sessions", "show", "0933f88d-b", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "session 0933f88d-b1" in shown.output
    ambiguous = runner.invoke(app, ["sessions", "show", "0933f88d", "--store", url])
    assert ambiguous.exit_code == 1
    assert "0933f88d is ambiguous: it starts 0933f88d-b1, 0933f88d-c2; give more characters" in " ".join(
        ambiguous.output.split()
    )
    missing = runner.invoke(app, ["sessions", "show", "9", "--store", url])
    assert missing.exit_code == 1 and "no session 9" in missing.output
    exact = runner.invoke(app, ["sessions", "show", "1", "--store", url])
    assert exact.exit_code == 0 and "session 1" in exact.output


def test_sessions_list_prints_whole_ids_on_a_narrow_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
    session_id = str(uuid.uuid4())

    async def prepare() -> None:
        opened = open_store(url)
        session = Session(
            id=session_id, flow="hotel", current_step="ExploreTheCatalogue", principal="someone"
        )
        await opened.save(session, expected_revision=None)
        await opened.close()

    asyncio.run(prepare())
    monkeypatch.setattr(cli.console, "width", 80)
    listed = CliRunner().invoke(app, ["sessions", "list", "--store", url])
    assert listed.exit_code == 0, listed.output
    # Whole, on one line; the other columns are the ones cut.
    assert session_id in listed.output
