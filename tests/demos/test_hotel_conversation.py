"""The 14-turn hotel conversation, start to booking, with a scripted model.

Asserts every reply's key content, the model calls of each turn (none after a list, a comparison
table or a confirmation is built), the steps visited, the whole transcript and the final state.
"""

from __future__ import annotations

import pytest

from picoflow import FlowEngine
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

SUITES = (
    "1. **Hampton Inn & Suites Portland Tigard** (suite): $3,810.60 total for 7 nights\n"
    "2. **Hilton Garden Inn Portland Airport** (suite): $4,204.80 total for 7 nights\n"
    "3. **Hilton Garden Inn Beaverton** (suite): $3,350.70 total for 7 nights\n"
    "4. **Hampton Inn Sherwood Portland** (suite): $3,547.80 total for 7 nights"
)
TWO_BEDS = (
    "1. **Hampton Inn & Suites Portland Tigard** (two beds): $2,438.78 total for 7 nights\n"
    "2. **Hampton Inn Portland-Airport** (two beds): $2,796.20 total for 7 nights\n"
    "3. **Hilton Garden Inn Portland Airport** (two beds): $2,691.08 total for 7 nights\n"
    "4. **Hilton Garden Inn Beaverton** (two beds): $2,144.44 total for 7 nights\n"
    "5. **Hampton Inn Portland/Clackamas** (two beds): $2,417.76 total for 7 nights\n"
    "6. **Tru by Hilton Aloha Beaverton** (two beds): $2,438.78 total for 7 nights\n"
    "7. **Hampton Inn Portland East** (two beds): $2,501.86 total for 7 nights\n"
    "8. **Hampton Inn Sherwood Portland** (two beds): $2,270.60 total for 7 nights\n"
    "9. **Hilton Garden Inn Wilsonville Portland** (two beds): $2,564.92 total for 7 nights"
)
# Two beds in August (× 1.8 × 1.6), weekend nights × 1.15; levels 133, 115 and 108.
PRICE_2_5_8 = (
    "| Night | #2 Hampton Inn Portland-Airport | #5 Hampton Inn Portland/Clackamas "
    "| #8 Hampton Inn Sherwood Portland |\n"
    "| --- | ---: | ---: | ---: |\n"
    "| Room | two beds | two beds | two beds |\n"
    "| Sun 8/1/2027 | $440.50 | $380.88 | $357.70 |\n"
    "| Mon 8/2/2027 | $383.04 | $331.20 | $311.04 |\n"
    "| Tue 8/3/2027 | $383.04 | $331.20 | $311.04 |\n"
    "| Wed 8/4/2027 | $383.04 | $331.20 | $311.04 |\n"
    "| Thu 8/5/2027 | $383.04 | $331.20 | $311.04 |\n"
    "| Fri 8/6/2027 | $383.04 | $331.20 | $311.04 |\n"
    "| Sat 8/7/2027 | $440.50 | $380.88 | $357.70 |\n"
    "| **Total** | **$2,796.20** | **$2,417.76** | **$2,270.60** |\n\n" + FOLLOW_UP
)
AMENITIES_2_5_8 = (
    "| Amenity | #2 Hampton Inn Portland-Airport | #5 Hampton Inn Portland/Clackamas "
    "| #8 Hampton Inn Sherwood Portland |\n"
    "| --- | :---: | :---: | :---: |\n"
    "| Free Wi-Fi | ✅ | ✅ | ✅ |\n"
    "| Free parking | ✅ | ✅ | ✅ |\n"
    "| Free breakfast | ✅ | ✅ | ✅ |\n"
    "| Indoor pool | ❌ | ✅ | ✅ |\n"
    "| Fitness center | ✅ | ✅ | ✅ |\n"
    "| Pet friendly | ✅ | ✅ | ✅ |\n"
    "| Non-smoking | ✅ | ✅ | ✅ |\n"
    "| Digital key | ✅ | ✅ | ✅ |\n"
    "| EV charging | ❌ | ✅ | ❌ |\n"
    "| Airport shuttle | ✅ | ❌ | ❌ |\n"
    "| Business center | ✅ | ✅ | ✅ |\n"
    "| Meeting rooms | ❌ | ✅ | ✅ |\n"
    "| Connecting rooms | ✅ | ✅ | ✅ |\n"
    "| Streaming TV | ✅ | ✅ | ✅ |\n\n" + FOLLOW_UP
)
PRICE_2_5 = (
    "| Night | #2 Hampton Inn Portland-Airport | #5 Hampton Inn Portland/Clackamas |\n"
    "| --- | ---: | ---: |\n"
    "| Room | two beds | two beds |\n"
    "| Sun 8/1/2027 | $440.50 | $380.88 |\n"
    "| Mon 8/2/2027 | $383.04 | $331.20 |\n"
    "| Tue 8/3/2027 | $383.04 | $331.20 |\n"
    "| Wed 8/4/2027 | $383.04 | $331.20 |\n"
    "| Thu 8/5/2027 | $383.04 | $331.20 |\n"
    "| Fri 8/6/2027 | $383.04 | $331.20 |\n"
    "| Sat 8/7/2027 | $440.50 | $380.88 |\n"
    "| **Total** | **$2,796.20** | **$2,417.76** |\n\n" + FOLLOW_UP
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
    "Explore | assistant: Hello! I can help you find a hotel in the Portland, Oregon a",
    "Explore | user: yes",
    "Explore | assistant: Great. What are your check-in and check-out dates?",
    "Explore | user: 8/1/2027 to 8/8/2027",
    "Explore | assistant: Check-in Sunday 2027-08-01, check-out Sunday 2027-08-08: 7 n",
    "Explore | user: max 700",
    "Explore | assistant: Up to $700 a night. Which room type: one bed, two beds or su",
    "Explore | user: suite",
    "Explore | assistant: A suite. Any amenities you need? For example freeWiFi, freeP",
    "Explore | user: free wifi, parking",
    "Explore | assistant: Noted: freeWiFi and freeParking. Any maximum distance to the",
    "Explore | user: none",
    "Explore | assistant: Your search:\n- 2027-08-01 to 2027-08-08 (7 nights)\n- up to $",
    "Explore | user: search",
    'Explore | assistant: -> capture_choices({"criteria": {"amenities": ["freeWiFi", "freeParking"], '
    '"check_in": "2027-08-01", "check_out": "2027-08-08", "max_price": 700, "room_types": ["suite"]}}) '
    "#call_1",
    "Explore | tool capture_choices #call_1: 4 hotels found; the guest now sees the list.",
    "Present | assistant [direct]: 1. **Hampton Inn & Suites Portland Tigard** (suite): $3,810.",
    "Present | user: change to 2 bed rooms, search",
    "Present | assistant: -> search_again({}) #call_2",
    "Present | tool search_again #call_2: Accepted.",
    "Explore | user [forwarded]: change to 2 bed rooms, search",
    'Explore | assistant: -> capture_choices({"criteria": {"amenities": ["freeWiFi", "freeParking"], '
    '"check_in": "2027-08-01", "check_out": "2027-08-08", "max_price": 700, "room_types": ["two beds"]}}) '
    "#call_3",
    "Explore | tool capture_choices #call_3: 9 hotels found; the guest now sees the list.",
    "Present | assistant [direct]: 1. **Hampton Inn & Suites Portland Tigard** (two beds): $2,4",
    "Present | user: compare hotel 2,5,8 on price",
    'Present | assistant: -> go_compare({"hotels": ["Hampton Inn Portland-Airport", '
    '"Hampton Inn Portland/Clackamas", "Hampton Inn Sherwood Portland"]}) #call_4',
    "Present | tool go_compare #call_4: Accepted.",
    "Compare | user [forwarded]: compare hotel 2,5,8 on price",
    'Compare | assistant: -> generate_comparison({"feature": "price", "hotels": '
    '["Hampton Inn Portland-Airport", "Hampton Inn Portland/Clackamas", "Hampton Inn Sherwood Portland"]}) '
    "#call_5",
    "Compare | tool generate_comparison #call_5: The comparison was shown to the guest.",
    "Compare | assistant [direct]: | Night | #2 Hampton Inn Portland-Airport | #5 Hampton Inn P",
    "Compare | user: compare on amenities",
    'Compare | assistant: -> generate_comparison({"feature": "amenities"}) #call_6',
    "Compare | tool generate_comparison #call_6: The comparison was shown to the guest.",
    "Compare | assistant [direct]: | Amenity | #2 Hampton Inn Portland-Airport | #5 Hampton Inn",
    "Compare | user: compare hotels 2,5 on price",
    'Compare | assistant: -> generate_comparison({"feature": "price", "hotels": '
    '["Hampton Inn Portland-Airport", "Hampton Inn Portland/Clackamas"]}) #call_7',
    "Compare | tool generate_comparison #call_7: The comparison was shown to the guest.",
    "Compare | assistant [direct]: | Night | #2 Hampton Inn Portland-Airport | #5 Hampton Inn P",
    "Compare | user: resume booking",
    "Compare | assistant: -> resume_booking({}) #call_8",
    "Compare | tool resume_booking #call_8: The guest sees the hotel list again.",
    "Present | assistant [direct]: 1. **Hampton Inn & Suites Portland Tigard** (two beds): $2,4",
    "Present | user: 8",
    'Present | assistant: -> chosen_hotel({"hotel": "Hampton Inn Sherwood Portland"}) #call_9',
    "Present | tool chosen_hotel #call_9: Booked Hampton Inn Sherwood Portland, confirmation number HF",
    "Goodbye | assistant [direct]: **Your booking is confirmed.**\n- Hotel: Hampton Inn Sherwood",
]


