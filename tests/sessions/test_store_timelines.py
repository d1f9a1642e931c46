"""Every store keeps turns' timelines beside the session: in order, by turn, with the retention's
deletions, gone with the session, and never touching the session's document."""

from __future__ import annotations

import json

from store_helpers import new_session

from picoflow.session import session_to_json
from picoflow.sessions import SessionStore
from picoflow.sessions.base import TimelineStore

UNICODE = 'héllo 😀 مرحبا \u202e "quoted" \\ back \x00'


def body(turn: int, note: str = "") -> str:
    return json.dumps({"turn": turn, "note": note, "entries": []}, ensure_ascii=False)


async def test_timelines_come_back_in_order_and_by_turn(store: SessionStore) -> None:
    assert isinstance(store, TimelineStore)
    session = new_session("tl-1")
    await store.save(session, expected_revision=None)
    before = session_to_json(await store.load("tl-1"))  # type: ignore[arg-type]

    await store.record_timeline("tl-1", 1, body(1, UNICODE))
    await store.record_timeline("tl-1", 2, body(2, "failed"))
    await store.record_timeline("tl-1", 2, body(2, "retried"))

    assert [json.loads(text)["note"] for text in await store.timelines("tl-1")] == [
        UNICODE,
        "failed",
        "retried",
    ]
    assert [json.loads(text)["note"] for text in await store.timelines("tl-1", 2)] == ["failed", "retried"]
    assert await store.timelines("tl-1", 9) == []
    assert await store.timelines("other") == []
    loaded = await store.load("tl-1")
    assert loaded is not None and session_to_json(loaded) == before and loaded.revision == 1


async def test_retention_keeps_the_last_turns_only(store: SessionStore) -> None:
    assert isinstance(store, TimelineStore)
    await store.save(new_session("tl-2"), expected_revision=None)
    await store.save(new_session("tl-3"), expected_revision=None)
    await store.record_timeline("tl-3", 1, body(1))
    for turn in range(1, 6):
        await store.record_timeline("tl-2", turn, body(turn), keep_turns=2)

    assert [json.loads(text)["turn"] for text in await store.timelines("tl-2")] == [4, 5]
    assert len(await store.timelines("tl-3")) == 1  # another session's are never touched


async def test_delete_removes_the_timelines(store: SessionStore) -> None:
    assert isinstance(store, TimelineStore)
    await store.save(new_session("tl-4"), expected_revision=None)
    await store.record_timeline("tl-4", 1, body(1))

    assert await store.delete("tl-4") is True
    assert await store.timelines("tl-4") == []
