"""The chat page as a guest sees it, in headless Chromium against a real server with API keys: an
approval card offers Approve and Deny only to a caller the approval names (its customer, or someone
holding one of its roles), while the server goes on refusing anyone else; no name from the code (a
step's, a status's, a principal's, a transition's, a tool argument's) reaches a guest's page, an
approval card labelling each argument with its tool's title; and at 390x844 (a
phone) the chat fits: no sideways scroll, the message box and its button in view, what is wide
scrolling inside its bubble."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from picoflow import FlowEngine
from picoflow.models import ScriptedModel, ToolCall
from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel.scripted import CURRENT_DATE, day, found, wants

from .approvals_support import KEYS, RefundFlow, Refunds, clock
from .test_browser import CHROMIUM, CHROMIUM_ARGS, open_as, send, serving_in_a_thread

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("fresh_ledger")]

SMALL = ToolCall("refund", {"order_id": 40001, "amount": 25.5}, "c1")
BIG = ToolCall("refund", {"order_id": 40002, "amount": 250.0}, "c2")
STAFF_ONLY = "Waiting for approval by someone with the 'staff' role"


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def card(page: Page, index: int) -> Any:
    return page.locator("#messages li.approval").nth(index)


def test_only_a_caller_the_approval_names_is_offered_the_buttons(browser: Any) -> None:
    failures: list[str] = []
    model = ScriptedModel([[BIG], [SMALL], [BIG]])
    engine = FlowEngine([RefundFlow], store=MemoryStore(), model=model, clock=clock)
    settings = ServerSettings(api_keys=KEYS, default_flow="refunds")
    with serving_in_a_thread(engine, settings) as url:
        customer = open_as(browser, url, "cust-key", failures)
        send(customer, "refund order 40002")
        big = card(customer, 0)
        expect(big.locator(".approval-summary")).to_have_text("Refund $250.00 on order 40002")
        expect(customer.locator("#busy")).to_be_hidden()
        expect(big.locator(".approval-who")).to_have_text(STAFF_ONLY)
        expect(big.locator(".approval-actions")).to_be_hidden()
        assert big.locator("button:visible, input:visible").count() == 0

        # Hiding the buttons is not what stops the customer: the server refuses them as before.
        refused = customer.evaluate(
            """async (id) => {
                const session = localStorage.getItem("picoflow.session.refunds");
                const response = await fetch(`/v1/sessions/${session}/approvals/${id}`, {
                    method: "POST",
                    headers: { "Content-Type": "application/json", Authorization: "Bearer cust-key" },
                    body: JSON.stringify({ decision: "approve" }),
                });
                return [response.status, (await response.json()).error.message];
            }""",
            big.get_attribute("data-approval-id"),
        )
        assert refused == [
            403,
            f"approval {big.get_attribute('data-approval-id')} needs someone with the 'staff' role",
        ]
        assert Refunds.ledger == []

        send(customer, "a smaller one then")  # the customer's own to decide
        small = card(customer, 1)
        expect(small.locator(".approval-summary")).to_have_text("Refund $25.50 on order 40001")
        expect(customer.locator("#busy")).to_be_hidden()
        expect(small.locator(".approval-who")).to_have_text("Must be approved by the customer")
        expect(small.locator(".approval-actions button")).to_have_text(["Approve", "Deny"])
        expect(big.locator(".approval-outcome")).to_have_text("Withdrawn: the conversation moved on")

        staff = open_as(browser, url, "staff-key", failures)  # holds the staff role
        send(staff, "refund order 40002")
        theirs = card(staff, 0)
        expect(theirs.locator(".approval-summary")).to_have_text("Refund $250.00 on order 40002")
        expect(staff.locator("#busy")).to_be_hidden()
        expect(theirs.locator(".approval-who")).to_have_text(
            "Must be approved by someone with the 'staff' role"
        )
        expect(theirs.locator(".approval-actions button")).to_have_text(["Approve", "Deny"])
    assert model.remaining == 0 and failures == [] and Refunds.ledger == []


# --- what a guest reads ------------------------------------------------------------------------

WATCH_BUSY = """
window.__busy = [];
addEventListener("DOMContentLoaded", () => {
  const line = document.getElementById("busy-text");
  new MutationObserver(() => window.__busy.push(line.textContent))
    .observe(line, { childList: true, characterData: true, subtree: true });
});
"""
"""Every text the line under the conversation shows, recorded as it changes."""

SHOWN_TEXTS = """
(root) => {
  const texts = [];
  const walker = document.createTreeWalker(document.querySelector(root), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent.trim();
    if (text && node.parentElement.checkVisibility()) texts.push(text);
  }
  return texts;
}
"""
"""Every visible text node under a selector."""
SNAKE_CASE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
"""A name from the code, such as ``room_type`` or ``check_in``."""


def test_a_guest_reads_no_name_from_the_code(browser: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", CURRENT_DATE)
    dates = found(
        ("check_in", "8/1/2027", day(8, 1, 2027)),
        ("check_out", "8/4/2027", day(8, 4, 2027)),
        ("max_price", "under 300", 300),
        ("request", "search", "search"),
    )
    model = ScriptedModel([found(), dates, wants("book", pick="cheapest")])
    engine = FlowEngine([HotelFlow], store=MemoryStore(), model=model)
    failures: list[str] = []
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, locale="en-US", timezone_id="UTC")
    context.add_init_script(WATCH_BUSY)
    guest: Page = context.new_page()
    guest.on("pageerror", lambda error: failures.append(str(error)))
    replies = guest.locator("#messages li.assistant:not(.streaming)")
    with serving_in_a_thread(
        engine, ServerSettings(api_keys={"guest-key": "guest-7"}, default_flow="hotel")
    ) as url:
        guest.goto(url + "/")
        guest.fill("#api-key", "guest-key")
        guest.click("#auth button[type=submit]")
        expect(guest.locator("body")).to_have_attribute("data-ready", "true")
        send(guest, "Hi")
        expect(replies).to_have_count(1)
        send(guest, "8/1/2027 to 8/4/2027, under 300 a night, search")
        expect(replies).to_have_count(2)
        expect(guest.locator("#busy")).to_be_hidden()
        send(guest, "book the cheapest")
        booking = card(guest, 0)
        expect(guest.locator("#busy")).to_be_hidden()
        expect(guest.locator("#session-status")).to_have_text("Waiting for approval")
        expect(booking.locator(".approval-who")).to_have_text("Must be approved by the customer")
        # The booking tool's own argument names are not the guest's words: the card says its titles.
        expect(booking.locator("table.approval-args th")).to_have_text(
            ["Hotel", "Room", "Check-in", "Check-out", "Price per night", "Total", "Language"]
        )
        booking.locator("button.approve").click()
        expect(replies).to_have_count(3)
        expect(guest.locator("#busy")).to_be_hidden()
        expect(booking.locator(".approval-outcome")).to_have_text("Approved by you")
        expect(guest.locator("#session-status")).to_have_text("Complete")

        busy = guest.evaluate("window.__busy")
        assert "Working…" in busy and all(text.endswith("…") for text in busy)
        assert set(busy) <= {"Thinking…", "Working…", "Approving…"}
        steps = {step.__name__ for step in HotelFlow.steps}
        statuses = {"new", "running", "awaiting_approval", "awaiting_human", "completed", "aborted"}
        internal = ["guest-7", "by local", "on_model_error", "awaiting_", "Moving to", "Asking "]
        for where in ("main.chat", "aside.panel"):
            shown = guest.evaluate(SHOWN_TEXTS, where)
            assert shown, where
            named = [
                text
                for text in shown
                if text in steps | statuses
                or any(name in text for name in internal)
                or SNAKE_CASE.search(text)  # an argument's name, such as room_type
            ]
            assert named == [], where
        expect(guest.locator("#diagram")).to_be_hidden()
        expect(guest.locator("#current-step")).to_be_hidden()
    assert model.remaining == 0 and failures == []


# --- a phone -----------------------------------------------------------------------------------

WIDE_TABLE = "\n".join(
    [
        "Here is what I found:",
        "",
        "| order | placed | item | amount | status | carrier | tracking number |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| 40001 | 2099-12-30 | a very long item name that keeps going | $25.50 | returned | Parcelforce | "
        "PF0000000000000000000000000001 |",
        "",
        "Reference: " + "X" * 120,
    ]
)
WIDE = ToolCall(
    "refund", {"order_id": 40001, "amount": 25.5, "note": "a note of many words " * 12 + "Y" * 90}, "c3"
)


def test_the_chat_fits_a_phone(browser: Any) -> None:
    failures: list[str] = []
    model = ScriptedModel([WIDE_TABLE, [WIDE]])
    engine = FlowEngine([RefundFlow], store=MemoryStore(), model=model, clock=clock)
    with serving_in_a_thread(engine, ServerSettings(api_keys=KEYS, default_flow="refunds")) as url:
        phone = open_as(browser, url, "cust-key", failures, width=390, height=844)
        send(phone, "my orders")
        expect(phone.locator("#messages li.assistant table")).to_have_count(1)
        expect(phone.locator("#busy")).to_be_hidden()
        send(phone, "refund order 40001")
        refund = card(phone, 0)
        expect(refund.locator(".approval-summary")).to_have_text("Refund $25.50 on order 40001")
        expect(phone.locator("#busy")).to_be_hidden()
        expect(refund.locator(".approval-actions button")).to_have_text(["Approve", "Deny"])

        assert phone.evaluate("document.scrollingElement.scrollWidth") <= 390
        for selector in ("#input", "#send", "#attach"):
            expect(phone.locator(selector)).to_be_in_viewport(ratio=1)
        for table, holder in (
            (
                phone.locator("#messages li.assistant table"),
                phone.locator("#messages li.assistant .bubble").last,
            ),
            (refund.locator("table.approval-args"), refund.locator(".card")),
        ):
            inner, outer = table.bounding_box(), holder.bounding_box()
            assert inner is not None and outer is not None
            assert outer["x"] >= 0 and outer["x"] + outer["width"] <= 390
            assert inner["x"] + inner["width"] <= outer["x"] + outer["width"]
        refund.locator("button.approve").scroll_into_view_if_needed()
        expect(refund.locator("button.approve")).to_be_in_viewport(ratio=1)
    assert model.remaining == 0 and failures == []
