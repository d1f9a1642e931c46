"""Files in the chat page, in headless Chromium against a real server: a PNG chosen with the attach
button and a PDF dropped on the chat go with the next message as multipart/form-data; the user's
bubble shows the image as a thumbnail and the PDF as a named chip, live and after a reload (the
stored bytes fetched with the API key). What the server refuses (a type the bytes contradict, a
file over the engine's limit) and what the page itself refuses (a file over the default limit) say
why and leave the typed message and the chosen files in the composer. Last, the invoice demo with
its scripted model: a sample PDF uploaded through the page comes back as the extracted invoice,
rendered as tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import JSHandle, Page, expect

from picoflow import FlowEngine
from picoflow.attachments import AttachmentLimits
from picoflow.evals.loading import load_scenarios
from picoflow.evals.scenario import Scenario
from picoflow.models import ScriptedModel
from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore
from picoflow_demos.invoice import InvoiceFlow, InvoicesDatabase

from .files_support import files_engine, pdf, png
from .test_browser import ARTIFACTS, last_reply, page, say, send, serving_in_a_thread

pytestmark = pytest.mark.browser
__all__ = ["page"]  # the fixture, shared with the other browser tests

API_KEY = "files-key"
PHOTO, INVOICE = png("teal"), pdf()
SCENARIOS = Path(__file__).resolve().parents[2] / "src" / "picoflow_demos" / "scenarios"


def upload(name: str, media_type: str, data: bytes) -> dict[str, Any]:
    """A file for Playwright's ``set_input_files``, made in memory."""
    return {"name": name, "mimeType": media_type, "buffer": data}


def dragged(page: Page, name: str, media_type: str, data: bytes) -> JSHandle:
    """A ``DataTransfer`` carrying one file, built in the page as a drag from the desktop would be."""
    return page.evaluate_handle(
        """([name, type, bytes]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([new Uint8Array(bytes)], name, { type }));
            return transfer;
        }""",
        [name, media_type, list(data)],
    )


def open_page(page: Page, url: str) -> list[str]:
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))
    page.goto(url + "/")
    page.fill("#api-key", API_KEY)
    page.press("#api-key", "Enter")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    return failures


@pytest.fixture
def files_url() -> Iterator[str]:
    # With an API key: the page must send it for the stored images too.
    settings = ServerSettings(api_keys={API_KEY: "reader"})
    with serving_in_a_thread(files_engine(), settings) as url:
        yield url


def expect_sent_files(page: Page) -> None:
    """The user's bubble: the PNG as a loaded thumbnail (a blob: URL), the PDF as a named chip."""
    files = page.locator("#messages li.user .bubble ul.files > li")
    expect(files).to_have_count(2)
    thumbnail = files.nth(0).locator("img")
    expect(thumbnail).to_have_attribute("alt", "photo.png")
    expect(thumbnail).to_have_attribute("src", re.compile(r"^blob:"))
    expect(thumbnail).to_have_js_property("naturalWidth", 4)  # the bytes arrived and decoded
    expect(files.nth(1)).to_have_class("file document")
    expect(files.nth(1).locator(".file-icon")).to_have_text("PDF")
    expect(files.nth(1).locator(".file-name")).to_have_text("invoice.pdf")
    expect(page.locator("#messages li.user .bubble")).to_contain_text("here are my files")


