"""A separate OS process for the approval durability tests: ``python approval_worker.py COMMAND ...``.

The flow is one step whose gated tool ``refund`` appends a line ``<idempotency key> <pid>`` to
``effects.log`` in the test's folder each time it runs, so the test can count runs across processes.
Every command prints one JSON line with what happened (``error`` is the error class name or None).

* ``propose URL DIR`` — a new session: "refund order 7"; the model proposes ``refund(7)``, which
  waits for approval. Prints the session id and the approval, then exits.
* ``decide URL DIR SESSION APPROVAL [--barrier] [--hang]`` — approve. ``--barrier``: after loading
  the session the decision is taken on, print ``loaded`` and wait for a line on stdin before going
  on (the test releases two such processes together). ``--hang``: the tool appends to
  ``started.log``, prints ``started`` and then blocks for good (the test kills the process there).
* ``message URL DIR SESSION TEXT LEASE`` — a new message in the session, with
  ``FlowEngine(approval_lease=LEASE)``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from picoflow import Caller, Flow, FlowEngine, RunContext, Step, TurnResult, tool
from picoflow.models import ScriptedModel, ToolCall
from picoflow.sessions import Session, SessionStore, open_store

CUSTOMER = Caller(principal="cust-1")
FOLDER = Path(".")
HANG = False
#: How long a hanging tool blocks at most: far beyond any test, short enough that a worker the test
#: failed to kill does not linger.
HANG_GUARD_SECONDS = 300.0


def effect(name: str, line: str) -> None:
    """Append one line to a file of the test's folder, durably before anything else happens."""
    with open(FOLDER / name, "a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


class Desk(Step):
    """Help with refunds."""

    @tool(approval=True, approval_summary="Refund order {order_id}")
    def refund(self, order_id: int, ctx: RunContext[Any]) -> str:
        """Refund an order."""
        if HANG:
            effect("started.log", f"{ctx.idempotency_key} {os.getpid()}")
            print("started", flush=True)
            # Blocks like a payment call that never answers; the test kills the process meanwhile.
            end = time.monotonic() + HANG_GUARD_SECONDS
            while not (FOLDER / "never").exists() and time.monotonic() < end:
                time.sleep(0.05)
            raise RuntimeError("the hanging refund was not killed")
        effect("effects.log", f"{ctx.idempotency_key} {os.getpid()}")
        return f"refunded order {order_id}"


class DeskFlow(Flow):
    name = "desk"
    steps = [Desk]


def engine(url: str, script: list[Any], store: SessionStore | None = None, **settings: Any) -> FlowEngine:
    return FlowEngine([DeskFlow], store=store or open_store(url), model=ScriptedModel(script), **settings)


def described(result: TurnResult) -> dict[str, Any]:
    return {
        "message": result.message,
        "session_id": result.session_id,
        "step": result.step,
        "error": result.error.error_class.__name__ if result.error else None,
        "pending": [{"id": a.id, "summary": a.summary, "status": a.status} for a in result.pending],
    }


async def propose(url: str) -> dict[str, Any]:
    flows = engine(url, [ToolCall("refund", {"order_id": 7}, "c1")])
    try:
        return described(await flows.run("desk", "refund order 7 please", caller=CUSTOMER))
    finally:
        await flows.aclose()


def with_barrier(store: SessionStore, session_id: str) -> SessionStore:
    """``store``, whose first load of ``session_id`` waits for the test's go once it has loaded."""
    load = store.load
    waited = False

    async def load_then_wait(wanted: str) -> Session | None:
        nonlocal waited
        session = await load(wanted)
        if wanted == session_id and not waited:
            waited = True
            print("loaded", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        return session

    store.load = load_then_wait  # type: ignore[method-assign]
    return store


async def decide(url: str, session_id: str, approval_id: str, barrier: bool) -> dict[str, Any]:
    store = open_store(url)
    if barrier:
        store = with_barrier(store, session_id)
    flows = engine(url, ["Refunded order 7."], store)
    try:
        return described(await flows.decide(session_id, approval_id, "approve", caller=CUSTOMER))
    finally:
        await flows.aclose()


async def message(url: str, session_id: str, text: str, lease: float) -> dict[str, Any]:
    flows = engine(url, ["I cannot tell whether order 7 was refunded; let me check."], approval_lease=lease)
    try:
        return described(await flows.run(None, text, session_id, caller=CUSTOMER))
    finally:
        await flows.aclose()


async def main(argv: list[str]) -> None:
    global FOLDER, HANG
    command, url, folder, *rest = argv
    FOLDER = Path(folder)
    if command == "propose":
        done = await propose(url)
    elif command == "decide":
        session_id, approval_id, *flags = rest
        HANG = "--hang" in flags
        done = await decide(url, session_id, approval_id, "--barrier" in flags)
    elif command == "message":
        session_id, text, lease = rest
        done = await message(url, session_id, text, float(lease))
    else:
        raise SystemExit(f"unknown command {command}")
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
