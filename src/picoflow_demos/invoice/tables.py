"""The replies code writes: the invoice as Markdown tables (GFM, which the web page renders), the
findings under it, and the list of saved invoices."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from picoflow_demos.invoice.arithmetic import money
from picoflow_demos.invoice.database import SavedInvoice
from picoflow_demos.invoice.reading import Invoice, plain

CONFIRM_OR_CORRECT = (
    'Reply **confirm** to save it, or tell me what to correct (for example "the total is 118.80" or '
    '"the vendor is ACME Ltd").'
)
CORRECT_FIRST = "Please correct what does not add up before I save it, or say **cancel** to drop it."


def cell(value: object) -> str:
    """A table cell: a missing value shows as a dash; a pipe or a line break cannot break the row."""
    if value is None or value == "":
        return "—"
    return " ".join(str(value).split()).replace("|", "\\|")


def _day(value: date | None) -> str:
    return value.isoformat() if value else "—"


def invoice_tables(invoice: Invoice) -> str:
    """The header, the lines and the totals, each a GFM table."""
    header = [
        "| Vendor | Invoice | Issued | Due | Currency |",
        "|---|---|---|---|---|",
        f"| {cell(invoice.vendor)} | {cell(invoice.number)} | {_day(invoice.issue_date)} | "
        f"{_day(invoice.due_date)} | {cell(invoice.currency)} |",
    ]
    lines = ["| # | Description | Qty | Unit price | Amount |", "|---:|---|---:|---:|---:|"]
    lines += [
        f"| {position} | {cell(line.description)} | {cell(plain(line.quantity))} | "
        f"{money(line.unit_price)} | {money(line.amount)} |"
        for position, line in enumerate(invoice.lines, 1)
    ]
    rate = f" ({plain(invoice.tax_rate)}%)" if invoice.tax_rate is not None else ""
    totals = [
        f"| | {cell(invoice.currency)} |",
        "|---|---:|",
        f"| Subtotal | {money(invoice.subtotal)} |",
        f"| Tax{rate} | {money(invoice.tax) if invoice.tax is not None else 'none'} |",
        f"| **Total** | **{money(invoice.total)}** |",
    ]
    return "\n\n".join("\n".join(table) for table in (header, lines, totals))


def review_reply(invoice: Invoice, problems: Sequence[str], opening: str) -> str:
    """The invoice, what code found, and what the user can do next."""
    if problems:
        verdict = "**Please check:**\n" + "\n".join(f"- {problem}" for problem in problems)
        ask = CORRECT_FIRST
    else:
        verdict = (
            "The arithmetic checks out: every line is its quantity times its unit price, the lines add up "
            "to the subtotal"
            + (", the tax matches its rate" if invoice.tax_rate is not None else "")
            + " and "
            "the total is the subtotal plus tax."
        )
        ask = CONFIRM_OR_CORRECT
    return f"{opening}\n\n{invoice_tables(invoice)}\n\n{verdict}\n\n{ask}"


def saved_list(saved: Sequence[SavedInvoice]) -> str:
    """The caller's saved invoices as one table, oldest first."""
    if not saved:
        return "You have no saved invoices yet. Upload an invoice (a PDF or an image) to add one."
    rows = [
        "| # | Vendor | Invoice | Issued | Total | Saved |",
        "|---:|---|---|---|---:|---|",
        *(
            f"| {item.id} | {cell(item.vendor)} | {cell(item.number)} | {_day(item.issue_date)} | "
            f"{cell(item.currency)} {money(item.total)} | {item.saved_on.isoformat()} |"
            for item in saved
        ),
    ]
    count = f"{len(saved)} saved invoice{'s' if len(saved) != 1 else ''}"
    return f"Your {count}:\n\n" + "\n".join(rows)
