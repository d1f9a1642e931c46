"""Fixtures that give every conformance test a fresh store of each kind.

PostgreSQL tests run against the server on 127.0.0.1:5432 (database ``test``, trust auth), each in
a schema of its own that is dropped afterwards, so parallel and earlier runs never collide. They are
never skipped: an unreachable server fails them with a message saying what to start.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from store_helpers import Backend

from picoflow.sessions import SessionStore

POSTGRES_ENV = "PICOFLOW_TEST_POSTGRES"
POSTGRES_CANDIDATES = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://root@127.0.0.1:5432/test",
)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    candidates = [os.environ[POSTGRES_ENV]] if os.environ.get(POSTGRES_ENV) else list(POSTGRES_CANDIDATES)
    problems = []
    for url in candidates:
        try:
            with psycopg.connect(url, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            return url
        except psycopg.Error as exc:
            problems.append(f"{url}: {str(exc).strip()}")
    pytest.fail(
        "PostgreSQL is not reachable, so the postgres-marked store tests cannot run"
        " (they are never skipped).\n"
        "Start the server on 127.0.0.1:5432 with a database 'test' and trust auth (.ci/run does), or point\n"
        f"{POSTGRES_ENV} at one.\n" + "\n".join(problems)
    )


@pytest.fixture
def postgres_schema(request: pytest.FixtureRequest) -> Iterator[str]:
    """A throwaway schema name; dropped after the test with everything in it."""
    url = request.getfixturevalue("postgres_url")
    schema = f"pf_test_{uuid.uuid4().hex[:16]}"
    yield schema
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def make_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if kind == "memory":
        return Backend("memory", None)
    if kind == "sqlite":
        path = tmp_path / "sessions.sqlite3"
        return Backend("sqlite", f"sqlite:///{path}", sqlite_path=path)
    url = request.getfixturevalue("postgres_url")
    schema = request.getfixturevalue("postgres_schema")
    separator = "&" if "?" in url else "?"
    return Backend("postgres", f"{url}{separator}schema={schema}", postgres_url=url, schema=schema)


ALL_KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
SQL_KINDS = ALL_KINDS[1:]


@pytest.fixture(params=ALL_KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    found = make_backend(request.param, request, tmp_path)
    yield found
    await found.close_all()


@pytest.fixture(params=SQL_KINDS)
async def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Stores shared between processes: SQLite and PostgreSQL."""
    found = make_backend(request.param, request, tmp_path)
    yield found
    await found.close_all()


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    return backend.open()


@pytest.fixture
def sql_store(sql_backend: Backend) -> SessionStore:
    return sql_backend.open()
