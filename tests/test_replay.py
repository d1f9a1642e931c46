"""Replaying stored sessions against the current code (``picoflow.replay``): the demos' scenarios,
played with their scripted answers into a SQLite store with timelines, replayed as they are (no
difference), after a deliberate prompt change (a divergence naming the system prompt, or, with a
fallback model, the turns it changed), with an approval-gated tool that must never run, and with
input that cannot be replayed (a clear error, nothing written)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from picoflow.context import ANY_PRINCIPAL
from picoflow.engine import FlowEngine
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, Model
from picoflow.replay import Difference, ReplayError, ReplayReport, TurnReplay, replay_schema, replay_sessions
from picoflow.session import Session
from picoflow.sessions import open_store
from picoflow.timeline import ModelEntry
from picoflow_demos import FLOWS
from picoflow_demos.orders import flow as orders_flow
from picoflow_demos.orders.database import OrdersDatabase
from replay_support import demo_world, dump, record

PICKS = [("orders.yaml", "orders-support"), ("hotel.yaml", "hotel-14-turns")]
REFUND = [("orders.yaml", "orders-refund-decided")]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """The store (URL) and the session of each scenario: recorded once, only read afterwards."""
    folder = tmp_path_factory.mktemp("recorded")
    url = f"sqlite:///{folder / 'sessions.sqlite3'}"
    return url, record(url, [*PICKS, *REFUND])


def replay(url: str, session_ids: list[str], model: Model | None = None, **options: Any) -> ReplayReport:
    async def work() -> ReplayReport:
        source = FlowEngine(store=open_store(url))
        try:
            return await replay_sessions(source, session_ids, FLOWS, model=model, **options)
        finally:
            await source.aclose()

    return asyncio.run(work())


def answers_per_turn(url: str, session_id: str) -> list[tuple[int, str, int]]:
    """(turn, trigger, model requests recorded) of each recorded turn."""

    async def read() -> list[tuple[int, str, int]]:
        source = FlowEngine(store=open_store(url))
        try:
            timeline = await source.timeline(session_id, principal=ANY_PRINCIPAL)
        finally:
            await source.aclose()
        assert timeline is not None
        return [
            (turn.turn, turn.trigger, sum(isinstance(e, ModelEntry) for e in turn.entries))
            for turn in timeline.turns
        ]

    return asyncio.run(read())


def rows(report: ReplayReport) -> list[tuple[str, str, list[tuple[int, str, int, int, str | None]]]]:
    return [
        (
            session.session_id,
            session.status,
            [(t.turn, t.status, t.recorded_answers, t.fallback_answers, t.diverged) for t in session.turns],
        )
        for session in report.sessions
    ]


def test_unchanged_code_replays_the_demo_sessions_with_no_difference(
    recorded: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, sessions = recorded
    ids = [sessions[name] for _, name in PICKS]
    before = dump(url)
    with demo_world(monkeypatch, tmp_path):
        report = replay(url, ids)
    expected = [
        (
            session_id,
            "same",
            [(turn, "same", answers, 0, None) for turn, _, answers in answers_per_turn(url, session_id)],
        )
        for session_id in ids
    ]
    assert rows(report) == expected
    assert [len(s.turns) for s in report.sessions] == [13, 15]
    assert all(turn.differences == [] for session in report.sessions for turn in session.turns)
    assert report.same and report.fallback_model is None and report.tools_run
    assert dump(url) == before  # the store replayed from is only read


def with_changed_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliberate change: Support's prompt gains a sentence at its start."""
    original = orders_flow.Support.prompt
    monkeypatch.setattr(orders_flow.Support, "prompt", lambda self: "Answer tersely.\n" + original(self))


