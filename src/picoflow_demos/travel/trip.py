"""The trip request: what the model reads off each message, what code keeps, and the rules it keeps.

The model only fills a ``TripDetails`` from the traveller's latest words (every field optional).
Code merges it into the ``TripDraft`` kept in the session, refuses a city the data does not hold
and dates that cannot be planned (in the past, ending before they start, longer than 14 nights),
and asks for what is still missing. A complete draft becomes a ``Trip``, the input of the sub-steps.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from picoflow_demos._common import today_from, usd
from picoflow_demos.travel.listings import INTERESTS, Interest, city_names, find_city, trip_days

TODAY_VARIABLE = "TRAVEL_FLOW_CURRENT_DATE"
MAX_NIGHTS = 14


def today() -> date:
    """The flow's today: ``TRAVEL_FLOW_CURRENT_DATE`` when set, else the real date."""
    return today_from(TODAY_VARIABLE)


def long_date(day: date) -> str:
    return f"{day:%a} {day:%b} {day.day}, {day.year}"


def short_date(day: date) -> str:
    return f"{day:%a} {day:%b} {day.day}"


def _calendar_day(value: Any) -> Any:
    """A date from its parts; a missing year is the next such date (a small model writes parts more
    reliably than a format, and the year rule belongs to code)."""
    if not isinstance(value, dict):
        return value
    month, day, year = value.get("month"), value.get("day"), value.get("year")
    if not isinstance(month, int) or not isinstance(day, int):
        raise ValueError("give the month and the day as numbers")
    try:
        if isinstance(year, int):
            return date(year, month, day)
        current = today()
        guess = date(current.year, month, day)
        return guess if guess >= current else date(current.year + 1, month, day)
    except ValueError:
        raise ValueError("that month has no such day") from None


_DAY_SCHEMA = {
    "type": "object",
    "properties": {
        "month": {"type": "integer", "minimum": 1, "maximum": 12},
        "day": {"type": "integer", "minimum": 1, "maximum": 31},
        "year": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "null when not said"},
    },
    "required": ["month", "day", "year"],
    "additionalProperties": False,
}
TripDay = Annotated[date, BeforeValidator(_calendar_day), WithJsonSchema(_DAY_SCHEMA)]


class TripDetails(BaseModel):
    """What the traveller said in their latest message; every field is left out when not said."""

    model_config = ConfigDict(extra="ignore")

    city: str | None = Field(None, description="The city they want to visit, as they wrote it")
    check_in: TripDay | None = Field(None, description="Day of arrival")
    check_out: TripDay | None = Field(None, description="Day of departure")
    max_price: float | None = Field(None, gt=0, description="Highest hotel price per night in USD")
    interests: list[Interest] | None = Field(
        None, max_length=len(INTERESTS), description="What they enjoy (jazz is music, hiking is outdoors)"
    )
    goodbye: bool | None = Field(None, description="true when they say goodbye or want to stop")

    def is_empty(self) -> bool:
        return not self.model_dump(exclude_none=True)


class Trip(BaseModel):
    """A complete trip request: what the sub-steps are given (as JSON, their user message)."""

    model_config = ConfigDict(frozen=True)

    city: str
    check_in: date
    check_out: date
    max_price: float | None = None
    interests: list[Interest] = Field(default_factory=list)

    @property
    def days(self) -> list[date]:
        return trip_days(self.check_in, self.check_out)

    @property
    def nights(self) -> int:
        return (self.check_out - self.check_in).days

    def heading(self) -> str:
        nights = f"{self.nights} night{'s' if self.nights != 1 else ''}"
        return f"{self.city}, {short_date(self.check_in)} to {long_date(self.check_out)} ({nights})"

    def wishes(self) -> str:
        """Budget and interests in a line ("" when neither was given)."""
        parts = []
        if self.max_price is not None:
            parts.append(f"hotels up to {usd(self.max_price)} a night")
        if self.interests:
            parts.append(f"interests: {', '.join(self.interests)}")
        return "; ".join(parts)


class TripDraft(BaseModel):
    """What code keeps of the request between turns (the Planner's state ``trip``)."""

    city: str | None = None
    check_in: date | None = None
    check_out: date | None = None
    max_price: float | None = None
    interests: list[Interest] | None = None
    asked_wishes: bool = False
    """The optional budget and interests were asked for once; they are not asked again."""
    planned: bool = False
    """The plan of this request was shown; new details make a new plan."""

    def complete(self) -> Trip | None:
        if self.city is None or self.check_in is None or self.check_out is None:
            return None
        return Trip(
            city=self.city,
            check_in=self.check_in,
            check_out=self.check_out,
            max_price=self.max_price,
            interests=self.interests or [],
        )