@pytest.fixture
async def chat(monkeypatch: pytest.MonkeyPatch) -> Chat:
    monkeypatch.setattr(hotel_flow, "new_confirmation_number", lambda: "HF-TEST2345")
    model = ScriptedModel(model_script())
    conversation = Chat(FlowEngine([HotelFlow], model=model), model, "hotel")
    await conversation.say_all([turn.user for turn in CONVERSATION])
    return conversation


async def test_every_reply_says_what_the_guest_needs(chat: Chat) -> None:
    replies = [result.message for result in chat.results]
    assert all(result.ok for result in chat.results), [result.error for result in chat.results]
    assert "Is your stay in Portland?" in replies[0]
    assert "check-in and check-out dates" in replies[1]
    assert "7 nights" in replies[2]
    assert "room type" in replies[3]
    assert "amenities" in replies[4]
    assert "freeWiFi and freeParking" in replies[5]
    assert replies[6].endswith("Shall I search?")
    assert replies[7] == f"{SUITES}\n\n{CHOOSE}"
    assert replies[8] == f"{TWO_BEDS}\n\n{CHOOSE}"
    assert replies[9] == PRICE_2_5_8
    assert replies[10] == AMENITIES_2_5_8
    assert replies[11] == PRICE_2_5
    assert replies[12] == f"{TWO_BEDS}\n\n{CHOOSE}"
    assert replies[13] == BOOKED
    assert [result.completed for result in chat.results] == [False] * 13 + [True]
    assert [result.step for result in chat.results] == ["Explore"] * 7 + ["Present"] * 2 + ["Compare"] * 3 + [
        "Present",
        "Goodbye",
    ]


