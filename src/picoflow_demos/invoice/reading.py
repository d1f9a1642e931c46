"""The invoice: what the model copies off the document, and what code makes of it.

A small model copies text well and converts it badly, so ``InvoiceReading`` asks for every value
*as printed* ("1.240,00", "March 3, 2026", "8%", "CA$") and code turns it into an ``Invoice`` of
``Decimal`` money, ISO dates and a currency code. A value code cannot read becomes None, which the
arithmetic check then names, so nothing the model wrote is silently trusted or silently lost.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_serializer

from picoflow_demos._common import cents


def _as_text(value: Any) -> Any:
    # A larger model may write 1240.0 where the schema asks for text: keep it, as text.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


Printed = Annotated[str | None, BeforeValidator(_as_text)]
"""A value as the document prints it; null when it prints none."""


class LineReading(BaseModel):
    """One line of the invoice's table, as printed."""

    model_config = ConfigDict(extra="ignore")

    description: str = Field(description="What was sold, as printed")
    quantity: Printed = Field(description="The quantity, as printed")
    unit_price: Printed = Field(description="The price of one unit, as printed")
    amount: Printed = Field(description="The line's amount, as printed")


class InvoiceReading(BaseModel):
    """The invoice as the model copies it off the document; every value as printed."""

    model_config = ConfigDict(extra="ignore")

    # Every field is required (null when not printed), so the model writes them in document order.
    vendor: str = Field(description="The company that issued the invoice (not the customer it is billed to)")
    number: str = Field(description="The invoice number")
    issue_date: Printed = Field(description="The invoice date, as printed")
    due_date: Printed = Field(description="The due date, as printed; null when none")
    currency: Printed = Field(description="The currency code or sign, e.g. USD, EUR, £")
    lines: list[LineReading] = Field(max_length=30, description="Every line of the table, in order")
    subtotal: Printed = Field(description="The subtotal, as printed")
    tax_rate: Printed = Field(description="The tax rate with its % sign; null when none is printed")
    tax: Printed = Field(description="The tax amount; null when no tax is printed")
    total: Printed = Field(description="The total to pay, as printed")


class Line(BaseModel):
    """A line of the invoice, read: money in ``Decimal``, None where the document could not be read."""

    description: str
    quantity: Decimal | None = None
    unit_price: Decimal | None = None
    amount: Decimal | None = None

    @field_serializer("quantity")
    def _quantity(self, value: Decimal | None) -> str | None:
        return plain(value)

    @field_serializer("unit_price", "amount")
    def _money(self, value: Decimal | None) -> str | None:
        return in_cents(value)


class Invoice(BaseModel):
    """The invoice code keeps, checks, shows and saves (the ``Desk`` step's state ``draft``)."""

    vendor: str | None = None
    number: str | None = None
    issue_date: date | None = None
    due_date: date | None = None
    currency: str | None = None
    """An ISO 4217 code."""
    lines: list[Line] = Field(default_factory=list)
    subtotal: Decimal | None = None
    tax_rate: Decimal | None = None
    """Percent: 8 means 8 %."""
    tax: Decimal | None = None
    total: Decimal | None = None

    @field_serializer("tax_rate")
    def _rate(self, value: Decimal | None) -> str | None:
        return plain(value)

    @field_serializer("subtotal", "tax", "total")
    def _money(self, value: Decimal | None) -> str | None:
        return in_cents(value)

    @classmethod
    def from_reading(cls, reading: InvoiceReading) -> Invoice:
        return cls(
            vendor=text(reading.vendor),
            number=text(reading.number),
            issue_date=day(reading.issue_date),
            due_date=day(reading.due_date),
            currency=currency(reading.currency, reading.total),
            lines=[
                Line(
                    description=text(line.description) or "",
                    quantity=number(line.quantity),
                    unit_price=money(line.unit_price),
                    amount=money(line.amount),
                )
                for line in reading.lines
            ],
            subtotal=money(reading.subtotal),
            tax_rate=rate(reading.tax_rate),
            tax=money(reading.tax),
            total=money(reading.total),
        )