#: The words of the planner's prompt for each interest: what the model was told maps to it.
INTEREST_WORDS: dict[str, tuple[str, ...]] = {
    "music": ("music", "jazz", "concert", "blues", "band"),
    "food": ("food", "eat", "restaurant", "dining", "cuisine"),
    "art": ("art", "museum", "gallery"),
    "sport": ("sport", "game", "match", "baseball", "football", "basketball"),
    "outdoors": ("outdoor", "hiking", "hike", "nature", "park"),
    "history": ("history", "historic", "heritage"),
}


def grounded(details: TripDetails, message: str) -> TripDetails:
    """``details`` without what the traveller's words do not bear out: a city not named, a budget or
    a date whose numbers are not in the message, an interest none of whose words it uses (a small
    model may fill in an example it was shown, or a trip it would like)."""
    words = " ".join(re.findall(r"[a-z0-9-]+", message.casefold()))
    numbers = set(re.findall(r"\d+", message))
    dropped: dict[str, Any] = {}
    for field in ("check_in", "check_out"):
        day = getattr(details, field)
        if day is not None and str(day.day) not in numbers:
            dropped[field] = None
    if details.interests:
        kept = [i for i in details.interests if any(w in words for w in INTEREST_WORDS.get(i, (i,)))]
        if kept != details.interests:
            dropped["interests"] = kept or None
    if details.city is not None:
        city = find_city(details.city)
        names = [details.city.casefold(), *((city.name.casefold(), *city.aliases) if city else ())]
        if not any(re.search(rf"\b{re.escape(name)}\b", words) for name in names):
            dropped["city"] = None
    if details.max_price is not None:
        digits = re.sub(r"[,\s]", "", message)
        if f"{details.max_price:g}" not in digits:
            dropped["max_price"] = None
    return details.model_copy(update=dropped) if dropped else details


def update(draft: TripDraft, said: TripDetails, on: date) -> tuple[TripDraft, str | None]:
    """The draft with what was said merged in, and why a part was refused (None when nothing was).

    A refused city or refused dates are taken out of the draft, so the next question asks for them
    again; everything else said in the same message is kept. A refused city is not repeated (it is
    the traveller's own text); refused dates are said back as code read them.
    """
    changes = said.model_dump(exclude_none=True)
    refusals = []
    if said.city is not None:
        city = find_city(said.city)
        if city is None:  # the traveller wants another city than any kept one: ask which of ours
            changes["city"] = None
            refusals.append("I have no listings for that city.")
        else:
            changes["city"] = city.name
    if changes:
        changes["planned"] = False
    merged = draft.model_copy(update=changes)
    problem = dates_problem(merged.check_in, merged.check_out, on)
    if problem is not None:
        merged = merged.model_copy(update={"check_in": None, "check_out": None})
        refusals.append(problem)
    return merged, " ".join(refusals) or None


def dates_problem(check_in: date | None, check_out: date | None, on: date) -> str | None:
    """Why these dates cannot be planned on day ``on``, or None."""
    for day in (check_in, check_out):
        if day is not None and day < on:
            return f"{long_date(day)} is in the past: today is {long_date(on)}."
    if check_in is None or check_out is None:
        return None
    if check_out == check_in:
        return f"A trip needs at least one night, and both dates are {long_date(check_in)}."
    if check_out < check_in:
        return (
            f"The trip would end on {long_date(check_out)}, before it starts on {long_date(check_in)}: "
            "the check-out date must come after the check-in date."
        )
    nights = (check_out - check_in).days
    if nights > MAX_NIGHTS:
        return (
            f"I can plan trips of up to {MAX_NIGHTS} nights, and {short_date(check_in)} to "
            f"{long_date(check_out)} is {nights} nights."
        )
    return None


WISHES_QUESTION = (
    "Do you have a nightly hotel budget, or interests such as music, food, art, sport, outdoors or "
    "history? Or shall I plan it as it is?"
)


def next_question(draft: TripDraft) -> str | None:
    """What to ask next, in a fixed order; None when the trip can be planned."""
    if draft.city is None:
        return f"Which city would you like to visit? I can plan trips to {city_names()}."
    if draft.check_in is None and draft.check_out is None:
        return f"When would you like to be in {draft.city}? Give your check-in and check-out dates."
    if draft.check_out is None:
        assert draft.check_in is not None
        return f"Check-in {long_date(draft.check_in)}. What is your check-out date?"
    if draft.check_in is None:
        return f"Check-out {long_date(draft.check_out)}. What is your check-in date?"
    if not draft.asked_wishes and draft.max_price is None and not draft.interests:
        return WISHES_QUESTION
    return None
