"""Two versions of one flow over one store: sessions stored by the first continue under the second.

The store (memory, SQLite, PostgreSQL) holds five sessions of ``StaysV1`` (``two_versions``), each
standing where a deploy of ``StaysV2`` changes something: in ``Compare``, renamed ``Review``; in
``Extras``, gone (``Flow.fallback``); in the middle of a form whose counts became numbers; and
waiting for the approval of a tool that changed (``book``) and of one that did not (``hold``).
Each continues under the second version as described, its whole transcript and final state
checked; a turn that fails after the migration leaves the stored session as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from store_helpers import Backend

from picoflow import Flow, FlowEngine
from picoflow.events import EventRecords, SessionMigrated, TurnEvent
from picoflow.exceptions import ApprovalStale, MigrationFailed, ModelError
from picoflow.models import ScriptedModel, ToolCall
from picoflow.session import MigrationChange, Session, SessionMigration
from picoflow.sessions import SessionStore
from picoflow.testing import request_lines, transcript_lines
from picoflow.timeline import MigratedEntry, MigrationChangeShown, TimelineSettings
from two_versions import (
    BOOKED,
    MIGRATED_FROM,
    NOTICE,
    SHOWN,
    StaysV1,
    StaysV2,
    StaysV2WithoutFallback,
    found,
    seed,
)

NOW = 1_000.0
V1 = StaysV1.version
V2 = StaysV2.version
GUESTS_RULE = "guests: input should be a valid integer, unable to parse string as an integer"


@dataclass
class Seeded:
    store: SessionStore
    approvals: dict[str, str]
    """The pending approval of the sessions that wait for one."""


@pytest.fixture
async def seeded(backend: Backend) -> AsyncIterator[Seeded]:
    """A store holding the first version's five sessions."""
    BOOKED.clear()
    MIGRATED_FROM.clear()
    store = backend.open()
    yield Seeded(store, await seed(store, NOW))
    BOOKED.clear()
    MIGRATED_FROM.clear()


def second(
    store: SessionStore, script: list[Any] | ScriptedModel, flow: type[Flow] = StaysV2, **options: Any
) -> FlowEngine:
    """The engine of the second version (``flow``) over the store of the first."""
    model = script if isinstance(script, ScriptedModel) else ScriptedModel(script)
    return FlowEngine([flow], store=store, model=model, clock=lambda: NOW, **options)


async def stored(store: SessionStore, session_id: str) -> Session:
    session = await store.load(session_id)
    assert session is not None
    return session


def form(known: dict[str, Any], asking: str | None, introduced: bool = True) -> dict[str, Any]:
    return {"form": {"known": known, "declined": [], "asking": asking, "introduced": introduced}}


def migration(turn: int, *changes: MigrationChange) -> SessionMigration:
    return SessionMigration(V1, V2, turn, NOW, changes)


SESSIONS = ("renamed", "removed", "retyped", "changed", "same")
RENAMED = MigrationChange("renamed", "Review", "from Compare")
REVIEW_MIGRATED = MigrationChange("state_migrated", "Review", "hotels, options")


async def test_the_two_versions_differ_and_every_session_stored_its_own(seeded: Seeded) -> None:
    assert V1 != V2 and len(V1) == len(V2) == 64
    assert StaysV2WithoutFallback.version == V2  # renamed and fallback are no part of the structure
    for session_id in ("renamed", "removed", "retyped", "changed", "same"):
        assert (await stored(seeded.store, session_id)).flow_version == V1


