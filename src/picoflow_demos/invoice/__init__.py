"""The invoice demo: read an uploaded invoice (PDF or image), check its arithmetic, save it on approval."""

from picoflow_demos.invoice.arithmetic import findings
from picoflow_demos.invoice.corrections import Correction, ReviewAnswer
from picoflow_demos.invoice.database import InvoicesDatabase, SavedInvoice, default_database, list_invoices
from picoflow_demos.invoice.flow import Assist, Desk, Extract, InvoiceFlow, InvoiceGoodbye, Review, Save
from picoflow_demos.invoice.reading import Invoice, InvoiceReading, Line, LineReading

__all__ = [
    "Assist",
    "Correction",
    "Desk",
    "Extract",
    "Invoice",
    "InvoiceFlow",
    "InvoiceGoodbye",
    "InvoiceReading",
    "InvoicesDatabase",
    "Line",
    "LineReading",
    "Review",
    "ReviewAnswer",
    "Save",
    "SavedInvoice",
    "default_database",
    "findings",
    "list_invoices",
]
