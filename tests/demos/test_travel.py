"""TravelFlow: the Planner (a SlotStep) reads the request into its form, code checks it, and three
sub-steps look into hotels, events and weather side by side before the Itinerary sub-step writes a
line per day."""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from typing import Any

import pytest

from picoflow import Caller, FlowEngine, Reject
from picoflow.messages import Message, ModelResponse
from picoflow.models import ScriptedModel
from picoflow.sessions import Session
from picoflow.slots.reading import EXTRACT_RULES, FORMAT_HINT
from picoflow.testing import describe, request_lines
from picoflow_demos.travel import TravelFlow
from picoflow_demos.travel.flow import ANYTHING_ELSE, EVENT_FALLBACK, HOTEL_FALLBACK, PLANNER, WISHES_QUESTION
from picoflow_demos.travel.research import HotelShortlist, unknown_picks
from picoflow_demos.travel.trip import TripDetails

from .conftest import Chat

TODAY = "2027-04-20"  # a Tuesday
CITIES = "Seattle, San Francisco, Chicago, New Orleans and Boston"
WHICH_CITY = f"Which city would you like to visit? I can plan trips to {CITIES}."
HELLO = "Hello! I plan short trips: hotels, local events and the weather, day by day."
GREETING = f"{HELLO} {WHICH_CITY}"
SEATTLE_TRIP = {"city": "Seattle", "check_in": "2027-05-14", "check_out": "2027-05-17"}


@pytest.fixture(autouse=True)
def travel_today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAVEL_FLOW_CURRENT_DATE", TODAY)


def day(month: int, number: int, year: int | None = None) -> dict[str, int | None]:
    return {"month": month, "day": number, "year": year}


def found(*items: tuple[str, str, Any]) -> str:
    """The Planner's reading: what the message says, as ``(field, quoted words, value)`` items."""
    return json.dumps(
        {"found": [{"field": name, "quote": quote, "value": value} for name, quote, value in items]}
    )


def picks(*chosen: tuple[str, str]) -> str:
    return json.dumps({"picks": [{"id": pick, "reason": reason} for pick, reason in chosen]})


def itinerary(first: date, *lines: str) -> str:
    days = [{"date": (first + timedelta(days=n)).isoformat(), "line": line} for n, line in enumerate(lines)]
    return json.dumps({"days": days})


def form(
    known: dict[str, Any], *, asking: str | None = None, declined: Sequence[str] = (), introduced: bool = True
) -> dict[str, Any]:
    """The Planner's form as its state keeps it."""
    return {
        "known": known,
        "declined": list(declined),
        "asking": asking,
        "introduced": introduced,
    }


SEATTLE_LINES = (
    "Arrive, check in, then jazz at the Triple Door.",
    "Morning food walk at Pike Place Market.",
    "Showers: an indoor day at the museums.",
    "Check out and fly home.",
)


def chat_with(scripts: Mapping[str, Sequence[Any]]) -> Chat:
    model = ScriptedModel(scripts, grounding="small")
    return Chat(FlowEngine([TravelFlow], model=model), model, "travel", Caller(principal="traveller-1"))


async def session_of(chat: Chat) -> Session:
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    return session


async def transcript(chat: Chat) -> list[Message]:
    return list(await chat.engine.store.transcript(chat.session_id or ""))


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def conversation(messages: Sequence[Message]) -> list[str]:
    """The messages of the conversation itself, one line each (sub-step runs left out)."""
    return [describe(message) for message in messages if message.within is None]


def runs(messages: Sequence[Message]) -> dict[str, list[str]]:
    """Each sub-step run's messages by step, whatever order the runs took turns in."""
    found: dict[str, list[str]] = {}
    for message in messages:
        if message.within is not None:
            assert re.fullmatch(rf"{message.step}@\d+", message.within), message.within
            found.setdefault(message.within, []).append(describe(message).split(" | ", 1)[1])
    return {label.split("@")[0]: lines for label, lines in sorted(found.items())}


SEATTLE_PLAN = f"""\
**Your trip to Seattle, Fri May 14 to Mon May 17, 2027 (3 nights)**

Hotels up to $200.00 a night; interests: music, food.

**Where to stay**

| Hotel | Area | Per night | Rating | Why |
|---|---|---|---|---|
| Union Lake Suites | South Lake Union | $189.00 | 4.4 | Central, by the lake |
| Ballard Boatyard Inn | Ballard | $159.00 | 4.3 | Quiet and cheaper |

**Events during your stay**

| Date | Event | Venue | Ticket | Why |
|---|---|---|---|---|
| Fri May 14 | Jazz Night at the Triple Door | The Triple Door | $38.00 | Live jazz |
| Sat May 15 | Pike Place Market Food Walk | Pike Place Market | $65.00 | Local food |

**Day by day**

| Day | Weather | Plan |
|---|---|---|
| Fri May 14 | sunny, 62°F / 48°F, rain 10% | Arrive, check in, then jazz at the Triple Door. |
| Sat May 15 | cloudy, 67°F / 45°F, rain 40% | Morning food walk at Pike Place Market. |
| Sun May 16 | showers, 69°F / 46°F, rain 50% | Showers: an indoor day at the museums. |
| Mon May 17 | showers, 70°F / 52°F, rain 65% | Check out and fly home. |

{ANYTHING_ELSE}"""


