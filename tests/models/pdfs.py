"""Small files made for the attachment tests: PDFs drawn with reportlab, a PNG drawn with Pillow."""

from __future__ import annotations

import io

from PIL import Image
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas


def pdf(*pages: list[str] | str, encrypt: str | None = None) -> bytes:
    """A PDF with one page per argument, each a line (or lines) of text; ``encrypt``: a user password."""
    buffer = io.BytesIO()
    document = canvas.Canvas(buffer, encrypt=encrypt)
    for page in pages:
        lines = [page] if isinstance(page, str) else page
        for number, line in enumerate(lines):
            document.drawString(40, 800 - 12 * number, line)
        document.showPage()
    document.save()
    return buffer.getvalue()


def image_only_pdf() -> bytes:
    """A one-page PDF holding a picture and no text: what a scanned document looks like."""
    buffer = io.BytesIO()
    document = canvas.Canvas(buffer)
    document.drawImage(ImageReader(Image.open(io.BytesIO(png()))), 40, 600, width=200, height=100)
    document.showPage()
    document.save()
    return buffer.getvalue()


def png(size: tuple[int, int] = (4, 3)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 60)).save(buffer, format="PNG")
    return buffer.getvalue()
