"""What the guest is looking for: the slots the Explore step fills, with the rules every value must keep.

The model reads each message into a partial ``Criteria``; the rules below run on every merge, so
a stay ending before it starts, a check-in in the past or a budget upside down is refused with a
reason (given to the model once, then to the guest) and the answers already given are kept.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, timedelta
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from picoflow import Said
from picoflow_demos._common import FAREWELL_WORDS, CalendarDay, today_from
from picoflow_demos.hotel.pricing import (
    AMENITY_LABELS,
    Amenity,
    HotelQuote,
    RoomType,
    quote_hotels,
    stay_nights,
)

TODAY_VARIABLE = "HOTEL_FLOW_CURRENT_DATE"
MAX_NIGHTS = 30
BOOKING_HORIZON = 500


def today() -> date:
    """The flow's today: ``HOTEL_FLOW_CURRENT_DATE`` when set, else the real date."""
    return today_from(TODAY_VARIABLE)


def long_date(day: date) -> str:
    return f"{day:%A} {day:%B} {day.day}, {day.year}"


Day = Annotated[date, CalendarDay(today)]

# The words that say each room type and amenity, beside the options: a reading of "Hi" as a suite,
# or of "free wifi" as a pool too, is dropped because none of their words was written.
ROOM_WORDS = Said(
    options={
        "one bed": ("1 bed", "single", "king", "queen", "one queen", "one king"),
        "two beds": ("two bed", "2 beds", "2 bed", "double", "doubles", "twin", "twins", "two queens"),
        "suite": ("suites",),
    }
)
AMENITY_WORDS = Said(
    options={
        "freeWiFi": ("wifi", "wi fi", "internet"),
        "freeParking": ("parking", "park"),
        "freeBreakfast": ("breakfast",),
        "indoorPool": ("pool", "pools", "swimming", "swim"),
        "outdoorPool": ("pool", "pools", "swimming", "swim"),
        "fitnessCenter": ("gym", "fitness", "workout", "exercise"),
        "petFriendly": ("pet", "pets", "dog", "dogs", "cat", "cats"),
        "nonSmoking": ("non smoking", "no smoking", "nonsmoking", "smoke free", "smoking"),
        "digitalKey": ("digital key", "keyless", "key"),
        "evCharging": ("ev", "charging", "charger", "electric"),
        "airportShuttle": ("shuttle",),
        "onSiteRestaurant": ("restaurant", "dining", "dinner"),
        "roomService": ("room service",),
        "businessCenter": ("business", "printer", "printing"),
        "meetingRoom": ("meeting", "meetings", "conference"),
        "connectingRooms": ("connecting", "adjoining"),
        "streaming": ("streaming", "netflix", "tv"),
        "kitchen": ("kitchenette", "cook", "cooking"),
        "concierge": (),
        "boutique": (),
        "eveningReception": ("reception",),
        "tennis": (),
        "newHotel": ("new",),
    }
)


# A bound's direction is in its words: "under $400" is a maximum even when read as a minimum. Only
# words that say one direction whatever surrounds them: "more than" and "over" are the guest's
# minimum in "more than $100" and their maximum in "we don't want to spend more than $350".
HIGHEST = Said(
    words=("under", "max", "maximum", "up to", "at most", "below", "less than", "no more than", "or less",
           "tops", "cheaper than", "budget")
)  # fmt: skip
LOWEST = Said(words=("from", "min", "minimum", "at least", "above", "or more", "starting"))
AIRPORT = Said(words=("airport", "airfield", "pdx", "flight", "flights"))
CENTER = Said(words=("center", "centre", "downtown", "city"))
# "yes" answers the question "Is your stay in the Portland area?", and so does naming the city.
PORTLAND = Said(
    yes=("yes", "yeah", "yep", "yup", "sure", "correct", "right", "indeed", "of course", "ok", "okay"),
    no=("no", "not", "nope", "elsewhere", "outside"),
    named=("portland", "pdx", "oregon"),
)  # fmt: skip
# Asking to see the hotels now, whatever question is pending ("hotels" alone names them, asks nothing).
SEARCH = Said(
    options={"search": ("show", "list", "results", "go ahead", "options", "see", "book", "cheapest")}
)

# Ending the conversation cannot be undone: a goodbye needs the words that say it.
GOODBYE_WORDS = (*FAREWELL_WORDS, "stop", "never mind", "forget it", "cancel")
GOODBYE = Said(options={"goodbye": GOODBYE_WORDS})


