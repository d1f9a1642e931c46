"""Stored sessions to replay: the demos' scenarios played with their scripted answers into a
SQLite store, timelines recorded, as ``picoflow eval --store`` does; and the settings a replay of
them runs with (the demos' dates, a fresh orders database)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from picoflow.evals import SCRIPTED, load_scenarios, run_eval
from picoflow.sessions import open_store
from picoflow.timeline import TimelineSettings
from picoflow_demos import FLOWS

SCENARIOS = Path(__file__).resolve().parents[1] / "src" / "picoflow_demos" / "scenarios"
ENV = {"ORDERS_FLOW_CURRENT_DATE": "2026-11-20", "HOTEL_FLOW_CURRENT_DATE": "2027-07-15"}


def record(url: str, picks: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Play the scenarios named ``(file, scenario)`` into the store at ``url``: scenario → session id."""
    chosen = [
        scenario
        for file, name in picks
        for scenario in load_scenarios(SCENARIOS / file)
        if scenario.name == name
    ]
    assert [scenario.name for scenario in chosen] == [name for _, name in picks]

    async def play() -> dict[str, str]:
        store = open_store(url)
        try:
            result = await run_eval(chosen, FLOWS, model=SCRIPTED, store=store, timeline=TimelineSettings())
        finally:
            await store.close()
        assert result.verdict(1.0)
        return {s.scenario.name: s.runs[0].session_id or "" for s in result.scenarios}

    return asyncio.run(play())


@contextmanager
def demo_world(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Iterator[None]:
    """The demos' dates, and a fresh orders database (the replay's, never the recording's)."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PICOFLOW_ORDERS_DB", str(folder / "replay-orders.sqlite3"))
    yield


def dump(url: str) -> list[str]:
    """Every row of the store, as SQL: what must not change when sessions are replayed."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        return list(db.iterdump())
