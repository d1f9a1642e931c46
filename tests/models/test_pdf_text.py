"""The text of a PDF for models that cannot read PDFs (``_pdf_text``), on PDFs drawn with reportlab."""

from __future__ import annotations

import hashlib
import io
import sys
from collections import OrderedDict

import pytest
from pypdf import PdfReader, PdfWriter

from picoflow.exceptions import AttachmentRefused, ModelConfigurationError
from picoflow.models import _pdf_text
from picoflow.models._pdf_text import MAX_CHARS, MAX_PAGES, NO_TEXT, pdf_text

from .pdfs import image_only_pdf, pdf


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing cached, so a result is always read from its own PDF."""
    monkeypatch.setattr(_pdf_text, "_cache", OrderedDict())


def test_the_text_of_every_page_in_order() -> None:
    data = pdf(["Invoice 2024-117", "Total due: 42.00 EUR"], "Paid by transfer.")
    assert pdf_text(data, name="invoice.pdf") == "Invoice 2024-117\nTotal due: 42.00 EUR\n\nPaid by transfer."


def test_pages_past_the_cap_are_left_out_and_said_to_be() -> None:
    pages = [f"page {number}" for number in range(1, MAX_PAGES + 4)]
    text = pdf_text(pdf(*pages), name="long.pdf")
    body, remark = text.rsplit("\n", 1)
    assert body == "\n\n".join(pages[:MAX_PAGES])
    assert remark == f"[... pages {MAX_PAGES + 1} to {MAX_PAGES + 3} are left out]"


def test_a_huge_text_is_cut_at_the_character_cap_and_says_where() -> None:
    # 20 pages of 60 lines of 96 characters: about 116,000 characters, past the cap in page 18.
    pages = [[f"{page:02d}-{line:02d} " + "x" * 90 for line in range(60)] for page in range(1, 21)]
    text = pdf_text(pdf(*pages), name="huge.pdf")
    body, remark = text.rsplit("\n", 1)
    assert len(body) == MAX_CHARS
    assert body.startswith("01-00 xxx")
    assert body == "\n\n".join("\n".join(lines) for lines in pages)[:MAX_CHARS]
    assert remark == f"[... the text is cut here, at {MAX_CHARS:,} characters, in page 18 of 20]"


def test_a_pdf_without_a_text_layer_says_so() -> None:
    assert pdf_text(image_only_pdf(), name="scan.pdf") == NO_TEXT
    assert pdf_text(pdf("", ""), name="blank.pdf") == NO_TEXT


def test_a_pdf_locked_with_a_password_is_refused_naming_the_file() -> None:
    with pytest.raises(AttachmentRefused) as caught:
        pdf_text(pdf("Confidential figures", encrypt="pw"), name="locked.pdf")
    assert str(caught.value) == (
        "attachment 'locked.pdf': the PDF is locked with a password, so its text cannot be read"
    )
    assert caught.value.status == 415


def test_a_pdf_with_only_an_owner_password_is_read() -> None:
    # Restrictions without a password to open (common in issued invoices): the text is readable.
    writer = PdfWriter(clone_from=io.BytesIO(pdf("Restricted but readable")))
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-256")
    locked = io.BytesIO()
    writer.write(locked)
    assert PdfReader(io.BytesIO(locked.getvalue())).is_encrypted
    assert pdf_text(locked.getvalue(), name="restricted.pdf") == "Restricted but readable"


def test_damaged_bytes_are_refused_without_quoting_them() -> None:
    garbage = b"SECRET-PAYLOAD-7f3a " * 20
    with pytest.raises(AttachmentRefused) as caught:
        pdf_text(b"%PDF-1.4\n" + garbage, name="broken.pdf")
    message = str(caught.value)
    assert message.startswith("attachment 'broken.pdf': the PDF could not be read (")
    assert message.endswith("); is it damaged?")
    assert "SECRET" not in message


def test_a_pdf_cut_short_is_refused() -> None:
    data = pdf("Hello there")
    with pytest.raises(AttachmentRefused, match=r"'short\.pdf': the PDF could not be read"):
        pdf_text(data[: len(data) // 2], name="short.pdf")


def test_the_text_is_cached_by_hash_and_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    extract = _pdf_text._extract

    def counting(data: bytes, name: str) -> str:
        reads.append(name)
        return extract(data, name)

    monkeypatch.setattr(_pdf_text, "_extract", counting)
    data = pdf("Cached text")
    key = hashlib.sha256(data).hexdigest()
    first = pdf_text(data, name="a.pdf", key=key)
    again = pdf_text(data, name="a.pdf", key=key)
    assert first == again == "Cached text"
    assert reads == ["a.pdf"]
    # Without a key nothing is cached: every call reads the PDF.
    pdf_text(data, name="b.pdf")
    pdf_text(data, name="b.pdf")
    assert reads == ["a.pdf", "b.pdf", "b.pdf"]


def test_the_cache_keeps_the_last_few_results(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []

    def fake_extract(data: bytes, name: str) -> str:
        reads.append(name)
        return f"text of {name}"

    monkeypatch.setattr(_pdf_text, "_extract", fake_extract)
    names = [f"file{number}.pdf" for number in range(_pdf_text._CACHED + 1)]
    for name in names:
        pdf_text(b"%PDF-", name=name, key=name)
    assert pdf_text(b"%PDF-", name=names[-1], key=names[-1]) == f"text of {names[-1]}"
    assert pdf_text(b"%PDF-", name=names[0], key=names[0]) == f"text of {names[0]}"
    # The newest was still kept; the oldest had been let go, so it was read a second time.
    assert reads == [*names, names[0]]


def test_a_refused_pdf_is_not_cached() -> None:
    data = b"%PDF-1.4\n" + b"garbage " * 10
    for _ in range(2):
        with pytest.raises(AttachmentRefused):
            pdf_text(data, name="broken.pdf", key="k")
    assert "k" not in _pdf_text._cache


def test_without_pypdf_the_error_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)
    monkeypatch.delitem(sys.modules, "pypdf.errors", raising=False)
    with pytest.raises(ModelConfigurationError) as caught:
        pdf_text(pdf("Hello"), name="invoice.pdf")
    assert "pip install 'picoflow-ai[pdf]'" in str(caught.value)
    assert "'invoice.pdf'" in str(caught.value)
    assert caught.value.retryable is False
