"""What the hotel flow does when the model proposes something wrong: every refusal, whole transcripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from picoflow import FlowEngine
from picoflow.models import ScriptedModel, ToolCall
from picoflow.testing import request_lines, transcript_lines
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel import flow as hotel_flow
from picoflow_demos.hotel.pricing import AMENITIES

from .conftest import Chat

SEARCH: dict[str, Any] = {
    "check_in": "2027-08-01",
    "check_out": "2027-08-08",
    "max_price": 700,
    "room_types": ["two beds"],
    "amenities": ["freeWiFi", "freeParking"],
}
FIND = "Two beds, Aug 1 to 8, free wifi and parking, max $700. Search."
LISTED = (
    "1. Hampton Inn & Suites Portland Tigard\n2. Hampton Inn Portland-Airport\n"
    "3. Hilton Garden Inn Portland Airport\n4. Hilton Garden Inn Beaverton\n"
    "5. Hampton Inn Portland/Clackamas\n"
    "6. Tru by Hilton Aloha Beaverton\n7. Hampton Inn Portland East\n8. Hampton Inn Sherwood Portland\n"
    "9. Hilton Garden Inn Wilsonville Portland"
)
NOT_LISTED = (
    "That hotel is not in the guest's list. Use its number or its exact name from this list:\n" + LISTED
)
LISTED_TOTALS = (
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
CHOOSE = (
    "Which hotel would you like to book? Give its number or name. "
    "You can also compare hotels or change the search."
)


def chat_with(script: Sequence[Any]) -> Chat:
    model = ScriptedModel(script)
    return Chat(FlowEngine([HotelFlow], model=model), model, "hotel")


async def listed(script: Sequence[Any]) -> Chat:
    """A conversation already showing the nine two-bed hotels; ``script`` plays after that."""
    chat = chat_with([ToolCall("capture_choices", {"criteria": SEARCH}), *script])
    result = await chat.say(FIND)
    assert result.step == "Present" and result.message.endswith(CHOOSE)
    assert result.usage.model_calls == 1
    return chat


async def state(chat: Chat) -> dict[str, Any]:
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    return session.states


async def test_check_in_in_the_past_is_refused_before_anything_runs() -> None:
    past = {**SEARCH, "check_in": "2027-07-01", "check_out": "2027-07-05"}
    chat = chat_with(
        [
            ToolCall("capture_choices", {"criteria": past}),
            "July 1st has passed. Which later dates would you like?",
        ]
    )
    result = await chat.say("July 1 to 5, two beds, search")

    reason = (
        "check_in must be after today (2027-07-15). Ask the user for a later check-in date; do not search "
        "until they give one."
    )
    assert result.ok and result.step == "Explore" and result.warnings == (reason,)
    assert result.usage.model_calls == 2 and result.usage.tool_calls == 0
    assert request_lines(chat.model.requests[1], width=50)[1:] == [
        "user: July 1 to 5, two beds, search",
        'assistant [correction]: -> capture_choices({"criteria": {"amenities": ["freeWiFi", "freeParking"], '
        '"check_in": "2027-07-01", "check_out": "2027-07-05", "max_price": 700, '
        '"room_types": ["two beds"]}}) #call_1',
        "tool capture_choices #call_1 (error) [correction]: "
        "Not run. Your response was not accepted: check_in ",
    ]
    assert chat.model.requests[1].messages[-1].content.endswith(reason)
    # The refused call never ran and never reached memory.
    assert await transcript_lines(chat.engine, chat.session_id or "") == [
        "Explore | user: July 1 to 5, two beds, search",
        "Explore | assistant: July 1st has passed. Which later dates would you like?",
    ]
    assert await state(chat) == {"Explore": {}}


async def test_no_search_on_dates_the_guest_never_gave() -> None:
    invented = {**SEARCH, "check_in": "2027-07-16", "check_out": "2027-07-17"}
    chat = chat_with(
        [
            "Hello! Is your stay in the Portland area?",
            ToolCall("capture_choices", {"criteria": invented}),
            "Great. What are your check-in and check-out dates?",
        ]
    )
    await chat.say("Hi")
    result = await chat.say("yes")
    assert result.step == "Explore" and result.usage.tool_calls == 0
    assert result.warnings == (
        "the guest has not given any dates yet. Ask for their check-in and check-out dates.",
    )
    assert await transcript_lines(chat.engine, chat.session_id or "") == [
        "Explore | user: Hi",
        "Explore | assistant: Hello! Is your stay in the Portland area?",
        "Explore | user: yes",
        "Explore | assistant: Great. What are your check-in and check-out dates?",
    ]


async def test_check_out_before_check_in_is_explained_and_corrected() -> None:
    backwards = {**SEARCH, "check_out": "2027-07-30"}
    chat = chat_with(
        [
            ToolCall("capture_choices", {"criteria": backwards}),
            ToolCall("capture_choices", {"criteria": SEARCH}),
        ]
    )
    result = await chat.say(FIND)
    assert result.ok and result.step == "Present" and result.usage.model_calls == 2
    assert await transcript_lines(chat.engine, chat.session_id or "", width=70) == [
        f"Explore | user: {FIND}",
        'Explore | assistant: -> capture_choices({"criteria": {"amenities": ["freeWiFi", "freeParking"], '
        '"check_in": "2027-08-01", "check_out": "2027-07-30", "max_price": 700, '
        '"room_types": ["two beds"]}}) #call_1',
        "Explore | tool capture_choices #call_1 (error): Invalid arguments for capture_choices:\n"
        "- criteria: Value error, check_",
        'Explore | assistant: -> capture_choices({"criteria": {"amenities": ["freeWiFi", "freeParking"], '
        '"check_in": "2027-08-01", "check_out": "2027-08-08", "max_price": 700, '
        '"room_types": ["two beds"]}}) #call_2',
        "Explore | tool capture_choices #call_2: 9 hotels found; the guest now sees the list.",
        "Present | assistant [direct]: 1. **Hampton Inn & Suites Portland Tigard** (two beds): "
        "$2,438.78 tota",
    ]


async def test_unknown_amenity_is_rejected_with_the_allowed_names() -> None:
    chat = chat_with(
        [
            ToolCall("capture_choices", {"criteria": {**SEARCH, "amenities": ["freeWiFi", "sauna"]}}),
            "We don't list saunas. Would an indoor pool or a fitness center do?",
        ]
    )
    result = await chat.say("Aug 1 to 8, free wifi and a sauna please, search")
    error = (
        "Invalid arguments for capture_choices:\n"
        f"- criteria.amenities: Value error, item 2 is not a known amenity; use only these names: "
        f"{', '.join(AMENITIES)}\n"
        "Correct the arguments and call capture_choices again."
    )
    assert "sauna" not in error
    assert result.ok and result.step == "Explore"
    assert await transcript_lines(chat.engine, chat.session_id or "") == [
        "Explore | user: Aug 1 to 8, free wifi and a sauna please, search",
        'Explore | assistant: -> capture_choices({"criteria": {"amenities": ["freeWiFi", "sauna"], '
        '"check_in": "2027-08-01", "check_out": "2027-08-08", "max_price": 700, '
        '"room_types": ["two beds"]}}) #call_1',
        f"Explore | tool capture_choices #call_1 (error): {error}",
        "Explore | assistant: We don't list saunas. Would an indoor pool or a fitness center do?",
    ]
    assert await state(chat) == {"Explore": {}}


async def test_no_match_stays_in_explore_with_the_criteria_kept() -> None:
    rare = {**SEARCH, "room_types": [], "amenities": ["tennis", "newHotel"]}
    chat = chat_with([ToolCall("capture_choices", {"criteria": rare}), "Nothing has both. Drop one?"])
    result = await chat.say("Aug 1-8: tennis and a brand new hotel, search")
    assert result.step == "Explore" and result.message == "Nothing has both. Drop one?"
    lines = await transcript_lines(chat.engine, chat.session_id or "")
    assert lines[2] == (
        "Explore | tool capture_choices #call_1: No hotel found for these criteria. "
        "Would you like to relax one of them: the budget, the room type, the amenities or the distance?"
    )
    assert (await state(chat))["Explore"]["criteria"]["amenities"] == ["tennis", "newHotel"]
    assert "Saved search: " in chat.model.requests[1].system
    assert '"amenities":["tennis","newHotel"]' in chat.model.requests[1].system


async def test_hallucinated_hotel_name_is_refused_then_a_list_number_books(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hotel_flow, "new_confirmation_number", lambda: "HF-AAAA2222")
    chat = await listed(
        [
            ToolCall("chosen_hotel", {"hotel": "The Grand Budapest Hotel"}),
            "That hotel is not in your list. Which number would you like?",
            ToolCall("chosen_hotel", {"hotel": "4"}),
        ]
    )
    refused = await chat.say("Book the Grand Budapest")
    assert refused.step == "Present" and not refused.completed
    assert "Goodbye" not in await state(chat)
    booked = await chat.say("number 4 then")
    assert booked.completed and booked.usage.model_calls == 1
    assert "- Hotel: Hilton Garden Inn Beaverton" in booked.message
    assert "- Confirmation number: **HF-AAAA2222**" in booked.message
    lines = await transcript_lines(chat.engine, chat.session_id or "")
    assert lines[4:] == [
        "Present | user: Book the Grand Budapest",
        'Present | assistant: -> chosen_hotel({"hotel": "The Grand Budapest Hotel"}) #call_2',
        f"Present | tool chosen_hotel #call_2 (error): {NOT_LISTED}",
        "Present | assistant: That hotel is not in your list. Which number would you like?",
        "Present | user: number 4 then",
        'Present | assistant: -> chosen_hotel({"hotel": "4"}) #call_3',
        "Present | tool chosen_hotel #call_3: "
        "Booked Hilton Garden Inn Beaverton, confirmation number HF-AAAA2222.",
        f"Goodbye | assistant [direct]: {booked.message}",
    ]
    assert (await state(chat))["Goodbye"]["booking"]["total"] == "2144.44"


async def test_comparing_a_hotel_not_in_the_list_is_refused_in_present_and_in_compare() -> None:
    chat = await listed(
        [
            ToolCall("go_compare", {"hotels": ["Hampton Inn Portland-Airport", "The Ritz"]}),
            "The Ritz is not in your list. Which hotels should I compare?",
            ToolCall("go_compare", {"hotels": ["Hampton Inn Portland-Airport", "Hampton Inn Portland East"]}),
            ToolCall(
                "generate_comparison",
                {"hotels": ["Hampton Inn Portland-Airport", "Ritz"], "feature": "distance"},
            ),
            ToolCall("generate_comparison", {"hotels": ["2", "7"], "feature": "distance"}),
        ]
    )
    first = await chat.say("compare the airport Hampton with the Ritz")
    assert first.step == "Present" and "Compare" not in await state(chat)
    second = await chat.say("compare 2 and 7 on distance")
    assert second.step == "Compare" and second.message == (
        "| Distance | #2 Hampton Inn Portland-Airport | #7 Hampton Inn Portland East |\n"
        "| --- | ---: | ---: |\n"
        "| Airport | 0.1 mi | 6.9 mi |\n"
        "| City center | 11.5 mi | 12 mi |\n\n"
        "Another comparison or ready to book?"
    )
    lines = await transcript_lines(chat.engine, chat.session_id or "", width=40)
    assert lines[4:] == [
        "Present | user: compare the airport Hampton with the Rit",
        'Present | assistant: -> go_compare({"hotels": ["Hampton Inn Portland-Airport", "The Ritz"]}) '
        "#call_2",
        "Present | tool go_compare #call_2 (error): That hotel is not in the guest's list. U",
        "Present | assistant: The Ritz is not in your list. Which hote",
        "Present | user: compare 2 and 7 on distance",
        'Present | assistant: -> go_compare({"hotels": ["Hampton Inn Portland-Airport", '
        '"Hampton Inn Portland East"]}) #call_3',
        "Present | tool go_compare #call_3: Accepted.",
        "Compare | user [forwarded]: compare 2 and 7 on distance",
        'Compare | assistant: -> generate_comparison({"feature": "distance", "hotels": '
        '["Hampton Inn Portland-Airport", "Ritz"]}) #call_4',
        "Compare | tool generate_comparison #call_4 (error): That hotel is not in the guest's list. U",
        'Compare | assistant: -> generate_comparison({"feature": "distance", "hotels": ["2", "7"]}) #call_5',
        "Compare | tool generate_comparison #call_5: The comparison was shown to the guest.",
        "Compare | assistant [direct]: | Distance | #2 Hampton Inn Portland-Air",
    ]
    messages = await chat.engine.store.transcript(chat.session_id or "")
    refusals = [m.content for m in messages if m.role == "tool" and m.is_error]
    assert refusals == [NOT_LISTED, NOT_LISTED]
    assert (await state(chat))["Compare"] == {
        "hotels": ["Hampton Inn Portland-Airport", "Hampton Inn Portland East"],
        "feature": "distance",
    }


async def test_booking_mixed_with_another_call_runs_nothing_then_books_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    numbers = iter(["HF-FIRST222", "HF-SECOND22"])
    monkeypatch.setattr(hotel_flow, "new_confirmation_number", lambda: next(numbers))
    chat = await listed(
        [
            [
                ToolCall("chosen_hotel", {"hotel": "Hampton Inn Sherwood Portland"}),
                ToolCall("go_compare", {"hotels": ["Hampton Inn Sherwood Portland"]}),
            ],
            ToolCall("chosen_hotel", {"hotel": "Hampton Inn Sherwood Portland"}),
        ]
    )
    result = await chat.say("8, and compare it too")
    assert result.completed and result.usage.model_calls == 2 and result.usage.tool_calls == 1
    assert result.warnings == ("chosen_hotel was called together with other tools",)
    # Exactly one booking happened: the mixed response ran neither handler.
    assert (await state(chat))["Goodbye"]["booking"]["confirmation"] == "HF-FIRST222"
    assert "**HF-FIRST222**" in result.message
    refused = (
        "Not run: chosen_hotel must be the only tool call of a response, so nothing in this response ran. "
        "Call chosen_hotel alone, in a response of its own."
    )
    lines = await transcript_lines(chat.engine, chat.session_id or "", width=200)
    assert lines[4:] == [
        "Present | user: 8, and compare it too",
        'Present | assistant: -> chosen_hotel({"hotel": "Hampton Inn Sherwood Portland"}) #call_2, '
        'go_compare({"hotels": ["Hampton Inn Sherwood Portland"]}) #call_3',
        f"Present | tool chosen_hotel #call_2 (error): {refused}",
        f"Present | tool go_compare #call_3 (error): {refused}",
        'Present | assistant: -> chosen_hotel({"hotel": "Hampton Inn Sherwood Portland"}) #call_4',
        "Present | tool chosen_hotel #call_4: Booked Hampton Inn Sherwood Portland, confirmation number "
        "HF-FIRST222.",
        f"Goodbye | assistant [direct]: {result.message[:200]}",
    ]
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.sequence == ["Explore", "Present", "Goodbye"]


async def test_a_guest_can_book_straight_from_a_comparison() -> None:
    chat = await listed(
        [
            ToolCall("go_compare", {"hotels": ["2", "8"]}),
            ToolCall("generate_comparison", {"hotels": ["2", "8"], "feature": "price"}),
            ToolCall("chosen_hotel", {"hotel": "8"}),
        ]
    )
    compared = await chat.say("compare 2 and 8 on price")
    assert compared.step == "Compare" and compared.message.endswith("Another comparison or ready to book?")
    booked = await chat.say("ready to book number 8")
    assert booked.completed and booked.usage.model_calls == 1
    assert "- Hotel: Hampton Inn Sherwood Portland" in booked.message
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.sequence == ["Explore", "Present", "Compare", "Goodbye"]
    assert session.states["Goodbye"]["booking"]["total"] == "2270.60"


async def test_parallel_comparisons_answer_in_one_reply() -> None:
    chat = await listed(
        [
            ToolCall("go_compare", {"hotels": ["2", "5"]}),
            [
                ToolCall("generate_comparison", {"hotels": ["2", "5"], "feature": "distance"}),
                ToolCall("generate_comparison", {"feature": "roomType"}),
                ToolCall("generate_comparison", {"feature": "roomType"}),
            ],
        ]
    )
    result = await chat.say("compare 2 and 5 on distance and room types")
    assert result.usage.model_calls == 2 and result.step == "Compare"
    assert result.message == (
        "| Distance | #2 Hampton Inn Portland-Airport | #5 Hampton Inn Portland/Clackamas |\n"
        "| --- | ---: | ---: |\n"
        "| Airport | 0.1 mi | 11.4 mi |\n"
        "| City center | 11.5 mi | 8 mi |\n\n"
        "| Room type | #2 Hampton Inn Portland-Airport | #5 Hampton Inn Portland/Clackamas |\n"
        "| --- | :---: | :---: |\n"
        "| one bed | ✅ | ✅ |\n"
        "| two beds | ✅ | ✅ |\n\n"
        "Another comparison or ready to book?"
    )
    lines = await transcript_lines(chat.engine, chat.session_id or "", width=40)
    assert lines[-4:] == [
        "Compare | tool generate_comparison #call_3: The comparison was shown to the guest.",
        "Compare | tool generate_comparison #call_4: The comparison was shown to the guest.",
        "Compare | tool generate_comparison #call_5: The comparison was shown to the guest.",
        "Compare | assistant [direct]: | Distance | #2 Hampton Inn Portland-Air",
    ]


async def test_comparison_mixed_with_resume_and_double_search_are_rejected() -> None:
    chat = await listed(
        [
            ToolCall("go_compare", {"hotels": ["2", "5"]}),
            [ToolCall("generate_comparison", {"feature": "price"}), ToolCall("resume_booking", {})],
            ToolCall("resume_booking", {}),
            ToolCall("search_again", {}),
            [
                ToolCall("capture_choices", {"criteria": SEARCH}),
                ToolCall("capture_choices", {"criteria": {**SEARCH, "room_types": ["one bed"]}}),
            ],
            "Shall I search with one bed or two beds?",
        ]
    )
    back = await chat.say("compare 2 and 5, actually just take me back")
    assert back.step == "Present" and back.warnings == (
        "generate_comparison cannot be combined with other tools in one response.",
    )
    assert back.message == f"{LISTED_TOTALS}\n\n{CHOOSE}" and back.usage.model_calls == 3
    again = await chat.say("search again")
    assert again.step == "Explore" and again.warnings == (
        "call capture_choices alone, exactly once, with no other tool in the same response.",
    )
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.sequence == ["Explore", "Present", "Compare", "Present", "Explore"]


async def test_a_search_repeated_word_for_word_runs_once() -> None:
    chat = chat_with(
        [
            [
                ToolCall("capture_choices", {"criteria": SEARCH}),
                ToolCall("capture_choices", {"criteria": SEARCH}),
            ]
        ]
    )
    result = await chat.say(FIND)
    assert result.step == "Present" and result.warnings == () and result.usage.model_calls == 1
    assert result.message == f"{LISTED_TOTALS}\n\n{CHOOSE}"
    lines = await transcript_lines(chat.engine, chat.session_id or "", width=40)
    assert lines[2:4] == [
        "Explore | tool capture_choices #call_1: 9 hotels found; the guest now sees the l",
        "Explore | tool capture_choices #call_2 (error): Not applied: an earlier call of this res",
    ]


async def test_present_answers_from_the_list_and_never_with_an_invented_price() -> None:
    chat = await listed(
        [
            "Number 4 is the cheapest, about $306 a night.",
            "Number 4 is the cheapest: $2,144.44 in total, within your $700 budget.",
        ]
    )
    result = await chat.say("which is cheapest?")
    assert result.message == "Number 4 is the cheapest: $2,144.44 in total, within your $700 budget."
    assert result.warnings == (
        "quote prices only exactly as they appear in the list; never compute or estimate one.",
    )
    # The model reads the list from what the guest was shown, not from a second copy in the prompt.
    [first, corrected] = chat.requests_per_turn[-1]
    assert request_lines(first, width=30)[1:] == [
        "assistant [direct]: 1. **Hampton Inn & Suites Port",
        "user: which is cheapest?",
    ]
    assert first.messages[0].content == f"{LISTED_TOTALS}\n\n{CHOOSE}"
    assert "Hilton Garden Inn Beaverton" not in first.system
    assert corrected.messages[-1].content.endswith(
        "quote prices only exactly as they appear in the list; never compute or estimate one."
    )


async def test_terminate_from_explore_says_goodbye_without_a_booking() -> None:
    chat = chat_with(["Hello! Is your stay in Portland?", ToolCall("terminate_session", {}), "Goodbye!"])
    await chat.say("Hi")
    result = await chat.say("No, Seattle. Bye.")
    assert result.completed and result.message == "Goodbye!" and result.step == "Goodbye"
    # terminate_session is offered only once the guest asks to leave.
    offered = [[tool.name for tool in request.tools] for request in chat.model.requests[:2]]
    assert offered == [["capture_choices"], ["capture_choices", "terminate_session"]]
    assert chat.model.requests[-1].system.startswith("The guest has ended the conversation.")
    assert await transcript_lines(chat.engine, chat.session_id or "") == [
        "Explore | user: Hi",
        "Explore | assistant: Hello! Is your stay in Portland?",
        "Explore | user: No, Seattle. Bye.",
        "Explore | assistant: -> terminate_session({}) #call_1",
        "Explore | tool terminate_session #call_1: Accepted.",
        "Goodbye | user [crossing]: I'm done, thank you.",
        "Goodbye | assistant: Goodbye!",
    ]


async def test_terminate_is_refused_unless_the_guest_asks_to_leave() -> None:
    chat = chat_with(
        [
            ToolCall("terminate_session", {}),
            "Hello! Is your stay in the Portland area?",
            [ToolCall("terminate_session", {})],
            "What are your check-in and check-out dates?",
        ]
    )
    hello = await chat.say("Hi")
    reason = (
        "the user has not asked to end the conversation. Do not call terminate_session; answer their "
        "latest message."
    )
    assert hello.step == "Explore" and not hello.completed and hello.warnings == (reason,)
    assert hello.message == "Hello! Is your stay in the Portland area?" and hello.usage.tool_calls == 0
    assert chat.model.requests[1].messages[-1].content.endswith(reason)
    no = await chat.say("no thanks, I'm fine")  # an answer, not a goodbye
    assert no.step == "Explore" and not no.completed and no.warnings == (reason,)
    assert await transcript_lines(chat.engine, chat.session_id or "") == [
        "Explore | user: Hi",
        "Explore | assistant: Hello! Is your stay in the Portland area?",
        "Explore | user: no thanks, I'm fine",
        "Explore | assistant: What are your check-in and check-out dates?",
    ]


async def test_a_question_the_guest_already_answered_is_not_asked_again() -> None:
    chat = chat_with(
        [
            "Which room type would you like: one bed, two beds or suite?",
            "Up to $300 a night. Which amenities do you need?",
        ]
    )
    result = await chat.say("A suite in Portland, Aug 1 to 8, max $300 a night")
    reason = (
        "the guest already gave the room type; do not ask for it again. Write your reply to the guest and "
        "end it with this question: "
        '"Which amenities do you need?"'
    )
    assert result.message == "Up to $300 a night. Which amenities do you need?"
    assert result.warnings == (reason,) and result.usage.model_calls == 2
    # The correction follows the cached conversation: the system prompt is the same for both calls.
    [first, second] = chat.model.requests
    assert first.system == second.system and second.messages[-1].content.endswith(reason)


async def test_a_name_copied_from_the_list_as_shown_books_that_hotel() -> None:
    # The guest saw "2. **Hampton Inn Portland-Airport** (two beds): ..."; small models copy it so.
    chat = await listed(
        [ToolCall("chosen_hotel", {"hotel": "2. **hampton inn portland-airport** (two beds)"})]
    )
    booked = await chat.say("book number 2")
    assert booked.completed and "- Hotel: Hampton Inn Portland-Airport" in booked.message
    assert hotel_flow.name_key("Inn (Portland) East (suite)") == "inn (portland) east"  # a trailing note goes


async def test_an_off_track_reply_is_corrected_once_then_code_asks_the_question() -> None:
    chat = chat_with(
        [
            "Hello! How can I help you today?",
            "Hi! What can I do for you?",  # still off track: code asks the question instead
            "Great. Which room type would you like?",
            "Great. What are your check-in and check-out dates?",
        ]
    )
    hello = await chat.say("Hi")
    assert hello.ok and hello.usage.model_calls == 2
    assert hello.message == (
        "Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in the Portland area?"
    )
    assert hello.warnings == (
        "your reply does not ask the next question. Write your reply to the guest and end it with this "
        'question: "Is your stay in the Portland area?"',
    )
    suite = await chat.say("a suite in Portland")
    assert suite.message == "Great. What are your check-in and check-out dates?"
    assert suite.warnings == (
        "the guest already gave the room type; do not ask for it again. Write your reply to the guest and "
        "end it with this question: "
        '"What are your check-in and check-out dates?"',
    )


async def test_a_choice_answered_in_words_is_steered_to_the_booking() -> None:
    chat = await listed(
        ["Great choice! Shall I book it for you?", ToolCall("chosen_hotel", {"hotel": "2"})],
    )
    booked = await chat.say("book number 2")
    assert booked.completed and "- Hotel: Hampton Inn Portland-Airport" in booked.message
    assert booked.warnings == ('the guest chose hotel 2: call chosen_hotel with hotel "2".',)
    picks = ["8", "#3", "book number 4", "Reserve #5, please", "compare 2 and 5", "I'll take 2 minutes"]
    assert [hotel_flow.chosen_number(text) for text in picks] == [8, 3, 4, 5, None, None]


async def test_when_the_model_will_not_act_on_a_plain_request_code_does() -> None:
    chat = await listed(
        [
            "Hampton Inn Portland-Airport is a great choice.",
            "I have booked it for you.",  # a claim, and still no booking: code books hotel 2
        ]
    )
    booked = await chat.say("book number 2")
    assert booked.completed and booked.usage.model_calls == 2 and booked.usage.tool_calls == 0
    assert "- Hotel: Hampton Inn Portland-Airport" in booked.message
    assert (await state(chat))["Goodbye"]["booking"]["hotel"] == "Hampton Inn Portland-Airport"


async def test_a_comparison_the_model_will_not_start_is_started_by_code() -> None:
    chat = await listed(
        [
            "Number 2 costs $2,796.20 and number 5 costs $2,417.76.",
            "They are both good hotels.",
            ToolCall("generate_comparison", {"feature": "distance"}),
        ]
    )
    compared = await chat.say("compare 2 and 5 on distance")
    assert compared.step == "Compare" and compared.message.startswith(
        "| Distance | #2 Hampton Inn Portland-Airport | #5 Hampton Inn Portland/Clackamas |"
    )
    assert compared.warnings == (
        "the guest asked for a comparison: call go_compare with the hotels they named.",
    )


async def test_a_false_booking_claim_never_reaches_the_guest() -> None:
    chat = await listed(["Done, it is booked!", "Your room is booked."])
    result = await chat.say("the cheapest one sounds good")
    assert not result.completed and result.message == f"{LISTED_TOTALS}\n\n{CHOOSE}"
    assert result.warnings == (
        "nothing is booked until chosen_hotel runs: call it for the hotel the guest chose, or ask.",
    )


async def test_no_search_before_the_guest_asks_for_one_and_the_budget_as_the_guest_said() -> None:
    upside_down = {**SEARCH, "min_price": 700, "max_price": None}
    chat = chat_with(
        [
            ToolCall("capture_choices", {"criteria": SEARCH}),  # nobody asked to search yet
            "Two beds, Aug 1 to 8, free wifi and parking, up to $700 a night. Shall I search?",
            ToolCall("capture_choices", {"criteria": upside_down}),  # "max 700" is not a minimum
        ]
    )
    summary = await chat.say("Two beds, Aug 1 to 8, free wifi and parking, max $700")
    assert summary.step == "Explore" and summary.usage.tool_calls == 0
    assert (
        summary.message == "Two beds, Aug 1 to 8, free wifi and parking, up to $700 a night. Shall I search?"
    )
    assert summary.warnings == (
        "the guest has not asked to search yet. Write your reply to the guest: list the details in a few "
        'lines and ask "Shall I search?"',
    )
    found = await chat.say("yes")
    # The guest's "max $700" settles it: code puts the limit back, no second model call.
    assert found.step == "Present" and found.usage.model_calls == 1 and found.warnings == ()
    criteria = (await state(chat))["Explore"]["criteria"]
    assert (criteria["min_price"], criteria["max_price"]) == (None, 700)
    assert found.message == f"{LISTED_TOTALS}\n\n{CHOOSE}"


async def test_asked_to_search_the_model_searches_rather_than_asking_again() -> None:
    chat = await listed(
        [
            ToolCall("search_again", {}),
            "Two beds, Aug 1 to 8. Shall I search?",  # the guest already said "search"
            ToolCall("capture_choices", {"criteria": {**SEARCH, "room_types": ["one bed"]}}),
        ]
    )
    result = await chat.say("one bed instead, search")
    assert result.step == "Present" and result.usage.model_calls == 3
    assert result.warnings == (
        "the guest asked to search: call capture_choices now, with what they said and any change they asked "
        "for.",
    )


async def test_the_reply_explaining_a_refused_search_goes_out_as_written() -> None:
    chat = chat_with([ToolCall("capture_choices", {"criteria": SEARCH}), "I need your dates first."])
    result = await chat.say("two beds with wifi, search")
    # No question in it, yet it is not replaced: it explains why nothing was searched.
    assert result.message == "I need your dates first." and result.usage.model_calls == 2
    assert result.warnings == (
        "the guest has not given any dates yet. Ask for their check-in and check-out dates.",
    )