SEATTLE_HOTELS = picks(("H6", "Central, by the lake"), ("H2", "Quiet and cheaper"))
SEATTLE_READING = found(
    ("city", "Seattle", "Seattle"), ("check_in", "May 14", day(5, 14)), ("check_out", "to 17", day(5, 17))
)
SEATTLE_NOTED = f"Noted: Seattle; Fri May 14 to Mon May 17, 2027 (3 nights). {WISHES_QUESTION}"


def seattle_scripts(**more: Sequence[Any]) -> dict[str, list[Any]]:
    """A conversation that asks, then plans Seattle from May 14 to 17 on $200 a night for music and
    food; ``more`` adds responses after those of each step."""
    scripts: dict[str, list[Any]] = {
        "Planner": [
            # Words instead of a reading: sent back with the format, then a reading.
            "Hello! How can I help?",
            found(),
            SEATTLE_READING,
            found(("max_price", "Under $200", 200), ("interests", "jazz and good food", ["music", "food"])),
        ],
        # H1 costs $239, above the budget: it is not among the hotels offered.
        "Hotels": [picks(("H1", "Right by the market")), SEATTLE_HOTELS],
        "Events": [picks(("E2", "Live jazz"), ("E3", "Local food"))],
        "Itinerary": [itinerary(date(2027, 5, 14), *SEATTLE_LINES)],
    }
    for step, items in more.items():
        scripts[step] = [*scripts.get(step, []), *items]
    return scripts


async def test_a_whole_conversation_from_hello_to_goodbye() -> None:
    chat = chat_with(
        seattle_scripts(
            Planner=[found(), found(("goodbye", "bye", "goodbye"))],
            TravelGoodbye=["Have a wonderful time in Seattle!"],
        )
    )
    results = await chat.say_all(
        [
            "Hi",
            "Seattle from May 14 to 17",
            "Under $200 a night, I love jazz and good food",
            "Thanks!",
            "That's all, bye",
        ]
    )
    assert [result.message for result in results] == [
        GREETING,
        SEATTLE_NOTED,
        SEATTLE_PLAN,
        ANYTHING_ELSE,
        "Have a wonderful time in Seattle!",
    ]
    assert [result.step for result in results] == ["Planner"] * 4 + ["TravelGoodbye"]
    assert [result.completed for result in results] == [False] * 4 + [True]
    # The greeting took two answers (words, then a reading after the correction). The plan's turn
    # counts its sub-steps: the Planner's reading, Hotels twice (one answer was sent back), Events
    # and Itinerary; Weather decides in code. The goodbye is read, then written by TravelGoodbye.
    assert [result.usage.model_calls for result in results] == [2, 1, 5, 1, 2]
    assert [result.usage.tool_calls for result in results] == [0, 0, 0, 0, 0]
    assert chat.model.remaining == 0

    messages = await transcript(chat)
    # Every reply of the Planner is code's; a reading is kept only where it led on to another step.
    assert conversation(messages) == [
        "Planner | user: Hi",
        f"Planner | assistant [direct]: {GREETING}",
        "Planner | user: Seattle from May 14 to 17",
        f"Planner | assistant [direct]: {SEATTLE_NOTED}",
        "Planner | user: Under $200 a night, I love jazz and good food",
        f"Planner | assistant [direct]: {SEATTLE_PLAN}",
        "Planner | user: Thanks!",
        f"Planner | assistant [direct]: {ANYTHING_ELSE}",
        "Planner | user: That's all, bye",
        'Planner | assistant [output]: {"found": [{"field": "goodbye", "quote": "bye", "value": "goodbye"}]}',
        "TravelGoodbye | user [crossing]: I'm done, thank you.",
        "TravelGoodbye | assistant: Have a wonderful time in Seattle!",
    ]
    # The sub-steps' messages are in the transcript too, marked with the run they belong to; each
    # run was given the trip as its user message.
    trip = compact({**SEATTLE_TRIP, "max_price": 200.0, "interests": ["music", "food"]})
    forecast = [
        {"date": "2027-05-14", "sky": "sunny", "high": 62, "low": 48, "rain": 10},
        {"date": "2027-05-15", "sky": "cloudy", "high": 67, "low": 45, "rain": 40},
        {"date": "2027-05-16", "sky": "showers", "high": 69, "low": 46, "rain": 50},
        {"date": "2027-05-17", "sky": "showers", "high": 70, "low": 52, "rain": 65},
    ]
    outline = {
        "city": "Seattle",
        "hotel": "Union Lake Suites",
        "days": [
            {
                "date": "2027-05-14",
                "weather": "sunny, 62°F / 48°F, rain 10%",
                "events": ["Jazz Night at the Triple Door"],
            },
            {
                "date": "2027-05-15",
                "weather": "cloudy, 67°F / 45°F, rain 40%",
                "events": ["Pike Place Market Food Walk"],
            },
            {"date": "2027-05-16", "weather": "showers, 69°F / 46°F, rain 50%", "events": []},
            {"date": "2027-05-17", "weather": "showers, 70°F / 52°F, rain 65%", "events": []},
        ],
    }
    assert runs(messages) == {
        "Events": [
            f"user: {trip}",
            f"assistant: {compact(json.loads(picks(('E2', 'Live jazz'), ('E3', 'Local food'))))}",
        ],
        "Hotels": [
            f"user: {trip}",
            f"assistant: {compact(json.loads(SEATTLE_HOTELS))}",
        ],
        "Itinerary": [
            f"user: {compact(outline)}",
            f"assistant: {compact(json.loads(itinerary(date(2027, 5, 14), *SEATTLE_LINES)))}",
        ],
        "Weather": [f"user: {trip}", f"assistant [direct]: {compact({'days': forecast})}"],
    }

    session = await session_of(chat)
    assert session.status == "completed"
    seattle = {**SEATTLE_TRIP, "max_price": 200.0, "interests": ["music", "food"]}
    # The form beside the Planner's own keys: the trip it planned and the records it showed.
    assert session.states["Planner"] == {
        "form": form(seattle),  # the goodbye ends the chat; it is not kept
        "planned": seattle,
        "hotels": ["H6", "H2"],
        "events": ["E2", "E3"],
    }
    # Each reading saw the Planner's last words (a question, or the note of the plan, not its
    # tables) and the traveller's answer; the first one its correction too.
    planner_requests = [
        request_lines(request) for request in chat.model.requests if request.step == "Planner"
    ]
    # The Planner's prompt, then SlotStep's reading rules: the same system prompt every time.
    assert {request[0] for request in planner_requests} == {
        f"system: {PLANNER.render(today='Tuesday 2027-04-20').rstrip()}\n\n{EXTRACT_RULES}"
    }
    assert [request[1:] for request in planner_requests] == [
        ["user: Hi"],
        [
            "user: Hi",
            "assistant [correction]: Hello! How can I help?",
            "user [correction]: Your answer must be one JSON object matching the required schema. "
            f"{FORMAT_HINT}",
        ],
        [f"assistant [direct]: {GREETING}", "user: Seattle from May 14 to 17"],
        [f"assistant [direct]: {SEATTLE_NOTED}", "user: Under $200 a night, I love jazz and good food"],
        [
            "assistant [direct]: Showed the plan of the trip to Seattle, Fri May 14 to Mon May 17, 2027 "
            f"(3 nights).\n\n{ANYTHING_ELSE}",
            "user: Thanks!",
        ],
        [f"assistant [direct]: {ANYTHING_ELSE}", "user: That's all, bye"],
    ]
    # A hotel pick off the list was sent back.
    assert [warning.code for warning in session.warnings] == ["response_rejected"]