def test_a_png_chosen_and_a_pdf_dropped_go_with_the_message_and_come_back_after_a_reload(
    files_url: str, page: Page
) -> None:
    failures = open_page(page, files_url)
    chips = page.locator("#attachment-chips > li")
    expect(page.locator("#attachment-chips")).to_be_hidden()

    # The PNG through the attach button's file input: a chip with its thumbnail.
    attach = page.get_by_role("button", name="Attach files")
    expect(attach).to_be_enabled()
    page.set_input_files("#file-input", files=[upload("photo.png", "image/png", PHOTO)])
    expect(chips).to_have_count(1)
    expect(chips.first.locator("img")).to_have_js_property("naturalWidth", 4)
    expect(chips.first).to_contain_text("photo.png")

    # The PDF dropped on the chat: the drop state shows while the file is over it.
    chat, hint = page.locator("main.chat"), page.locator("#drop-hint")
    expect(hint).to_be_hidden()
    transfer = dragged(page, "invoice.pdf", "application/pdf", INVOICE)
    chat.dispatch_event("dragenter", {"dataTransfer": transfer})
    expect(hint).to_be_visible()
    expect(chat).to_have_class(re.compile(r"\bdropping\b"))
    chat.dispatch_event("drop", {"dataTransfer": transfer})
    expect(hint).to_be_hidden()
    expect(chat).not_to_have_class(re.compile(r"\bdropping\b"))
    expect(chips).to_have_count(2)
    expect(chips.nth(1).locator(".file-icon")).to_have_text("PDF")
    expect(chips.nth(1)).to_contain_text("invoice.pdf")

    # A third file, taken off again from the keyboard; the focus stays in the chips.
    page.set_input_files("#file-input", files=[upload("notes.txt", "text/plain", b"call the plumber\n")])
    expect(chips).to_have_count(3)
    page.get_by_role("button", name="Remove notes.txt").focus()
    page.keyboard.press("Enter")
    expect(chips).to_have_count(2)
    expect(page.get_by_role("button", name="Remove invoice.pdf")).to_be_focused()

    say(page, "here are my files")
    expect(last_reply(page)).to_have_text(
        f"here are my files: photo.png (image/png, {len(PHOTO)} bytes), "
        f"invoice.pdf (application/pdf, {len(INVOICE)} bytes); all bytes: True"
    )
    expect_sent_files(page)
    expect(page.locator("#attachment-chips")).to_be_hidden()  # the files went with the message
    expect(page.locator("#error")).to_be_hidden()

    # After a reload the transcript's files show the same, the image fetched with the key.
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#messages li.user")).to_have_count(1)
    expect_sent_files(page)

    # The next turn sees the earlier files again (the model gets their bytes), and sends none.
    say(page, "and now?")
    expect(last_reply(page)).to_have_text("and now?: no files; all bytes: True")
    expect(page.locator("#messages li.user").last.locator("ul.files")).to_have_count(0)
    assert failures == []


@pytest.fixture
def strict_url() -> Iterator[str]:
    """A server whose engine takes files of at most 4 KB."""
    engine = files_engine(AttachmentLimits(max_file_bytes=4096))
    with serving_in_a_thread(engine, ServerSettings(api_keys={API_KEY: "reader"})) as url:
        yield url


def expect_kept(page: Page, message: str, names: list[str]) -> None:
    """Nothing was sent: the message and the files wait in the composer, the chat is unchanged."""
    expect(page.locator("#input")).to_have_value(message)
    expect(page.locator("#input")).to_be_enabled()
    expect(page.locator("#attachment-chips .file-name")).to_have_text(names)
    expect(page.locator("#messages > li")).to_have_count(0)


def test_refused_files_say_why_and_keep_the_message_and_the_files(strict_url: str, page: Page) -> None:
    failures = open_page(page, strict_url)
    error, chips = page.locator("#error"), page.locator("#attachment-chips > li")

    # Declared a PNG, the bytes are a PDF: the server refuses it (415) and says why.
    page.set_input_files("#file-input", files=[upload("scan.png", "image/png", INVOICE)])
    page.fill("#input", "please read my scan")
    page.press("#input", "Enter")
    expect(error).to_have_text(
        "attachment 'scan.png' is declared image/png but its bytes are application/pdf"
    )
    expect_kept(page, "please read my scan", ["scan.png"])

    # Over the engine's limit of 4 KB, which the page is told: it refuses the file itself, before
    # anything is sent (the server's own 413 is tested in test_uploads.py).
    page.get_by_role("button", name="Remove scan.png").click()
    page.set_input_files("#file-input", files=[upload("notes.txt", "text/plain", b"a line of notes\n" * 300)])
    expect(error).to_have_text("“notes.txt” is 5 KB; a file may be at most 4 KB.")
    expect(chips).to_have_count(0)
    expect(page.locator("#input")).to_have_value("please read my scan")

    # With the file fixed, the same message goes through.
    page.set_input_files("#file-input", files=[upload("scan.png", "image/png", PHOTO)])
    expect(error).to_be_hidden()
    page.press("#input", "Enter")
    expect(last_reply(page)).to_have_text(
        f"please read my scan: scan.png (image/png, {len(PHOTO)} bytes); all bytes: True"
    )
    expect(page.locator("#input")).to_have_value("")
    expect(chips).to_have_count(0)
    expect(page.locator("#messages li.user .file.image img")).to_have_js_property("naturalWidth", 4)
    assert failures == []


