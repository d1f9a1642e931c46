"""Every CLI test: a wide console, the hotel's fixed date, and none of the caller's PICOFLOW_* settings."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from tests.cli import desk

from picoflow import cli
from picoflow.cli import loading
from picoflow_demos.hotel.scripted import CURRENT_DATE

from .approval_support import NOW


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tables and rules wrap at the console width; keep every line whole for the assertions.
    monkeypatch.setattr(cli.console, "width", 200)
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    for name in (
        "PICOFLOW_FLOWS",
        "PICOFLOW_STORE",
        "PICOFLOW_MODEL",
        "PICOFLOW_API_KEYS",
        "PICOFLOW_API_KEYS_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Commands' engines read NOW, times print in UTC, and the desk's ledger starts empty."""
    monkeypatch.setattr(loading, "clock", lambda: NOW)
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    desk.LEDGER.clear()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
        desk.LEDGER.clear()
