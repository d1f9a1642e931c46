"""TravelFlow: plan a short trip, with hotels, local events and the weather found side by side.

The Planner is a ``SlotStep``: its model only reads each message into items of ``TripDetails``,
and its form keeps them. Code refuses a city it has no data for and dates it cannot plan (the
rules of ``TripDetails``), and asks for what is missing. Once the request is complete, the Planner
runs three sub-steps at the same time — Hotels and Events (each a model picking from a list code
made) and Weather (no model) — then the Itinerary sub-step writes a line per day, and code writes
the reply from the data. The Planner stays in place for the next request until the traveller says
goodbye.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from picoflow import (
    Ask,
    Flow,
    Outcome,
    Prompt,
    Repairs,
    SlotStep,
    Step,
    SubStepFailed,
    SubStepsFailed,
    TerminateStep,
    ask,
    direct,
)
from picoflow_demos._common import usd
from picoflow_demos.travel.listings import Event, Hotel, city_names, events_in, hotels_in
from picoflow_demos.travel.research import (
    DayOutline,
    Events,
    EventShortlist,
    Forecast,
    Hotels,
    HotelShortlist,
    Itinerary,
    ItineraryPlan,
    ItineraryRequest,
    Weather,
)
from picoflow_demos.travel.tables import plan_reply, weather_text
from picoflow_demos.travel.trip import CONFIRM, Trip, TripDetails, long_date, today

PLANNER = Prompt.file("planner.md")

GREETING = "Hello! I plan short trips: hotels, local events and the weather, day by day."
WHICH_CITY = f"Which city would you like to visit? I can plan trips to {city_names()}."
WHEN = "When would you like to travel? Give your check-in and check-out dates."
WISHES_QUESTION = (
    "Do you have a nightly hotel budget, or interests such as music, food, art, sport, outdoors or "
    "history? Or shall I plan it as it is?"
)
ANYTHING_ELSE = "Would you like to change the city, the dates, the budget or the interests? Or say goodbye."
HOTEL_FALLBACK = "Among the best rated within your budget."
EVENT_FALLBACK = "On during your stay."


class Planner(SlotStep):
    """Read the traveller's trip request, ask for what is missing, then plan the trip."""

    memory = "travel-planner"
    slots = TripDetails
    intro = GREETING
    questions = [
        ask(WHICH_CITY, "city"),
        ask(WHEN, "check_in", "check_out"),
        ask(WISHES_QUESTION, "max_price", "interests", optional=True),
    ]
    # A goodbye ends the conversation whatever question is pending.
    goodbye = "goodbye"
    # Cancel, repeat, skip and out of scope are the repair patterns' (picoflow.repairs).
    repairs_from = "repair"
    accept = CONFIRM
    # A city without listings or dates that cannot be planned are what the traveller said, read
    # right: asking the model again would cost a call and change nothing. They are told at once.
    max_corrections = 0

    def prompt(self) -> str:
        return PLANNER.render(today=f"{today():%A} {today().isoformat()}")

    def given(self) -> Sequence[str]:
        """What a cancel would throw away, as the traveller said it."""
        values = self.form.values(self.slots)
        said = [values.city or ""]
        said += [long_date(day) for day in (values.check_in, values.check_out) if day is not None]
        if values.max_price is not None:
            said.append(f"up to ${values.max_price:,.0f} a night")
        said += list(values.interests or ())
        return [part for part in said if part]

    def acknowledge(self, values: TripDetails, accepted: Sequence[str]) -> str:
        return values.noted() if accepted else ""

    def corrected(self, values: TripDetails, changed: Sequence[str]) -> str:
        return values.noted(changed, lead="Changed")

    def phrase(self, question: Ask, values: TripDetails) -> str:
        if question.key != "check_in":
            return question.question
        if values.check_in and not values.check_out:
            return f"Check-in {long_date(values.check_in)}. What is your check-out date?"
        if values.check_out and not values.check_in:
            return f"Check-out {long_date(values.check_out)}. What is your check-in date?"
        if values.city:
            return f"When would you like to be in {values.city}? Give your check-in and check-out dates."
        return question.question

    def question(self) -> str:
        # Every question answered and this very trip planned: what the Planner waits for is a
        # change to it. A repair says that again, not the whole plan (nor its own last reply).
        values = self.form.values(self.slots)
        answered = self.form.asked(self.questions) is None and self.form.pending(self.questions) is None
        if answered and self.state.get_as("planned", Trip) == Trip.of(values):
            return ANYTHING_ELSE
        return super().question()

    async def on_complete(self, details: TripDetails) -> Outcome:
        trip = Trip.of(details)
        if self.state.get_as("planned", Trip) == trip:  # nothing new since the plan shown
            return direct(ANYTHING_ELSE)
        return await self.plan(trip)

    async def plan(self, trip: Trip) -> Outcome:
        offered = hotels_in(trip.city, trip.max_price)
        if not offered:
            cheapest = min(hotel.price for hotel in hotels_in(trip.city))
            return direct(
                f"No hotel in {trip.city} is within {usd(trip.max_price or 0)} a night; the cheapest is "
                f"{usd(cheapest)}. What nightly budget shall I plan with?"
            )
        happening = events_in(trip.city, trip.check_in, trip.check_out, trip.interests)
        hotel_picks, event_picks, forecast = await self.research(trip, bool(happening))
        # Picks name records of the lists code offered (check_response saw to it); a part that
        # failed falls back on the data itself.
        stay = chosen(offered, hotel_picks) or [(hotel, HOTEL_FALLBACK) for hotel in offered[:3]]
        outings = chosen(happening, event_picks) or [(event, EVENT_FALLBACK) for event in happening[:3]]
        weather = {day.date: day for day in forecast.days} if forecast else {}
        outline = ItineraryRequest(
            city=trip.city,
            hotel=stay[0][0].name,
            days=[
                DayOutline(
                    date=day,
                    weather=weather_text(weather.get(day)),
                    events=[event.name for event, _ in outings if event.date == day],
                )
                for day in trip.days
            ],
        )
        try:
            itinerary: ItineraryPlan = await self.run_step(Itinerary, outline)
            lines = {day.date: day.line for day in itinerary.days}
        except SubStepFailed:
            lines = {}  # each day still shows its weather; the session keeps a warning
        reply = plan_reply(trip, stay, outings, weather, lines, ANYTHING_ELSE)
        return (
            direct(reply)
            .remember_as(f"Showed the plan of the trip to {trip.heading()}.\n\n{ANYTHING_ELSE}")
            .with_state(
                planned=trip,
                hotels=[hotel.id for hotel, _ in stay],
                events=[event.id for event, _ in outings],
            )
        )

    async def research(
        self, trip: Trip, happening: bool
    ) -> tuple[HotelShortlist | None, EventShortlist | None, Forecast | None]:
        """Hotels, events (when any fall on the dates) and weather, looked into at the same time;
        None for a part that failed."""
        parts: dict[str, tuple[type[Step], Trip]] = {"hotels": (Hotels, trip), "weather": (Weather, trip)}
        if happening:
            parts["events"] = (Events, trip)
        try:
            found = await self.run_steps(parts, concurrency=3)
        except SubStepsFailed as failed:
            found = failed.by_key  # what the other parts found is kept
        return found["hotels"], found.get("events"), found["weather"]


Listed = TypeVar("Listed", Hotel, Event)


def chosen(
    offered: Sequence[Listed], shortlist: HotelShortlist | EventShortlist | None
) -> list[tuple[Listed, str]]:
    """The picked records of ``offered`` with their reasons, each once, in the order picked."""
    by_id = {record.id: record for record in offered}
    picks = {pick.id: pick.reason for pick in shortlist.picks if pick.id in by_id} if shortlist else {}
    return [(by_id[record_id], reason) for record_id, reason in picks.items()]


class TravelGoodbye(TerminateStep):
    """The end of the conversation."""

    memory = "travel-goodbye"

    def prompt(self) -> str:
        return "The traveller has ended the conversation. Wish them a good trip in one short sentence."


class TravelFlow(Flow):
    """Plan a short trip: hotels, local events and the weather, day by day."""

    name = "travel"
    steps = [Planner, Hotels, Events, Weather, Itinerary, TravelGoodbye]
    # No one to hand over to: a required question declined is asked again.
    repairs = Repairs(on_required_skip="ask_again")
