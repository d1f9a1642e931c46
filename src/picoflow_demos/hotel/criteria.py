"""What the guest is looking for, as one validated value.

The rules a search must satisfy live here, next to the fields, so a model that proposes a stay
ending before it starts, a budget upside down or an amenity we don't track gets told exactly
which rule it broke and what is allowed, and can fix its call. Nothing is silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, timedelta
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from picoflow_demos._common import today_from
from picoflow_demos.hotel.pricing import (
    AMENITIES,
    ROOM_TYPES,
    Amenity,
    HotelQuote,
    RoomType,
    quote_hotels,
    stay_nights,
)

TODAY_VARIABLE = "HOTEL_FLOW_CURRENT_DATE"
MAX_NIGHTS = 30


def today() -> date:
    """The flow's today: ``HOTEL_FLOW_CURRENT_DATE`` when set, else the real date."""
    return today_from(TODAY_VARIABLE)


def _canonical(values: Any, allowed: tuple[str, ...], what: str) -> Any:
    """Fix the case and spacing of known names; refuse unknown ones, listing every allowed name.

    The refusal is raised here, for the whole list, rather than left to the ``Literal`` check of
    each item: its message then names the position but never the submitted text.
    """
    if not isinstance(values, list):
        return values
    by_key = {name.lower().replace(" ", ""): name for name in allowed}
    fixed: list[Any] = []
    for position, value in enumerate(values, start=1):
        if isinstance(value, str):
            known = by_key.get(value.strip().lower().replace(" ", ""))
            if known is None:
                raise ValueError(
                    f"item {position} is not a known {what}; use only these names: {', '.join(allowed)}"
                )
            value = known
        if value not in fixed:
            fixed.append(value)
    return fixed


class Criteria(BaseModel):
    """The guest's hotel search criteria."""

    model_config = ConfigDict(extra="forbid")

    check_in: date = Field(description="Date of the first night, YYYY-MM-DD. Must be after today.")
    check_out: date = Field(description="Departure date, YYYY-MM-DD. Must be after check_in.")
    min_price: float | None = Field(
        None, ge=0, description="Lowest nightly price in USD, if the guest gave one."
    )
    max_price: float | None = Field(
        None, gt=0, description="Highest nightly price in USD, if the guest gave one."
    )
    room_types: list[RoomType] = Field(
        default_factory=list, description="Wanted room types; empty means any.", max_length=3
    )
    amenities: list[Amenity] = Field(
        default_factory=list, description="Required amenities, names from the list only.", max_length=23
    )
    max_airport_miles: float | None = Field(
        None, gt=0, description="Maximum distance to the airport in miles."
    )
    max_city_center_miles: float | None = Field(
        None, gt=0, description="Maximum distance to the city center in miles."
    )

    @field_validator("room_types", mode="before")
    @classmethod
    def _room_type_names(cls, value: Any) -> Any:
        return _canonical(value, ROOM_TYPES, "room type")

    @field_validator("amenities", mode="before")
    @classmethod
    def _amenity_names(cls, value: Any) -> Any:
        return _canonical(value, AMENITIES, "amenity")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.check_out <= self.check_in:
            raise ValueError("check_out must be after check_in")
        if self.check_out - self.check_in > timedelta(days=MAX_NIGHTS):
            raise ValueError(f"a stay can be at most {MAX_NIGHTS} nights")
        if self.min_price is not None and self.max_price is not None and self.min_price > self.max_price:
            raise ValueError("min_price must not be more than max_price")
        return self

    @property
    def nights(self) -> list[date]:
        return stay_nights(self.check_in, self.check_out)

    def search(self) -> list[HotelQuote]:
        """The priced hotels that match, in catalog order."""
        return quote_hotels(
            self.check_in,
            self.check_out,
            room_types=self.room_types,
            amenities=self.amenities,
            max_airport=self.max_airport_miles,
            max_city_center=self.max_city_center_miles,
            min_price=self.min_price,
            max_price=self.max_price,
        )


def check_in_problem(check_in: date) -> str | None:
    """Why this check-in date cannot be booked today, if it cannot."""
    current = today()
    if check_in <= current:
        return (
            f"check_in must be after today ({current.isoformat()}). Ask the user for a later check-in date; "
            "do not search until they give one."
        )
    return None


_DATE_WORDS = re.compile(
    r"\d{1,4}[/.-]\d{1,2}|\b\d{1,2}(st|nd|rd|th)\b|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\b"
    r"|\b(today|tonight|tomorrow|weekend|week|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.IGNORECASE,
)


def mentions_dates(texts: Iterable[str]) -> bool:
    """Whether any of the guest's messages gives a date, so a search is not run on invented ones."""
    return any(_DATE_WORDS.search(text) for text in texts)


def raw_check_in(args: Any) -> date | None:
    """The check-in date inside a raw ``capture_choices`` argument object, if it is readable."""
    criteria = args.get("criteria") if isinstance(args, dict) else None
    value = criteria.get("check_in") if isinstance(criteria, dict) else None
    if not isinstance(value, str):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


_BUDGET = re.compile(
    r"\b(?:(?P<max>max(?:imum)?|up to|under|below|at most|less than|no more than)"
    r"|(?P<min>min(?:imum)?|at least|over|above|more than))\b\W{0,3}(?P<amount>\d[\d,]*(?:\.\d+)?)",
    re.IGNORECASE,
)


def as_the_guest_said(criteria: Criteria, said: Iterable[str]) -> Criteria:
    """``criteria`` with a budget limit the model swapped put back where the guest's words put it.

    "max 700" sent as ``min_price=700`` is a slip small models make; the guest's words settle it,
    so code fixes it rather than send the model round again.
    """
    limits: dict[str, set[float]] = {"max": set(), "min": set()}
    for text in said:
        for match in _BUDGET.finditer(text):
            limits["max" if match.group("max") else "min"].add(float(match.group("amount").replace(",", "")))
    low, high = criteria.min_price, criteria.max_price
    if low is not None and low in limits["max"] and low not in limits["min"] and high is None:
        return criteria.model_copy(update={"min_price": None, "max_price": low})
    if high is not None and high in limits["min"] and high not in limits["max"] and low is None:
        return criteria.model_copy(update={"min_price": high, "max_price": None})
    return criteria
