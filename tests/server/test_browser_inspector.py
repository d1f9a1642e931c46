"""The developer view of the chat page, in headless Chromium against a real server: the inspector's
conversation (a reading that drops an age the user never gave, a step change, a tool refusing with
a ToolError, an answer the acceptance gate rejects, a refund waiting for approval, then approved)
shows turn by turn in the timeline while each turn runs (the model is held at chosen requests, and
the page is looked at meanwhile), the same after the turn and after a reload. The sessions list
filters by flow, status and errors. A caller without the inspect visibility gets no developer view
and no timeline in its streams."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from inspect_flow import AGE, ASK_ORDER, NAME, PROMISE, REFUNDED, WELCOME, Desk, Guest, LoopFlow, found
from picoflow import Flow, FlowEngine, Outcome, SlotStep, ask, go
from picoflow.messages import ModelRequest, ModelResponse, ToolCall
from picoflow.models import Model, ScriptedModel
from picoflow.server import ServerSettings
from picoflow.server.auth import Identity
from picoflow.sessions import MemoryStore
from picoflow.timeline import TimelineSettings

from .test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, reload, send, serving_in_a_thread, settled

pytestmark = pytest.mark.browser

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
"""Where ``PICOFLOW_DOCS_IMAGES=1`` has the test save the screenshot the docs show."""


class Interview(SlotStep):
    """Learn who the guest is."""

    slots = Guest
    questions = [ask(NAME, "name"), ask(AGE, "age")]

    def on_complete(self, values: Guest) -> Outcome:
        # The desk's model welcomes the guest in the same turn: a model call after the step change.
        return go(Desk).with_state(guest=values.model_dump())


class WelcomeFlow(Flow):
    name = "inspect"
    steps = [Interview, Desk]


SCRIPT: list[Any] = [
    found(),  # 1 "Hi"
    found(("name", "Ada", "Ada"), ("age", "I'm 30", 30)),  # 2 "Ada": the age was never said
    found(("age", "30", 30)),  # 3 "30"
    WELCOME,  # 4: the desk, in the same turn
    ToolCall("lookup", {"order_id": 7}),  # 5 "Refund order 7"
    PROMISE,  # 6: rejected by the acceptance gate
    ASK_ORDER,  # 7: asked again
    ToolCall("refund", {"order_id": 8, "amount": 20.0}),  # 8 "Order 8, twenty dollars"
    REFUNDED,  # 9: after the approval
]
HELD = (4, 7, 9)
"""The requests (counted from 1) the model holds until the test has looked at the page."""


@dataclass
class Hold:
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class HeldModel(Model):
    """The script, holding the chosen requests; the loop flow's searcher looks forever (its turn fails)."""

    name = "scripted:test"  # as the script it plays, which answers

    def __init__(self, script: list[Any] = SCRIPT) -> None:
        self.script = ScriptedModel(list(script))
        self.holds = {number: Hold() for number in HELD}
        self.count = 0

    async def request(self, request: ModelRequest) -> ModelResponse:
        if request.step == "Searcher":
            return ModelResponse(tool_calls=[ToolCall("look", {"query": "again"})])
        self.count += 1
        hold = self.holds.get(self.count)
        if hold is not None:
            hold.arrived.set()
            # Generous: only a test that failed before releasing it waits this long.
            if not await asyncio.to_thread(hold.release.wait, 60):
                raise RuntimeError(f"the test never released request {self.count}")
        return await self.script.request(request)

    def held(self, number: int) -> Hold:
        hold = self.holds[number]
        assert hold.arrived.wait(30), f"request {number} never came"
        return hold

    def release_all(self) -> None:
        for hold in self.holds.values():
            hold.release.set()


@dataclass
class Served:
    url: str
    model: HeldModel


def engine_for(model: HeldModel) -> FlowEngine:
    return FlowEngine([WelcomeFlow, LoopFlow], store=MemoryStore(), model=model, timeline=TimelineSettings())


