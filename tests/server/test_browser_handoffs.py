"""The handoff in the chat page, in headless Chromium against a real server: a customer's
conversation is handed to a person; a member of staff, on their own page, sees it in the queue with
its summary, takes it, reads the customer's message and replies; the customer's page shows the
staff reply; staff hand it back and the model answers the customer again."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore

from .handoff_support import KEYS, support_engine
from .test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, open_as, serving_in_a_thread

pytestmark = pytest.mark.browser

REPLY = "I'm passing this conversation to a member of our team. A person will reply here."


def send(page: Page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")
    expect(page.locator("#busy")).to_be_hidden()


def chat(page: Page) -> list[str]:
    lines = []
    for item in page.locator("#messages > li").all():
        classes = (item.get_attribute("class") or "").split()
        who = "user" if "user" in classes else "staff" if "staff" in classes else "assistant"
        lines.append(f"{who}: {item.locator('.bubble').inner_text()}")
    return lines


def test_staff_take_over_a_conversation_from_the_queue() -> None:
    failures: list[str] = []
    engine = support_engine(MemoryStore())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            with serving_in_a_thread(engine, ServerSettings(api_keys=KEYS, default_flow="support")) as url:
                customer = open_as(browser, url, "key-cust", failures)
                expect(customer.locator("#staff")).to_be_hidden()  # no staff visibility: no queue
                send(customer, "about order 40001")
                send(customer, "I want to talk to a person")
                expect(customer.locator("#session-status")).to_have_text("With our team")
                expect(customer.locator("#with-staff")).to_be_visible()

                staff = open_as(browser, url, "key-ana", failures)
                queue = staff.locator("#handoff-queue > li")
                expect(queue).to_have_count(1)
                item = queue.first
                expect(item.locator(".handoff-meta")).to_have_text("support · from Desk · waiting")
                expect(item.locator(".handoff-summary")).to_contain_text(
                    "Reason: the customer asked for a person"
                )
                expect(item.locator(".handoff-summary")).to_contain_text("Desk.order_id = 40001")
                item.get_by_role("button", name="Take").click()
                expect(item.locator(".handoff-meta")).to_have_text("support · from Desk · taken by ana")
                expect(item.get_by_role("button", name="Take")).to_be_hidden()

                send(customer, "hello? is anyone there?")
                log = item.locator(".handoff-messages li")
                expect(log.last).to_have_text("User: hello? is anyone there?")
                item.get_by_label("Reply as staff").fill("Hi, Ana here. I am looking at order 40001.")
                item.get_by_role("button", name="Send as staff").click()
                expect(log.last).to_have_text("ana (staff): Hi, Ana here. I am looking at order 40001.")

                staff_reply = customer.locator("#messages li.staff")
                expect(staff_reply).to_have_count(1)
                expect(staff_reply.locator(".staff-author")).to_have_text("ana (staff)")
                ARTIFACTS.mkdir(exist_ok=True)
                staff.screenshot(path=str(ARTIFACTS / "chat-handoff-staff.png"))
                customer.screenshot(path=str(ARTIFACTS / "chat-handoff-customer.png"))

                item.get_by_role("button", name="Hand back").click()
                expect(queue).to_have_count(0)
                expect(staff.locator("#staff-empty")).to_be_visible()
                expect(customer.locator("#session-status")).to_have_text("In progress")
                expect(customer.locator("#with-staff")).to_be_hidden()
                send(customer, "thanks!")
                assert chat(customer) == [
                    "user: about order 40001",
                    "assistant: Noted. (noted order 40001)",
                    "user: I want to talk to a person",
                    f"assistant: {REPLY}",
                    "user: hello? is anyone there?",
                    "staff: ana (staff)\nHi, Ana here. I am looking at order 40001.",
                    "user: thanks!",
                    "assistant: Model, in Desk: thanks!",
                ]
                customer.reload()
                expect(customer.locator("body")).to_have_attribute("data-ready", "true")
                expect(customer.locator("#messages > li")).to_have_count(8)
                assert chat(customer)[5] == "staff: ana (staff)\nHi, Ana here. I am looking at order 40001."
        finally:
            browser.close()
    assert failures == []