async def test_a_hotel_pick_that_is_not_on_the_list_is_sent_back_with_the_list() -> None:
    chat = chat_with(seattle_scripts())
    await chat.say_all(["Hi", "Seattle from May 14 to 17", "Under $200 a night, I love jazz and good food"])
    first, second = [request for request in chat.model.requests if request.step == "Hotels"]
    # Code listed only the hotels of Seattle within the budget, best rated first.
    assert first.system == (
        "You help plan a trip. The user message is the trip as JSON: the city, the dates, the nightly budget "
        "and the traveller's interests.\n\n"
        "Pick up to 3 hotels from this list that suit the trip best, best first, each with a reason of a few "
        "words:\n\n"
        "H6: Union Lake Suites, South Lake Union, $189 a night, rated 4.4\n"
        "H2: Ballard Boatyard Inn, Ballard, $159 a night, rated 4.3\n"
        "H3: Capitol Hill Guesthouse, Capitol Hill, $129 a night, rated 4.1\n"
        "H5: Fremont Troll House, Fremont, $109 a night, rated 3.9\n\n"
        "Use only ids from the list.\n"
    )
    assert first.output is not None and first.tools == ()
    # (request_lines names a sub-step run's messages by the run: the label is cut off here.)
    assert [line.split(" | ", 1)[-1] for line in request_lines(second)[1:]] == [
        f"user: {compact({**SEATTLE_TRIP, 'max_price': 200.0, 'interests': ['music', 'food']})}",
        f"assistant [correction]: {picks(('H1', 'Right by the market'))}",
        "user [correction]: Your response was not accepted: H1 is not in the list. Pick only ids from the "
        "list: H6, H2, H3, H5.",
    ]
    # The Events model saw the events of the stay's days, those matching an interest first.
    [events] = [request for request in chat.model.requests if request.step == "Events"]
    assert events.system.split("\n\n")[2].splitlines() == [
        "E2: Jazz Night at the Triple Door (music), Fri May 14, $38",
        "E3: Pike Place Market Food Walk (food), Sat May 15, $65",
        "E4: Mariners vs. Astros (sport), Sat May 15, $42",
        "E5: Discovery Park Bird Walk (outdoors), Sun May 16, free",
        "E6: Glass Art After Dark (art), Sun May 16, $35",
        "E7: Underground Tour (history), Mon May 17, $28",
    ]