@pytest.fixture(autouse=True)
def patient() -> Iterator[None]:
    """Waits for the page measured in seconds of a busy machine, not of an idle one: each waits for
    a state of the page, never for a time, so a longer bound only matters when a check fails."""
    expect.set_options(timeout=30_000)
    yield
    expect.set_options(timeout=5_000)  # Playwright's default, for the modules run after this one


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Browser, failures: list[str]) -> Page:
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, locale="en-US", timezone_id="UTC")
    page = context.new_page()
    page.on("pageerror", lambda error: failures.append(str(error)))
    return page


# --- reading the view --------------------------------------------------------------------------------


def turn(page: Page, number: int) -> Locator:
    return page.locator(f"#timeline-turns > li.turn[data-turn='{number}']")


def entries(page: Page, number: int, kind: str | None = None) -> Locator:
    selector = "li.entry" if kind is None else f"li.entry[data-kind='{kind}']"
    return turn(page, number).locator(selector)


def kinds(page: Page, number: int) -> list[str]:
    return [
        str(kind) for kind in entries(page, number).evaluate_all("items => items.map(i => i.dataset.kind)")
    ]


def view(page: Page) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every turn of the view: its head, and each entry's kind and text (folded parts included)."""
    turns: list[tuple[str, list[tuple[str, str]]]] = page.locator("#timeline-turns > li.turn").evaluate_all(
        """turns => turns.map(t => [
            t.querySelector(".turn-head").textContent,
            [...t.querySelectorAll("li.entry")].map(e => [e.dataset.kind, e.textContent]),
        ])"""
    )
    return [(head, [(kind, text) for kind, text in items]) for head, items in turns]


def idle(page: Page) -> None:
    """The turn is over and the view shows it as recorded (no turn is drawn live any more)."""
    settled(page)
    expect(page.locator("#timeline-turns > li.turn.live")).to_have_count(0)


def say(page: Page, text: str) -> None:
    send(page, text)
    idle(page)


# --- the tests -----------------------------------------------------------------------------------------


def test_each_turn_shows_in_the_developer_view_live_and_after_a_reload(browser: Browser) -> None:
    failures: list[str] = []
    model = HeldModel()
    try:
        with serving_in_a_thread(engine_for(model), ServerSettings(default_flow="inspect")) as url:
            page = new_page(browser, failures)
            page.goto(url + "/")
            expect(page.locator("body")).to_have_attribute("data-ready", "true")
            toggle = page.get_by_role("button", name="Developer view")
            expect(toggle).to_be_visible()  # the local open mode may inspect
            expect(page.locator("#inspector")).to_be_hidden()
            toggle.click()
            expect(page.locator("#inspector")).to_be_visible()
            expect(toggle).to_have_attribute("aria-pressed", "true")
            expect(page.locator("#timeline-status")).to_contain_text("No turn yet")
            converse(page, model)
            live = view(page)
            numbers = page.locator("#timeline-turns > li.turn").evaluate_all(
                "ts => ts.map(t => t.dataset.turn)"
            )
            assert numbers == ["1", "2", "3", "4", "5", "6"]

            # After a reload the view comes back from GET /v1/sessions/{id}/timeline, the same.
            reload(page)
            expect(page.locator("#inspector")).to_be_visible()  # remembered
            expect(page.locator("#timeline-turns > li.turn")).to_have_count(6)
            assert view(page) == live
            expect(turn(page, 1).locator("details").first).not_to_have_attribute("open", "")  # older: folded
            check_the_conversation(page)
            screenshot(page)
            sessions_list(page, model)
    finally:
        model.release_all()
    assert failures == []


