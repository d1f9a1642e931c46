"""Every CLI test: a wide console, the hotel's fixed date, and none of the caller's PICOFLOW_* settings."""

from __future__ import annotations

import pytest

from picoflow import cli
from picoflow_demos.hotel.scripted import CURRENT_DATE


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
