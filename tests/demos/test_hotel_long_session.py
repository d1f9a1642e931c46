"""A guest who compares hotels sixty times: every request fits the embedded model's window, at a flat size.

The hotel search of the 14-turn conversation, then 60 comparison turns, with a scripted model given
the window and output reserve the catalog knows for the ``local`` selection. The tables reach the
guest and the transcript whole; the step's memory keeps a one-line note of each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picoflow import FlowEngine
from picoflow._run.tokens import request_tokens
from picoflow.models import ScriptedModel
from picoflow.models.catalog import ModelSelection, context_limits_of
from picoflow.sessions import SQLiteStore
from picoflow.testing import transcript_lines
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel.scripted import CONVERSATION, wants

from .conftest import Chat
from .test_hotel_conversation import AMENITIES_2_3_9, CHOOSE, FOLLOW_UP, PRICE_2_3_9, TRANSCRIPT

SEARCH = CONVERSATION[:9]
"""Greeting to the two-beds search: the list of nine hotels is on screen."""
VARIANTS = [
    ("compare hotel 2,3,9 on price", [2, 3, 9], ["price"], "Compared hotels 2, 3 and 9 on price."),
    ("compare 2, 3 and 9 on amenities", [2, 3, 9], ["amenities"], "Compared hotels 2, 3 and 9 on amenities."),
    ("how far are 4, 6 and 9?", [4, 6, 9], ["distance"], "Compared hotels 4, 6 and 9 on distance."),
    (
        "compare 1 and 7 on rooms and price",
        [1, 7],
        ["roomType", "price"],
        "Compared hotels 1 and 7 on room type and price.",
    ),
]
COMPARISONS = [VARIANTS[index % len(VARIANTS)] for index in range(60)]


@pytest.fixture
async def chat(tmp_path: Path) -> AsyncIterator[Chat]:
    limits = context_limits_of(ModelSelection.parse("local"))
    script = [item for turn in SEARCH for item in turn.model]
    script += [wants("compare", hotels, features) for _, hotels, features, _ in COMPARISONS]
    model = ScriptedModel(
        script, context_window=limits.window, output_reserve=limits.output_reserve, grounding="small"
    )
    engine = FlowEngine([HotelFlow], model=model, store=SQLiteStore(tmp_path / "hotel.sqlite3"))
    conversation = Chat(engine, model, "hotel")
    await conversation.say_all([turn.user for turn in SEARCH])
    await conversation.say_all([text for text, _, _, _ in COMPARISONS])
    yield conversation
    await engine.aclose()


async def test_sixty_comparisons_answer_every_time(chat: Chat) -> None:
    assert all(result.ok for result in chat.results), [result.error for result in chat.results]
    comparisons = chat.results[len(SEARCH) :]
    assert [result.step for result in comparisons] == ["Compare"] * 60
    assert comparisons[0].message == PRICE_2_3_9
    assert comparisons[1].message == AMENITIES_2_3_9
    assert [result.message for result in comparisons[4:8]] == [result.message for result in comparisons[:4]]
    assert chat.model.remaining == 0


async def test_every_request_fits_the_local_window_at_a_flat_size(chat: Chat) -> None:
    limits = context_limits_of(ModelSelection.parse("local"))
    assert (limits.window, limits.output_reserve) == (8192, 512)
    assert all(request_tokens(request) + limits.output_reserve <= 8192 for request in chat.model.requests)
    per_comparison = chat.requests_per_turn[len(SEARCH) :]
    assert all(len(requests) == 1 for requests in per_comparison)
    sizes = [request_tokens(requests[0]) for requests in per_comparison]
    tenth = sizes[9]
    assert max(sizes[10:]) <= 1.5 * tenth
    # The model reads the list from the prompt, and the guest's latest words: never a table.
    for (text, _, _, _), requests in zip(COMPARISONS, per_comparison, strict=True):
        messages = requests[0].messages
        assert len(messages) <= 2 and messages[-1].content == text
        assert not any("| Night |" in message.content for message in messages)
        assert "7. Hilton Garden Inn Wilsonville Portland" in requests[0].system


async def test_the_transcript_keeps_every_table_whole_and_memory_a_note(chat: Chat) -> None:
    session_id = chat.session_id or ""
    lines = await transcript_lines(chat.engine, session_id, width=60)
    expected = list(TRANSCRIPT[:23])
    for index, ((text, _, _, _), result) in enumerate(zip(COMPARISONS, chat.results[9:], strict=True)):
        expected.append(f"{'Present' if index == 0 else 'Compare'} | user: {text}")
        expected.append(f"Compare | assistant [direct]: {result.message[:60]}")
    assert lines == expected
    messages = await chat.engine.store.transcript(session_id)
    replies = [m for m in messages if m.kind == "direct"]
    assert [m.content for m in replies] == [result.message for result in chat.results]
    assert [m.remembered_as for m in replies[9:]] == [
        f"{note}\n\n{FOLLOW_UP}" for _, _, _, note in COMPARISONS
    ]
    assert replies[8].remembered_as == f"Showed the list of 9 hotels.\n\n{CHOOSE}"

    session = await chat.engine.store.load(session_id)
    assert session is not None
    [last] = session.memory["Present"].messages
    assert (last.content, last.remembered_as) == (
        chat.results[-1].message,
        f"{COMPARISONS[-1][3]}\n\n{FOLLOW_UP}",
    )
    assert session.warnings == [] and session.turns == 69 and session.current_step == "Compare"
    present = session.states["Present"]
    assert (present["compared"], present["feature"]) == ([1, 7], "price")