def converse(page: Page, model: HeldModel) -> None:
    say(page, "Hi")
    expect(turn(page, 1)).to_have_attribute("data-outcome", "replied")
    assert kinds(page, 1) == ["entered", "model", "erased", "state"]

    # The dropped reading shows when its turn ends, without a reload.
    say(page, "Ada")
    expect(entries(page, 2, "field_dropped")).to_have_count(1)

    # A reading kept and a step change, seen while the desk's model is held in the same turn.
    send(page, "30")
    hold = model.held(4)
    live = page.locator("#timeline-turns > li.turn.live")
    expect(live).to_have_attribute("data-turn", "3")
    expect(live.locator("li.entry[data-kind='field_set'] .tag")).to_have_text("kept")
    expect(live.locator(".turn-message mark.evidence")).to_have_text("30")
    expect(live.locator("li.entry[data-kind='entered']")).to_contain_text("entered Desk from Interview")
    waiting = live.locator("li.entry[data-kind='model']").last
    expect(waiting).to_contain_text("in Desk")
    expect(waiting.locator(".pending")).to_have_text("waiting for the model's answer…")
    hold.release.set()
    idle(page)
    expect(turn(page, 3)).not_to_have_class("turn live")
    expect(entries(page, 3, "model").last.locator(".answer")).to_contain_text(WELCOME)
    expect(entries(page, 3, "state")).to_have_count(2)  # Interview's form, Desk's guest

    # A tool error and a rejected answer, seen while the next attempt is held.
    send(page, "Refund order 7")
    hold = model.held(7)
    expect(live).to_have_attribute("data-turn", "4")
    expect(live.locator("li.entry[data-kind='tool']")).to_have_class("entry kind-tool failed")
    expect(live.locator("li.entry[data-kind='tool']")).to_contain_text("order 7 belongs to another customer")
    expect(live.locator("li.entry[data-kind='rejected']")).to_contain_text("by check_response")
    expect(live.locator("li.entry[data-kind='rejected'] .reason")).to_have_text("never promise an outcome")
    expect(live.locator("li.entry[data-kind='model']")).to_have_count(3)
    expect(live.locator("li.entry[data-kind='model']").last).to_contain_text("attempt 2")
    expect(live.locator("li.entry[data-kind='model']").last.locator(".pending")).to_be_visible()
    # Closed and opened again while the turn runs: the recorded turns are read again (new
    # elements), and the running one stays, with what it showed.
    turn(page, 3).evaluate("item => item.dataset.before = 'reopened'")
    toggle = page.get_by_role("button", name="Developer view")
    toggle.click()
    expect(page.locator("#inspector")).to_be_hidden()
    toggle.click()
    expect(page.locator("#timeline-turns > li.turn[data-before]")).to_have_count(0)
    expect(page.locator("#timeline-turns > li.turn")).to_have_count(4)
    expect(live).to_have_attribute("data-turn", "4")
    expect(live.locator("li.entry[data-kind='rejected']")).to_have_count(1)
    hold.release.set()
    idle(page)
    expect(entries(page, 4, "model").last.locator(".pending")).to_have_count(0)
    assert kinds(page, 4) == ["model", "tool", "model", "rejected", "model"]

    # The refund waits for approval, then the approval's turn, held before the model's last words.
    say(page, "Order 8, twenty dollars")
    expect(turn(page, 5)).to_have_attribute("data-outcome", "paused")
    expect(entries(page, 5, "approval_requested")).to_contain_text(
        'asked for refund({"order_id":8,"amount":20})'
    )
    page.locator("#messages li.approval").get_by_role("button", name="Approve").click()
    hold = model.held(9)
    expect(live).to_have_attribute("data-turn", "6")
    expect(live.locator("li.entry[data-kind='approval_decided']")).to_contain_text("approved by local")
    expect(live.locator("li.entry[data-kind='tool']")).to_contain_text("refunded $20.00 on order 8")
    hold.release.set()
    idle(page)
    expect(turn(page, 6)).to_have_attribute("data-outcome", "replied")


