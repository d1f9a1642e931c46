"""Make the invoice demo's ten sample invoices and their expected fields.

    .venv/bin/python scripts/make_invoice_samples.py [FOLDER]

Five PDFs (reportlab, a real text layer) and five PNGs (Pillow), each with another vendor, layout,
currency and number of lines, written to ``src/picoflow_demos/invoice/data/samples`` with
``expected.json``: the fields a correct reading gives, as the flow keeps them (money in cents as
text, dates in ISO form). Every run writes the same bytes: reportlab's ``invariant`` mode fixes the
document's dates and id, and nothing else depends on the clock.

One sample, ``png-04``, is printed with a wrong total on purpose: the demo's arithmetic check must
flag it, and its scenario corrects it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont
from reportlab.lib.pagesizes import A4, LETTER
from reportlab.pdfgen.canvas import Canvas

SAMPLES = Path(__file__).resolve().parents[1] / "src" / "picoflow_demos" / "invoice" / "data" / "samples"
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Line:
    description: str
    quantity: Decimal
    unit_price: Decimal

    @property
    def amount(self) -> Decimal:
        return (self.quantity * self.unit_price).quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Sample:
    name: str
    vendor: str
    vendor_address: str
    customer: str
    number: str
    issue: date
    due: date | None
    currency: str
    symbol: str
    lines: list[Line]
    tax_rate: Decimal | None  # percent
    tax_label: str
    tax_printed: bool = True
    """False: no tax line at all (the vendor charges none)."""
    total_printed: Decimal | None = None
    """A total printed instead of the right one (the vendor's own mistake)."""
    european: bool = False
    """Amounts written 1.234,56 and dates 03.02.2026."""
    date_style: str = "long"
    rows_as_text: bool = False
    """The PDF writes each table row as one line of fixed-width text, as many billing systems do,
    rather than a text object per cell."""
    notes: list[str] = field(default_factory=list)

    @property
    def subtotal(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal("0"))

    @property
    def tax(self) -> Decimal | None:
        if not self.tax_printed:
            return None
        assert self.tax_rate is not None
        return (self.subtotal * self.tax_rate / 100).quantize(CENT, rounding=ROUND_HALF_UP)

    @property
    def total(self) -> Decimal:
        return self.total_printed or self.subtotal + (self.tax or 0)

    def money(self, value: Decimal) -> str:
        text = f"{value:,.2f}"
        if self.european:
            text = text.replace(",", " ").replace(".", ",").replace(" ", ".")
        return text

    def day(self, value: date) -> str:
        if self.european:
            return f"{value:%d.%m.%Y}"
        if self.date_style == "iso":
            return value.isoformat()
        if self.date_style == "short":
            return f"{value.day} {value:%b %Y}"
        return f"{value:%B} {value.day}, {value.year}"

    def quantity(self, value: Decimal) -> str:
        text = f"{value:f}"
        return text.rstrip("0").rstrip(".") if "." in text else text

    def expected(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "number": self.number,
            "issue_date": self.issue.isoformat(),
            "due_date": self.due.isoformat() if self.due else None,
            "currency": self.currency,
            "lines": [
                {
                    "description": line.description,
                    "quantity": self.quantity(line.quantity),
                    "unit_price": f"{line.unit_price:.2f}",
                    "amount": f"{line.amount:.2f}",
                }
                for line in self.lines
            ],
            "subtotal": f"{self.subtotal:.2f}",
            "tax_rate": self.quantity(self.tax_rate)
            if self.tax_rate is not None and "%" in self.tax_label
            else None,
            "tax": f"{self.tax:.2f}" if self.tax is not None else None,
            "total": f"{self.total:.2f}",
            "arithmetic_ok": self.total_printed is None,
        }


def d(text: str) -> Decimal:
    return Decimal(text)


# Positional, one sample to a block: name, vendor, its address, customer, number, issued, due,
# currency, symbol, lines, tax rate, tax label. (The PNG font has no £ sign: those write GBP.)
# fmt: off
PDFS = [
    Sample(
        "pdf-01", "Northwind Office Supplies", "410 Harbor Way, Seattle, WA 98101", "Crestline Dental Group",
        "INV-2026-0042", date(2026, 3, 3), date(2026, 4, 2), "USD", "$",
        [
            Line("Printer paper, A4, 500 sheets", d("10"), d("6.49")),
            Line("Black toner cartridge", d("2"), d("89.00")),
            Line("Desk organiser", d("3"), d("14.75")),
        ],
        d("8"), "Sales tax (8%)",
    ),
    Sample(
        "pdf-02", "Kessler Druck GmbH", "Hafenstrasse 12, 20457 Hamburg", "Atlas Reisen AG",
        "RE-7781", date(2026, 2, 3), date(2026, 3, 5), "EUR", "EUR",
        [
            Line("Brochures, 24 pages, 1000 copies", d("1"), d("1240.00")),
            Line("Design proof", d("2"), d("85.50")),
        ],
        d("19"), "VAT 19%", european=True, rows_as_text=True,
    ),
    Sample(
        "pdf-03", "Blue Harbor Consulting Ltd", "7 Quay Street, Bristol BS1 4DJ", "Fenwick & Daughters",
        "BH-118", date(2026, 1, 12), date(2026, 2, 11), "GBP", "£",
        [Line("Strategy workshop, two days", d("1"), d("2400.00"))],
        None, "", tax_printed=False, date_style="short", rows_as_text=True,
        notes=["No VAT charged: below the registration threshold."],
    ),
    Sample(
        "pdf-04", "Pixel & Pine Studio", "88 Alder Road, Portland, OR 97205", "Rainier Bikes",
        "PPS-2026-17", date(2026, 4, 20), date(2026, 5, 20), "USD", "$",
        [
            Line("Logo design", d("1"), d("650.00")),
            Line("Business card layout", d("1"), d("120.00")),
            Line("Website mockups", d("3"), d("210.00")),
            Line("Photo retouching, per image", d("12"), d("8.50")),
            Line("Project management, hours", d("4.5"), d("60.00")),
        ],
        d("5"), "Tax", date_style="iso",
    ),
    Sample(
        "pdf-05", "Maple Leaf Logistics Inc.", "2200 Dock Road, Halifax NS B3H 1A1", "Northern Lights Crafts",
        "MLL-55012", date(2026, 5, 15), date(2026, 6, 14), "CAD", "CA$",
        [
            Line("Pallet freight Halifax to Toronto", d("2"), d("385.00")),
            Line("Liftgate delivery", d("1"), d("45.00")),
            Line("Fuel surcharge", d("1"), d("62.30")),
            Line("Insurance", d("1"), d("19.90")),
        ],
        d("5"), "GST 5%", rows_as_text=True,
    ),
]

PNGS = [
    Sample(
        "png-01", "Sunrise Bakery", "15 Main Street, Burlington, VT 05401", "Lakeview Cafe",
        "SB-3391", date(2026, 6, 1), date(2026, 6, 15), "USD", "$",
        [Line("Sourdough loaves", d("24"), d("4.25")), Line("Croissants, dozen", d("5"), d("18.00"))],
        d("6"), "Tax 6%",
    ),
    Sample(
        "png-02", "Atelier Lumiere", "9 rue des Arts, 69002 Lyon", "Galerie Moreau",
        "AL-2026-088", date(2026, 2, 17), date(2026, 3, 19), "EUR", "EUR",
        [
            Line("Framing, oak, 50 x 70 cm", d("3"), d("95.00")),
            Line("Museum glass upgrade", d("3"), d("40.00")),
            Line("Delivery", d("1"), d("35.00")),
        ],
        d("20"), "VAT 20%", european=True,
    ),
    Sample(
        "png-03", "Greenfield Garden Center", "3100 Orchard Lane, Sacramento CA 95818", "Hillside Apartments",
        "GGC-10457", date(2026, 4, 8), date(2026, 5, 8), "USD", "$",
        [
            Line("Boxwood shrub, 5 gal", d("8"), d("32.99")),
            Line("Mulch, cubic yard", d("6"), d("38.00")),
            Line("Drip irrigation kit", d("2"), d("74.50")),
            Line("Planting labor, hours", d("5"), d("55.00")),
        ],
        d("7.25"), "Sales tax (7.25%)", date_style="iso",
    ),
    Sample(
        "png-04", "Orbit IT Services", "21 Canal Row, Manchester M1 3HZ", "Pennine Outdoor Ltd",
        "OIT-0931", date(2026, 3, 30), date(2026, 4, 29), "GBP", "GBP",
        [Line("Laptop setup and data transfer", d("6"), d("45.00"))],
        d("20"), "VAT 20%", total_printed=d("342.00"), date_style="short",
    ),
    Sample(
        "png-05", "Kookaburra Cleaning Co", "48 Beach Road, Brisbane QLD 4000", "Riverside Medical Centre",
        "KCC-2207", date(2026, 7, 1), date(2026, 7, 15), "AUD", "A$",
        [
            Line("Office cleaning, weekly", d("4"), d("180.00")),
            Line("Window cleaning", d("1"), d("240.00")),
            Line("Carpet steam clean, rooms", d("6"), d("35.00")),
            Line("Bathroom supplies", d("1"), d("58.40")),
            Line("After-hours surcharge", d("2"), d("25.00")),
        ],
        d("10"), "GST 10%",
    ),
]
# fmt: on


def rows(sample: Sample) -> list[tuple[str, str, str, str]]:
    return [
        (
            line.description,
            sample.quantity(line.quantity),
            sample.money(line.unit_price),
            sample.money(line.amount),
        )
        for line in sample.lines
    ]


def totals(sample: Sample) -> list[tuple[str, str]]:
    found = [("Subtotal", sample.money(sample.subtotal))]
    if sample.tax is not None:
        found.append((sample.tax_label, sample.money(sample.tax)))
    found.append((f"Total ({sample.currency})", f"{sample.symbol} {sample.money(sample.total)}"))
    return found


def write_pdf(sample: Sample, path: Path) -> None:
    size = A4 if sample.currency in ("EUR", "GBP") else LETTER
    width, height = size
    pdf = Canvas(str(path), pagesize=size, invariant=1)
    pdf.setTitle(f"Invoice {sample.number}")
    pdf.setAuthor(sample.vendor)
    top = height - 60
    pdf.setFont("Helvetica-Bold", 18)
    pdf.drawString(50, top, sample.vendor)
    pdf.setFont("Helvetica", 10)
    pdf.drawString(50, top - 16, sample.vendor_address)
    pdf.setFont("Helvetica-Bold", 22)
    pdf.drawRightString(width - 50, top, "INVOICE")
    pdf.setFont("Helvetica", 10)
    facts = [("Invoice number", sample.number), ("Invoice date", sample.day(sample.issue))]
    if sample.due is not None:
        facts.append(("Due date", sample.day(sample.due)))
    for offset, (label, value) in enumerate(facts):
        pdf.drawRightString(width - 50, top - 30 - 14 * offset, f"{label}: {value}")
    pdf.drawString(50, top - 60, f"Bill to: {sample.customer}")
    y = top - 110
    y = text_rows(pdf, sample, y) if sample.rows_as_text else cell_rows(pdf, sample, y, width)
    pdf.setFont("Helvetica", 9)
    for note in [*sample.notes, "Thank you for your business."]:
        y -= 30
        pdf.drawString(50, y, note)
    pdf.showPage()
    pdf.save()


def text_rows(pdf: Canvas, sample: Sample, y: float) -> float:
    """The table as lines of fixed-width text: one text run per row."""
    pdf.setFont("Courier-Bold", 9)
    pdf.drawString(50, y, f"{'Description':<36}{'Qty':>6}{'Unit price':>14}{'Amount':>14}")
    pdf.setFont("Courier", 9)
    for description, quantity, unit, amount in rows(sample):
        y -= 14
        pdf.drawString(50, y, f"{description:<36}{quantity:>6}{unit:>14}{amount:>14}")
    y -= 10
    for label, value in totals(sample):
        y -= 14
        pdf.setFont("Courier-Bold" if label.startswith("Total") else "Courier", 9)
        pdf.drawString(50, y, f"{label + ':':>56}{value:>14}")
    return y


def cell_rows(pdf: Canvas, sample: Sample, y: float, width: float) -> float:
    """The table with a text object per cell, columns aligned by position."""
    columns = (50, width - 250, width - 160, width - 50)
    pdf.setFont("Helvetica-Bold", 10)
    pdf.drawString(columns[0], y, "Description")
    pdf.drawRightString(columns[1], y, "Qty")
    pdf.drawRightString(columns[2], y, "Unit price")
    pdf.drawRightString(columns[3], y, "Amount")
    pdf.line(50, y - 5, width - 50, y - 5)
    pdf.setFont("Helvetica", 10)
    for description, quantity, unit, amount in rows(sample):
        y -= 18
        pdf.drawString(columns[0], y, description)
        pdf.drawRightString(columns[1], y, quantity)
        pdf.drawRightString(columns[2], y, unit)
        pdf.drawRightString(columns[3], y, amount)
    pdf.line(50, y - 8, width - 50, y - 8)
    for label, value in totals(sample):
        y -= 18
        pdf.setFont("Helvetica-Bold" if label.startswith("Total") else "Helvetica", 10)
        pdf.drawRightString(columns[2], y, label)
        pdf.drawRightString(columns[3], y, value)
    return y


def write_png(sample: Sample, path: Path) -> None:
    width, height = 1000, 760 + 34 * len(sample.lines)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    regular, bold, title = (ImageFont.load_default(size=size) for size in (20, 22, 34))
    draw.text((50, 40), sample.vendor, font=title, fill=0)
    draw.text((50, 86), sample.vendor_address, font=regular, fill=60)
    draw.text((width - 50, 40), "INVOICE", font=title, fill=0, anchor="ra")
    facts = [("Invoice number", sample.number), ("Invoice date", sample.day(sample.issue))]
    if sample.due is not None:
        facts.append(("Due date", sample.day(sample.due)))
    for offset, (label, value) in enumerate(facts):
        draw.text((width - 50, 90 + 28 * offset), f"{label}: {value}", font=regular, fill=0, anchor="ra")
    draw.text((50, 200), f"Bill to: {sample.customer}", font=regular, fill=0)
    y = 270
    columns = (50, 600, 780, width - 50)
    draw.text((columns[0], y), "Description", font=bold, fill=0)
    for x, label in zip(columns[1:], ("Qty", "Unit price", "Amount"), strict=True):
        draw.text((x, y), label, font=bold, fill=0, anchor="ra")
    draw.line((50, y + 30, width - 50, y + 30), fill=0, width=2)
    for description, quantity, unit, amount in rows(sample):
        y += 34
        draw.text((columns[0], y + 10), description, font=regular, fill=0)
        for x, value in zip(columns[1:], (quantity, unit, amount), strict=True):
            draw.text((x, y + 10), value, font=regular, fill=0, anchor="ra")
    y += 60
    draw.line((50, y, width - 50, y), fill=0, width=2)
    for label, value in totals(sample):
        y += 36
        font = bold if label.startswith("Total") else regular
        draw.text((columns[2], y), label, font=font, fill=0, anchor="ra")
        draw.text((columns[3], y), value, font=font, fill=0, anchor="ra")
    draw.text((50, height - 60), "Thank you for your business.", font=regular, fill=60)
    # Sixteen greys are plenty for black text on white, and keep each file well under 150 KB.
    image.quantize(16, dither=Image.Dither.NONE).save(path, optimize=True)


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else SAMPLES
    folder.mkdir(parents=True, exist_ok=True)
    expected: dict[str, Any] = {}
    for sample in PDFS:
        write_pdf(sample, folder / f"{sample.name}.pdf")
        expected[f"{sample.name}.pdf"] = sample.expected()
    for sample in PNGS:
        write_png(sample, folder / f"{sample.name}.png")
        expected[f"{sample.name}.png"] = sample.expected()
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {len(expected)} invoices and expected.json to {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