def test_a_prompt_change_without_a_fallback_model_diverges_naming_the_system_prompt(
    recorded: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, sessions = recorded
    session_id = sessions["orders-support"]
    with_changed_prompt(monkeypatch)
    with demo_world(monkeypatch, tmp_path):
        report = replay(url, [session_id])
    first = "step Support: the system prompt"
    assert rows(report) == [
        (
            session_id,
            "diverged",
            [(1, "diverged", 0, 0, first)] + [(turn, "not_replayed", 0, 0, None) for turn in range(2, 14)],
        )
    ]
    assert not report.same


def test_a_prompt_change_with_a_fallback_model_shows_what_each_turn_does_differently(
    recorded: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, sessions = recorded
    session_id = sessions["orders-support"]
    with_changed_prompt(monkeypatch)
    other = '{"orders": [], "status": "any", "since": null, "until": null, "action": "other"}'
    asked: list[str | None] = []

    def reads_nothing(request: ModelRequest) -> str:
        asked.append(request.step)
        return other

    with demo_world(monkeypatch, tmp_path):
        report = replay(url, [session_id], FunctionModel(reads_nothing, name="function:other"))
    turns = report.sessions[0].turns
    first = turns[0]
    assert first == TurnReplay(
        turn=1,
        trigger="message",
        message="Hi! What's the status of order 40006?",
        status="differs",
        recorded_answers=0,
        fallback_answers=1,
        diverged="step Support: the system prompt",
        differences=[
            Difference(
                part="reply",
                recorded="Order #40006: shipped, $156.00, placed 2026-11-08.",
                replayed=first.differences[0].replayed,
            ),
            Difference(part="state", key="Support.shown", recorded=[40006], replayed="(unchanged)"),
        ],
    )
    assert report.fallback_model == "function:other" and report.sessions[0].status == "differs"
    assert asked and set(asked) == {"Support"}
    assert [t.fallback_answers >= 1 for t in turns] == [True] * 13  # every Support request is new
    assert not report.same


def test_an_approval_gated_tool_never_runs_in_a_replay(
    recorded: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, sessions = recorded
    session_id = sessions["orders-refund-decided"]
    refunds: list[int] = []

    def never(self: OrdersDatabase, customer_id: str, order_id: int, *, reference: str) -> Any:
        refunds.append(order_id)
        raise AssertionError("a replay ran an approval-gated refund")

    monkeypatch.setattr(OrdersDatabase, "refund", never)
    with demo_world(monkeypatch, tmp_path):
        report = replay(url, [session_id])
    assert refunds == []
    assert rows(report) == [
        (
            session_id,
            "differs",
            [
                (1, "same", 2, 0, None),
                (2, "same", 0, 0, None),  # approved by the customer: the recorded run stands in
                (3, "same", 2, 0, None),
                (4, "same", 0, 0, None),  # approved by staff (sam, with the staff role)
                (5, "differs", 1, 0, None),
            ],
        )
    ]
    # What the refunds did in the recording is not in the replay's world: the later read shows it.
    assert report.sessions[0].turns[4].differences == [
        Difference(
            part="reply",
            recorded="Refunded orders placed since 2026-10-01:\n"
            "- Order #40006: refunded, $156.00, placed 2026-11-08.\n"
            "- Order #40005: refunded, $23.75, placed 2026-10-20.\n"
            "- Order #40004: refunded, $89.00, placed 2026-10-11.\n"
            "- Order #40003: refunded, $54.20, placed 2026-10-03.",
            replayed="Refunded orders placed since 2026-10-01:\n"
            "- Order #40005: refunded, $23.75, placed 2026-10-20.\n"
            "- Order #40003: refunded, $54.20, placed 2026-10-03.",
        ),
        Difference(
            part="state", key="Support.shown", recorded=[40006, 40005, 40004, 40003], replayed=[40005, 40003]
        ),
    ]


def test_without_tools_and_a_call_the_recording_never_ran_the_model_is_told_it_did_not_run(
    recorded: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, sessions = recorded
    session_id = sessions["orders-refund-decided"]
    monkeypatch.setattr(OrdersDatabase, "refund", lambda *a, **k: pytest.fail("refund ran"))
    with demo_world(monkeypatch, tmp_path):
        report = replay(url, [session_id], run_tools=False)
    assert [t.status for t in report.sessions[0].turns] == ["same", "same", "same", "same", "differs"]
    assert report.tools_run is False


def test_what_cannot_be_replayed_is_refused_in_one_line_and_nothing_is_written(
    recorded: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, sessions = recorded
    before = dump(url)
    with pytest.raises(ReplayError) as unknown:
        replay(url, ["no-such-session"])
    assert str(unknown.value) == "no session no-such-session in this store"

    bare = f"sqlite:///{tmp_path / 'bare.sqlite3'}"
    asyncio.run(save_bare(bare))
    stored = dump(bare)
    with pytest.raises(ReplayError) as unrecorded:
        replay(bare, ["bare"])
    assert str(unrecorded.value) == (
        "session bare has no recorded timeline: replay needs the turns recorded "
        "(FlowEngine(timeline=TimelineSettings()); picoflow serve and the command line record them)"
    )
    assert dump(bare) == stored

    async def only_hotel() -> None:
        source = FlowEngine(store=open_store(url))
        try:
            await replay_sessions(source, [sessions["orders-support"]], [FLOWS[0]])
        finally:
            await source.aclose()

    with pytest.raises(ReplayError) as foreign:
        asyncio.run(only_hotel())
    assert str(foreign.value) == (
        f"session {sessions['orders-support']} is of flow 'orders', "
        "which is not among the flows given (hotel)"
    )
    assert dump(url) == before


async def save_bare(url: str) -> None:
    """A session stored without any timeline (an engine that recorded none)."""
    store = open_store(url)
    try:
        await store.save(Session(id="bare", flow="orders", current_step="Support"), expected_revision=None)
    finally:
        await store.close()


def test_the_report_schema_is_published() -> None:
    schema = replay_schema()
    assert schema["$id"] == "https://picoflow.dev/schemas/replay-v1.json"
    assert set(schema["properties"]) == {"version", "fallback_model", "tools_run", "sessions"}