async def test_a_session_in_a_renamed_step_goes_on_there_with_its_state_and_memory(seeded: Seeded) -> None:
    events: list[TurnEvent] = []
    model = ScriptedModel([ToolCall("pick", {"number": 1})])
    engine = second(seeded.store, model, timeline=TimelineSettings())
    result = await engine.run("stays", "Number 1", session_id="renamed", on_event=events.append)

    assert result.error is None and result.message == "Shall I book Hotel Lumière?" and result.step == "Book"
    assert MIGRATED_FROM == [V1]
    # Review reads the memory it kept as Compare: the hotels it showed, then the choice.
    assert engine.flow("stays").steps["Review"].namespace == "Compare"
    assert request_lines(model.requests[0])[1:] == [f"assistant [direct]: {SHOWN}", "user: Number 1"]
    assert await transcript_lines(engine, "renamed") == [
        "Explore | user: Paris for 2, 3 nights",
        f"Compare | assistant [direct]: {SHOWN}",
        "Review | user: Number 1",
        'Review | assistant: -> pick({"number": 1}) #call_1',
        "Review | tool pick #call_1: Accepted.",
        "Book | assistant [direct]: Shall I book Hotel Lumière?",
    ]
    session = await stored(seeded.store, "renamed")
    assert (session.current_step, session.status, session.flow_version) == ("Book", "running", V2)
    assert session.sequence == ["Explore", "Review", "Book"]
    assert session.states == {
        "Explore": form({"city": "Paris", "guests": 2, "nights": 3}, None, introduced=False),
        "Review": {"options": ["Lumière", "Rive"]},
        "Book": {"hotel": "Lumière"},
    }
    assert session.migrations == (migration(2, RENAMED, REVIEW_MIGRATED),)
    assert (session.turns, session.revision) == (2, 3)

    # What migrated is the turn's first event, and its timeline's first entry.
    assert isinstance(events[0], SessionMigrated) and events[0].migration == session.migrations[0]
    records = EventRecords()
    records(events[0])
    assert records.records == [
        {
            "kind": "migrated",
            "from_version": V1,
            "to_version": V2,
            "changes": [
                {"action": "renamed", "step": "Review", "detail": "from Compare"},
                {"action": "state_migrated", "step": "Review", "detail": "hotels, options"},
            ],
        }
    ]
    timeline = await engine.timeline("renamed")
    assert timeline is not None
    turn = timeline.turns[-1]
    assert (turn.turn, turn.flow_version) == (2, V2)
    entry = turn.entries[0]
    assert isinstance(entry, MigratedEntry)
    assert (entry.from_version, entry.to_version) == (V1, V2)
    assert entry.changes == [
        MigrationChangeShown(action="renamed", step="Review", detail="from Compare"),
        MigrationChangeShown(action="state_migrated", step="Review", detail="hotels, options"),
    ]
    assert session.version_of_turn(1) == V1 and session.version_of_turn(2) == V2


async def test_a_session_in_a_removed_step_falls_back_and_is_told_so(seeded: Seeded) -> None:
    engine = second(seeded.store, [found(("guests", "2", 2))])
    told = await engine.run("stays", "Yes please", session_id="removed")
    # Nothing was asked of the model: the fallback's words are code's, then its opening question
    # (the form's guests, "two", no longer validates as a number: it is asked again).
    assert told.error is None and told.step == "Explore"
    assert told.message == f"{NOTICE} How many guests?"
    went_on = await engine.run("stays", "2 guests", session_id="removed")
    assert went_on.error is None and (went_on.message, went_on.step) == (SHOWN, "Review")

    assert await transcript_lines(engine, "removed") == [
        "Explore | user: Paris for two, 3 nights",
        f"Compare | assistant [direct]: {SHOWN}",
        "Compare | user: Number 2",
        'Compare | assistant: -> pick({"number": 2}) #call_1',
        "Compare | tool pick #call_1: Accepted.",
        "Extras | assistant [direct]: Hotel Rive it is. Breakfast with it?",
        "Explore | user: Yes please",
        f"Explore | assistant [direct]: {NOTICE} How many guests?",
        "Explore | user: 2 guests",
        f"Review | assistant [direct]: {SHOWN}",
    ]
    session = await stored(seeded.store, "removed")
    assert (session.current_step, session.status, session.flow_version) == ("Review", "running", V2)
    assert session.sequence == ["Explore", "Review", "Explore", "Review"]
    assert session.states == {
        "Explore": form({"city": "Paris", "nights": 3, "guests": 2}, None),
        "Review": {"options": ["Lumière", "Rive"]},
    }
    assert session.migrations == (
        migration(
            3,
            RENAMED,
            MigrationChange("fell_back", "Explore", "from Extras"),
            MigrationChange("state_dropped", "Extras", "the step is gone"),
            MigrationChange("field_dropped", "Explore", GUESTS_RULE),
            REVIEW_MIGRATED,
        ),
    )