@pytest.mark.parametrize(
    ("check_in", "check_out", "refusal"),
    [
        (day(4, 2, 2027), day(4, 5, 2027), "Fri Apr 2, 2027 is in the past: today is Tue Apr 20, 2027."),
        (
            day(6, 12),
            day(6, 9),
            "the trip would end on Wed Jun 9, 2027, before it starts on Sat Jun 12, 2027: the check-out date "
            "must come after the check-in date.",
        ),
        (day(6, 12), day(6, 12), "a trip needs at least one night, and both dates are Sat Jun 12, 2027."),
        (
            day(6, 1),
            day(6, 20),
            "I can plan trips of up to 14 nights, and Tue Jun 1 to Sun Jun 20, 2027 is 19 nights.",
        ),
    ],
)
async def test_dates_that_cannot_be_planned_are_refused_with_the_reason(
    check_in: dict[str, Any], check_out: dict[str, Any], refusal: str
) -> None:
    # Each date says its month: a month nobody wrote is no month (grounding's month_given).
    arrive = f"{calendar.month_name[check_in['month']]} {check_in['day']}"
    leave = f"{calendar.month_name[check_out['month']]} {check_out['day']}"
    said = f"Boston please, from {arrive} to {leave}"
    reading = found(
        ("city", "Boston", "Boston"), ("check_in", arrive, check_in), ("check_out", leave, check_out)
    )
    chat = chat_with({"Planner": [reading]})
    result = await chat.say(said)
    assert result.message == (
        f"{HELLO}\n\nNoted: Boston. Sorry, {refusal} When would you like to be in Boston? Give your check-in "
        "and check-out dates."
    )
    # The traveller is told at once: the model read the dates right, and is not asked again.
    assert result.usage.model_calls == 1 and result.step == "Planner"
    # The city is kept; of two dates that cannot go together neither is known to be the right one,
    # so both are asked for again. No sub-step ran.
    assert (await session_of(chat)).states["Planner"] == {"form": form({"city": "Boston"}, asking="check_in")}
    assert conversation(await transcript(chat)) == [
        f"Planner | user: {said}",
        f"Planner | assistant [direct]: {result.message}",
    ]


async def test_a_check_out_date_alone_is_read_against_the_check_in_kept() -> None:
    chat = chat_with(
        {
            "Planner": [
                found(("city", "Boston", "Boston"), ("check_in", "June 20", day(6, 20))),
                found(("check_out", "June 12", day(6, 12))),
                found(("check_out", "the 24th", day(6, 24))),
            ]
        }
    )
    said = ["Boston, arriving June 20", "leaving June 12", "sorry, the 24th"]
    replies = [result.message for result in await chat.say_all(said)]
    assert replies == [
        f"{HELLO}\n\nNoted: Boston. Check-in Sun Jun 20, 2027. What is your check-out date?",
        "Sorry, the trip would end on Sat Jun 12, 2027, before it starts on Sun Jun 20, 2027: the check-out "
        "date must come after the check-in date. Check-in Sun Jun 20, 2027. What is your check-out date?",
        f"Noted: Boston; Sun Jun 20 to Thu Jun 24, 2027 (4 nights). {WISHES_QUESTION}",
    ]
    trip = {"city": "Boston", "check_in": "2027-06-20", "check_out": "2027-06-24"}
    assert (await session_of(chat)).states["Planner"] == {"form": form(trip, asking="max_price")}


NOLA_DAYS = itinerary(date(2027, 6, 10), "Preservation Hall at night.", "Ghost walk.", "Swamp tour.", "Home.")
NOLA_PLAN = f"""\
**Your trip to New Orleans, Thu Jun 10 to Sun Jun 13, 2027 (3 nights)**

Interests: music.

**Where to stay**

| Hotel | Area | Per night | Rating | Why |
|---|---|---|---|---|
| Frenchmen Music House | Marigny | $169.00 | 4.4 | Jazz on the doorstep |

**Events during your stay**

| Date | Event | Venue | Ticket | Why |
|---|---|---|---|---|
| Thu Jun 10 | Preservation Hall Jazz | Preservation Hall | $50.00 | Famous jazz hall |

**Day by day**

| Day | Weather | Plan |
|---|---|---|
| Thu Jun 10 | partly cloudy, 90°F / 76°F, rain 30% | Preservation Hall at night. |
| Fri Jun 11 | rain, 89°F / 70°F, rain 70% | Ghost walk. |
| Sat Jun 12 | showers, 92°F / 75°F, rain 60% | Swamp tour. |
| Sun Jun 13 | sunny, 84°F / 72°F, rain 20% | Home. |

{ANYTHING_ELSE}"""


