"""Two ``picoflow serve`` processes on one PostgreSQL: 200 concurrent sessions x 10 turns over HTTP.

Every session's stored transcript has all its turns, none lost or duplicated, and 409s happen only
where the test sent two turns of the same session at once (to different servers).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "load.py"


def load_driver():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("picoflow_bench_load", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.postgres
async def test_two_servers_200_sessions_10_turns_lose_nothing() -> None:
    driver = load_driver()
    report = await driver.run_load(processes=2, sessions=200, turns=10, doubled=20)
    assert report.problems == [], report.problems[:5]
    assert report.errors == {}, report.errors
    assert len(report.doubled) == 20
    # Every turn but the doubled ones' refused halves committed.
    refused = sum(report.conflicts.values())
    assert report.completed == 200 * 10 + 20 - refused
    assert set(report.conflicts) <= report.doubled
