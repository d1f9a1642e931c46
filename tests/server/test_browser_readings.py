"""The chat page never shows the model's structured answers, live or after a reload: a SlotStep's
reading (``{"found": [...]}``) and a typed ``output`` (``{"action": "book"}``) are for code, and
only what the user typed and what they were sent are bubbles. Headless Chromium against a real
server, the booking conversation of ``booking_readings`` played by a scripted model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from booking_readings import GOODBYE, NIGHTS, PRICE_WORDS, QUOTE, SEEN, TURNS, WELCOME, BookingFlow, script
from picoflow import FlowEngine
from picoflow.messages import ModelRequest, ModelResponse
from picoflow.models import Model, ScriptedModel
from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore

from .test_browser import CHROMIUM, CHROMIUM_ARGS, conversation, reload, send, serving_in_a_thread, settled

pytestmark = pytest.mark.browser


class HeldScript(Model):
    """The booking script, except that the goodbye waits until the test (another thread) releases it:
    the page is looked at while the turn is between the typed step's answer and the reply."""

    name = "scripted:held"

    def __init__(self) -> None:
        self.script = ScriptedModel(script())
        self.release = threading.Event()

    async def request(self, request: ModelRequest) -> ModelResponse:
        # Generous: only a test that failed before releasing it waits this long.
        if request.step == "Booked" and not await asyncio.to_thread(self.release.wait, 60):
            raise RuntimeError("the test never released the goodbye")
        return await self.script.request(request)


@dataclass
class Served:
    url: str
    model: HeldScript


@pytest.fixture
def served() -> Iterator[Served]:
    model = HeldScript()
    engine = FlowEngine([BookingFlow], store=MemoryStore(), model=model)
    try:
        with serving_in_a_thread(engine, ServerSettings(default_flow="booking")) as url:
            yield Served(url, model)
    finally:
        model.release.set()  # before the server stops: no turn is left waiting


@pytest.fixture
def page() -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
        finally:
            browser.close()


def bubbles(seen: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The page's messages for ``seen``: each one's classes and text."""
    return [(f"message {role}", text) for role, text in seen]


def say(page: Page, text: str, reply: str) -> None:
    send(page, text)
    expect(page.locator("#messages li.assistant .bubble").last).to_have_text(reply)
    settled(page)


def test_no_bubble_ever_holds_a_structured_answer(served: Served, page: Page) -> None:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(served.url + "/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#flow-select")).to_have_value("booking")
    messages = page.locator("#messages > li")
    (hi, _), (dates, _), (nights, _), (yes, _) = TURNS

    say(page, hi, WELCOME)
    assert conversation(page) == bubbles(SEEN[:2])

    # The reading is refused once (40 nights), read again, and the next question asked.
    say(page, dates, NIGHTS)
    assert conversation(page) == bubbles(SEEN[:4])

    # The reading completes the form and moves on to a step whose model writes words with a call:
    # those words stay on the page, and nothing of the reading comes with them.
    say(page, nights, QUOTE)
    assert conversation(page) == bubbles(SEEN[:7])
    assert SEEN[5:7] == [("assistant", PRICE_WORDS), ("assistant", QUOTE)]

    # Between the typed step's answer and the goodbye: the page has moved on, and shows no answer.
    send(page, yes)
    expect(page.locator("#busy-text")).to_have_text("Working…")
    assert conversation(page) == bubbles(SEEN[:8])
    served.model.release.set()
    expect(page.locator("#messages li.assistant .bubble").last).to_have_text(GOODBYE)
    # The session is completed: the page stays idle with its input off (not ``settled``).
    expect(page.locator("#completed")).to_be_visible()
    expect(page.locator("#busy")).to_be_hidden()
    expect(page.locator("#messages li.streaming")).to_have_count(0)
    expect(page.locator("#input")).to_be_disabled()
    live = conversation(page)
    assert live == bubbles(SEEN)
    expect(page.locator("#messages li", has_text="{")).to_have_count(0)

    reload(page)
    expect(messages).to_have_count(len(SEEN))
    assert conversation(page) == live
    expect(page.locator("#messages li", has_text="{")).to_have_count(0)
    expect(page.locator("#completed")).to_be_visible()
    served.model.script.assert_complete()
    assert failures == []
