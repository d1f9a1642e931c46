"""``picoflow handoffs list|take|reply|return``: the staff queue from the terminal, as the caller
``--as`` and ``--role`` name; a customer is refused, staff take, reply and hand back, and the
model answers the customer again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.server.handoff_support import CUSTOMER, support_engine

from picoflow.engine import ANY_PRINCIPAL
from picoflow.sessions import SQLiteStore

from .support import invoke


async def _hand_off(path: Path) -> str:
    engine = support_engine(SQLiteStore(path))
    try:
        first = await engine.run("support", "about order 40001", caller=CUSTOMER)
        assert first.session_id is not None
        handed = await engine.run("support", "a person please", first.session_id, caller=CUSTOMER)
        assert handed.awaiting_human
        return first.session_id
    finally:
        await engine.aclose()


async def _continue(path: Path, session_id: str) -> tuple[str, list[str]]:
    engine = support_engine(SQLiteStore(path))
    try:
        result = await engine.run("support", "thanks", session_id, caller=CUSTOMER)
        session = await engine.get_session(session_id, principal=ANY_PRINCIPAL)
        assert session is not None
        return result.message, session.sequence
    finally:
        await engine.aclose()


def test_staff_take_reply_and_return_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "support.sqlite3"
    session_id = asyncio.run(_hand_off(path))
    store = f"sqlite:///{path}"
    staff = ("--store", store, "--as", "ana", "--role", "staff")

    refused = invoke("handoffs", "list", "--store", store)
    assert refused.exit_code == 1
    assert refused.output == "error: only callers with the 'staff' visibility may act on handoffs\n"

    listed = invoke("handoffs", "list", *staff, "--summaries")
    assert listed.exit_code == 0, listed.output
    assert session_id in listed.output and "the customer asked for a person" in listed.output
    assert "  > a person please" in listed.output

    taken = invoke("handoffs", "take", session_id[:8], *staff)
    assert taken.exit_code == 0, taken.output
    assert taken.output.splitlines()[:3] == [
        f"taken by ana: session {session_id}",
        "Flow: support",
        "Step: Desk",
    ]
    other = invoke("handoffs", "take", session_id, "--store", store, "--as", "ben", "--role", "staff")
    assert other.exit_code == 1
    assert other.output == (
        f"error: session {session_id} is taken by ana; take it with force to take it over\n"
    )

    replied = invoke("handoffs", "reply", session_id, "Hi, Ana here.", *staff)
    assert replied.exit_code == 0 and replied.output.startswith("sent as ana (seq ")
    bad = invoke("handoffs", "return", session_id, "--step", "Nowhere", *staff)
    assert bad.exit_code == 1 and bad.output == "error: Nowhere is not a step this conversation was in\n"
    back = invoke("handoffs", "return", session_id, *staff)
    assert back.exit_code == 0, back.output
    assert back.output == f"handed back: session {session_id} is running in Desk\n"
    assert invoke("handoffs", "list", *staff).output == "no conversations wait for a person (ana (staff))\n"

    assert asyncio.run(_continue(path, session_id)) == ("Model, in Desk: thanks", ["Desk", "Handoff", "Desk"])
