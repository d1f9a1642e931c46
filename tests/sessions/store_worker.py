"""A separate OS process for the multi-process store tests: ``python store_worker.py COMMAND ...``.

* ``hammer URL SESSION_ID SECONDS NAME`` — once through the barrier (below), load and save turns on
  the session for ``SECONDS``; print ``{"won": [tags], "conflicts": n}``.
* ``crash URL SESSION_ID`` — save turns forever (each with a large tool result, so a kill often
  lands inside a write), printing each committed revision; the test kills it.
* ``upgrade URL`` — once through the barrier, run the store's migrations; print the versions applied.

The barrier: a worker ready to start prints ``ready`` and waits for a line on its stdin, which the
test writes to every worker only once all of them said ``ready``. So they start together however
slowly each one started up — no wall-clock start time to miss on a busy machine.
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


async def barrier() -> None:
    """Tell the test this worker is ready, then wait until it says go."""
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)


async def hammer(url: str, session_id: str, seconds: float, name: str) -> None:
    store = open_store(url)
    won: list[str] = []
    conflicts = 0
    await store.load(session_id)  # connect and migrate before the barrier
    await barrier()
    # Only the length of the run is timed; both workers begin it at the barrier.
    end = time.monotonic() + seconds
    attempt = 0
    while time.monotonic() < end:
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


async def upgrade(url: str) -> None:
    store = open_store(url)
    assert isinstance(store, SQLiteStore | PostgresStore)
    await barrier()
    applied = await store.upgrade()
    await store.close()
    print(json.dumps(applied), flush=True)


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "hammer":
        url, session_id, seconds, name = args
        asyncio.run(hammer(url, session_id, float(seconds), name))
    elif command == "crash":
        url, session_id = args
        asyncio.run(crash(url, session_id))
    elif command == "upgrade":
        (url,) = args
        asyncio.run(upgrade(url))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
