"""The travel demo in the chat page: a plan made of parallel sub-steps shows as the conversation,
never as its runs — the step stays the Planner, the runs' messages stay out of the chat, and the
page after a reload is the page before it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from picoflow import FlowEngine
from picoflow.evals.loading import load_scenarios
from picoflow.models import ScriptedModel
from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore
from picoflow_demos.travel import TravelFlow

from .test_browser import ARTIFACTS, current_step, last_reply, page, say, serving_in_a_thread

pytestmark = pytest.mark.browser
__all__ = ["page"]  # the fixture, shared with the hotel test

SCENARIOS = Path(__file__).resolve().parents[2] / "src" / "picoflow_demos" / "scenarios" / "travel.yaml"


#: The turns of the scenario the page plays: up to the plan, not the goodbye after it.
PLAYED_TURNS = 3


def travel_plan() -> tuple[list[str], dict[str, list[Any]]]:
    """The messages of the travel-plan scenario's first turns and their per-step script, joined."""
    scenario = next(s for s in load_scenarios(SCENARIOS) if s.name == "travel-plan")
    script: dict[str, list[Any]] = {}
    turns = scenario.turns[:PLAYED_TURNS]
    for turn in turns:
        played = turn.script()
        assert isinstance(played, dict)
        for step, items in played.items():
            script.setdefault(step, []).extend(items)
    return [turn.user for turn in turns], script


@pytest.fixture
def travel_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TRAVEL_FLOW_CURRENT_DATE", "2027-04-20")
    _, script = travel_plan()
    engine = FlowEngine([TravelFlow], store=MemoryStore(), model=ScriptedModel(script))
    with serving_in_a_thread(engine, ServerSettings(default_flow="travel")) as url:
        yield url


def test_a_trip_planned_with_parallel_sub_steps_in_the_chat_page(travel_url: str, page: Page) -> None:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(travel_url + "/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#flow-select")).to_have_value("travel")
    messages, _ = travel_plan()
    for text in messages:
        say(page, text)
    # The plan: tables written by code from the data and the sub-steps' picks.
    plan = last_reply(page)
    expect(plan.locator("table")).to_have_count(3)
    expect(plan.locator("table").first).to_contain_text("Frenchmen Music House")
    expect(plan.locator("table").nth(1)).to_contain_text("Preservation Hall")
    # The runs moved nothing: the conversation is still with the Planner, on the page and the diagram.
    expect(page.locator("#current-step")).to_have_text("Planner")
    expect(current_step(page)).to_have_attribute("data-step", "Planner")
    expect(page.locator("#diagram g.sub-step")).to_have_count(4)
    # Only what the user typed and what the assistant said: no sub-step input or answer.
    expect(page.locator("#messages li.user")).to_have_count(3)
    expect(page.locator("#messages li.assistant")).to_have_count(3)
    expect(page.locator("#messages")).not_to_contain_text('"picks"')
    # The Planner's three readings and the Hotels, Events and Itinerary runs (the panel follows the
    # session once the turn is in, so the expectation waits for it).
    expect(page.locator("#usage-calls")).to_have_text("6")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-travel-plan.png"), full_page=True)

    before = page.locator("#messages li").all_inner_texts()
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#messages li")).to_have_count(len(before))
    assert page.locator("#messages li").all_inner_texts() == before
    assert failures == []
