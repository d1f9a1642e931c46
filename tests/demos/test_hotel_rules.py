"""The hotel criteria rules, money formatting and the comparison tables, without a conversation."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from picoflow import Message
from picoflow._schema import describe_validation_error
from picoflow_demos._common import dollar_amounts, list_number, usd, usd_cents, wants_to_leave
from picoflow_demos.hotel.criteria import (
    Criteria,
    as_the_guest_said,
    check_in_problem,
    mentions_dates,
    raw_check_in,
    today,
)
from picoflow_demos.hotel.interview import answered, off_track, without_stock_refusal
from picoflow_demos.hotel.pricing import AMENITIES, quote_hotels
from picoflow_demos.hotel.tables import comparison, hotel_list

BASE: dict[str, Any] = {"check_in": "2027-08-01", "check_out": "2027-08-08"}


def errors(**fields: Any) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        Criteria.model_validate({**BASE, **fields})
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in caught.value.errors()]


def test_cross_field_rules() -> None:
    assert errors(check_out="2027-08-01") == [("", "Value error, check_out must be after check_in")]
    assert errors(check_out="2027-09-15") == [("", "Value error, a stay can be at most 30 nights")]
    assert errors(min_price=300, max_price=200) == [
        ("", "Value error, min_price must not be more than max_price")
    ]
    assert errors(max_price=0) == [("max_price", "Input should be greater than 0")]


def test_unknown_names_are_rejected_with_the_allowed_ones_never_dropped() -> None:
    assert errors(amenities=["freeWiFi", "sauna"]) == [
        (
            "amenities",
            f"Value error, item 2 is not a known amenity; use only these names: {', '.join(AMENITIES)}",
        )
    ]
    assert errors(room_types=["penthouse"]) == [
        (
            "room_types",
            "Value error, item 1 is not a known room type; use only these names: one bed, two beds, suite",
        )
    ]


def test_a_near_miss_does_not_garble_the_allowed_names() -> None:
    # "Pool" and "bed" are inside allowed names; the model still gets every name intact.
    [(_, pool)] = errors(amenities=["Pool"])
    assert "indoorPool, outdoorPool" in pool
    with pytest.raises(ValidationError) as caught:
        Criteria.model_validate({**BASE, "room_types": ["bed"]})
    assert describe_validation_error(caught.value, tool="capture_choices") == (
        "Invalid arguments for capture_choices:\n"
        "- room_types: Value error, item 1 is not a known room type; "
        "use only these names: one bed, two beds, suite\n"
        "Correct the arguments and call capture_choices again."
    )


def test_known_names_are_normalised() -> None:
    criteria = Criteria.model_validate(
        {**BASE, "room_types": ["Two Beds", "suite", "SUITE"], "amenities": ["FreeWifi", "free parking"]}
    )
    assert criteria.room_types == ["two beds", "suite"]
    assert criteria.amenities == ["freeWiFi", "freeParking"]
    assert len(criteria.nights) == 7


def test_today_and_the_check_in_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    assert today() == date(2027, 7, 15)  # HOTEL_FLOW_CURRENT_DATE from conftest
    assert check_in_problem(date(2027, 7, 16)) is None
    problem = check_in_problem(date(2027, 7, 15))
    assert problem is not None and problem.startswith("check_in must be after today (2027-07-15).")
    assert raw_check_in({"criteria": {"check_in": "2027-07-01"}}) == date(2027, 7, 1)
    assert raw_check_in({"criteria": {"check_in": "next Tuesday"}}) is None
    assert raw_check_in("not an object") is None
    monkeypatch.setenv("HOTEL_FLOW_CURRENT_DATE", "15/07/2027")
    with pytest.raises(ValueError, match="HOTEL_FLOW_CURRENT_DATE must be an ISO date"):
        today()


def test_date_mentions() -> None:
    said = ["8/1/2027 to 8/8/2027", "Aug 1-8", "the 3rd to the 5th", "next weekend", "2027-08-01", "July"]
    assert all(mentions_dates([text]) for text in said)
    assert not any(mentions_dates([text]) for text in ["yes", "Hi", "suite", "max 700", "free wifi, parking"])


def test_money_in_us_format() -> None:
    assert usd(Decimal("1234.5")) == "$1,234.50"
    assert usd(Decimal("0.005")) == "$0.01"
    assert usd(1234567.891) == "$1,234,567.89"
    assert usd(Decimal("-3.2")) == "-$3.20"
    assert usd_cents(5420) == "$54.20"


def test_dollar_amounts() -> None:
    text = "From $2,144.44 total ($306.35/night) to $ 700, not 700 or $1,2"
    assert dollar_amounts(text) == [Decimal("2144.44"), Decimal("306.35"), Decimal("700"), Decimal("1")]


def test_list_numbers() -> None:
    assert [list_number(text) for text in ["8", "#2", "hotel 5", "No. 3", "2."]] == [8, 2, 5, 3, 2]
    assert list_number("Hampton Inn 2") is None


def test_hotel_list_and_tables() -> None:
    quotes = quote_hotels(date(2027, 1, 15), date(2027, 1, 17), amenities=["tennis"])
    assert hotel_list(quotes, 2) == (
        "1. **Homewood Suites by Hilton Vancouver-Portland** (one bed): $516.00 total for 2 nights"
    )
    chosen = [(1, quotes[0])]
    nights = [date(2027, 1, 15), date(2027, 1, 16)]
    assert comparison("price", chosen, nights) == (
        "| Night | #1 Homewood Suites by Hilton Vancouver-Portland |\n"
        "| --- | ---: |\n"
        "| Room | one bed |\n"
        "| Fri 1/15/2027 | $240.00 |\n"
        "| Sat 1/16/2027 | $276.00 |\n"
        "| **Total** | **$516.00** |"
    )
    assert comparison("distance", chosen, nights) == (
        "| Distance | #1 Homewood Suites by Hilton Vancouver-Portland |\n"
        "| --- | ---: |\n"
        "| Airport | 10.5 mi |\n"
        "| City center | 1.5 mi |"
    )


def test_room_type_table_is_the_union_of_offered_types() -> None:
    quotes = quote_hotels(date(2027, 1, 13), date(2027, 1, 14))
    duniway = next(q for q in quotes if q.name == "The Duniway Portland, a Hilton Hotel")
    porter = quotes[0]
    assert comparison("roomType", [(3, duniway), (1, porter)], [date(2027, 1, 13)]) == (
        "| Room type | #3 The Duniway Portland, a Hilton Hotel "
        "| #1 The Porter Portland, Curio Collection by Hilton |\n"
        "| --- | :---: | :---: |\n"
        "| one bed | ✅ | ✅ |\n"
        "| two beds | ✅ | ✅ |\n"
        "| suite | ❌ | ✅ |"
    )


def said(*turns: str) -> list[Message]:
    """Alternating guest and assistant messages, the guest first."""
    return [Message.user(text) if n % 2 == 0 else Message.assistant(text) for n, text in enumerate(turns)]


def names(messages: list[Message]) -> list[str]:
    return [topic.name for topic in answered(messages)]


def test_what_the_guest_answered_is_read_from_the_conversation() -> None:
    assert names([]) == []
    # Volunteered details count, wherever they come.
    assert names(said("Hi, I need a suite in Portland from Aug 1 to 8, max $300 a night")) == [
        "area",
        "dates",
        "budget",
        "room type",
    ]
    # A reply answers the last question asked, "none" included.
    replies = said(
        "Hi",
        "Hello! Is your stay in the Portland area?",
        "yes",
        "Great. What are your check-in and check-out dates?",
        "8/1/2027 to 8/8/2027",
        "7 nights. What nightly budget do you have in mind?",
        "no limit",
        "Which room type would you like: one bed, two beds or suite?",
        "two please",
    )
    assert names(replies) == ["area", "dates", "budget", "room type"]
    # A reply to the dates question without any date does not answer it.
    assert names([*replies[:4], *said("not sure yet")]) == ["area"]
    # "max 5 miles" is a distance, not a budget.
    assert names(said("max 5 miles from downtown")) == ["distance"]
    everything = said("Portland, Aug 1-8, under $200, suite, free wifi, within 10 miles of the airport")
    assert len(answered(everything)) == 6


def test_a_question_already_answered_is_refused_with_the_next_one() -> None:
    so_far = said("Hi", "Is your stay in the Portland area?", "yes, Aug 1 to 8, a suite please")
    assert off_track(so_far, "Which room type would you like: one bed, two beds or suite?") == (
        "the guest already gave the room type; do not ask for it again. Write your reply to the guest and "
        "end it with this question: "
        '"What nightly budget do you have in mind: a minimum, a maximum or both?"'
    )
    assert off_track(so_far, "7 nights. What nightly budget do you have in mind?") is None
    # Confirmations, and dates or amenities asked again (a past check-in, an amenity not offered), pass.
    assert off_track(so_far, "August 1 has passed. Which later dates would you like?") is None
    # Dates or amenities the guest has just given, asked for again without a reason, are refused.
    assert off_track(so_far, "Great! What are your check-in and check-out dates?") == (
        "the guest already gave the dates; do not ask for it again. Write your reply to the guest and "
        "end it with this question: "
        '"What nightly budget do you have in mind: a minimum, a maximum or both?"'
    )
    with_amenities = said(
        "Hi",
        "Is your stay in the Portland area?",
        "yes",
        "What are your dates, budget and room type?",
        "Aug 1 to 8, under $300, a suite with wifi and a sauna",
    )
    assert off_track(with_amenities, "Which amenities do you need?") is not None
    assert off_track(with_amenities, "We don't offer a sauna. Which other amenities do you need?") is None
    # Confirming while questions remain only adds a turn; with every answer in, it is the next step.
    assert off_track(so_far, "I don't know if you're staying in Portland. Can you please confirm?") == (
        "your reply does not ask the next question. Write your reply to the guest and end it with this "
        'question: "What nightly budget do you have in mind: a minimum, a maximum or both?"'
    )
    assert off_track(so_far, "A suite from Aug 1 to 8, is that right?") == (
        "the guest already gave the room type; do not ask for it again. Write your reply to the guest and "
        "end it with this question: "
        '"What nightly budget do you have in mind: a minimum, a maximum or both?"'
    )
    # Given earlier, not just now: asking again is losing track, whatever the reply says.
    later = [*with_amenities, Message.assistant("Any maximum distance to the airport?"), Message.user("no")]
    assert off_track(later, "Sorry, which amenities do you need?") is not None
    everything = said("Portland, Aug 1-8, under $200, suite, free wifi, within 10 miles of the airport")
    assert off_track(everything, "Here is your search. Shall I search?") is None
    # A reply that asks nothing the guest still has to answer gets the next question.
    assert off_track(said("Hi"), "Hello! How can I assist you today?") == (
        "your reply does not ask the next question. Write your reply to the guest and end it with this "
        'question: "Is your stay in the Portland area?"'
    )
    assert off_track(so_far, "Great, noted.") == (
        "your reply does not ask the next question. Write your reply to the guest and end it with this "
        'question: "What nightly budget do you have in mind: a minimum, a maximum or both?"'
    )
    assert off_track(everything, "Any maximum distance to the airport?") == (
        "the guest already gave the distance; do not ask for it again. Write your reply to the guest: list "
        'the details in a few lines and ask "Shall I search?"'
    )


def test_a_stock_refusal_before_the_real_reply_is_dropped() -> None:
    assert without_stock_refusal("I'm sorry, but I can't assist with that. What nightly budget?") == (
        "What nightly budget?"
    )
    assert (
        without_stock_refusal("Great. I am sorry but I cannot help with this request. Dates?")
        == "Great. Dates?"
    )
    # Nothing else to say: the refusal stays, it is the reply.
    assert without_stock_refusal("I'm sorry, but I can't assist with that.") == (
        "I'm sorry, but I can't assist with that."
    )


def test_leaving_words() -> None:
    leaving = ["bye", "Thanks, goodbye!", "please end the chat", "stop", "Stop.", "No, Seattle. Bye.", "quit"]
    assert all(map(wants_to_leave, leaving))
    # Answers that only sound final must not end a session.
    staying = ["Hi", "no thanks", "free wifi, that's all", "I'm done with amenities", "stop the search", None]
    assert not any(map(wants_to_leave, staying))


def test_a_swapped_budget_is_put_back_as_the_guest_said_it() -> None:
    def budget(said: str, **limits: Any) -> tuple[float | None, float | None]:
        fixed = as_the_guest_said(Criteria.model_validate({**BASE, **limits}), [said])
        return fixed.min_price, fixed.max_price

    assert budget("max $700 a night", min_price=700) == (None, 700)
    assert budget("at least 150", max_price=150.0) == (150, None)
    assert budget("up to $1,200", min_price=1200) == (None, 1200)
    # Nothing to put back: both limits given, or nothing the guest said contradicts the model.
    assert budget("min 150, max 300", min_price=150, max_price=300) == (150, 300)
    assert budget("max 300 and min 700", min_price=300, max_price=700) == (300, 700)
    assert budget("no budget", min_price=100) == (100, None)
