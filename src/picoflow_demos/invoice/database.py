"""The saved invoices: SQLite, every query parameter-bound, every read and write scoped to one principal.

The model never writes SQL and never names whose invoices these are: the flow passes the invoice
code checked together with the principal of the authenticated caller. An invoice is saved once per
principal, vendor and number, so confirming twice (or retrying a turn that failed after the write)
never stores it twice.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Literal

from picoflow_demos._common import today_from
from picoflow_demos.invoice.reading import Invoice

DB_VARIABLE = "PICOFLOW_INVOICE_DB"
TODAY_VARIABLE = "INVOICE_FLOW_CURRENT_DATE"
DEFAULT_FILE = "picoflow-invoices.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS invoices (
    id INTEGER PRIMARY KEY,
    principal TEXT NOT NULL,
    vendor TEXT NOT NULL,
    number TEXT NOT NULL,
    issue_date TEXT,
    currency TEXT,
    total TEXT NOT NULL,
    document TEXT NOT NULL,
    saved_on TEXT NOT NULL,
    reference TEXT,
    UNIQUE (principal, vendor, number)
);
"""

_SELECT = "SELECT id, vendor, number, issue_date, currency, total, document, saved_on FROM invoices "


def today() -> date:
    """The flow's today: ``INVOICE_FLOW_CURRENT_DATE`` when set, else the real date."""
    return today_from(TODAY_VARIABLE)


@dataclass(frozen=True, slots=True)
class SavedInvoice:
    id: int
    vendor: str
    number: str
    issue_date: date | None
    currency: str | None
    total: Decimal
    saved_on: date
    invoice: Invoice


@dataclass(frozen=True, slots=True)
class SaveResult:
    status: Literal["saved", "already_saved"]
    saved: SavedInvoice


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    # Autocommit mode: the one write is a single statement.
    connection = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        connection.executescript(SCHEMA)
        yield connection
    finally:
        connection.close()


def _saved(row: tuple[int, str, str, str | None, str | None, str, str, str]) -> SavedInvoice:
    invoice_id, vendor, number, issued, currency, total, document, saved_on = row
    return SavedInvoice(
        invoice_id,
        vendor,
        number,
        date.fromisoformat(issued) if issued else None,
        currency,
        Decimal(total),
        date.fromisoformat(saved_on),
        Invoice.model_validate_json(document),
    )


class InvoicesDatabase:
    """Saves and lists, always for one principal. Each call opens its own short connection."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def save(self, principal: str, invoice: Invoice, *, reference: str | None = None) -> SaveResult:
        """Save a checked invoice once; the same vendor and number again is ``already_saved``."""
        if invoice.vendor is None or invoice.number is None or invoice.total is None:
            raise ValueError("only an invoice with a vendor, a number and a total is saved")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with connect(self.path) as connection:
            inserted = connection.execute(
                "INSERT OR IGNORE INTO invoices (principal, vendor, number, issue_date, currency, total, "
                "document, saved_on, reference) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    principal,
                    invoice.vendor,
                    invoice.number,
                    invoice.issue_date.isoformat() if invoice.issue_date else None,
                    invoice.currency,
                    str(invoice.total),
                    invoice.model_dump_json(),
                    today().isoformat(),
                    reference,
                ),
            ).rowcount
            row = connection.execute(
                _SELECT + "WHERE principal = ? AND vendor = ? AND number = ?",
                (principal, invoice.vendor, invoice.number),
            ).fetchone()
        return SaveResult("saved" if inserted else "already_saved", _saved(row))

    def list_invoices(self, principal: str) -> list[SavedInvoice]:
        """The principal's saved invoices, in the order they were saved."""
        if not self.path.exists():
            return []
        with connect(self.path) as connection:
            rows = connection.execute(_SELECT + "WHERE principal = ? ORDER BY id", (principal,)).fetchall()
        return [_saved(row) for row in rows]

    def count(self) -> int:
        """Invoices of every principal (for tests and operators)."""
        if not self.path.exists():
            return 0
        with connect(self.path) as connection:
            return int(connection.execute("SELECT COUNT(*) FROM invoices").fetchone()[0])


def default_database() -> InvoicesDatabase:
    """The database at ``$PICOFLOW_INVOICE_DB`` (default ``./picoflow-invoices.sqlite3``), created on
    first save. Nothing is cached, so a changed variable is seen at once."""
    return InvoicesDatabase(Path(os.environ.get(DB_VARIABLE, "").strip() or DEFAULT_FILE).resolve())


def list_invoices(principal: str, database: InvoicesDatabase | None = None) -> list[SavedInvoice]:
    """The principal's saved invoices (in the demo database unless another is given)."""
    return (database or default_database()).list_invoices(principal)
