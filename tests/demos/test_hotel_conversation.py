"""The 14-turn hotel conversation, start to booking, with a scripted model.

Each turn the model only reads the guest's message into a small JSON value; code asks, searches,
lists, compares and proposes the booking, which the guest then approves. Asserts every reply, the
model calls of each turn, what each request shows the model, the whole transcript and the final
state.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from picoflow import FlowEngine
from picoflow.exceptions import SessionCompleted
from picoflow.models import ScriptedModel
from picoflow.testing import request_lines, transcript_lines
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel import flow as hotel_flow
from picoflow_demos.hotel.scripted import CONVERSATION, model_script

from .conftest import Chat

FOLLOW_UP = "Another comparison or ready to book?"
CHOOSE = (
    "Which hotel would you like to book? Give its number or name. "
    "You can also compare hotels or change the search."
)

# Cheapest first (equal totals by name), each hotel's price per night beside its total: the
# guest's budget is per night.
SUITES = (
    "Cheapest first:\n\n"
    "1. **Hilton Garden Inn Beaverton** (suite): $3,350.70 total for 7 nights, $459.00 to $527.85 a night\n"
    "2. **Hampton Inn Sherwood Portland** (suite): $3,547.80 total for 7 nights, $486.00 to $558.90 a night\n"
    "3. **Hampton Inn & Suites Portland Tigard** (suite): $3,810.60 total for 7 nights, "
    "$522.00 to $600.30 a night\n"
    "4. **Hilton Garden Inn Portland Airport** (suite): $4,204.80 total for 7 nights, "
    "$576.00 to $662.40 a night"
)
TWO_BEDS = (
    "Cheapest first:\n\n"
    "1. **Hilton Garden Inn Beaverton** (two beds): $2,144.44 total for 7 nights, "
    "$293.76 to $337.82 a night\n"
    "2. **Hampton Inn Sherwood Portland** (two beds): $2,270.60 total for 7 nights, "
    "$311.04 to $357.70 a night\n"
    "3. **Hampton Inn Portland/Clackamas** (two beds): $2,417.76 total for 7 nights, "
    "$331.20 to $380.88 a night\n"
    "4. **Hampton Inn & Suites Portland Tigard** (two beds): $2,438.78 total for 7 nights, "
    "$334.08 to $384.19 a night\n"
    "5. **Tru by Hilton Aloha Beaverton** (two beds): $2,438.78 total for 7 nights, "
    "$334.08 to $384.19 a night\n"
    "6. **Hampton Inn Portland East** (two beds): $2,501.86 total for 7 nights, $342.72 to $394.13 a night\n"
    "7. **Hilton Garden Inn Wilsonville Portland** (two beds): $2,564.92 total for 7 nights, "
    "$351.36 to $404.06 a night\n"
    "8. **Hilton Garden Inn Portland Airport** (two beds): $2,691.08 total for 7 nights, "
    "$368.64 to $423.94 a night\n"
    "9. **Hampton Inn Portland-Airport** (two beds): $2,796.20 total for 7 nights, $383.04 to $440.50 a night"
)
# Two beds in August (× 1.8 × 1.6), weekend nights × 1.15; levels 108, 115 and 133.
PRICE_2_3_9 = (
    "| Night | #2 Hampton Inn Sherwood Portland | #3 Hampton Inn Portland/Clackamas "
    "| #9 Hampton Inn Portland-Airport |\n"
    "| --- | ---: | ---: | ---: |\n"
    "| Room | two beds | two beds | two beds |\n"
    "| Sun 8/1/2027 | $357.70 | $380.88 | $440.50 |\n"
    "| Mon 8/2/2027 | $311.04 | $331.20 | $383.04 |\n"
    "| Tue 8/3/2027 | $311.04 | $331.20 | $383.04 |\n"
    "| Wed 8/4/2027 | $311.04 | $331.20 | $383.04 |\n"
    "| Thu 8/5/2027 | $311.04 | $331.20 | $383.04 |\n"
    "| Fri 8/6/2027 | $311.04 | $331.20 | $383.04 |\n"
    "| Sat 8/7/2027 | $357.70 | $380.88 | $440.50 |\n"
    "| **Total** | **$2,270.60** | **$2,417.76** | **$2,796.20** |\n\n" + FOLLOW_UP
)
AMENITIES_2_3_9 = (
    "| Amenity | #2 Hampton Inn Sherwood Portland | #3 Hampton Inn Portland/Clackamas "
    "| #9 Hampton Inn Portland-Airport |\n"
    "| --- | :---: | :---: | :---: |\n"
    "| Free Wi-Fi | ✅ | ✅ | ✅ |\n"
    "| Free parking | ✅ | ✅ | ✅ |\n"
    "| Free breakfast | ✅ | ✅ | ✅ |\n"
    "| Indoor pool | ✅ | ✅ | ❌ |\n"
    "| Fitness center | ✅ | ✅ | ✅ |\n"
    "| Pet friendly | ✅ | ✅ | ✅ |\n"
    "| Non-smoking | ✅ | ✅ | ✅ |\n"
    "| Digital key | ✅ | ✅ | ✅ |\n"
    "| EV charging | ❌ | ✅ | ❌ |\n"
    "| Airport shuttle | ❌ | ❌ | ✅ |\n"
    "| Business center | ✅ | ✅ | ✅ |\n"
    "| Meeting rooms | ✅ | ✅ | ❌ |\n"
    "| Connecting rooms | ✅ | ✅ | ✅ |\n"
    "| Streaming TV | ✅ | ✅ | ✅ |\n\n" + FOLLOW_UP
)
PRICE_3_9 = (
    "| Night | #3 Hampton Inn Portland/Clackamas | #9 Hampton Inn Portland-Airport |\n"
    "| --- | ---: | ---: |\n"
    "| Room | two beds | two beds |\n"
    "| Sun 8/1/2027 | $380.88 | $440.50 |\n"
    "| Mon 8/2/2027 | $331.20 | $383.04 |\n"
    "| Tue 8/3/2027 | $331.20 | $383.04 |\n"
    "| Wed 8/4/2027 | $331.20 | $383.04 |\n"
    "| Thu 8/5/2027 | $331.20 | $383.04 |\n"
    "| Fri 8/6/2027 | $331.20 | $383.04 |\n"
    "| Sat 8/7/2027 | $380.88 | $440.50 |\n"
    "| **Total** | **$2,417.76** | **$2,796.20** |\n\n" + FOLLOW_UP
)
WAITING = (
    "Waiting for approval: Book Hampton Inn Sherwood Portland, two beds: check-in Sunday August 1, 2027, "
    "check-out Sunday August 8, 2027 (7 nights), $311.04 to $357.70 a night, $2,270.60 in total "
    "(the customer must approve)"
)
BOOKED = (
    "**Your booking is confirmed.**\n"
    "- Hotel: Hampton Inn Sherwood Portland\n"
    "- Room: two beds\n"
    "- Stay: Sun 8/1/2027 to Sun 8/8/2027 (7 nights)\n"
    "- Total: $2,270.60\n"
    "- Confirmation number: **HF-TEST2345**\n\n"
    "Thank you for booking with us. Enjoy your stay in Portland!"
)

TRANSCRIPT = [
    "Explore | user: Hi",
    "Explore | assistant [direct]: Hello! I can help you find a hotel in the Portland, Oregon a",
    "Explore | user: yes",
    "Explore | assistant [direct]: Great. What are your check-in and check-out dates?",
    "Explore | user: 8/1/2027 to 8/8/2027",
    "Explore | assistant [direct]: Check-in Sunday August 1, 2027, check-out Sunday August 8, 2",
    "Explore | user: max 700",
    "Explore | assistant [direct]: Noted: up to $700 a night. Which room type would you like: o",
    "Explore | user: suite",
    "Explore | assistant [direct]: Noted: suite. Which amenities do you need? For example free ",
    "Explore | user: free wifi, parking",
    "Explore | assistant [direct]: Noted: Free Wi-Fi, Free parking. Any maximum distance to the",
    "Explore | user: none",
    "Present | assistant [direct]: **Aug 1 to Aug 8, 7 nights; up to $700 a night; suite; Free ",
    "Present | user: search",
    'Present | assistant [output]: {"hotels": [], "features": [], "action": "change_search", "p',
    "Explore | user [forwarded]: search",
    "Present | assistant [direct]: **Aug 1 to Aug 8, 7 nights; up to $700 a night; suite; Free ",
    "Present | user: change to 2 bed rooms, search",
    'Present | assistant [output]: {"hotels": [], "features": [], "action": "change_search", "p',
    "Explore | user [forwarded]: change to 2 bed rooms, search",
    'Explore | assistant [output]: {"found": [{"field": "room_types", "quote": "2 bed rooms", "',
    "Present | assistant [direct]: Changed: two beds.\n\n**Aug 1 to Aug 8, 7 nights; up to $700 a",
    "Present | user: compare hotel 2,3,9 on price",
    "Compare | assistant [direct]: | Night | #2 Hampton Inn Sherwood Portland | #3 Hampton Inn ",
    "Compare | user: compare on amenities",
    "Compare | assistant [direct]: | Amenity | #2 Hampton Inn Sherwood Portland | #3 Hampton In",
    "Compare | user: compare hotels 3,9 on price",
    "Compare | assistant [direct]: | Night | #3 Hampton Inn Portland/Clackamas | #9 Hampton Inn",
    "Compare | user: resume booking",
    "Present | assistant [direct]: **Aug 1 to Aug 8, 7 nights; up to $700 a night; two beds; Fr",
    "Present | user: 2",
    'Present | assistant [output]: {"hotels": [2], "features": [], "action": "book", "pick": "n',
    'Present | assistant [call]: -> book({"check_in": "2027-08-01", "check_out": "2027-08-08", "hotel": '
    '"Hampton Inn Sherwood Portland", "language": "en", "nightly": ["357.70", "311.04", "311.04", "311.04", '
    '"311.04", "311.04", "357.70"], "room_type": "two beds", "total": "2270.60"}) #code_33',
    "Present | tool book #code_33: Accepted.",
    "Goodbye | assistant [direct]: **Your booking is confirmed.**\n- Hotel: Hampton Inn Sherwood",
]
SUITE_SEARCH = "**Aug 1 to Aug 8, 7 nights; up to $700 a night; suite; Free Wi-Fi, Free parking**"
TWO_BEDS_SEARCH = "**Aug 1 to Aug 8, 7 nights; up to $700 a night; two beds; Free Wi-Fi, Free parking**"


@pytest.fixture
async def chat(monkeypatch: pytest.MonkeyPatch) -> Chat:
    monkeypatch.setattr(hotel_flow, "confirmation_number", lambda key: "HF-TEST2345")
    model = ScriptedModel(model_script(), grounding="small")
    conversation = Chat(FlowEngine([HotelFlow], model=model), model, "hotel")
    await conversation.say_all([turn.user for turn in CONVERSATION])
    await conversation.decide("approve")  # the guest approves the booking card
    return conversation


async def test_every_reply_is_written_by_code(chat: Chat) -> None:
    assert all(result.ok for result in chat.results), [result.error for result in chat.results]
    assert [result.message for result in chat.results] == [
        "Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in the Portland area?",
        "Great. What are your check-in and check-out dates?",
        "Check-in Sunday August 1, 2027, check-out Sunday August 8, 2027: 7 nights. "
        "What nightly budget do you have in mind: a minimum, a maximum or both?",
        "Noted: up to $700 a night. Which room type would you like: one bed, two beds or suite?",
        "Noted: suite. Which amenities do you need? For example free WiFi, free parking or free breakfast.",
        "Noted: Free Wi-Fi, Free parking. Any maximum distance to the airport or the city center, in miles?",
        f"{SUITE_SEARCH}\n\n{SUITES}\n\n{CHOOSE}",
        f"{SUITE_SEARCH}\n\n{SUITES}\n\n{CHOOSE}",
        f"Changed: two beds.\n\n{TWO_BEDS_SEARCH}\n\n{TWO_BEDS}\n\n{CHOOSE}",
        PRICE_2_3_9,
        AMENITIES_2_3_9,
        PRICE_3_9,
        f"{TWO_BEDS_SEARCH}\n\n{TWO_BEDS}\n\n{CHOOSE}",
        WAITING,  # "2" books nothing: it proposes the booking, which waits for the guest
        BOOKED,  # the guest's approval
    ]
    assert [result.completed for result in chat.results] == [False] * 14 + [True]
    assert [result.step for result in chat.results] == ["Explore"] * 6 + ["Present"] * 3 + ["Compare"] * 3 + [
        "Present",
        "Present",
        "Goodbye",
    ]
    assert [len(result.pending) for result in chat.results] == [0] * 13 + [1, 0]


async def test_one_reading_per_turn_and_two_when_the_search_changes(chat: Chat) -> None:
    calls = [result.usage.model_calls for result in chat.results]
    assert calls == [1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 0]  # the approval asks no model
    assert [len(requests) for requests in chat.requests_per_turn] == calls
    assert chat.model.remaining == 0
    # Every request asks for a small structured reading, never for free text.
    assert {request.output.name for request in chat.model.requests if request.output} == {
        "CriteriaReading",
        "GuestRequest",
    }
    assert all(request.output is not None and not request.tools for request in chat.model.requests)


async def test_each_request_shows_only_the_question_and_the_answer(chat: Chat) -> None:
    # Explore: the question code asked, then the guest's words; never the earlier answers.
    [dates] = chat.turn_requests(3)
    assert request_lines(dates)[1:] == [
        "assistant [direct]: Great. What are your check-in and check-out dates?",
        "user: 8/1/2027 to 8/8/2027",
    ]
    # Present and Compare: only the guest's latest words; the list is in the prompt, tables never sent.
    # Present and Compare: the note of what the guest was shown, with the question they answer, then
    # their words; the list is in the prompt and no table is ever sent back.
    shown = {
        10: "Showed the list of 9 hotels.\n\n" + CHOOSE,
        11: "Compared hotels 2, 3 and 9 on price.\n\n" + FOLLOW_UP,
        12: "Compared hotels 2, 3 and 9 on amenities.\n\n" + FOLLOW_UP,
        13: "Compared hotels 3 and 9 on price.\n\n" + FOLLOW_UP,
        14: "Showed the list of 9 hotels.\n\n" + CHOOSE,
    }
    for turn, note in shown.items():
        [request] = chat.turn_requests(turn)
        assert [m.content for m in request.messages] == [note, CONVERSATION[turn - 1].user], turn
        assert "2. Hampton Inn Sherwood Portland" in request.system
    # The prompt of a step never changes within a visit, so a local model reuses its prompt cache.
    explore = {request.system for request in chat.model.requests if request.step == "Explore"}
    assert len(explore) == 1 and "Today is Thursday 2027-07-15." in next(iter(explore))
    [_, research] = chat.turn_requests(9)
    assert [m.content for m in research.messages] == ["change to 2 bed rooms, search"]


async def test_whole_transcript(chat: Chat) -> None:
    assert await transcript_lines(chat.engine, chat.session_id or "", width=60) == TRANSCRIPT
    messages = await chat.engine.store.transcript(chat.session_id or "")
    replies = [m.content for m in messages if m.role == "assistant" and m.kind == "direct"]
    assert replies == [result.message for result in chat.results if not result.pending]


async def test_final_state(chat: Chat) -> None:
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    assert session.status == "completed" and session.current_step == "Goodbye"
    assert session.sequence == [
        "Explore", "Present", "Explore", "Present", "Explore", "Present", "Compare", "Present", "Goodbye"
    ]  # fmt: skip
    # The Explore step's state is its form and the language the guest's words told (English: the
    # replies are in it), nothing else: every key beside them is the step's own.
    assert session.states["Explore"] == {
        "form": {
            "known": {
                "in_portland": True,
                "check_in": "2027-08-01",
                "check_out": "2027-08-08",
                "max_price": 700.0,
                "room_types": ["two beds"],
                "amenities": ["freeWiFi", "freeParking"],
            },
            "declined": ["max_airport_miles"],
            "asking": None,
            "introduced": True,
        },
        "locale": "en",
    }
    present = session.states["Present"]
    assert set(present) == {"hotels", "check_in", "check_out", "searched", "nightly", "compared", "feature"}
    assert (present["compared"], present["feature"], present["nightly"]) == ([3, 9], "price", True)
    # The list in the state is the list shown, in its order: hotel 2 is the one booked.
    totals = [(hotel["total"], hotel["name"]) for hotel in present["hotels"]]
    assert totals == sorted(totals, key=lambda pair: (Decimal(pair[0]), pair[1]))
    assert [hotel["name"] for hotel in present["hotels"]][1] == "Hampton Inn Sherwood Portland"
    assert (present["check_in"], present["check_out"]) == ("2027-08-01", "2027-08-08")
    booking = session.states["Goodbye"]["booking"]
    assert booking == {
        "hotel": "Hampton Inn Sherwood Portland",
        "room_type": "two beds",
        "check_in": "2027-08-01",
        "check_out": "2027-08-08",
        "total": "2270.60",
        "confirmation": "HF-TEST2345",
    }
    assert session.prompts == {}
    assert session.warnings == [] and session.turns == 15 and session.usage.model_calls == 16
    # Memory stays short: what the guest last saw in each namespace, not the whole conversation
    # (the list's: the booking's call and its result).
    assert len(session.namespace("hotel-explore").messages) <= 2
    assert len(session.namespace("Present").messages) == 2
    (approval,) = session.approvals
    assert (approval.tool, approval.status, approval.step) == ("book", "approved", "Present")
    again = await chat.engine.run("hotel", "one more thing", chat.session_id)
    assert again.error is not None and again.error.is_a(SessionCompleted)


def test_a_confirmation_number_is_the_approvals_own_distinct_and_readable() -> None:
    numbers = {hotel_flow.confirmation_number(f"apr_{index:024x}") for index in range(200)}
    assert len(numbers) == 200
    assert all(len(n) == 11 and n.startswith("HF-") and not set(n[3:]) & set("01IO") for n in numbers)
    # The same approval, the same booking: carried out again, it is not a second one.
    assert hotel_flow.confirmation_number("apr_1") == hotel_flow.confirmation_number("apr_1")
