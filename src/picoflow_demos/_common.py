"""Small helpers the example flows share: a reproducible "today", a day read as its parts, US money."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from types import MappingProxyType
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from picoflow import Locale
from picoflow.slots import Said

CENT = Decimal("0.01")


def as_typed(*phrases: str) -> tuple[str, ...]:
    """Each phrase as written and as people often type it: without its accents ("habitación" as
    "habitacion", "déjeuner" as "dejeuner") and with a German umlaut as its letter and an "e"
    ("frühstück" as "fruehstueck"). Declared words are compared as written where no slip of the
    keys is allowed (telling the language, words that tell a field on their own)."""
    typed: list[str] = []
    for phrase in phrases:
        spelled_out = phrase
        for umlaut, letters in (("ä", "ae"), ("ö", "oe"), ("ü", "ue")):
            spelled_out = spelled_out.replace(umlaut, letters)
        typed.extend((phrase, Locale.fold(phrase), Locale.fold(spelled_out)))
    return tuple(dict.fromkeys(typed))


#: Words that end a conversation in every demo, per language (a demo adds its own: "cancel" ends a
#: hotel search but only drops an invoice). Ending cannot be undone, so a goodbye needs one of
#: them: a bare "Thanks!" is none, and neither is "forget it" said about a refund. "ciao" is said
#: in all four.
FAREWELLS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "en": ("bye", "goodbye", "good bye", "farewell", "that's all", "that is all", "that will be all",
               "that's it", "see you", "nothing else", "no more questions", "i'm done", "i am done",
               "all done", "quit", "exit", "ciao"),
        "es": as_typed("adiós", "hasta luego", "hasta pronto", "nos vemos", "chao", "chau", "ciao",
                       "eso es todo",
                       "nada más", "he terminado", "hemos terminado", "salir"),
        "de": as_typed("tschüss", "tschüs", "tschau", "ciao", "auf wiedersehen", "wiedersehen", "bis bald",
                       "bis dann", "das ist alles", "das war's", "das wars", "das wäre alles",
                       "nichts weiter",
                       "ich bin fertig", "wir sind fertig", "beenden"),
        "fr": as_typed("au revoir", "adieu", "à bientôt", "à plus tard", "bonne journée", "bonne soirée",
                       "ciao",
                       "c'est tout", "ce sera tout", "rien d'autre", "j'ai fini", "nous avons fini",
                       "quitter"),
    }
)  # fmt: skip
#: Every language's words, for the demos that declare no locale (every word then counts).
FAREWELL_WORDS = tuple(dict.fromkeys(word for words in FAREWELLS.values() for word in words))
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
