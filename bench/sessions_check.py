"""``picoflow sessions check`` on a large store: how long the pre-deploy check takes, and that its
memory does not grow with the number of sessions.

Run: ``.venv/bin/python bench/sessions_check.py`` (``--sessions N``, default 100,000;
``--stores sqlite,postgres``; ``--page N``: the check's page size).

The store is seeded with sessions of the first version of the tests' two-version flow
(``tests/two_versions.py``): the five sessions its tests play through a real engine (one standing in
a step the second version renames, one in a step it removes, one in the middle of a form whose
counts became numbers, two waiting for approvals) are stored once, then copied under new random ids
(their documents and messages, as a store holds them) until there are ``N``, the five kinds in
turn. Then the command itself runs, in a process of its own, against the second version: once with
its fallback (every session can continue: exit 0) and once without (a fifth would fail: exit 1).
Each run prints the command's report and its wall time, CPU time and peak memory (RSS).

PostgreSQL: ``$PICOFLOW_BENCH_POSTGRES`` or ``postgresql://postgres@127.0.0.1:5432/test``; the
benchmark works in a schema of its own and drops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))  # the flow's two versions are the tests' (two_versions.py)

from picoflow.sessions import open_store  # noqa: E402
from two_versions import seed  # noqa: E402

POSTGRES = os.environ.get("PICOFLOW_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
NOW = 1_000.0
BATCH = 10_000
"""Sessions inserted per transaction while seeding."""

SESSION_COLUMNS = (
    "id",
    "flow",
    "status",
    "principal",
    "current_step",
    "revision",
    "turns",
    "created_at",
    "updated_at",
    "flow_version",
)


def new_ids(count: int, rng: random.Random) -> Iterator[str]:
    """Random version-4 UUIDs (as the engine draws them), from a seeded generator."""
    for _ in range(count):
        yield str(uuid.UUID(int=rng.getrandbits(128), version=4))


async def seed_templates(url: str) -> None:
    store = open_store(url)
    try:
        await seed(store, NOW)
    finally:
        await store.close()


def renamed(document: str, template_id: str, new_id: str) -> str:
    """A stored document under another id (its ``id`` is its first key)."""
    head = f'{{"id":"{template_id}",'
    assert document.startswith(head), document[:40]
    return f'{{"id":"{new_id}",' + document[len(head) :]


# --- SQLite -------------------------------------------------------------------------------------


def seed_sqlite(path: Path, count: int, rng: random.Random) -> None:
    asyncio.run(seed_templates(f"sqlite:///{path}"))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        columns = ", ".join((*SESSION_COLUMNS, "live", "document"))
        templates = db.execute(f"SELECT {columns} FROM picoflow_sessions ORDER BY id").fetchall()
        messages = {
            row[0]: db.execute(
                "SELECT seq, namespace, body FROM picoflow_messages WHERE session_id = ? ORDER BY seq",
                (row[0],),
            ).fetchall()
            for row in templates
        }
        db.execute("DELETE FROM picoflow_sessions")
        db.execute("DELETE FROM picoflow_messages")
        marks = ", ".join("?" * (len(SESSION_COLUMNS) + 2))
        ids = new_ids(count, rng)
        for start in range(0, count, BATCH):
            sessions, bodies = [], []
            for index in range(start, min(start + BATCH, count)):
                template = templates[index % len(templates)]
                session_id = next(ids)
                sessions.append((session_id, *template[1:-1], renamed(template[-1], template[0], session_id)))
                bodies += [(session_id, *message) for message in messages[template[0]]]
            db.execute("BEGIN")
            db.executemany(f"INSERT INTO picoflow_sessions ({columns}) VALUES ({marks})", sessions)
            db.executemany(
                "INSERT INTO picoflow_messages (session_id, seq, namespace, body) VALUES (?, ?, ?, ?)", bodies
            )
            db.execute("COMMIT")
        db.execute("ANALYZE")


# --- PostgreSQL ---------------------------------------------------------------------------------


def seed_postgres(schema: str, count: int, rng: random.Random) -> None:
    asyncio.run(seed_templates(f"{POSTGRES}?schema={schema}"))
    table = f'"{schema}".picoflow_sessions'
    columns = ", ".join((*SESSION_COLUMNS, "namespaces", "starts", "document"))
    with psycopg.connect(POSTGRES, autocommit=True) as db:
        templates = db.execute(
            f"SELECT {columns.replace('document', 'document::text')} FROM {table} ORDER BY id"
        ).fetchall()
        messages = {
            row[0]: db.execute(
                f'SELECT seq, namespace, body::text FROM "{schema}".picoflow_messages'
                " WHERE session_id = %s ORDER BY seq",
                (row[0],),
            ).fetchall()
            for row in templates
        }
        db.execute(f"DELETE FROM {table}")
        db.execute(f'DELETE FROM "{schema}".picoflow_messages')
        ids = new_ids(count, rng)
        with db.cursor() as cursor:
            with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                bodies: list[tuple[Any, ...]] = []
                for index in range(count):
                    template = templates[index % len(templates)]
                    session_id = next(ids)
                    copy.write_row(
                        (session_id, *template[1:-1], renamed(template[-1], template[0], session_id))
                    )
                    bodies += [(session_id, *message) for message in messages[template[0]]]
            with cursor.copy(
                f'COPY "{schema}".picoflow_messages (session_id, seq, namespace, body) FROM STDIN'
            ) as copy:
                for row in bodies:
                    copy.write_row(row)
        db.execute(f"ANALYZE {table}")
        db.execute(f'ANALYZE "{schema}".picoflow_messages')


# --- the check ----------------------------------------------------------------------------------


def run_check(url: str, flow: str, page: int) -> None:
    """``picoflow sessions check`` in a process of its own: its report, exit code and costs."""
    command = [sys.executable, "-m", "picoflow", "sessions", "check", "--flows", f"two_versions:{flow}"]
    command += ["--store", url, "--page", str(page)]
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "110"}
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(process.pid, 0)  # this process's own CPU time and peak memory
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        report = out.read().rstrip()
    print(f"$ picoflow sessions check --flows two_versions:{flow} --store {url.split('?')[0]} --page {page}")
    print(report)
    print(
        f"-> exit {process.returncode}; wall {wall:.2f} s, CPU {usage.ru_utime + usage.ru_stime:.2f} s, "
        f"peak RSS {usage.ru_maxrss / 1024:.0f} MB (the whole command: start-up and imports included)\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--page", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(42)
    for kind in args.stores.split(","):
        print(f"=== {kind}: {args.sessions:,} sessions ===")
        if kind == "sqlite":
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "sessions.sqlite3"
                started = time.perf_counter()
                seed_sqlite(path, args.sessions, rng)
                print(
                    f"seeded in {time.perf_counter() - started:.1f} s ({path.stat().st_size / 1e6:.0f} MB)\n"
                )
                for flow in ("StaysV2", "StaysV2WithoutFallback"):
                    run_check(f"sqlite:///{path}", flow, args.page)
        elif kind == "postgres":
            schema = f"pf_bench_{uuid.uuid4().hex[:12]}"
            try:
                started = time.perf_counter()
                seed_postgres(schema, args.sessions, rng)
                print(f"seeded in {time.perf_counter() - started:.1f} s (schema {schema})\n")
                for flow in ("StaysV2", "StaysV2WithoutFallback"):
                    run_check(f"{POSTGRES}?schema={schema}", flow, args.page)
            finally:
                with psycopg.connect(POSTGRES, autocommit=True) as db:
                    db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        else:
            raise SystemExit(f"unknown store {kind!r}: sqlite or postgres")


if __name__ == "__main__":
    main()
