"""The user's answer to a shown invoice: confirm it, correct fields of it, drop it, or leave.

The model reads the answer into a ``ReviewAnswer``: the action and, for a correction, a small patch
of ``field, line, value`` items with each value as the user wrote it. Code keeps only the items
whose value the user's words bear out, parses each like a value read off the document, and applies
them to a copy of the invoice, which is then checked again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from picoflow_demos._common import SAYS_GOODBYE
from picoflow_demos.invoice.reading import Invoice, currency, day, money, number, text

HeaderField = Literal[
    "vendor", "number", "issue_date", "due_date", "currency", "subtotal", "tax_rate", "tax", "total"
]
LineField = Literal["description", "quantity", "unit_price", "amount"]
LINE_FIELDS: tuple[str, ...] = get_args(LineField)


class Correction(BaseModel):
    """One field the user corrects."""

    model_config = ConfigDict(extra="ignore")

    field: HeaderField | LineField
    line: int | None = Field(
        description="The line number for description, quantity, unit_price or amount; else null"
    )
    value: str = Field(description="The new value, as the user wrote it")


class ReviewAnswer(BaseModel):
    """The user's answer to the invoice shown to them."""

    model_config = ConfigDict(extra="ignore")

    # The corrections come first, so a model writes what the message says before what it means.
    corrections: list[Correction] = Field(max_length=8, description="Fields the user corrects; [] when none")
    answer: Annotated[Literal["confirm", "correct", "cancel", "goodbye", "other"], SAYS_GOODBYE] = Field(
        description="confirm: save the invoice as shown; correct: the user changes fields; cancel: drop this "
        "invoice; goodbye: the user ends the conversation; other: anything else"
    )


_PARSERS: dict[str, Any] = {
    "vendor": text,
    "number": text,
    "description": text,
    "issue_date": day,
    "due_date": day,
    "currency": currency,
    "quantity": number,
    "tax_rate": number,
    "unit_price": money,
    "subtotal": money,
    "tax": money,
    "amount": money,
    "total": money,
}


def said(value: str, message: str) -> bool:
    """Whether the user wrote ``value`` (spaces and case aside): a value they did not write is the
    model's invention, e.g. one of its prompt's examples."""

    def squeeze(words: str) -> str:
        return "".join(words.split()).casefold().strip(".\"'")

    return bool(squeeze(value)) and squeeze(value) in "".join(message.split()).casefold()


def apply(invoice: Invoice, corrections: Sequence[Correction], message: str) -> tuple[Invoice, list[str]]:
    """``invoice`` with the corrections the message bears out applied, and why others were not."""
    changed = invoice.model_copy(deep=True)
    problems: list[str] = []
    for correction in corrections:
        if not said(correction.value, message):
            continue
        parsed = _PARSERS[correction.field](correction.value)
        label = correction.field.replace("_", " ")
        if parsed is None:
            problems.append(f'I could not read "{correction.value}" as the {label}.')
        elif correction.field in LINE_FIELDS:
            count = len(changed.lines)
            if correction.line is None or not 1 <= correction.line <= count:
                problems.append(
                    f"The invoice has {count} line{'s' if count != 1 else ''}: which line's {label}?"
                )
                continue
            setattr(changed.lines[correction.line - 1], correction.field, parsed)
        else:
            setattr(changed, correction.field, parsed)
    return changed, problems
