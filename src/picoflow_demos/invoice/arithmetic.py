"""The checks code runs on every reading and every correction: is the invoice whole, and does it add up?

Each finding is a sentence the user reads under the table, naming the numbers involved, so a
misreading (the model's or the vendor's) can be corrected in one message. An invoice with findings
is not saved: the user corrects it first.
"""

from __future__ import annotations

from decimal import Decimal

from picoflow_demos._common import cents
from picoflow_demos.invoice.reading import Invoice, plain

TOLERANCE = Decimal("0.01")
"""Rounding a line or the tax may leave a cent either way."""

_REQUIRED = {"vendor": "the vendor", "number": "the invoice number", "total": "the total"}


def findings(invoice: Invoice) -> list[str]:
    """What is missing or does not add up, in reading order; empty when the invoice is sound."""
    found = [
        f"I could not read {label}." for name, label in _REQUIRED.items() if getattr(invoice, name) is None
    ]
    if invoice.issue_date is None:
        found.append("I could not read the invoice date.")
    if not invoice.lines:
        found.append("I found no lines on the invoice.")
    for position, line in enumerate(invoice.lines, 1):
        where = f"Line {position} ({line.description or 'no description'})"
        if line.quantity is None or line.unit_price is None or line.amount is None:
            found.append(f"{where}: I could not read its quantity, unit price and amount.")
            continue
        expected = cents(line.quantity * line.unit_price)
        if off(expected, line.amount):
            found.append(
                f"{where}: {plain(line.quantity)} × {money(line.unit_price)} = {money(expected)}, "
                f"not {money(line.amount)}."
            )
    amounts = [line.amount for line in invoice.lines]
    if invoice.subtotal is None:
        found.append("I could not read the subtotal.")
    elif amounts and all(amount is not None for amount in amounts):
        added = sum((amount for amount in amounts if amount is not None), Decimal(0))
        if off(added, invoice.subtotal):
            found.append(
                f"The lines add up to {money(added)}, not to the subtotal {money(invoice.subtotal)}."
            )
    found.extend(_tax_findings(invoice))
    if invoice.total is not None and invoice.subtotal is not None:
        expected = invoice.subtotal + (invoice.tax or 0)
        if off(expected, invoice.total):
            plus = f" + tax {money(invoice.tax)}" if invoice.tax is not None else ""
            found.append(
                f"The subtotal {money(invoice.subtotal)}{plus} = {money(expected)}, "
                f"not the total {money(invoice.total)}."
            )
    return found


def _tax_findings(invoice: Invoice) -> list[str]:
    if invoice.tax_rate is None or invoice.subtotal is None:
        return []
    expected = cents(invoice.subtotal * invoice.tax_rate / 100)
    if invoice.tax is None:
        return [f"A tax rate of {plain(invoice.tax_rate)}% is printed but I could not read the tax amount."]
    if off(expected, invoice.tax):
        return [
            f"The tax at {plain(invoice.tax_rate)}% of {money(invoice.subtotal)} is {money(expected)}, "
            f"not {money(invoice.tax)}."
        ]
    return []


def off(expected: Decimal, printed: Decimal) -> bool:
    return abs(expected - printed) > TOLERANCE


def money(value: Decimal | None) -> str:
    """An amount as the tables show it: thousands separated, two decimals, no currency sign."""
    return "—" if value is None else f"{cents(value):,.2f}"