async def test_model_calls_per_turn_and_none_after_code_writes_the_reply(chat: Chat) -> None:
    calls = [result.usage.model_calls for result in chat.results]
    assert calls == [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1]
    assert [len(requests) for requests in chat.requests_per_turn] == calls
    assert len(chat.model.requests) == 16 and chat.model.remaining == 0
    # Lists (turns 8, 9, 13), tables (10 to 12) and the confirmation (14): the model only picked a
    # tool, and the reply reached the guest with no model call after it.
    for turn in (8, 9, 10, 11, 12, 13, 14):
        last = list(chat.turn_requests(turn))[-1]
        assert last.messages[-1].role == "user" and last.messages[-1].kind in (None, "forwarded"), turn
        reply = chat.results[turn - 1].message
        assert all(reply not in m.content for request in chat.turn_requests(turn) for m in request.messages)
    lines = await transcript_lines(chat.engine, chat.session_id or "")
    assert [line.split(" |")[0] for line in lines if " | assistant [direct]: " in line] == [
        "Present",
        "Present",
        "Compare",
        "Compare",
        "Compare",
        "Present",
        "Goodbye",
    ]


async def test_each_step_sees_only_its_own_memory(chat: Chat) -> None:
    [present_asks, compare_builds] = chat.turn_requests(10)
    # Present's memory starts with exactly what the guest was shown, the list and its question.
    assert request_lines(present_asks, width=60)[1:] == [
        "assistant [direct]: 1. **Hampton Inn & Suites Portland Tigard** (two beds): $2,4",
        "user: compare hotel 2,5,8 on price",
    ]
    assert present_asks.messages[0].content == f"{TWO_BEDS}\n\n{CHOOSE}"
    assert "Hampton Inn Sherwood" not in present_asks.system  # the list is not sent twice
    assert request_lines(compare_builds)[1:] == ["user [forwarded]: compare hotel 2,5,8 on price"]
    assert "\n8. Hampton Inn Sherwood Portland\n" in compare_builds.system
    # Within a visit each step's system prompt never changes, so a local model reuses its prompt cache.
    assert len({request.system for request in chat.model.requests[:8]}) == 1  # the Explore interview
    [next_comparison] = chat.turn_requests(11)
    assert next_comparison.system == compare_builds.system
    assert {request.system for request in chat.model.requests if request.step == "Present"} == {
        present_asks.system
    }
    [last_comparison] = chat.turn_requests(12)
    assert request_lines(last_comparison, width=40)[1:] == [
        "user [forwarded]: compare hotel 2,5,8 on price",
        'assistant: -> generate_comparison({"feature": "price", "hotels": ["Hampton Inn Portland-Airport", '
        '"Hampton Inn Portland/Clackamas", "Hampton Inn Sherwood Portland"]}) #call_5',
        "tool generate_comparison #call_5: The comparison was shown to the guest.",
        "assistant [direct]: | Night | #2 Hampton Inn Portland-Airpor",
        "user: compare on amenities",
        'assistant: -> generate_comparison({"feature": "amenities"}) #call_6',
        "tool generate_comparison #call_6: The comparison was shown to the guest.",
        "assistant [direct]: | Amenity | #2 Hampton Inn Portland-Airp",
        "user: compare hotels 2,5 on price",
    ]
    # Back in Present, the comparisons are gone: only the list shown again, then the choice.
    [book] = chat.turn_requests(14)
    assert request_lines(book, width=60)[1:] == [
        "assistant [direct]: 1. **Hampton Inn & Suites Portland Tigard** (two beds): $2,4",
        "user: 8",
    ]
    assert "a message that is only a number picks that hotel" in book.system
    # Explore's long history never travels to the later steps.
    explore_said = {"8/1/2027 to 8/8/2027", "max 700", "free wifi, parking"}
    for request in chat.model.requests:
        shown = {message.content for message in request.messages}
        assert request.step == "Explore" or not shown & explore_said, request.step
    [_, research] = chat.turn_requests(9)
    assert research.step == "Explore" and explore_said <= {message.content for message in research.messages}


