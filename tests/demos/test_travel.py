"""TravelFlow: the Planner's model reads the request, code checks it, and three sub-steps look into
hotels, events and weather side by side before the Itinerary sub-step writes a line per day."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from typing import Any

import pytest

from picoflow import Caller, FlowEngine, Reject
from picoflow.messages import Message, ModelResponse
from picoflow.models import ScriptedModel, ToolCall
from picoflow.sessions import Session
from picoflow.testing import describe, request_lines
from picoflow_demos.travel import TravelFlow
from picoflow_demos.travel.flow import ANYTHING_ELSE, EVENT_FALLBACK, HOTEL_FALLBACK
from picoflow_demos.travel.research import HotelShortlist, unknown_picks
from picoflow_demos.travel.trip import WISHES_QUESTION

from .conftest import Chat

TODAY = "2027-04-20"  # a Tuesday
CITIES = "Seattle, San Francisco, Chicago, New Orleans and Boston"
WHICH_CITY = f"Which city would you like to visit? I can plan trips to {CITIES}."
GREETING = f"Hello! I plan short trips: hotels, local events and the weather, day by day. {WHICH_CITY}"
SEATTLE_TRIP = {"city": "Seattle", "check_in": "2027-05-14", "check_out": "2027-05-17"}


@pytest.fixture(autouse=True)
def travel_today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAVEL_FLOW_CURRENT_DATE", TODAY)


def day(month: int, number: int, year: int | None = None) -> dict[str, int | None]:
    return {"month": month, "day": number, "year": year}


def note(**said: Any) -> ToolCall:
    return ToolCall("note_trip", {"said": said})


def picks(*chosen: tuple[str, str]) -> str:
    return json.dumps({"picks": [{"id": pick, "reason": reason} for pick, reason in chosen]})


def itinerary(first: date, *lines: str) -> str:
    days = [{"date": (first + timedelta(days=n)).isoformat(), "line": line} for n, line in enumerate(lines)]
    return json.dumps({"days": days})


SEATTLE_LINES = (
    "Arrive, check in, then jazz at the Triple Door.",
    "Morning food walk at Pike Place Market.",
    "Showers: an indoor day at the museums.",
    "Check out and fly home.",
)


def chat_with(scripts: Mapping[str, Sequence[Any]]) -> Chat:
    model = ScriptedModel(scripts)
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


def seattle_scripts(**more: Sequence[Any]) -> dict[str, list[Any]]:
    """A conversation that asks, then plans Seattle from May 14 to 17 on $200 a night for music and
    food; ``more`` adds responses after those of each step."""
    scripts: dict[str, list[Any]] = {
        "Planner": [
            # Words instead of a reading, and again after being told to read: code still greets.
            "Hello! How can I help?",
            "Hello!",
            note(city="Seattle", check_in=day(5, 14), check_out=day(5, 17)),
            note(max_price=200, interests=["music", "food"]),
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
            Planner=[note(), ToolCall("terminate_session")],
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
        f"Noted: Seattle; Fri May 14 to Mon May 17, 2027 (3 nights). {WISHES_QUESTION}",
        SEATTLE_PLAN,
        ANYTHING_ELSE,
        "Have a wonderful time in Seattle!",
    ]
    assert [result.step for result in results] == ["Planner"] * 4 + ["TravelGoodbye"]
    assert [result.completed for result in results] == [False] * 4 + [True]
    # The greeting took two answers (words, a correction, words again). The plan's turn counts its
    # sub-steps: the Planner's reading, Hotels twice (one answer was sent back), Events and
    # Itinerary; Weather decides in code.
    assert [result.usage.model_calls for result in results] == [2, 1, 5, 1, 2]
    assert [result.usage.tool_calls for result in results] == [0, 1, 1, 1, 1]
    assert chat.model.remaining == 0

    messages = await transcript(chat)
    assert conversation(messages) == [
        "Planner | user: Hi",
        f"Planner | assistant [direct]: {GREETING}",
        "Planner | user: Seattle from May 14 to 17",
        'Planner | assistant: -> note_trip({"said": {"check_in": {"day": 14, "month": 5, "year": null}, '
        '"check_out": {"day": 17, "month": 5, "year": null}, "city": "Seattle"}}) #call_Planner_1',
        "Planner | tool note_trip #call_Planner_1: Accepted.",
        f"Planner | assistant [direct]: {results[1].message}",
        "Planner | user: Under $200 a night, I love jazz and good food",
        'Planner | assistant: -> note_trip({"said": {"interests": ["music", "food"], "max_price": 200}}) '
        "#call_Planner_2",
        "Planner | tool note_trip #call_Planner_2: Accepted.",
        f"Planner | assistant [direct]: {SEATTLE_PLAN}",
        "Planner | user: Thanks!",
        'Planner | assistant: -> note_trip({"said": {}}) #call_Planner_3',
        "Planner | tool note_trip #call_Planner_3: Accepted.",
        f"Planner | assistant [direct]: {ANYTHING_ELSE}",
        "Planner | user: That's all, bye",
        "Planner | assistant: -> terminate_session({}) #call_Planner_4",
        "Planner | tool terminate_session #call_Planner_4: Accepted.",
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
    assert session.states["Planner"] == {
        "trip": {
            **SEATTLE_TRIP,
            "max_price": 200.0,
            "interests": ["music", "food"],
            "asked_wishes": True,
            "planned": True,
        },
        "hotels": ["H6", "H2"],
        "events": ["E2", "E3"],
    }
    # The Planner's memory keeps a note of the plan, not the tables; each reading saw only the latest words.
    planner_requests = [request for request in chat.model.requests if request.step == "Planner"]
    assert [len(request.messages) for request in planner_requests] == [1, 3, 1, 1, 1, 1]
    # The greeting's words were sent back once, and so was a hotel pick off the list.
    assert [warning.code for warning in session.warnings] == ["response_rejected", "response_rejected"]


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
    ("check_in", "check_out", "reply"),
    [
        (
            day(4, 2, 2027),
            day(4, 5, 2027),
            "Fri Apr 2, 2027 is in the past: today is Tue Apr 20, 2027.",
        ),
        (
            day(6, 12),
            day(6, 9),
            "The trip would end on Wed Jun 9, 2027, before it starts on Sat Jun 12, 2027: the check-out date "
            "must come after the check-in date.",
        ),
        (day(6, 12), day(6, 12), "A trip needs at least one night, and both dates are Sat Jun 12, 2027."),
        (
            day(6, 1),
            day(6, 20),
            "I can plan trips of up to 14 nights, and Tue Jun 1 to Sun Jun 20, 2027 is 19 nights.",
        ),
    ],
)
async def test_dates_that_cannot_be_planned_are_refused_in_code(
    check_in: dict[str, Any], check_out: dict[str, Any], reply: str
) -> None:
    chat = chat_with({"Planner": [note(city="Boston", check_in=check_in, check_out=check_out)]})
    result = await chat.say(f"Boston please, from the {check_in['day']} to the {check_out['day']}")
    assert result.message == (
        f"{reply} When would you like to be in Boston? Give your check-in and check-out dates."
    )
    assert result.usage.model_calls == 1 and result.step == "Planner"
    # The city is kept; the dates are asked for again. No sub-step ran.
    assert (await session_of(chat)).states["Planner"] == {
        "trip": {
            "city": "Boston",
            "check_in": None,
            "check_out": None,
            "max_price": None,
            "interests": None,
            "asked_wishes": False,
            "planned": False,
        }
    }
    assert all(message.within is None for message in await transcript(chat))


async def test_a_city_without_listings_is_refused_and_the_dates_are_kept() -> None:
    chat = chat_with(
        {
            "Planner": [
                note(city="Paris", check_in=day(6, 10), check_out=day(6, 13)),
                note(city="New Orleans", interests=["music"]),
            ],
            "Hotels": [picks(("H20", "Jazz on the doorstep"))],
            "Events": [picks(("E36", "Famous jazz hall"))],
            "Itinerary": [
                itinerary(
                    date(2027, 6, 10), "Preservation Hall at night.", "Ghost walk.", "Swamp tour.", "Home."
                )
            ],
        }
    )
    refused = await chat.say("Paris from June 10 to 13")
    # The traveller's words are not repeated; the question lists the cities there are listings for.
    assert refused.message == f"I have no listings for that city. {WHICH_CITY}"
    planned = await chat.say("OK, NOLA then. I love jazz")
    assert planned.message.startswith(
        "**Your trip to New Orleans, Thu Jun 10 to Sun Jun 13, 2027 (3 nights)**\n\nInterests: music.\n\n"
    )
    assert "| Frenchmen Music House | Marigny | $169.00 | 4.4 | Jazz on the doorstep |" in planned.message
    assert (
        "| Thu Jun 10 | Preservation Hall Jazz | Preservation Hall | $50.00 | Famous jazz hall |"
        in planned.message
    )
    state = (await session_of(chat)).states["Planner"]
    assert (state["trip"]["city"], state["hotels"], state["events"]) == ("New Orleans", ["H20"], ["E36"])


async def test_a_budget_below_every_hotel_is_said_with_the_cheapest_price() -> None:
    chat = chat_with(
        {"Planner": [note(city="Boston", check_in=day(5, 15), check_out=day(5, 17), max_price=100)]}
    )
    result = await chat.say("Boston May 15 to 17, max $100 a night")
    assert result.message == (
        "No hotel in Boston is within $100.00 a night; the cheapest is $119.00. What nightly budget shall I "
        "plan with?"
    )
    assert result.usage.model_calls == 1
    assert all(message.within is None for message in await transcript(chat))


async def test_dates_without_events_or_forecasts_run_only_hotels_and_weather() -> None:
    # September: no event and no forecast in the data. No Events script: had it run, the turn would fail.
    chat = chat_with(
        {
            "Planner": [note(city="Chicago", check_in=day(9, 3), check_out=day(9, 5), interests=["art"])],
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
            "Planner": [note(city="Seattle", check_in=day(5, 14), check_out=day(5, 15), max_price=160)],
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
    chat = chat_with({"Planner": [note(city="Seattle", max_price=250), note(city="Boston", max_price=1200)]})
    invented = await chat.say("Hello there")
    assert invented.message == GREETING
    kept = await chat.say("I'd love to see boston, budget $1,200 total")
    assert (
        kept.message == "Noted: Boston; hotels up to $1,200.00 a night. When would you like to be in Boston? "
        "Give your check-in and check-out dates."
    )


async def test_after_a_plan_new_details_make_a_new_plan() -> None:
    chat = chat_with(
        seattle_scripts(
            Planner=[note(city="San Francisco")],
            Hotels=[picks(("H9", "North Beach charm"))],
            Events=[picks(("E15", "Jazz"))],
            Itinerary=[itinerary(date(2027, 5, 14), "Ferry Building.", "SFJAZZ.", "Lands End.", "Home.")],
        )
    )
    await chat.say_all(["Hi", "Seattle from May 14 to 17", "Under $200 a night, I love jazz and good food"])
    again = await chat.say("What about San Francisco instead?")
    assert again.message.startswith(
        "**Your trip to San Francisco, Fri May 14 to Mon May 17, 2027 (3 nights)**"
    )
    assert "| Fog City Rooms | North Beach | $199.00 | 4.4 | North Beach charm |" in again.message
    state = (await session_of(chat)).states["Planner"]
    assert (state["hotels"], state["events"], state["trip"]["planned"]) == (["H9"], ["E15"], True)


async def test_every_request_of_the_longest_trip_stays_small_for_a_small_local_model() -> None:
    first = date(2027, 6, 1)
    lines = [f"Day {number} in Boston." for number in range(1, 16)]
    chat = chat_with(
        {
            "Planner": [note(city="Boston", check_in=day(6, 1), check_out=day(6, 15), interests=["food"])],
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
    # A small model fills in a trip on "hello": dates and interests nobody wrote. Code keeps only
    # what the message bears out (numbers it holds, words of an interest), so it just asks.
    chat = chat_with(
        {
            "Planner": [
                note(city="Seattle", check_in=day(5, 15), check_out=day(5, 20), interests=["music", "art"]),
                note(goodbye=True),
            ],
            "TravelGoodbye": ["Goodbye!"],
        }
    )
    first = await chat.say("Hi! Can you help me plan a trip?")
    assert first.ok and "which city" in first.message.casefold()
    session = await session_of(chat)
    assert session.states["Planner"]["trip"]["check_in"] is None
    assert session.states["Planner"]["trip"]["interests"] in (None, [])
    bye = await chat.say("Perfect, thanks. Bye!")
    assert bye.ok and bye.completed and bye.step == "TravelGoodbye"