async def test_a_city_without_listings_is_refused_and_the_dates_are_kept() -> None:
    chat = chat_with(
        {
            "Planner": [
                found(
                    ("city", "Paris", "Paris"),
                    ("check_in", "June 10", day(6, 10)),
                    ("check_out", "13", day(6, 13)),
                ),
                found(("city", "NOLA", "New Orleans"), ("interests", "I love jazz", ["music"])),
            ],
            "Hotels": [picks(("H20", "Jazz on the doorstep"))],
            "Events": [picks(("E36", "Famous jazz hall"))],
            "Itinerary": [NOLA_DAYS],
        }
    )
    refused, planned = await chat.say_all(["Paris from June 10 to 13", "OK, NOLA then. I love jazz"])
    # The traveller's words are not repeated; the question lists the cities there are listings for.
    assert refused.message == (
        f"{HELLO}\n\nNoted: Thu Jun 10 to Sun Jun 13, 2027 (3 nights). "
        f"Sorry, I have no listings for that city. {WHICH_CITY}"
    )
    assert planned.message == NOLA_PLAN
    assert conversation(await transcript(chat)) == [
        "Planner | user: Paris from June 10 to 13",
        f"Planner | assistant [direct]: {refused.message}",
        "Planner | user: OK, NOLA then. I love jazz",
        f"Planner | assistant [direct]: {NOLA_PLAN}",
    ]
    nola = {
        "city": "New Orleans",
        "check_in": "2027-06-10",
        "check_out": "2027-06-13",
        "interests": ["music"],
    }
    assert (await session_of(chat)).states["Planner"] == {
        "form": form(nola),
        "planned": {**nola, "max_price": None},
        "hotels": ["H20"],
        "events": ["E36"],
    }


BOSTON_PLAN = f"""\
**Your trip to Boston, Sat May 15 to Mon May 17, 2027 (2 nights)**

Hotels up to $130.00 a night.

**Where to stay**

| Hotel | Area | Per night | Rating | Why |
|---|---|---|---|---|
| Fenway Bunkhouse | Fenway | $119.00 | 3.8 | Within the budget |

**Events during your stay**

| Date | Event | Venue | Ticket | Why |
|---|---|---|---|---|
| Sun May 16 | Red Sox vs. Yankees | Fenway Park | $65.00 | Red Sox |

**Day by day**

| Day | Weather | Plan |
|---|---|---|
| Sat May 15 | partly cloudy, 66°F / 51°F, rain 10% | Freedom Trail. |
| Sun May 16 | sunny, 70°F / 54°F, rain 20% | Fenway. |
| Mon May 17 | showers, 64°F / 51°F, rain 50% | Home. |

{ANYTHING_ELSE}"""


async def test_a_budget_below_every_hotel_is_said_with_the_cheapest_price_and_a_new_one_plans() -> None:
    boston = found(
        ("city", "Boston", "Boston"),
        ("check_in", "May 15", day(5, 15)),
        ("check_out", "17", day(5, 17)),
        ("max_price", "max $100", 100),
    )
    chat = chat_with(
        {
            "Planner": [boston, found(("max_price", "$130", 130))],
            "Hotels": [picks(("H30", "Within the budget"))],
            "Events": [picks(("E46", "Red Sox"))],
            "Itinerary": [itinerary(date(2027, 5, 15), "Freedom Trail.", "Fenway.", "Home.")],
        }
    )
    result = await chat.say("Boston May 15 to 17, max $100 a night")
    too_low = (
        "No hotel in Boston is within $100.00 a night; the cheapest is $119.00. What nightly budget shall I "
        "plan with?"
    )
    assert result.message == too_low
    assert result.usage.model_calls == 1
    trip = {"city": "Boston", "check_in": "2027-05-15", "check_out": "2027-05-17"}
    # Nothing was planned; the form is complete, so the next budget plans at once.
    assert (await session_of(chat)).states["Planner"] == {
        "form": form({**trip, "max_price": 100.0}, introduced=False)
    }
    planned = await chat.say("OK, $130 then")
    # The budget was corrected: what changed is said, then the plan.
    changed = f"Changed: hotels up to $130.00 a night.\n\n{BOSTON_PLAN}"
    assert planned.message == changed
    assert conversation(await transcript(chat)) == [
        "Planner | user: Boston May 15 to 17, max $100 a night",
        f"Planner | assistant [direct]: {too_low}",
        "Planner | user: OK, $130 then",
        # A reading that fires a pattern stays in the transcript beside where it led.
        'Planner | assistant [output]: {"found": [{"field": "max_price", "quote": "$130", "value": 130}]}',
        f"Planner | assistant [direct]: {changed}",
    ]
    state = (await session_of(chat)).states["Planner"]
    assert state == {
        "form": form({**trip, "max_price": 130.0}, introduced=False),
        "planned": {**trip, "max_price": 130.0, "interests": []},
        "hotels": ["H30"],
        "events": ["E46"],
    }