def check_the_conversation(page: Page) -> None:
    """What each turn of the conversation shows."""
    # Turn 2: the name kept, its evidence marked in the user's words; the age dropped, and why.
    said = turn(page, 2).locator(".turn-message")
    expect(said.locator("mark.evidence")).to_have_text("Ada")
    expect(said.locator("mark.evidence")).to_have_attribute("data-field", "name")
    kept = entries(page, 2, "field_set")
    expect(kept.locator(".tag")).to_have_text("kept")
    expect(kept.locator(".evidence-line mark")).to_have_text("Ada")
    dropped = entries(page, 2, "field_dropped")
    expect(dropped.locator(".tag")).to_have_text("dropped")
    expect(dropped).to_contain_text("age = 30")
    expect(dropped.locator(".rule")).to_have_text(" rule quoted")
    expect(dropped.locator(".why")).to_contain_text("invention")
    # The reading's request: the system prompt folded (long), its output schema, the raw and parsed answer.
    request = entries(page, 2, "model")
    expect(request.locator("details.folded").first.locator(".label")).to_have_text("system prompt")
    expect(request.locator("details.folded").first).not_to_have_attribute("open", "")
    expect(request).to_contain_text("output schema: GuestReading")
    expect(request.locator(".answer")).to_contain_text("I'm 30")
    expect(request.locator("pre.parsed")).to_contain_text('"quote": "Ada"')
    state = entries(page, 2, "state").locator("tr.added")
    expect(state.locator(".key")).to_have_text(["form.known.name"])
    expect(state.locator(".after")).to_have_text(['"Ada"'])

    # Turn 3: the step change.
    expect(entries(page, 3, "left").locator(".entry-head")).to_have_text("stepleft Interview for Desk")
    expect(entries(page, 3, "entered").locator(".entry-head")).to_have_text("stepentered Desk from Interview")
    # Turn 4: the tool's error, the rejection and its reason.
    expect(entries(page, 4, "tool")).to_contain_text('lookup({"order_id":7})')
    expect(entries(page, 4, "tool").locator("pre.error")).to_have_text("order 7 belongs to another customer")
    expect(entries(page, 4, "rejected").locator(".reason")).to_have_text("never promise an outcome")
    expect(turn(page, 4).locator(".turn-head")).to_contain_text("3 model calls, 1 tool call")
    # Turns 5 and 6: the approval asked and decided; the refund's state.
    expect(entries(page, 5, "approval_requested")).to_have_count(1)
    expect(entries(page, 6, "approval_decided")).to_contain_text(
        'approved by local: refund({"order_id":8,"amount":20})'
    )
    expect(turn(page, 6).locator(".turn-message")).to_contain_text("decision")
    expect(entries(page, 6, "state").locator(".key")).to_have_text(["refunded"])


def screenshot(page: Page) -> None:
    """The dropped reading (turn 2) and the tool's error and rejected answer (turn 4), turn 3 folded."""
    page.set_viewport_size({"width": 1440, "height": 1900})
    turn(page, 3).locator(".turn-head").click()
    expect(turn(page, 3).locator("details").first).not_to_have_attribute("open", "")
    turn(page, 2).evaluate("item => item.scrollIntoView({block: 'start'})")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "inspector.png"))
    if os.environ.get("PICOFLOW_DOCS_IMAGES"):
        DOCS_IMAGES.mkdir(exist_ok=True)
        page.screenshot(path=str(DOCS_IMAGES / "inspector.png"))
    turn(page, 3).locator(".turn-head").click()
    page.set_viewport_size({"width": 1440, "height": 1000})


def sessions_list(page: Page, model: HeldModel) -> None:
    """A failed turn in another flow, then the sessions filtered by flow, status and errors."""
    page.select_option("#flow-select", "loop")
    send(page, "find it")
    expect(page.locator("#error")).to_be_visible()  # a usage limit: the page's message for a 422
    idle(page)
    # The failed first turn is inspected too: every model call until the limit, and the error.
    expect(turn(page, 1)).to_have_attribute("data-outcome", "failed")
    expect(turn(page, 1).locator(".turn-error")).to_contain_text("model_calls limit of 4")
    expect(entries(page, 1, "model")).to_have_count(4)

    page.get_by_role("tab", name="Sessions").click()
    rows = page.locator("#session-list > li.session-row")
    expect(rows).to_have_count(2)
    page.select_option("#filter-flow", "loop")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".session-flow")).to_have_text("loop")
    page.select_option("#filter-flow", "")
    page.check("#filter-errors")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".session-flow")).to_have_text("loop")
    page.uncheck("#filter-errors")
    page.select_option("#filter-status", "awaiting_human")
    expect(page.locator("#sessions-status")).to_have_text("No session matches these filters.")
    expect(rows).to_have_count(0)
    page.select_option("#filter-status", "running")
    expect(rows).to_have_count(2)
    page.select_option("#filter-flow", "inspect")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".session-status")).to_have_text("running")

    # Opening one inspects it; the chat's own conversation is a click away.
    rows.first.locator("button").click()
    expect(page.locator("#inspector-timeline")).to_be_visible()
    expect(page.locator("#timeline-turns > li.turn")).to_have_count(6)
    expect(page.locator("#inspected-what")).to_have_text("Session")
    page.get_by_role("button", name="Back to this conversation").click()
    expect(page.locator("#timeline-turns > li.turn")).to_have_count(1)
    expect(turn(page, 1)).to_have_attribute("data-outcome", "failed")


