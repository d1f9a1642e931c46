"""The trip request: the slots the Planner fills, the rules every value keeps, and the complete Trip.

The model reads each message into items of ``TripDetails`` (every field optional); the Planner's
form keeps them. The rules below run on every merge, so a city without listings, a date in the
past, a trip ending before it starts or longer than 14 nights is refused with a reason the
traveller reads, and what was said with it is kept. Beside each field are the words a reading of
it needs: a city's names, an interest's words. A complete request becomes a ``Trip``, the input of
the sub-steps.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, timedelta
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from picoflow import Said
from picoflow_demos._common import FAREWELL_WORDS, CalendarDay, today_from, usd
from picoflow_demos.travel.listings import INTERESTS, Interest, cities, find_city, trip_days

TODAY_VARIABLE = "TRAVEL_FLOW_CURRENT_DATE"
MAX_NIGHTS = 14


def today() -> date:
    """The flow's today: ``TRAVEL_FLOW_CURRENT_DATE`` when set, else the real date."""
    return today_from(TODAY_VARIABLE)


def long_date(day: date) -> str:
    return f"{day:%a} {day:%b} {day.day}, {day.year}"


def short_date(day: date) -> str:
    return f"{day:%a} {day:%b} {day.day}"


Day = Annotated[date, CalendarDay(today)]

# A city is borne out by its name or a nickname of the data ("NOLA"); one the data does not hold
# must be written as the model gives it, and is then refused with a reason.
CITY_WORDS = Said(options={city.name: city.aliases for city in cities()})
# The words of the planner's prompt for each interest, and their plain forms: what the model was
# told maps to it. An interest read from none of them is the model's wish, not the traveller's.
INTEREST_WORDS = Said(
    options={
        "music": ("jazz", "concert", "concerts", "blues", "band", "bands", "gig", "gigs"),
        "food": ("eat", "eating", "restaurant", "restaurants", "dining", "cuisine", "foodie"),
        "art": ("arts", "museum", "museums", "gallery", "galleries"),
        "sport": ("sports", "game", "games", "match", "baseball", "football", "basketball"),
        "outdoors": ("outdoor", "outside", "hiking", "hike", "hikes", "nature", "park", "parks"),
        "history": ("historic", "historical", "heritage"),
    }
)


# A goodbye ends the conversation for good, so it is an option that needs its words: a model that
# reads "hello" as a goodbye (the embedded one did) quotes none of them.
Goodbye = Annotated[
    Literal["goodbye"],
    Said(options={"goodbye": (*FAREWELL_WORDS, "stop", "finished")}),
]
# What the traveller asks of the conversation itself (picoflow.repairs): to drop the plan and start
# over, to hear the last message again, to leave a question unanswered, or something this planner
# does not do (no words can list those: the reading alone says it, and only of a message that gives
# nothing else).
Repair = Annotated[
    Literal["cancel", "repeat", "skip", "out_of_scope"],
    Said(
        options={
            "cancel": ("cancel", "start over", "start again", "forget it", "never mind", "scrap that"),
            "repeat": ("say that again", "repeat that", "come again", "sorry what"),
            "skip": ("rather not say", "prefer not to say", "skip"),
        }
    ),
]
#: A yes or a no to what the planner asked (a cancel to confirm).
CONFIRM = Said(yes=("yes", "yeah", "sure", "ok", "okay", "please do"), no=("no", "nope", "keep"))