async def test_dates_without_events_or_forecasts_run_only_hotels_and_weather() -> None:
    # September: no event and no forecast in the data. No Events script: had it run, the turn would fail.
    chat = chat_with(
        {
            "Planner": [
                found(
                    ("city", "Chicago", "Chicago"),
                    ("check_in", "September 3", day(9, 3)),
                    ("check_out", "to 5", day(9, 5)),
                    ("interests", "I like art", ["art"]),
                )
            ],
            "Hotels": [picks(("H17", "An art hotel"))],
            "Itinerary": [itinerary(date(2027, 9, 3), "Art Institute.", "Pilsen murals.", "Home.")],
        }
    )
    result = await chat.say("Chicago, September 3 to 5, I like art")
    assert result.ok and result.usage.model_calls == 3
    assert result.message == "\n\n".join(
        [
            "**Your trip to Chicago, Fri Sep 3 to Sun Sep 5, 2027 (2 nights)**",
            "Interests: art.",
            "**Where to stay**",
            "| Hotel | Area | Per night | Rating | Why |\n|---|---|---|---|---|\n"
            "| Pilsen Art Hotel | Pilsen | $119.00 | 4.0 | An art hotel |",
            "**Events during your stay**",
            "No listed events fall on your dates.",
            "**Day by day**",
            "| Day | Weather | Plan |\n|---|---|---|\n"
            "| Fri Sep 3 | no forecast yet | Art Institute. |\n"
            "| Sat Sep 4 | no forecast yet | Pilsen murals. |\n"
            "| Sun Sep 5 | no forecast yet | Home. |",
            ANYTHING_ELSE,
        ]
    )
    assert sorted(runs(await transcript(chat))) == ["Hotels", "Itinerary", "Weather"]


async def test_sub_steps_that_fail_leave_the_plan_to_the_data() -> None:
    # Hotels and Events name what is not on their lists on every attempt, and the Itinerary never
    # writes the right days: the three runs fail, and code plans from the data alone.
    chat = chat_with(
        {
            "Planner": [
                found(
                    ("city", "Seattle", "Seattle"),
                    ("check_in", "May 14", day(5, 14)),
                    ("check_out", "to 15", day(5, 15)),
                    ("max_price", "up to $160", 160),
                )
            ],
            "Hotels": [picks(("H99", "Nice"))] * 3,
            "Events": [picks(("E1", "Seafood"))] * 3,  # on May 8: not during the stay
            "Itinerary": [itinerary(date(2027, 5, 20), "A day.")] * 3,
        }
    )
    result = await chat.say("Seattle from May 14 to 15, up to $160")
    assert result.ok and result.usage.model_calls == 1 + 3 + 3 + 3
    assert result.message == "\n\n".join(
        [
            "**Your trip to Seattle, Fri May 14 to Sat May 15, 2027 (1 night)**",
            "Hotels up to $160.00 a night.",
            "**Where to stay**",
            "| Hotel | Area | Per night | Rating | Why |\n|---|---|---|---|---|\n"
            f"| Ballard Boatyard Inn | Ballard | $159.00 | 4.3 | {HOTEL_FALLBACK} |\n"
            f"| Capitol Hill Guesthouse | Capitol Hill | $129.00 | 4.1 | {HOTEL_FALLBACK} |\n"
            f"| Fremont Troll House | Fremont | $109.00 | 3.9 | {HOTEL_FALLBACK} |",
            "**Events during your stay**",
            "| Date | Event | Venue | Ticket | Why |\n|---|---|---|---|---|\n"
            f"| Fri May 14 | Jazz Night at the Triple Door | The Triple Door | $38.00 | {EVENT_FALLBACK} |\n"
            f"| Sat May 15 | Pike Place Market Food Walk | Pike Place Market | $65.00 | {EVENT_FALLBACK} |\n"
            f"| Sat May 15 | Mariners vs. Astros | T-Mobile Park | $42.00 | {EVENT_FALLBACK} |",
            "**Day by day**",
            "| Day | Weather | Plan |\n|---|---|---|\n"
            "| Fri May 14 | sunny, 62°F / 48°F, rain 10% | — |\n"
            "| Sat May 15 | cloudy, 67°F / 45°F, rain 40% | — |",
            ANYTHING_ELSE,
        ]
    )
    # A failed run leaves nothing behind but its warnings (why it failed, then that it did): only
    # Weather's messages are in the transcript.
    warnings = [(warning.code, warning.message) for warning in (await session_of(chat)).warnings]
    assert sorted(w for w in warnings if w[0] == "sub_step_failed") == [
        ("sub_step_failed", "sub-step Events failed: attempts_exhausted"),
        ("sub_step_failed", "sub-step Hotels failed: attempts_exhausted"),
        ("sub_step_failed", "sub-step Itinerary failed: attempts_exhausted"),
    ]
    rejected = [message for code, message in warnings if code == "response_rejected"]
    assert rejected.count("H99 is not in the list. Pick only ids from the list: H2, H3, H5.") == 3
    assert rejected.count("E1 is not in the list. Pick only ids from the list: E2, E3, E4.") == 3
    assert len(warnings) == 3 + 9  # and the Itinerary's three corrections
    assert sorted(runs(await transcript(chat))) == ["Weather"]


async def test_a_city_or_budget_the_traveller_never_wrote_is_dropped() -> None:
    invented = found(
        ("city", "Hello there", "Seattle"),  # a known city, none of whose names was written
        ("city", "there", "Paris"),  # a city of the model's, not of the traveller's words
        ("max_price", "Hello there", 250),
    )
    kept = found(("city", "boston", "Seattle"), ("city", "boston", "Boston"), ("max_price", "$1,200", 1200))
    chat = chat_with({"Planner": [invented, kept]})
    said = ["Hello there", "I'd love to see boston, budget $1,200 total"]
    replies = [result.message for result in await chat.say_all(said)]
    assert replies == [
        GREETING,
        "Noted: Boston; hotels up to $1,200.00 a night. When would you like to be in Boston? "
        "Give your check-in and check-out dates.",
    ]
    assert (await session_of(chat)).states["Planner"] == {
        "form": form({"city": "Boston", "max_price": 1200.0}, asking="check_in")
    }


