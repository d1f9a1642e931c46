"""Session ids by unique prefix, like git: ``SessionStore.find_ids`` on every store. The commands that
take a prefix (``picoflow sessions show``, ``picoflow chat --session``) are tested in tests/cli/."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from picoflow.session import Session
from picoflow.sessions import SessionStore, open_store

POSTGRES_URL = os.environ.get("PICOFLOW_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
IDS = ["0933f88d-b1", "0933f88d-c2", "0933f_x", "0933fAx", "1"]


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