class Criteria(BaseModel):
    """What the guest said about their stay."""

    model_config = ConfigDict(extra="ignore")

    in_portland: Annotated[bool | None, PORTLAND] = Field(
        None, description="true when the guest says the stay is in Portland (a yes), false if not"
    )
    check_in: Day | None = Field(None, description="Day of arrival (the first night)")
    check_out: Day | None = Field(None, description="Day of departure")
    max_price: Annotated[float | None, HIGHEST] = Field(
        None, gt=0, description="Highest price per night in USD (the guest says max, up to, under, at most)"
    )
    min_price: Annotated[float | None, LOWEST] = Field(
        None, ge=0, description="Lowest price per night in USD (the guest says min, at least, from, over)"
    )
    room_types: list[Annotated[RoomType, ROOM_WORDS]] | None = Field(
        None, max_length=3, description="Room types the guest wants"
    )
    amenities: list[Annotated[Amenity, AMENITY_WORDS]] | None = Field(
        None,
        max_length=23,
        description="Amenities the guest needs (wifi is freeWiFi, parking is freeParking)",
    )
    max_airport_miles: Annotated[float | None, AIRPORT] = Field(
        None, gt=0, description="Most miles from the airport"
    )
    max_city_center_miles: Annotated[float | None, CENTER] = Field(
        None, gt=0, description="Most miles from the city center"
    )
    request: Annotated[Literal["search"] | None, SEARCH] = Field(
        None, description="search when the guest asks to search or to see the hotels now"
    )
    goodbye: Annotated[Literal["goodbye"] | None, GOODBYE] = Field(
        None, description="goodbye when the guest says goodbye or wants to stop"
    )

    @field_validator("in_portland")
    @classmethod
    def _portland_only(cls, value: bool | None) -> bool | None:
        if value is False:
            raise ValueError("we only have hotels in the Portland, Oregon area")
        return value

    @field_validator("check_in")
    @classmethod
    def _after_today(cls, value: date | None) -> date | None:
        if value is not None and value <= today():
            raise ValueError(f"the check-in date must be after today, {long_date(today())}")
        if value is not None and value > today() + timedelta(days=BOOKING_HORIZON):
            raise ValueError(f"bookings open at most {BOOKING_HORIZON} days ahead")
        return value

    @field_validator("room_types", "amenities")
    @classmethod
    def _once_each(cls, values: list[str] | None) -> list[str] | None:
        return list(dict.fromkeys(values)) if values is not None else None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.check_in and self.check_out:
            if self.check_out <= self.check_in:
                raise ValueError("the check-out date must be after the check-in date")
            if self.check_out - self.check_in > timedelta(days=MAX_NIGHTS):
                raise ValueError(f"a stay can be at most {MAX_NIGHTS} nights")
        if self.min_price is not None and self.max_price is not None and self.min_price > self.max_price:
            raise ValueError("the lowest nightly price must not be more than the highest")
        return self

    @property
    def nights(self) -> list[date]:
        assert self.check_in and self.check_out, "a search needs both dates"
        return stay_nights(self.check_in, self.check_out)

    def search(self) -> list[HotelQuote]:
        """The priced hotels that match, in catalog order."""
        assert self.check_in and self.check_out, "a search needs both dates"
        return quote_hotels(
            self.check_in,
            self.check_out,
            room_types=self.room_types or [],
            amenities=self.amenities or [],
            max_airport=self.max_airport_miles,
            max_city_center=self.max_city_center_miles,
            min_price=self.min_price,
            max_price=self.max_price,
        )

    def phrases(self, fields: Collection[str]) -> list[str]:
        """The known criteria among ``fields`` (not the dates), as the guest reads them, in a fixed order.

        Each price limit is said on its own ("up to $700 a night"); ``summary`` joins both.
        """
        said = {
            "max_price": self.max_price is not None and budget(None, self.max_price),
            "min_price": self.min_price is not None and budget(self.min_price, None),
            "room_types": self.room_types and " or ".join(self.room_types),
            "amenities": self.amenities and ", ".join(AMENITY_LABELS.get(a, a) for a in self.amenities),
            "max_airport_miles": self.max_airport_miles is not None
            and f"within {self.max_airport_miles:g} mi of the airport",
            "max_city_center_miles": self.max_city_center_miles is not None
            and f"within {self.max_city_center_miles:g} mi of the city center",
        }
        return [text for name, text in said.items() if name in fields and isinstance(text, str)]

    def summary(self) -> str:
        """The criteria in one line, as the guest reads them above the list."""
        assert self.check_in and self.check_out, "a summary needs both dates"
        nights = len(self.nights)
        parts = [
            f"{self.check_in:%b} {self.check_in.day} to {self.check_out:%b} {self.check_out.day}, {nights} "
            f"night{'s' if nights != 1 else ''}"
        ]
        if self.min_price is not None or self.max_price is not None:
            parts.append(budget(self.min_price, self.max_price))
        rest = ("room_types", "amenities", "max_airport_miles", "max_city_center_miles")
        return "; ".join([*parts, *self.phrases(rest)])


def budget(low: float | None, high: float | None) -> str:
    """A nightly price range: "$100 to $700 a night", "up to $700 a night" or "from $100 a night"."""
    if low is not None and high is not None:
        return f"${low:,.0f} to ${high:,.0f} a night"
    return f"up to ${high:,.0f} a night" if high is not None else f"from ${low:,.0f} a night"
