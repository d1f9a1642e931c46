"""A separate OS process for the multi-process store tests: ``python store_worker.py COMMAND ...``.

* ``hammer URL SESSION_ID START_AT SECONDS NAME`` — from ``START_AT`` (unix time) on, load and save
  turns on the session for ``SECONDS``; print ``{"won": [tags], "conflicts": n}``.
* ``crash URL SESSION_ID`` — save turns forever (each with a large tool result, so a kill often
  lands inside a write), printing each committed revision; the test kills it.
* ``upgrade URL START_AT`` — run the store's migrations at ``START_AT``; print the versions applied.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from store_helpers import BIG_RESULT, crash_turn, new_session, play_turn

from picoflow.exceptions import SessionConflict
from picoflow.sessions import SQLiteStore, open_store
from picoflow.sessions.postgres import PostgresStore


async def hammer(url: str, session_id: str, start_at: float, seconds: float, name: str) -> None:
    store = open_store(url)
    won: list[str] = []
    conflicts = 0
    await store.load(session_id)  # connect and migrate before the clock starts
    await asyncio.sleep(max(0.0, start_at - time.time()))
    attempt = 0
    while time.time() < start_at + seconds:
        session = await store.load(session_id)
        assert session is not None
        tag = f"{name}-{attempt}"
        attempt += 1
        try:
            await store.save(session, expected_revision=session.revision, appended=play_turn(session, tag))
        except SessionConflict:
            conflicts += 1
        else:
            won.append(tag)
    await store.close()
    print(json.dumps({"won": won, "conflicts": conflicts}), flush=True)


async def crash(url: str, session_id: str) -> None:
    store = open_store(url)
    session = await store.load(session_id)
    if session is None:
        session = new_session(session_id)
        appended = play_turn(session, "t1", tool_result=BIG_RESULT)
        await store.save(session, expected_revision=None, appended=appended)
        print(session.revision, flush=True)
    while True:
        appended = crash_turn(session)
        await store.save(session, expected_revision=session.revision, appended=appended)
        print(session.revision, flush=True)


async def upgrade(url: str, start_at: float) -> None:
    store = open_store(url)
    assert isinstance(store, SQLiteStore | PostgresStore)
    await asyncio.sleep(max(0.0, start_at - time.time()))
    applied = await store.upgrade()
    await store.close()
    print(json.dumps(applied), flush=True)


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "hammer":
        url, session_id, start_at, seconds, name = args
        asyncio.run(hammer(url, session_id, float(start_at), float(seconds), name))
    elif command == "crash":
        url, session_id = args
        asyncio.run(crash(url, session_id))
    elif command == "upgrade":
        url, start_at = args
        asyncio.run(upgrade(url, float(start_at)))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