async def test_answers_in_another_order_are_all_kept_and_the_wishes_are_asked_once() -> None:
    chat = chat_with(
        {
            "Planner": [
                found(("check_in", "June 10", day(6, 10)), ("check_out", "June 13", day(6, 13))),
                found(("city", "New Orleans", "New Orleans")),
                found(),
                found(),
            ],
            "Hotels": [picks(("H20", "Jazz on the doorstep"))],
            "Events": [picks(("E36", "Famous jazz hall"))],
            "Itinerary": [NOLA_DAYS],
        }
    )
    said = ["June 10 to June 13, please", "New Orleans", "no, just plan it", "thanks"]
    results = await chat.say_all(said)
    replies = [result.message for result in results]
    assert replies[:2] == [
        f"{HELLO}\n\nNoted: Thu Jun 10 to Sun Jun 13, 2027 (3 nights). {WHICH_CITY}",
        f"Noted: New Orleans; Thu Jun 10 to Sun Jun 13, 2027 (3 nights). {WISHES_QUESTION}",
    ]
    # Declined, the wishes are not asked again: the plan, then nothing new to plan.
    assert replies[2:] == [NOLA_PLAN.replace("Interests: music.\n\n", ""), ANYTHING_ELSE]
    assert [result.usage.model_calls for result in results] == [1, 1, 4, 1]
    nola = {"city": "New Orleans", "check_in": "2027-06-10", "check_out": "2027-06-13"}
    assert (await session_of(chat)).states["Planner"] == {
        "form": form(nola, declined=["max_price"]),
        "planned": {**nola, "max_price": None, "interests": []},
        "hotels": ["H20"],
        "events": ["E36"],
    }


async def test_after_a_plan_new_details_make_a_new_plan() -> None:
    chat = chat_with(
        seattle_scripts(
            Planner=[found(("city", "San Francisco", "San Francisco"))],
            Hotels=[picks(("H9", "North Beach charm"))],
            Events=[picks(("E15", "Local food"))],
            Itinerary=[itinerary(date(2027, 5, 14), "Ferry Building.", "SFJAZZ.", "Lands End.", "Home.")],
        )
    )
    await chat.say_all(["Hi", "Seattle from May 14 to 17", "Under $200 a night, I love jazz and good food"])
    again = await chat.say("What about San Francisco instead?")
    assert (
        again.message
        == f"""\
Changed: San Francisco.

**Your trip to San Francisco, Fri May 14 to Mon May 17, 2027 (3 nights)**

Hotels up to $200.00 a night; interests: music, food.

**Where to stay**

| Hotel | Area | Per night | Rating | Why |
|---|---|---|---|---|
| Fog City Rooms | North Beach | $199.00 | 4.4 | North Beach charm |

**Events during your stay**

| Date | Event | Venue | Ticket | Why |
|---|---|---|---|---|
| Fri May 14 | Ferry Building Farmers Market | Ferry Building | free | Local food |

**Day by day**

| Day | Weather | Plan |
|---|---|---|
| Fri May 14 | sunny, 64°F / 52°F, rain 20% | Ferry Building. |
| Sat May 15 | sunny, 70°F / 53°F, rain 0% | SFJAZZ. |
| Sun May 16 | sunny, 63°F / 47°F, rain 20% | Lands End. |
| Mon May 17 | partly cloudy, 62°F / 49°F, rain 20% | Home. |

{ANYTHING_ELSE}"""
    )
    sf = {**SEATTLE_TRIP, "city": "San Francisco", "max_price": 200.0, "interests": ["music", "food"]}
    assert (await session_of(chat)).states["Planner"] == {
        "form": form(sf),
        "planned": sf,
        "hotels": ["H9"],
        "events": ["E15"],
    }


async def test_after_a_plan_a_repair_asks_what_to_change_not_the_whole_plan_again() -> None:
    # With every question answered, what the Planner waits for is a change to the plan: a repair
    # says that again, never the whole plan, nor its own last reply wrapped once more.
    chat = chat_with(
        seattle_scripts(
            Planner=[
                found(("repair", "book my flight", "out_of_scope")),
                found(("repair", "rental car", "out_of_scope")),
                found(("repair", "train", "out_of_scope")),
                found(("repair", "start over", "cancel")),
                found(),
            ]
        )
    )
    await chat.say_all(["Hi", "Seattle from May 14 to 17", "Under $200 a night, I love jazz and good food"])
    results = await chat.say_all(
        [
            "Can you book my flight?",
            "And a rental car?",
            "What about a train?",
            "Let's start over",
            "no, keep it",
        ]
    )
    sorry = f"I'm sorry, I can't help with that here. {ANYTHING_ELSE}"
    assert [result.message for result in results] == [
        sorry,
        sorry,
        f"I'm sorry, no one can take over here. {ANYTHING_ELSE}",
        "Shall I drop everything you told me so far (Seattle, Fri May 14, 2027, Mon May 17, 2027, up to "
        "$200 a night, music, food) and start over? Please say yes or no.",
        f"Fine, let's go on. {ANYTHING_ELSE}",
    ]
    planned = {**SEATTLE_TRIP, "max_price": 200.0, "interests": ["music", "food"]}
    assert (await session_of(chat)).states["Planner"]["planned"] == planned