async def test_a_form_keeps_the_fields_that_still_validate_and_asks_again_for_the_rest(
    seeded: Seeded,
) -> None:
    engine = second(seeded.store, [found(("nights", "3", 3)), found(("guests", "2", 2))])
    asked = await engine.run("stays", "3 nights", session_id="retyped")
    assert asked.error is None and (asked.message, asked.step) == ("How many guests?", "Explore")
    done = await engine.run("stays", "We are 2", session_id="retyped")
    assert done.error is None and (done.message, done.step) == (SHOWN, "Review")

    assert await transcript_lines(engine, "retyped") == [
        "Explore | user: A hotel in Paris for two",
        "Explore | assistant [direct]: How many nights?",
        "Explore | user: 3 nights",
        "Explore | assistant [direct]: How many guests?",
        "Explore | user: We are 2",
        f"Review | assistant [direct]: {SHOWN}",
    ]
    session = await stored(seeded.store, "retyped")
    assert (session.current_step, session.status, session.flow_version) == ("Review", "running", V2)
    assert session.states == {
        "Explore": form({"city": "Paris", "nights": 3, "guests": 2}, None),
        "Review": {"options": ["Lumière", "Rive"]},
    }
    assert session.migrations == (migration(2, MigrationChange("field_dropped", "Explore", GUESTS_RULE)),)


async def test_a_pending_approval_of_a_changed_tool_is_withdrawn(seeded: Seeded) -> None:
    approval = seeded.approvals["changed"]
    engine = second(seeded.store, [ToolCall("book", {"hotel": "Lumière", "guests": 2}), "Booked for 2."])
    refused = await engine.decide("changed", approval, "approve")
    assert refused.error is not None and refused.error.is_a(ApprovalStale)
    assert refused.error.message == (
        f"approval {approval} was withdrawn: withdrawn: its tool changed in a new version of the flow"
    )
    assert (await stored(seeded.store, "changed")).flow_version == V1  # a refusal stores nothing

    asked = await engine.run("stays", "Go ahead for 2 guests", session_id="changed")
    assert asked.error is None and [p.summary for p in asked.pending] == ["Book Hotel Lumière for 2"]
    done = await engine.decide("changed", asked.pending[0].id, "approve")
    assert done.error is None and done.message == "Booked for 2."
    assert BOOKED == [("book", "Lumière", "2")]

    assert await transcript_lines(engine, "changed") == [
        "Explore | user: Paris for 2, 3 nights",
        f"Compare | assistant [direct]: {SHOWN}",
        "Compare | user: Number 1",
        'Compare | assistant: -> pick({"number": 1}) #call_2',
        "Compare | tool pick #call_2: Accepted.",
        "Book | assistant [direct]: Shall I book Hotel Lumière?",
        "Book | user: Yes, book Lumière",
        'Book | assistant: -> book({"hotel": "Lumi\\u00e8re"}) #call_3',
        "Book | tool book #call_3 (error): Not run: the approval of book withdrawn: its tool changed in a "
        "new version of the flow. Propose it again if it is still wanted.",
        "Book | user: Go ahead for 2 guests",
        'Book | assistant: -> book({"guests": 2, "hotel": "Lumi\\u00e8re"}) #call_1',
        "Book | tool book #call_1: booked",
        "Book | assistant: Booked for 2.",
    ]
    session = await stored(seeded.store, "changed")
    assert (session.current_step, session.status, session.flow_version) == ("Book", "running", V2)
    assert [(a.tool, a.status, a.flow_version) for a in session.approvals] == [
        ("book", "withdrawn", V1),
        ("book", "approved", V2),
    ]
    assert session.approvals[0].reason == "withdrawn: its tool changed in a new version of the flow"
    assert session.migrations == (
        migration(
            4,
            RENAMED,
            REVIEW_MIGRATED,
            MigrationChange("approval_withdrawn", "Book", "book", approval),
        ),
    )