def test_a_caller_who_may_not_inspect_gets_no_developer_view(browser: Browser) -> None:
    failures: list[str] = []
    model = HeldModel([found()])  # one turn: no request it holds
    keys = {"k-ada": Identity("ada"), "k-eve": Identity("eve", frozenset({"inspect"}))}
    settings = ServerSettings(api_keys=keys, default_flow="inspect", prepare_models=False)
    with serving_in_a_thread(engine_for(model), settings) as url:
        page = new_page(browser, failures)
        streams: list[str] = []
        page.on(
            "response",
            lambda response: (
                streams.append(response.text())
                if response.request.method == "POST" and "/sessions" in response.url
                else None
            ),
        )
        page.goto(url + "/?inspect=1")  # asking for the view in the address changes nothing
        page.fill("#api-key", "k-ada")
        page.click("#auth button[type=submit]")
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        say(page, "Hi")
        expect(page.locator("#messages li.assistant .bubble").last).to_have_text(NAME)
        expect(page.locator("#inspect-toggle")).to_be_hidden()
        expect(page.locator("#inspector")).to_be_hidden()
        expect(page.locator("#timeline-turns > li")).to_have_count(0)
        assert len(streams) == 1 and "event: result" in streams[0]
        assert "event: timeline" not in streams[0]

        # The same page with a key that may inspect offers it.
        other = new_page(browser, failures)
        other.goto(url + "/")
        other.fill("#api-key", "k-eve")
        other.click("#auth button[type=submit]")
        expect(other.locator("body")).to_have_attribute("data-ready", "true")
        expect(other.get_by_role("button", name="Developer view")).to_be_visible()
    model.script.assert_complete()
    assert failures == []


def test_a_turn_run_elsewhere_shows_live_in_the_developer_view(browser: Browser) -> None:
    failures: list[str] = []
    model = HeldModel()
    try:
        with serving_in_a_thread(engine_for(model), ServerSettings(default_flow="inspect")) as url:
            page = new_page(browser, failures)
            page.goto(url + "/?inspect=1")
            expect(page.locator("#inspector")).to_be_visible()
            say(page, "Hi")
            say(page, "Ada")
            session_id = page.locator("#inspected-id").text_content()
            assert session_id
            # The view follows the session it shows: a turn anyone else runs in it shows as it runs.
            expect(page.locator("#inspector")).to_have_attribute("data-following", session_id)

            answered: list[httpx.Response] = []
            elsewhere = threading.Thread(
                target=lambda: answered.append(
                    httpx.post(f"{url}/v1/sessions/{session_id}/turns", json={"message": "30"}, timeout=120)
                )
            )
            elsewhere.start()
            hold = model.held(4)  # the desk's model, after the step change, in the same turn
            live = page.locator("#timeline-turns > li.turn.live")
            expect(live).to_have_attribute("data-turn", "3")
            expect(live.locator(".turn-head")).to_contain_text("run elsewhere")
            expect(live.locator("li.entry[data-kind='field_set'] .tag")).to_have_text("kept")
            expect(live.locator(".turn-message mark.evidence")).to_have_text("30")
            expect(live.locator("li.entry[data-kind='entered']")).to_contain_text(
                "entered Desk from Interview"
            )
            expect(live.locator("li.entry[data-kind='model']").last.locator(".pending")).to_have_text(
                "waiting for the model's answer…"
            )
            hold.release.set()
            elsewhere.join()
            assert [response.status_code for response in answered] == [200]
            # Stored: the recorded turn replaces what came live, in its place.
            idle(page)
            expect(turn(page, 3)).to_have_attribute("data-outcome", "replied")
            expect(entries(page, 3, "model").last.locator(".answer")).to_contain_text(WELCOME)
            expect(page.locator("#timeline-turns > li.turn")).to_have_count(3)
            assert kinds(page, 3)[-2:] == ["state", "state"]
            model.script.drop_remaining()  # the conversation's later turns are another test's
    finally:
        model.release_all()
    assert failures == []