class TripDetails(BaseModel):
    """What the traveller said about their trip."""

    model_config = ConfigDict(extra="ignore")

    city: Annotated[str, CITY_WORDS] | None = Field(
        None, description="The city they want to visit, as they wrote it"
    )
    check_in: Day | None = Field(None, description="Day of arrival")
    check_out: Day | None = Field(None, description="Day of departure")
    max_price: float | None = Field(None, gt=0, description="Highest hotel price per night in USD")
    interests: list[Annotated[Interest, INTEREST_WORDS]] | None = Field(
        None, max_length=len(INTERESTS), description="What they enjoy (jazz is music, hiking is outdoors)"
    )
    goodbye: Goodbye | None = Field(None, description="goodbye when they say goodbye or want to stop")
    repair: Repair | None = Field(
        None,
        description="cancel to drop the plan and start over, repeat to hear the last message again, "
        "skip to leave the question unanswered, out_of_scope for a request other than a trip plan",
    )

    @field_validator("city")
    @classmethod
    def _listed(cls, name: str | None) -> str | None:
        if name is None:
            return None
        city = find_city(name)
        if city is None:  # the traveller's own words are not repeated back
            raise ValueError("I have no listings for that city")
        return city.name

    @field_validator("check_in", "check_out", mode="before")
    @classmethod
    def _day_first(cls, value: object) -> object:
        # "20/10/2027" read in the order written gives month 20: no month has that number, so the
        # first number is the day (a date written day first, as most of the world writes it).
        if isinstance(value, dict):
            month, day = value.get("month"), value.get("day")
            if isinstance(month, int) and isinstance(day, int) and month > 12 >= day:
                return {**value, "month": day, "day": month}
        return value

    @field_validator("check_in", "check_out")
    @classmethod
    def _not_past(cls, day: date | None) -> date | None:
        if day is not None and day < today():
            raise ValueError(f"{long_date(day)} is in the past: today is {long_date(today())}")
        return day

    @field_validator("interests")
    @classmethod
    def _once_each(cls, interests: list[Interest] | None) -> list[Interest] | None:
        return list(dict.fromkeys(interests)) if interests is not None else None

    @model_validator(mode="after")
    def _plannable(self) -> Self:
        start, end = self.check_in, self.check_out
        if start is None or end is None:
            return self
        if end == start:
            raise ValueError(f"a trip needs at least one night, and both dates are {long_date(start)}")
        if end < start:
            raise ValueError(
                f"the trip would end on {long_date(end)}, before it starts on {long_date(start)}: the "
                "check-out date must come after the check-in date"
            )
        if end - start > timedelta(days=MAX_NIGHTS):
            raise ValueError(
                f"I can plan trips of up to {MAX_NIGHTS} nights, and {short_date(start)} to "
                f"{long_date(end)} is {(end - start).days} nights"
            )
        return self

    def noted(self, only: Collection[str] | None = None, *, lead: str = "Noted") -> str:
        """What code understood so far (or of the fields ``only``), said back so the traveller can
        correct a misreading at once."""

        def said(*names: str) -> bool:
            return only is None or any(name in only for name in names)

        parts = [self.city] if self.city and said("city") else []
        if self.check_in and self.check_out and said("check_in", "check_out"):
            # a single date is said back by the question
            nights = (self.check_out - self.check_in).days
            parts.append(
                f"{short_date(self.check_in)} to {long_date(self.check_out)} "
                f"({nights} night{'s' if nights != 1 else ''})"
            )
        if self.max_price is not None and said("max_price"):
            parts.append(f"hotels up to {usd(self.max_price)} a night")
        if self.interests and said("interests"):
            parts.append(", ".join(self.interests))
        return f"{lead}: {'; '.join(parts)}." if parts else ""


class Trip(BaseModel):
    """A complete trip request: what the sub-steps are given (as JSON, their user message)."""

    model_config = ConfigDict(frozen=True)

    city: str
    check_in: date
    check_out: date
    max_price: float | None = None
    interests: list[Interest] = Field(default_factory=list)

    @classmethod
    def of(cls, details: TripDetails) -> Trip:
        """The trip the details ask for; they hold a city and both dates (the Planner asks until then)."""
        assert details.city and details.check_in and details.check_out, "the Planner asks for them first"
        return cls(
            city=details.city,
            check_in=details.check_in,
            check_out=details.check_out,
            max_price=details.max_price,
            interests=details.interests or [],
        )

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
