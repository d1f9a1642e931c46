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
NOT_LISTED = "That hotel is not in the guest's list. Use exact names from this list:\n" + LISTED


def chat_with(script: Sequence[Any]) -> Chat:
    model = ScriptedModel(script)
    return Chat(FlowEngine([HotelFlow], model=model), model, "hotel")


async def listed(script: Sequence[Any]) -> Chat:
    """A conversation already showing the nine two-bed hotels; ``script`` plays after that."""
    chat = chat_with([ToolCall("capture_choices", {"criteria": SEARCH}), "Which one?", *script])
    result = await chat.say(FIND)
    assert result.step == "Present" and result.message.endswith("Which one?")
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
            "Here they are.",
        ]
    )
    result = await chat.say(FIND)
    assert result.ok and result.step == "Present"
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
        "Present | user [crossing]: Which hotels match my search?",
        "Present | assistant: 1. **Hampton Inn & Suites Portland Tigard** (two beds): $2,438.78 tota",
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
        "Tell the guest and suggest relaxing one criterion (budget, room type, amenities or distance); "
        "search again when they say so."
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
            "Thank you, goodbye!",
        ]
    )
    refused = await chat.say("Book the Grand Budapest")
    assert refused.step == "Present" and not refused.completed
    assert "booking" not in (await state(chat))["Present"]
    booked = await chat.say("number 4 then")
    assert booked.completed and "- Hotel: Hilton Garden Inn Beaverton" in booked.message
    assert "- Confirmation number: **HF-AAAA2222**" in booked.message
    lines = await transcript_lines(chat.engine, chat.session_id or "")
    assert lines[5:] == [
        "Present | user: Book the Grand Budapest",
        'Present | assistant: -> chosen_hotel({"hotel": "The Grand Budapest Hotel"}) #call_2',
        f"Present | tool chosen_hotel #call_2 (error): {NOT_LISTED}",
        "Present | assistant: That hotel is not in your list. Which number would you like?",
        "Present | user: number 4 then",
        'Present | assistant: -> chosen_hotel({"hotel": "4"}) #call_3',
        "Present | tool chosen_hotel #call_3: "
        "Booked Hilton Garden Inn Beaverton, confirmation number HF-AAAA2222.",
        "Goodbye | user [crossing]: I'm done, thank you.",
        f"Goodbye | assistant: {booked.message}",
    ]
    assert (await state(chat))["Present"]["booking"]["total"] == "2144.44"


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
    assert lines[5:] == [
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


async def test_booking_mixed_with_another_call_is_rejected_then_booked_alone(
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
            "Enjoy your stay!",
        ]
    )
    result = await chat.say("8, and compare it too")
    reason = (
        "call chosen_hotel alone, exactly once, with no other tool in the same response (a booking is final)."
    )
    assert result.completed and result.warnings == (reason,)
    # Exactly one booking happened: the rejected response never ran either handler.
    assert (await state(chat))["Present"]["booking"]["confirmation"] == "HF-FIRST222"
    assert "**HF-FIRST222**" in result.message
    lines = await transcript_lines(chat.engine, chat.session_id or "", width=30)
    assert lines[5:] == [
        "Present | user: 8, and compare it too",
        'Present | assistant: -> chosen_hotel({"hotel": "Hampton Inn Sherwood Portland"}) #call_4',
        "Present | tool chosen_hotel #call_4: Booked Hampton Inn Sherwood Po",
        "Goodbye | user [crossing]: I'm done, thank you.",
        "Goodbye | assistant: **Your booking is confirmed.**",
    ]


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
            "Which one?",
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
    again = await chat.say("search again")
    assert again.step == "Explore" and again.warnings == (
        "call capture_choices alone, exactly once, with no other tool in the same response "
        "(one search at a time).",
    )
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.sequence == ["Explore", "Present", "Compare", "Present", "Explore"]


async def test_a_search_repeated_word_for_word_runs_once() -> None:
    chat = chat_with(
        [
            [
                ToolCall("capture_choices", {"criteria": SEARCH}),
                ToolCall("capture_choices", {"criteria": SEARCH}),
            ],
            "Ok?",
        ]
    )
    result = await chat.say(FIND)
    assert result.step == "Present" and result.warnings == () and result.usage.model_calls == 2
    lines = await transcript_lines(chat.engine, chat.session_id or "", width=40)
    assert lines[2:4] == [
        "Explore | tool capture_choices #call_1: 9 hotels found; the guest now sees the l",
        "Explore | tool capture_choices #call_2 (error): Not applied: an earlier call of this res",
    ]


async def test_present_shows_the_list_once_per_visit_and_never_an_invented_price() -> None:
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
    assert "A message that is only a number chooses that hotel: book it." in chat.model.requests[-1].system


async def test_terminate_from_explore_says_goodbye_without_a_booking() -> None:
    chat = chat_with(["Hello! Is your stay in Portland?", ToolCall("terminate_session", {}), "Goodbye!"])
    await chat.say("Hi")
    result = await chat.say("No, Seattle. Bye.")
    assert result.completed and result.message == "Goodbye!" and result.step == "Goodbye"
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
