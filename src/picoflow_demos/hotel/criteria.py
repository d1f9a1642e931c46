"""What the guest is looking for: the slots the Explore step fills, with the rules every value must keep.

The model reads each message into a partial ``Criteria``; the rules below run on every merge, so
a stay ending before it starts, a check-in in the past or a budget upside down is refused with a
reason (given to the model once, then to the guest) and the answers already given are kept.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, timedelta
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from picoflow_demos._common import today_from
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


def calendar_day(value: Any) -> Any:
    """A date from the parts a model reads off the guest's words; a missing year is the next such date.

    Parts are easier for a small model than a format: "8/1/2027" is month 8, day 1, year 2027,
    where asked for ISO it wrote 8012-08-01. The year rule lives here, in code, not in a prompt.
    """
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
        return guess if guess > current else date(current.year + 1, month, day)
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
CalendarDay = Annotated[date, BeforeValidator(calendar_day), WithJsonSchema(_DAY_SCHEMA)]


class Criteria(BaseModel):
    """What the guest said about their stay."""

    model_config = ConfigDict(extra="ignore")

    in_portland: bool | None = Field(
        None, description="true when the guest says the stay is in the Portland area (a yes), false if not"
    )
    check_in: CalendarDay | None = Field(None, description="Day of arrival (the first night)")
    check_out: CalendarDay | None = Field(None, description="Day of departure")
    max_price: float | None = Field(
        None, gt=0, description="Highest price per night in USD (the guest says max, up to, under, at most)"
    )
    min_price: float | None = Field(
        None, ge=0, description="Lowest price per night in USD (the guest says min, at least, from, over)"
    )
    room_types: list[RoomType] | None = Field(None, max_length=3, description="Room types the guest wants")
    amenities: list[Amenity] | None = Field(
        None,
        max_length=23,
        description="Amenities the guest needs (wifi is freeWiFi, parking is freeParking)",
    )
    max_airport_miles: float | None = Field(None, gt=0, description="Most miles from the airport")
    max_city_center_miles: float | None = Field(None, gt=0, description="Most miles from the city center")

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