def plain(value: Decimal | None) -> str | None:
    """A decimal as text without an exponent or trailing zeros past the cents ("4.5", "10", "6.49")."""
    if value is None:
        return None
    if value == value.to_integral_value():
        return f"{value.quantize(Decimal(1)):f}"
    return f"{value.normalize():f}"


def in_cents(value: Decimal | None) -> str | None:
    """Money as text with its two decimals ("64.90")."""
    return None if value is None else f"{cents(value):f}"


def text(value: str | None) -> str | None:
    cleaned = " ".join((value or "").split())
    return cleaned or None


def number(value: str | None) -> Decimal | None:
    """A quantity or a rate as printed ("4.5", "8%", "1,5", "12 h"); None when it holds no number."""
    return _decimal(value)


MOST_LIKELY_RATE = Decimal(30)
"""Sales taxes and VAT stay below this; a larger figure printed without a % sign is not a rate."""


def rate(value: str | None) -> Decimal | None:
    """A tax rate in percent ("8%", "7.25 %", "19"). A number above any tax rate without its % sign is
    an amount copied into the wrong field (a small model, given "Tax 88.60" and no rate, wrote 88.6):
    no rate, so the tax is not checked against one that was never printed."""
    found = _decimal(value)
    if found is None or (found > MOST_LIKELY_RATE and "%" not in (value or "")):
        return None
    return found


def money(value: str | None) -> Decimal | None:
    """An amount as printed ("$ 1,860.60", "1.240,00", "EUR 85,50"), to the cent; None when unreadable."""
    found = _decimal(value)
    return cents(found) if found is not None else None


def _decimal(value: str | None) -> Decimal | None:
    if value is None:
        return None
    match = re.search(r"-?\d[\d.,' ]*", value)
    if match is None:
        return None
    digits = match.group(0).strip().replace(" ", "").replace("'", "")
    if "," in digits and "." in digits:  # the later sign separates the decimals
        thousands = "." if digits.rfind(",") > digits.rfind(".") else ","
        digits = digits.replace(thousands, "").replace(",", ".")
    elif "," in digits:  # 85,50 has decimals; 2,400 and 1,240,000 have thousands
        digits = (
            digits.replace(",", ".") if re.fullmatch(r"-?\d+,\d{1,2}", digits) else digits.replace(",", "")
        )
    elif digits.count(".") > 1:  # 1.240.000
        digits = digits.replace(".", "")
    digits = digits.rstrip(".")
    try:
        return Decimal(digits)
    except InvalidOperation:
        return None


_DATE_FORMATS = (
    "%Y-%m-%d",
    "%B %d %Y",
    "%b %d %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%d.%m.%Y",
    "%Y/%m/%d",
    "%m/%d/%Y",
    "%d/%m/%Y",
)


def day(value: str | None) -> date | None:
    """A date as printed ("March 3, 2026", "03.02.2026", "12 Jan 2026", "2026-04-20"); None otherwise.

    Slashes are read month first, as in the US, unless the first number cannot be a month.
    """
    if value is None:
        return None
    cleaned = " ".join(value.replace(",", " ").replace("Sept", "Sep").split())
    cleaned = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", cleaned)
    for layout in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, layout).date()
        except ValueError:
            continue
    return None


_SIGNS = {
    "$": "USD",
    "US$": "USD",
    "€": "EUR",
    "£": "GBP",
    "CA$": "CAD",
    "C$": "CAD",
    "A$": "AUD",
    "¥": "JPY",
}


def currency(value: str | None, total: str | None = None) -> str | None:
    """The ISO code of a printed currency ("EUR", "€", "CA$"); else of the sign before the total."""
    for candidate in (value, total):
        if not candidate:
            continue
        code = re.search(r"\b[A-Z]{3}\b", candidate.upper())
        if code is not None:
            return code.group(0)
        for sign in sorted(_SIGNS, key=len, reverse=True):
            if sign in candidate.upper():
                return _SIGNS[sign]
    return None