async def test_every_request_of_the_longest_trip_stays_small_for_a_small_local_model() -> None:
    first = date(2027, 6, 1)
    lines = [f"Day {number} in Boston." for number in range(1, 16)]
    chat = chat_with(
        {
            "Planner": [
                found(
                    ("city", "Boston", "Boston"),
                    ("check_in", "June 1", day(6, 1)),
                    ("check_out", "June 15", day(6, 15)),
                    ("interests", "for the food", ["food"]),
                )
            ],
            "Hotels": [picks(("H27", "Near the cannoli"))],
            "Events": [picks(("E49", "Cannoli"), ("E48", "Islands by ferry"))],
            "Itinerary": [itinerary(first, *lines)],
        }
    )
    result = await chat.say("Boston, June 1 to June 15, for the food")
    assert result.ok and result.warnings == () and result.message.count(" in Boston. |") == 15
    assert "| Sat Jun 12 | North End Cannoli Crawl | North End | $48.00 | Cannoli |" in result.message
    sizes = {request.step: request.text_size() for request in chat.model.requests}
    assert sorted(sizes) == ["Events", "Hotels", "Itinerary", "Planner"]
    # System prompt, messages and schemas of each call stay near 1,000 tokens.
    assert max(sizes.values()) < 4_500, sizes


def test_unknown_picks_are_named_once_and_malformed_answers_are_left_to_output_validation() -> None:
    offered = ["H6", "H2"]
    two = ModelResponse(text=picks(("H7", "a"), ("H6", "b"), ("H8", "c")))
    again = ModelResponse(text=picks(("H7", "a"), ("H7", "b")))
    assert unknown_picks(two, HotelShortlist, offered) == Reject(
        "H7, H8 are not in the list. Pick only ids from the list: H6, H2."
    )
    assert unknown_picks(again, HotelShortlist, offered) == Reject(
        "H7 is not in the list. Pick only ids from the list: H6, H2."
    )
    assert unknown_picks(ModelResponse(text=picks(("H2", "ok"))), HotelShortlist, offered) is None
    assert unknown_picks(ModelResponse(text='{"picks": "H7"}'), HotelShortlist, offered) is None


async def test_what_the_message_does_not_bear_out_is_dropped_and_a_goodbye_ends_the_chat() -> None:
    # A small model fills in a trip on "hello", or reads it as a goodbye: a city, dates, interests
    # and an ending nobody wrote. Code keeps only what the message bears out (numbers it holds, a
    # city's names, an interest's words, a goodbye's), so it asks; a goodbye written ends the
    # conversation whatever question is pending.
    invented = found(
        ("goodbye", "Hi!", "goodbye"),
        ("city", "plan a trip", "Seattle"),
        ("check_in", "Can you help", day(5, 15)),
        ("check_out", "a trip", day(5, 20)),
        ("interests", "help me plan a trip", ["music", "art"]),
    )
    chat = chat_with(
        {"Planner": [invented, found(("goodbye", "Bye!", "goodbye"))], "TravelGoodbye": ["Goodbye!"]}
    )
    first, bye = await chat.say_all(["Hi! Can you help me plan a trip?", "Perfect, thanks. Bye!"])
    assert first.message == GREETING
    assert (bye.message, bye.completed, bye.step) == ("Goodbye!", True, "TravelGoodbye")
    session = await session_of(chat)
    assert session.status == "completed"
    assert session.states["Planner"] == {"form": form({})}
    assert conversation(await transcript(chat)) == [
        "Planner | user: Hi! Can you help me plan a trip?",
        f"Planner | assistant [direct]: {GREETING}",
        "Planner | user: Perfect, thanks. Bye!",
        "Planner | assistant [output]: "
        '{"found": [{"field": "goodbye", "quote": "Bye!", "value": "goodbye"}]}',
        "TravelGoodbye | user [crossing]: I'm done, thank you.",
        "TravelGoodbye | assistant: Goodbye!",
    ]


@pytest.mark.parametrize(
    ("read", "meant"),
    [
        ({"month": 20, "day": 10, "year": 2027}, date(2027, 10, 20)),  # "20/10/2027" read as written
        ({"month": 10, "day": 20, "year": 2027}, date(2027, 10, 20)),
        ({"month": 6, "day": 10, "year": None}, date(2027, 6, 10)),  # "6/10" stays June 10
    ],
)
def test_a_date_read_day_first_is_the_day_no_month_can_be(read: dict[str, Any], meant: date) -> None:
    assert TripDetails.model_validate({"check_in": read}).check_in == meant
