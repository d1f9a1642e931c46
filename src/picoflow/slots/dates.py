"""Dates written in digits ("01/10/2026", "15/10", "21.10.2026", "2026-10-21"), each read in the order
the message writes them all: next to "15/10/2026", "01/10" is the first of October.

A value's date parts are found through the fields a slots model marks with ``Said(date=...)``;
here they are given as a mapping from part to field name, so this module needs no slots model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel

from picoflow.slots.words import written_numbers

DatePart = Literal["day", "month", "year"]
"""Which number of a date written in digits a field holds (``Said(date=...)``)."""

DATE_PARTS: tuple[DatePart, ...] = ("day", "month", "year")

# A date written in digits, its numbers joined by one sign: "01/10/2026", "15/10", "21.10.2026",
# "2026-10-21". Only "/" joins two numbers alone ("1.5" is a decimal, "10-15" a span).
_WRITTEN_DATE = re.compile(r"(?<![\w.,/-])(\d{1,4})([/.-])(\d{1,2})(?:\2(\d{2,4}))?(?![\w/-]|[.,]\d)")

Written = Mapping[DatePart, int]


@dataclass(frozen=True, slots=True)
class WrittenDates:
    """The dates a message writes in digits, each read in the order the message writes them all."""

    read: tuple[tuple[Written, ...], ...] = ()
    """For each date, its readings in the message's order (two when every date could be both)."""
    other: tuple[tuple[Written, ...], ...] = ()
    """For each date, its readings in the other order, when that reading is a date."""
    outside: frozenset[float] = frozenset()
    """The numbers the message writes outside such dates."""

    @classmethod
    def of(cls, said: str, order: str | None = None) -> WrittenDates:
        """The dates ``said`` writes; ``order`` ("dmy" or "mdy", a locale's) settles the dates that
        could be read both ways when nothing in the message does ("03/04" is April 3 in "de")."""
        found: list[
            tuple[Written | None, Written | None, Written | None]
        ] = []  # (iso, day first, month first)
        rest = said
        for match in _WRITTEN_DATE.finditer(said):
            first, sign, second, third = match.groups()
            if third is None and sign != "/":
                continue
            if len(first) == 4:
                iso = _date({"year": int(first), "month": int(second), "day": int(third or 0)})
                if iso is not None:
                    found.append((iso, None, None))
                    rest = _blanked(rest, match)
                continue
            year: dict[DatePart, int] = {"year": int(third)} if third else {}
            day_first = _date({"day": int(first), "month": int(second), **year})
            month_first = _date({"month": int(first), "day": int(second), **year})
            if day_first or month_first:
                found.append((None, day_first, month_first))
                rest = _blanked(rest, match)
        if not found:
            return cls(outside=frozenset(written_numbers(said)))
        orders = [
            {index for index, reading in enumerate(date[1:]) if reading} for date in found if not date[0]
        ]
        common = set.intersection(*orders) if orders else set()
        if len(common) == 2 and order in ("dmy", "mdy"):
            common = {0} if order == "dmy" else {1}
        read: list[tuple[Written, ...]] = []
        other: list[tuple[Written, ...]] = []
        for iso, *ways in found:
            if iso is not None:
                read.append((iso,))
                other.append(())
                continue
            chosen = common or {index for index, reading in enumerate(ways) if reading}
            read.append(tuple(reading for index, reading in enumerate(ways) if reading and index in chosen))
            other.append(
                tuple(reading for index, reading in enumerate(ways) if reading and index not in chosen)
            )
        return cls(tuple(read), tuple(other), frozenset(written_numbers(rest)))

    def __bool__(self) -> bool:
        return bool(self.read)

    def bear(self, fields: Mapping[DatePart, str], value: Any) -> bool:
        """Whether ``value`` (a mapping of the fields ``fields`` names) is borne out as a written date: it is
        one, in the message's order, or its day is a number written only inside such dates."""
        day = self._day(fields, value)
        if day is None or not self.read or self._is_read(day):
            return True
        return float(day["day"]) in self.outside

    def reads(self, fields: Mapping[DatePart, str], value: Any) -> bool:
        """Whether ``value`` (a mapping of the fields ``fields`` names) is one of the written dates, in the
        message's order."""
        day = self._day(fields, value)
        return day is not None and self._is_read(day)

    def _is_read(self, day: Mapping[DatePart, int]) -> bool:
        """Whether ``day`` is one of the written dates, in the message's order."""
        return any(_matches(reading, day) for readings in self.read for reading in readings)

    def put_right(self, fields: Mapping[DatePart, str], value: Any) -> Any:
        """``value`` as the one written date it is read the other way round, in the message's
        order; else ``value`` as it is."""
        day = self._day(fields, value)
        if day is None or self._is_read(day):
            return value
        meant = {
            tuple(sorted(reading.items()))
            for readings, others in zip(self.read, self.other, strict=True)
            if any(_matches(reading, day) for reading in others)
            for reading in readings
        }
        if len(meant) != 1:
            return value
        update = {
            fields[part]: number for part, number in next(iter(meant)) if part in fields and part in day
        }
        if isinstance(value, BaseModel):
            return value.model_copy(update=update)
        return {**value, **update}

    @staticmethod
    def _day(fields: Mapping[DatePart, str], value: Any) -> dict[DatePart, int] | None:
        """The date parts of ``value``, or None when it has no whole-number day and month."""
        if not fields:
            return None
        plain = value.model_dump() if isinstance(value, BaseModel) else value
        if not isinstance(plain, Mapping):
            return None
        day: dict[DatePart, int] = {}
        for part, name in fields.items():
            number = plain.get(name)
            if number is None:
                continue
            if not isinstance(number, int) or isinstance(number, bool):
                return None
            day[part] = number
        return day if {"day", "month"} <= day.keys() else None


def _blanked(text: str, match: re.Match[str]) -> str:
    """``text`` with the span of ``match`` blanked out (its length kept)."""
    start, end = match.span()
    return f"{text[:start]}{' ' * (end - start)}{text[end:]}"


def _date(parts: dict[DatePart, int]) -> Written | None:
    """``parts`` when they make a day of a month (a year of two digits stays as written)."""
    if not (1 <= parts["month"] <= 12 and 1 <= parts["day"] <= 31):
        return None
    return MappingProxyType(parts)


def _matches(reading: Written, day: Mapping[DatePart, int]) -> bool:
    """Whether the day ``day`` is the written date ``reading`` (a year written with two digits is
    its last two; a year not written matches any)."""
    for part in ("day", "month"):
        if reading[part] != day[part]:
            return False
    if "year" in reading and "year" in day:
        written = reading["year"]
        return day["year"] == written or (written < 100 and day["year"] % 100 == written)
    return True
