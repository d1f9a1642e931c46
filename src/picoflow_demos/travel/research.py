"""The sub-steps the Planner runs: Hotels, Events and Weather side by side, then the Itinerary.

Each is given the trip as its user message (JSON of ``Trip``) and answers its caller; none of them
talks to the traveller. Code lists the options a model may choose from, and ``check_response``
sends back any pick that is not one of them, so an id a model makes up never reaches the reply.
"""

from __future__ import annotations

from datetime import date
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError

from picoflow import Direct, LogicStep, Prompt, Reject, Step, direct
from picoflow.messages import ModelResponse
from picoflow_demos.travel.listings import DayWeather, Event, Hotel, events_in, hotels_in, weather_on
from picoflow_demos.travel.trip import Trip

HOTELS = Prompt.file("hotels.md")
EVENTS = Prompt.file("events.md")
ITINERARY = Prompt.file("itinerary.md")


class Pick(BaseModel):
    id: str = Field(description="An id from the list")
    reason: str = Field(max_length=100, description="Why it suits this trip, in a few words")


class HotelShortlist(BaseModel):
    """Up to three hotels of the list, best first."""

    picks: list[Pick] = Field(min_length=1, max_length=3)


class EventShortlist(BaseModel):
    """Up to three events of the list, in the order to go to them."""

    picks: list[Pick] = Field(min_length=1, max_length=3)


class Forecast(BaseModel):
    """The weather of each day of the trip the data has a forecast for."""

    days: list[DayWeather]


class DayOutline(BaseModel):
    date: date
    weather: str
    events: list[str]


class ItineraryRequest(BaseModel):
    """What the Itinerary step is given: the stay, and what code already knows of each day."""

    city: str
    hotel: str
    days: list[DayOutline]


class DayLine(BaseModel):
    date: date
    line: str = Field(max_length=120, description="What to do that day, in one short sentence")


class ItineraryPlan(BaseModel):
    """One short line per day of the trip, in order."""

    days: list[DayLine]


Shortlist = TypeVar("Shortlist", HotelShortlist, EventShortlist)


def unknown_picks(response: ModelResponse, shortlist: type[Shortlist], offered: list[str]) -> Reject | None:
    """A correction when a pick names an id that is not in the list (the answer is otherwise left to
    ``output`` validation, whose correction says what is malformed)."""
    try:
        picks = shortlist.model_validate_json(response.text).picks
    except ValidationError:
        return None
    unknown = list(dict.fromkeys(pick.id for pick in picks if pick.id not in offered))
    if not unknown:
        return None
    return Reject(
        f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not in the list. "
        f"Pick only ids from the list: {', '.join(offered)}."
    )


def hotel_line(hotel: Hotel) -> str:
    return f"{hotel.id}: {hotel.name}, {hotel.area}, ${hotel.price} a night, rated {hotel.rating}"


def event_line(event: Event) -> str:
    price = "free" if event.price == 0 else f"${event.price}"
    return f"{event.id}: {event.name} ({event.category}), {event.date:%a %b} {event.date.day}, {price}"


class Hotels(Step):
    """Shortlist hotels for the trip from the hotels code found in its city and budget."""

    output = HotelShortlist

    def options(self) -> list[Hotel]:
        trip = self.input_as(Trip)
        return hotels_in(trip.city, trip.max_price)

    def prompt(self) -> str:
        return HOTELS.render(hotels="\n".join(hotel_line(hotel) for hotel in self.options()))

    def check_response(self, response: ModelResponse) -> Reject | None:
        return unknown_picks(response, HotelShortlist, [hotel.id for hotel in self.options()])


class Events(Step):
    """Shortlist the local events of the trip's days that suit the traveller."""

    output = EventShortlist

    def options(self) -> list[Event]:
        trip = self.input_as(Trip)
        return events_in(trip.city, trip.check_in, trip.check_out, trip.interests)

    def prompt(self) -> str:
        return EVENTS.render(events="\n".join(event_line(event) for event in self.options()))

    def check_response(self, response: ModelResponse) -> Reject | None:
        return unknown_picks(response, EventShortlist, [event.id for event in self.options()])


class Weather(LogicStep):
    """The forecast of each day of the trip, read from the shipped weather data (no model)."""

    output = Forecast

    def run_logic(self) -> Direct:
        trip = self.input_as(Trip)
        return direct(Forecast(days=weather_on(trip.city, trip.days)).model_dump_json())


class Itinerary(Step):
    """Write one short line per day of the trip, from what code knows of each day."""

    output = ItineraryPlan

    def prompt(self) -> str:
        return ITINERARY.text

    def check_response(self, response: ModelResponse) -> Reject | None:
        try:
            written = [day.date for day in ItineraryPlan.model_validate_json(response.text).days]
        except ValidationError:
            return None
        wanted = [day.date for day in ItineraryRequest.model_validate_json(self.last_user_message or "").days]
        if written == wanted:
            return None
        return Reject(
            f"Write exactly one line for each of the {len(wanted)} days, in this order: "
            f"{', '.join(day.isoformat() for day in wanted)}."
        )
