"""A worker process of the approval tests, with an approval lease of its own:
``python approval_worker.py ADDRESS TASK_QUEUE SQLITE_PATH LEASE_SECONDS``."""

from __future__ import annotations

import asyncio
import sys

from refund_flows import TillFlow, till_model
from temporalio.client import Client

from picoflow import FlowEngine
from picoflow.sessions import SQLiteStore
from picoflow.temporal import run_worker


async def main(address: str, queue: str, path: str, lease: str) -> None:
    engine = FlowEngine([TillFlow], store=SQLiteStore(path), model=till_model(), approval_lease=float(lease))
    client = await Client.connect(address)
    try:
        await run_worker(client, queue, engine)
    finally:
        await engine.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