# --- the invoice demo ------------------------------------------------------------------------------


def invoice_scenario() -> Scenario:
    """The first PDF sample's scenario: the upload (its extraction scripted), then "confirm" (which
    asks for the approval of the save)."""
    return next(s for s in load_scenarios(SCENARIOS / "invoice-pdf.yaml") if s.name == "invoice-pdf-01")


@pytest.fixture
def invoice_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    scenario = invoice_scenario()
    for name, value in scenario.env.items():
        monkeypatch.setenv(name, value.replace("{run_dir}", str(tmp_path)))
    script: list[Any] = []
    for turn in scenario.turns:
        played = turn.script()
        assert isinstance(played, list)
        script.extend(played)
    engine = FlowEngine(
        [InvoiceFlow],
        store=MemoryStore(),
        model=ScriptedModel(script),
        deps=InvoicesDatabase(tmp_path / "invoices.sqlite3"),
    )
    # The scenario's caller signs in with the key: the demo saves invoices for a principal only.
    settings = ServerSettings(api_keys={API_KEY: scenario.caller.principal}, default_flow="invoice")
    with serving_in_a_thread(engine, settings) as url:
        yield url


def test_an_invoice_pdf_uploaded_in_the_page_comes_back_as_tables(invoice_url: str, page: Page) -> None:
    scenario = invoice_scenario()
    upload_turn, confirm_turn, _approve = scenario.turns
    [sample] = scenario.attachments(1)
    read = json.loads(str(upload_turn.scripted[0]))  # what the scripted model copies off the PDF
    failures = open_page(page, invoice_url)
    expect(page.locator("#flow-select")).to_have_value("invoice")

    page.set_input_files("#file-input", files=[upload(sample.name, sample.media_type, sample.data)])
    expect(page.locator("#attachment-chips .file-name")).to_have_text([sample.name])
    say(page, upload_turn.user)

    def expect_invoice_tables() -> None:
        tables = last_reply(page).locator("table")
        expect(tables).to_have_count(3)  # the header fields, the lines, the totals
        expect(tables.nth(0).locator("tbody td")).to_contain_text([read["vendor"], read["number"]])
        expect(tables.nth(1).locator("tbody tr")).to_have_count(len(read["lines"]))
        total = tables.nth(2).locator("tbody tr").last.locator("td")
        expect(total).to_have_text(["Total", read["total"]])
        expect(page.locator("#messages li.user .file-name")).to_have_text([sample.name])

    expect_invoice_tables()
    expect(last_reply(page)).to_contain_text("checks out")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-invoice-pdf.png"), full_page=True)

    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect_invoice_tables()

    replies = page.locator("#messages li.assistant")
    before = replies.count()
    send(page, confirm_turn.user)  # asks for the approval of the save, on a card
    card = page.locator("#messages li.approval").last
    summary = f"Save invoice {read['number']} from {read['vendor']} (USD {read['total']})"
    expect(card.locator(".approval-summary")).to_have_text(summary)
    expect(page.locator("#busy")).to_be_hidden()
    # The card says it all: the reading of "confirm" that led to it is no bubble.
    expect(replies).to_have_count(before)
    last_two = page.locator("#messages > li").evaluate_all("items => items.slice(-2).map(i => i.className)")
    assert last_two == ["message user", "message approval"]
    card.locator("button.approve").click()
    expect(last_reply(page)).to_contain_text(f"Saved invoice {read['number']} from {read['vendor']}")
    expect(card.locator(".approval-outcome")).to_contain_text("Approved")
    assert failures == []
