"""A separate OS process for ``test_cancel_across_processes.py``: ``python cancel_worker.py URL SCHEMA``.

It runs the cancel desk on a ``PostgresStore`` of the test's schema: a first turn ("hello"), then a
turn whose third model request is held (``HeldModel``). Once it is held, the worker prints
``held SESSION_ID``; the test cancels the turn from its own process. The worker then runs one more
turn in the session and prints one JSON line: the held turn's error kind, whether its model request
was cancelled, and the next turn's reply.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # ``tests`` as a package, as under pytest

from tests.cancel_support import Started, hold_at, note

from picoflow import Caller
from picoflow.sessions import PostgresStore

ALICE = Caller(principal="alice")
GUARD = 60.0  # seconds: a worker the test failed to kill does not linger


async def main(url: str, schema: str) -> None:
    Started.reset()
    store = PostgresStore(url, schema=schema)
    engine, model, script = hold_at(3, ["Hi!", [note("a", "c1")], "Back."], store=store)
    try:
        first = await engine.run("desk", "hello", caller=ALICE)
        assert first.ok and first.session_id is not None, first.message
        session_id = first.session_id
        running = asyncio.create_task(engine.run("desk", "note a", session_id, caller=ALICE))
        async with asyncio.timeout(GUARD):
            await model.held.wait()
            print("held", session_id, flush=True)
            result = await running
        model.release()
        after = await engine.run("desk", "anything new?", session_id, caller=ALICE)
        script.assert_complete()
        error = None if result.error is None else result.error.kind
        print(json.dumps({"error": error, "cancelled": model.cancelled.is_set(), "next": after.message}))
    finally:
        await engine.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
