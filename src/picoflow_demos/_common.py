"""Small helpers the example flows share: a reproducible "today", a day read as its parts, US money."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from picoflow.slots import Said

CENT = Decimal("0.01")

#: Words that end a conversation in every demo (a demo adds its own: "cancel" ends a hotel search
#: but only drops an invoice). Ending cannot be undone, so a goodbye needs one of them: a bare
#: "Thanks!" is none, and neither is "forget it" said about a refund.
FAREWELL_WORDS = ("bye", "goodbye", "good bye", "farewell", "that's all", "that is all", "that will be all",
                  "that's it", "see you", "nothing else", "no more questions", "i'm done", "i am done",
                  "all done", "quit", "exit", "ciao", "tschüss", "auf wiedersehen", "au revoir", "adieu",
                  "adios", "adiós")  # fmt: skip
#: The marker of a "goodbye" option that needs those words (``bears_out`` checks it).
SAYS_GOODBYE = Said(options={"goodbye": FAREWELL_WORDS})


def today_from(variable: str) -> date:
    """Today's date, or the ISO date in environment ``variable`` when set (for reproducible runs)."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return date.today()
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{variable} must be an ISO date such as 2027-07-15") from None


DAY_PARTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "month": {"type": "integer", "minimum": 1, "maximum": 12},
        "day": {"type": "integer", "minimum": 1, "maximum": 31},
        "year": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "null when not said"},
    },
    "required": ["month", "day", "year"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class CalendarDay:
    """A ``date`` the model gives as its parts, for ``Annotated[date, CalendarDay(today)]``.

    Parts are easier for a small model than a format: "8/1/2027" is month 8, day 1, year 2027,
    where asked for ISO it wrote 8012-08-01. A missing year is the next such date from ``today()``
    on (the flow's own today), a rule that lives here, in code, not in a prompt. An ISO date or a
    ``date`` is taken as it is (a stored value read back).
    """

    today: Callable[[], date]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.from_parts, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(DAY_PARTS_SCHEMA)

    def from_parts(self, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        month, day, year = value.get("month"), value.get("day"), value.get("year")
        if not isinstance(month, int) or not isinstance(day, int):
            raise ValueError("give the month and the day as numbers")
        try:
            if isinstance(year, int):
                return date(year, month, day)
            current = self.today()
            guess = date(current.year, month, day)
            return guess if guess >= current else date(current.year + 1, month, day)
        except ValueError:
            raise ValueError("that month has no such day") from None


def cents(value: Decimal) -> Decimal:
    """``value`` rounded to cents, half up (the way a price list is rounded, not banker's rounding)."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def usd(value: Decimal | int | float) -> str:
    """US currency: ``$1,234.56``."""
    amount = cents(Decimal(str(value)))
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.2f}"


def usd_cents(total_cents: int) -> str:
    """US currency from an integer number of cents."""
    return usd(Decimal(total_cents) / 100)
