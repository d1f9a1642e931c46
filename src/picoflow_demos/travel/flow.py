"""TravelFlow: plan a short trip, with hotels, local events and the weather found side by side.

The Planner's model only reads each message into a ``TripDetails`` (one tool, every field
optional). Code keeps the request, refuses a city it has no data for and dates it cannot plan,
and asks for what is missing. Once the request is complete, the tool handler runs three sub-steps
at the same time — Hotels and Events (each a model picking from a list code made) and Weather (no
model) — then the Itinerary sub-step writes a line per day, and code writes the reply from the
data. The Planner stays in place for the next request until the traveller says goodbye.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from picoflow import (
    Flow,
    Outcome,
    Prompt,
    Reject,
    Step,
    SubStepFailed,
    SubStepsFailed,
    TerminateStep,
    direct,
    go,
    since_last_user,
    tool,
)
from picoflow.messages import Message, ModelResponse
from picoflow_demos._common import usd
from picoflow_demos.travel.listings import Event, Hotel, events_in, hotels_in
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
from picoflow_demos.travel.trip import (
    WISHES_QUESTION,
    Trip,
    TripDetails,
    TripDraft,
    grounded,
    long_date,
    next_question,
    short_date,
    today,
    update,
)

PLANNER = Prompt.file("planner.md")

GREETING = "Hello! I plan short trips: hotels, local events and the weather, day by day."
ANYTHING_ELSE = "Would you like to change the city, the dates, the budget or the interests? Or say goodbye."
HOTEL_FALLBACK = "Among the best rated within your budget."
EVENT_FALLBACK = "On during your stay."


class Planner(Step):
    """Read the traveller's trip request, ask for what is missing, then plan the trip."""

    memory = "travel-planner"

    def prompt(self) -> str:
        return PLANNER.render(today=f"{today():%A} {today().isoformat()}")

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        # The reading needs only the traveller's latest words; plans shown earlier would only
        # lengthen a small model's prompt.
        return since_last_user(memory)

    @tool
    async def note_trip(self, said: TripDetails) -> Outcome:
        """Record what the traveller just said about their trip (only the fields they gave)."""
        return await self.advance(said)

    def check_response(self, response: ModelResponse) -> Reject | None:
        # Every message is read through note_trip. A model that answers in words (a small one says
        # "Goodbye!" to "thanks, bye") is told so once; its second answer stands either way.
        if response.tool_calls or self.attempt > 1:
            return None
        return Reject("Do not answer in words: call note_trip with what the latest message says.")

    async def on_response(self, response: Any) -> Outcome:
        # The model answered in words instead of calling note_trip: it read nothing new, and code
        # still writes the reply (a greeting, the next question, or the plan after "no, go ahead").
        return await self.advance(TripDetails())

    async def advance(self, said: TripDetails) -> Outcome:
        if said.goodbye:
            return go(TravelGoodbye)
        said = grounded(said, self.last_user_message or "")
        kept = self.state.get_as("trip", TripDraft) or TripDraft()
        if said.is_empty() and kept.planned:
            return direct(ANYTHING_ELSE)
        draft, refusal = update(kept, said, today())
        question = next_question(draft)
        if refusal is not None:
            return direct(f"{refusal} {question or ANYTHING_ELSE}").with_state(trip=draft)
        if question is None:
            trip = draft.complete()
            assert trip is not None, "next_question asks until the trip is complete"
            return await self.plan(trip, draft)
        said_back = "" if said.is_empty() else noted(draft)
        opening = GREETING if draft == TripDraft() else said_back
        if question == WISHES_QUESTION:  # asked once: they are optional
            draft = draft.model_copy(update={"asked_wishes": True})
        return direct(f"{opening} {question}".lstrip()).with_state(trip=draft)

    async def plan(self, trip: Trip, draft: TripDraft) -> Outcome:
        offered = hotels_in(trip.city, trip.max_price)
        if not offered:
            cheapest = min(hotel.price for hotel in hotels_in(trip.city))
            return direct(
                f"No hotel in {trip.city} is within {usd(trip.max_price or 0)} a night; the cheapest is "
                f"{usd(cheapest)}. What nightly budget shall I plan with?"
            ).with_state(trip=draft)
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
                trip=draft.model_copy(update={"planned": True}),
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


def noted(draft: TripDraft) -> str:
    """What code understood so far, said back so the traveller can correct a misreading at once."""
    parts = [draft.city] if draft.city else []
    if draft.check_in and draft.check_out:  # a single date is said back by the question
        nights = (draft.check_out - draft.check_in).days
        parts.append(
            f"{short_date(draft.check_in)} to {long_date(draft.check_out)} "
            f"({nights} night{'s' if nights != 1 else ''})"
        )
    if draft.max_price is not None:
        parts.append(f"hotels up to {usd(draft.max_price)} a night")
    if draft.interests:
        parts.append(", ".join(draft.interests))
    return f"Noted: {'; '.join(parts)}." if parts else ""


class TravelGoodbye(TerminateStep):
    """The end of the conversation."""

    memory = "travel-goodbye"

    def prompt(self) -> str:
        return "The traveller has ended the conversation. Wish them a good trip in one short sentence."


class TravelFlow(Flow):
    """Plan a short trip: hotels, local events and the weather, day by day."""

    name = "travel"
    steps = [Planner, Hotels, Events, Weather, Itinerary, TravelGoodbye]