async def test_a_pending_approval_of_an_unchanged_tool_is_carried_and_can_be_decided(seeded: Seeded) -> None:
    approval = seeded.approvals["same"]
    engine = second(seeded.store, ["Held for a day."])
    done = await engine.decide("same", approval, "approve")
    assert done.error is None and done.message == "Held for a day."
    assert BOOKED == [("hold", "Lumière")]

    assert (await transcript_lines(engine, "same"))[-4:] == [
        "Book | user: Hold Lumière for me",
        'Book | assistant: -> hold({"hotel": "Lumi\\u00e8re"}) #call_5',
        "Book | tool hold #call_5: held",
        "Book | assistant: Held for a day.",
    ]
    session = await stored(seeded.store, "same")
    assert (session.current_step, session.status, session.flow_version) == ("Book", "running", V2)
    assert [(a.tool, a.status, a.flow_version) for a in session.approvals] == [("hold", "approved", V2)]
    assert session.migrations == (
        migration(
            4,
            RENAMED,
            REVIEW_MIGRATED,
            MigrationChange("approval_carried", "Book", "hold", approval),
        ),
    )


async def test_without_a_fallback_a_session_in_a_removed_step_fails_and_stays_as_stored(
    seeded: Seeded,
) -> None:
    before = await stored(seeded.store, "removed")
    transcript = await seeded.store.transcript("removed")
    engine = second(seeded.store, [], flow=StaysV2WithoutFallback)
    failed = await engine.run("stays", "Yes please", session_id="removed")

    assert failed.error is not None and failed.error.is_a(MigrationFailed)
    assert failed.message == "This conversation cannot continue with the current version of the assistant."
    assert await stored(seeded.store, "removed") == before
    assert await seeded.store.transcript("removed") == transcript
    [record] = await seeded.store.errors("removed")
    assert (record.code, record.step, record.message) == (
        "migration_failed",
        "Extras",
        "the session stands in step 'Extras', which flow stays no longer has: map it to its new step in "
        "Flow.renamed, or declare Flow.fallback",
    )


async def test_a_turn_that_fails_after_the_migration_stores_neither(seeded: Seeded) -> None:
    before = await stored(seeded.store, "retyped")
    engine = second(seeded.store, [ModelError("the provider is down")])
    failed = await engine.run("stays", "3 nights", session_id="retyped")

    assert failed.error is not None and failed.error.is_a(ModelError)
    after = await stored(seeded.store, "retyped")
    assert after == before
    assert (after.flow_version, after.migrations) == (V1, ())
    assert after.states["Explore"] == form({"city": "Paris", "guests": "two"}, "nights")


async def test_the_check_says_what_each_session_would_do_and_changes_nothing(seeded: Seeded) -> None:
    before = {session_id: await stored(seeded.store, session_id) for session_id in SESSIONS}
    engine = second(seeded.store, [found(("nights", "3", 3))])
    # Pages of two sessions: the five are read in three pages, each after the last id of the one before.
    report = await engine.check_sessions("stays", page=2)

    assert (report.flow, report.version, report.stored, report.checked) == ("stays", V2, {V1: 5}, 5)
    assert report.verdicts == {"current": 0, "migrate": 4, "fall_back": 1, "fail": 0}
    assert {what: (group.sessions, group.examples) for what, group in report.changes.items()} == {
        "renamed Review: from Compare": (4, ["changed", "removed", "renamed", "same"]),
        "state migrated Review: hotels, options": (4, ["changed", "removed", "renamed", "same"]),
        "approval withdrawn Book: book": (1, ["changed"]),
        "approval carried Book: hold": (1, ["same"]),
        "fell back Explore: from Extras": (1, ["removed"]),
        "state dropped Extras: the step is gone": (1, ["removed"]),
        f"field dropped Explore: {GUESTS_RULE}": (2, ["removed", "retyped"]),
    }
    assert report.failures == {}
    for session_id in SESSIONS:
        assert await stored(seeded.store, session_id) == before[session_id]

    without = await second(seeded.store, [], flow=StaysV2WithoutFallback).check_sessions("stays")
    assert without.verdicts == {"current": 0, "migrate": 4, "fall_back": 0, "fail": 1}
    assert {what: (group.sessions, group.examples) for what, group in without.failures.items()} == {
        "the session stands in step 'Extras', which flow stays no longer has: map it to its new step in "
        "Flow.renamed, or declare Flow.fallback": (1, ["removed"])
    }

    # Once a session ran a turn under the second version, it is current.
    assert (await engine.run("stays", "3 nights", session_id="retyped")).error is None
    again = await engine.check_sessions("stays")
    assert (again.stored, again.verdicts["current"], again.verdicts["migrate"]) == ({V1: 4, V2: 1}, 1, 3)