async def test_whole_transcript(chat: Chat) -> None:
    assert await transcript_lines(chat.engine, chat.session_id or "", width=60) == TRANSCRIPT
    messages = await chat.engine.store.transcript(chat.session_id or "")
    # Every reply is in the transcript in full, exactly as the guest saw it.
    replies = [m.content for m in messages if m.role == "assistant" and not m.tool_calls]
    assert replies == [result.message for result in chat.results]
    tool_results = [(m.name, m.content, m.is_error) for m in messages if m.role == "tool"]
    assert tool_results == [
        ("capture_choices", "4 hotels found; the guest now sees the list.", False),
        ("search_again", "Accepted.", False),
        ("capture_choices", "9 hotels found; the guest now sees the list.", False),
        ("go_compare", "Accepted.", False),
        ("generate_comparison", "The comparison was shown to the guest.", False),
        ("generate_comparison", "The comparison was shown to the guest.", False),
        ("generate_comparison", "The comparison was shown to the guest.", False),
        ("resume_booking", "The guest sees the hotel list again.", False),
        ("chosen_hotel", "Booked Hampton Inn Sherwood Portland, confirmation number HF-TEST2345.", False),
    ]


async def test_final_state(chat: Chat) -> None:
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    assert session.status == "completed" and session.current_step == "Goodbye"
    assert session.sequence == ["Explore", "Present", "Explore", "Present", "Compare", "Present", "Goodbye"]
    assert session.states["Explore"] == {
        "criteria": {
            "check_in": "2027-08-01",
            "check_out": "2027-08-08",
            "min_price": None,
            "max_price": 700.0,
            "room_types": ["two beds"],
            "amenities": ["freeWiFi", "freeParking"],
            "max_airport_miles": None,
            "max_city_center_miles": None,
        }
    }
    present = session.states["Present"]
    assert set(present) == {"hotels", "check_in", "check_out"}
    booking = session.states["Goodbye"]["booking"]
    assert booking == {
        "hotel": "Hampton Inn Sherwood Portland",
        "room_type": "two beds",
        "check_in": "2027-08-01",
        "check_out": "2027-08-08",
        "total": "2270.60",
        "confirmation": "HF-TEST2345",
    }
    assert [hotel["name"] for hotel in present["hotels"]][7] == "Hampton Inn Sherwood Portland"
    assert (present["check_in"], present["check_out"]) == ("2027-08-01", "2027-08-08")
    assert session.states["Compare"] == {
        "hotels": ["Hampton Inn Portland-Airport", "Hampton Inn Portland/Clackamas"],
        "feature": "price",
    }
    assert session.prompts == {}
    assert session.warnings == [] and session.turns == 14 and session.usage.model_calls == 16
    # The number the guest was shown is the one stored.
    assert f"**{booking['confirmation']}**" in chat.results[-1].message
    again = await chat.engine.run("hotel", "one more thing", chat.session_id)
    assert again.error is not None and again.error.kind == "session_completed"


async def test_the_real_generator_gives_distinct_readable_numbers() -> None:
    numbers = {hotel_flow.new_confirmation_number() for _ in range(200)}
    assert len(numbers) == 200
    assert all(len(n) == 11 and n.startswith("HF-") and not set(n[3:]) & set("01IO") for n in numbers)
