"""Approval cards in the chat page, in headless Chromium against a real server: a refund the model
proposes shows as a card (its summary, its arguments as a table, who must approve, when it
expires); Deny and Approve answer as turns, across page reloads that bring every card back from
the stored session; a card the caller may not decide waits for those who may, with no buttons; a
refused decision shows its error on the card and runs nothing. The hotel
demo's booking, which its code proposes, waits on the same card: denied, the guest is back at the
list; approved, the booking is confirmed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from picoflow import FlowEngine
from picoflow.models import ScriptedModel, ToolCall
from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel import flow as hotel_flow
from picoflow_demos.hotel.scripted import CURRENT_DATE, day, found, wants

from .approvals_support import RefundFlow, Refunds, clock
from .test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, serving_in_a_thread

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("fresh_ledger")]

XSS_NOTE = '<img src=x onerror="window.__xss = 1">'
SMALL = ToolCall("refund", {"order_id": 40001, "amount": 25.5, "note": XSS_NOTE}, "c1")
AGAIN = ToolCall("refund", {"order_id": 40001, "amount": 25.5}, "c2")
BIG = ToolCall("refund", {"order_id": 40002, "amount": 250.0}, "c3")
EXPIRES = "Expires Jan 1, 2100, 12:10 AM"
"""The engine's clock stands at 2100-01-01 00:00 UTC; approvals wait ten minutes; the page is UTC."""


def serve(script: list[Any]) -> Any:
    engine = FlowEngine([RefundFlow], store=MemoryStore(), model=ScriptedModel(script), clock=clock)
    return serving_in_a_thread(engine, ServerSettings(default_flow="refunds"))


@pytest.fixture
def browser_context() -> Iterator[Any]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser.new_context(
                viewport={"width": 1280, "height": 1000}, locale="en-US", timezone_id="UTC"
            )
        finally:
            browser.close()


@pytest.fixture
def page(browser_context: Any) -> Page:
    page: Page = browser_context.new_page()
    return page


def open_chat(page: Page, url: str) -> None:
    page.goto(url + "/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#busy")).to_be_hidden()


def reload(page: Page) -> None:
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")


def send(page: Page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def chat(page: Page) -> list[str]:
    """The conversation on the page, one line per item: who said what, or a card and its state."""
    lines = []
    for item in page.locator("#messages > li").all():
        classes = (item.get_attribute("class") or "").split()
        if "approval" in classes:
            summary = item.locator(".approval-summary").inner_text()
            outcome = item.locator(".approval-outcome").inner_text() or "buttons"
            if item.locator(".approval-actions").is_visible():
                outcome = "Approve / Deny"
            lines.append(f"card {summary}: {outcome}")
        else:
            role = "user" if "user" in classes else "assistant"
            lines.append(f"{role}: {item.locator('.bubble').inner_text()}")
    return lines


def card(page: Page, index: int) -> Any:
    return page.locator("#messages li.approval").nth(index)


def rows(table: Any) -> list[list[str]]:
    return [[cell.inner_text() for cell in row.locator("th, td").all()] for row in table.locator("tr").all()]


def test_deny_then_approve_across_reloads(page: Page) -> None:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    script = [[SMALL], "Understood, no refund.", [AGAIN], "Your refund is on its way."]
    with serve(script) as url:
        open_chat(page, url)
        send(page, "refund order 40001")
        first = card(page, 0)
        expect(first.locator(".approval-summary")).to_have_text("Refund $25.50 on order 40001")
        expect(page.locator("#busy")).to_be_hidden()
        # Each argument under its tool's title ("Order"), else its name made readable.
        assert rows(first.locator("table.approval-args")) == [
            ["Order", "40001"],
            ["Amount", "25.5"],
            ["Note", XSS_NOTE],  # the model's text as text: no element made of it
        ]
        assert first.locator("table img").count() == 0
        expect(first.locator(".approval-who")).to_have_text("Must be approved by the customer")
        expect(first.locator(".approval-expires")).to_have_text(EXPIRES)
        expect(page.locator("#session-status")).to_have_text("Waiting for approval")
        assert chat(page) == ["user: refund order 40001", "card Refund $25.50 on order 40001: Approve / Deny"]
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chat-approval-card.png"))

        first.locator(".approval-reason").fill("the parcel came back")
        first.locator("button.deny").click()
        expect(page.locator("#messages li.assistant")).to_have_text(["Understood, no refund."])
        expect(first.locator(".approval-outcome")).to_have_text("Denied by you: the parcel came back")
        expect(page.locator("#busy")).to_be_hidden()
        expect(page.locator("#session-status")).to_have_text("In progress")
        assert Refunds.ledger == []

        send(page, "refund it after all")
        expect(page.locator("#messages li.approval")).to_have_count(2)
        expect(page.locator("#busy")).to_be_hidden()
        second = card(page, 1)
        assert rows(second.locator("table.approval-args")) == [
            ["Order", "40001"],
            ["Amount", "25.5"],
            ["Note", ""],
        ]

        reload(page)
        assert chat(page) == [
            "user: refund order 40001",
            "card Refund $25.50 on order 40001: Denied by you: the parcel came back",
            "assistant: Understood, no refund.",
            "user: refund it after all",
            "card Refund $25.50 on order 40001: Approve / Deny",
        ]
        expect(page.locator("#session-status")).to_have_text("Waiting for approval")
        card(page, 1).locator("button.approve").click()
        expect(page.locator("#messages li.assistant")).to_have_text(
            ["Understood, no refund.", "Your refund is on its way."]
        )
        expect(card(page, 1).locator(".approval-outcome")).to_have_text("Approved by you")
        expect(page.locator("#busy")).to_be_hidden()
        (approved,) = Refunds.ledger
        assert approved[1:] == (40001, 25.5) and approved[0] == card(page, 1).get_attribute(
            "data-approval-id"
        )

        reload(page)
        assert chat(page) == [
            "user: refund order 40001",
            "card Refund $25.50 on order 40001: Denied by you: the parcel came back",
            "assistant: Understood, no refund.",
            "user: refund it after all",
            "card Refund $25.50 on order 40001: Approved by you",
            "assistant: Your refund is on its way.",
        ]
        assert page.locator("#messages .approval-actions:visible").count() == 0
        page.screenshot(path=str(ARTIFACTS / "chat-approvals-decided.png"))
        assert page.evaluate("window.__xss") is None
    assert Refunds.ledger == [approved]
    assert failures == []


def test_a_refused_decision_shows_its_error_on_the_card(browser_context: Any) -> None:
    script = [[BIG], [AGAIN], "Your refund is on its way."]
    with serve(script) as url:
        page = browser_context.new_page()
        failures: list[str] = []
        page.on("pageerror", lambda error: failures.append(str(error)))
        open_chat(page, url)
        send(page, "refund order 40002")
        big = card(page, 0)
        expect(page.locator("#busy")).to_be_hidden()
        # This page's caller holds no staff role: the card waits for staff, with nothing to press.
        expect(big.locator(".approval-who")).to_have_text(
            "Waiting for approval by someone with the 'staff' role"
        )
        expect(big.locator(".approval-actions")).to_be_hidden()
        assert Refunds.ledger == []

        send(page, "a smaller one then")  # withdraws the staff refund, proposes another
        expect(page.locator("#messages li.approval")).to_have_count(2)
        expect(big.locator(".approval-outcome")).to_have_text("Withdrawn: the conversation moved on")
        expect(page.locator("#busy")).to_be_hidden()

        other = browser_context.new_page()  # the same conversation in a second tab
        open_chat(other, url)
        card(other, 1).locator("button.approve").click()
        expect(other.locator("#messages li.assistant")).to_have_text(["Your refund is on its way."])
        expect(other.locator("#busy")).to_be_hidden()

        small = card(page, 1)  # still pending in the first tab
        small.locator("button.approve").click()
        expect(small.locator(".approval-error")).to_have_text(
            f"approval {small.get_attribute('data-approval-id')} was approved already"
        )
        expect(small.locator(".approval-outcome")).to_have_text("Approved by you")
        expect(page.locator("#busy")).to_be_hidden()
        assert chat(page) == [
            "user: refund order 40002",
            "card Refund $250.00 on order 40002: Withdrawn: the conversation moved on",
            "user: a smaller one then",
            "card Refund $25.50 on order 40001: Approved by you",
        ]
    assert [entry[1:] for entry in Refunds.ledger] == [(40001, 25.5)]
    assert failures == []


TRU = "Tru by Hilton Portland Airport"
BOOK_TRU = (
    f"Book {TRU}, one bed: check-in Sunday August 1, 2027, check-out Wednesday August 4, 2027 (3 nights), "
    "$180.00 to $207.00 a night, $567.00 in total"
)


def test_the_hotel_booking_waits_on_its_card_denied_then_approved(
    page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    dates = found(
        ("check_in", "8/1/2027", day(8, 1, 2027)),
        ("check_out", "8/4/2027", day(8, 4, 2027)),
        ("max_price", "under 300", 300),
        ("request", "search", "search"),
    )
    model = ScriptedModel([found(), dates, wants("book", pick="cheapest"), wants("book", pick="cheapest")])
    engine = FlowEngine([HotelFlow], store=MemoryStore(), model=model)
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    replies = page.locator("#messages li.assistant:not(.streaming)")
    with serving_in_a_thread(engine, ServerSettings(default_flow="hotel")) as url:
        open_chat(page, url)
        send(page, "Hi")
        expect(replies).to_have_count(1)
        send(page, "8/1/2027 to 8/4/2027, under 300 a night, search")
        expect(replies).to_have_count(2)
        expect(page.locator("#busy")).to_be_hidden()

        send(page, "book the cheapest")  # code finds the hotel; the guest decides the booking
        first = card(page, 0)
        expect(first.locator(".approval-summary")).to_have_text(BOOK_TRU)
        expect(page.locator("#busy")).to_be_hidden()
        assert rows(first.locator("table.approval-args")) == [
            ["Hotel", TRU],
            ["Room", "one bed"],
            ["Check-in", "2027-08-01"],
            ["Check-out", "2027-08-04"],
            ["Price per night", '["207.00","180.00","180.00"]'],
            ["Total", "567.00"],
            ["Language", "en"],
        ]
        expect(first.locator(".approval-who")).to_have_text("Must be approved by the customer")
        expect(page.locator("#session-status")).to_have_text("Waiting for approval")
        expect(replies).to_have_count(2)  # no confirmation: nothing is booked yet

        first.locator(".approval-reason").fill("not that one")
        first.locator("button.deny").click()
        expect(replies).to_have_count(3)
        expect(replies.last).to_contain_text("OK, nothing was booked.")
        expect(replies.last.locator("ol li")).to_have_count(26)  # back at the list
        expect(first.locator(".approval-outcome")).to_have_text("Denied by you: not that one")
        expect(page.locator("#busy")).to_be_hidden()
        expect(page.locator("#session-status")).to_have_text("In progress")

        send(page, "book the cheapest")
        second = card(page, 1)
        expect(second.locator(".approval-summary")).to_have_text(BOOK_TRU)
        expect(page.locator("#busy")).to_be_hidden()
        second.locator("button.approve").click()
        expect(replies).to_have_count(4)
        expect(page.locator("#busy")).to_be_hidden()
        code = hotel_flow.confirmation_number(second.get_attribute("data-approval-id") or "")
        expect(replies.last.locator("strong").first).to_have_text("Your booking is confirmed.")
        expect(replies.last).to_contain_text(f"Hotel: {TRU}")
        expect(replies.last).to_contain_text(f"Confirmation number: {code}")
        expect(second.locator(".approval-outcome")).to_have_text("Approved by you")
        expect(page.locator("#session-status")).to_have_text("Complete")
        expect(page.locator("#completed")).to_be_visible()
        live = [line.split("\n")[0] for line in chat(page)]
        page.screenshot(path=str(ARTIFACTS / "chat-hotel-booking-approved.png"), full_page=True)

        reload(page)  # every card back where it was, with its decision
        expect(page.locator("#messages li.approval")).to_have_count(2)
        assert (
            [line.split("\n")[0] for line in chat(page)]
            == live
            == [
                "user: Hi",
                "assistant: Hello! I can help you find a hotel in the Portland, Oregon area. Is your "
                "stay in the Portland area?",
                "user: 8/1/2027 to 8/4/2027, under 300 a night, search",
                "assistant: Aug 1 to Aug 4, 3 nights; up to $300 a night",
                "user: book the cheapest",
                f"card {BOOK_TRU}: Denied by you: not that one",
                "assistant: OK, nothing was booked.",
                "user: book the cheapest",
                f"card {BOOK_TRU}: Approved by you",
                "assistant: Your booking is confirmed.",
            ]
        )
    assert model.remaining == 0 and failures == []
