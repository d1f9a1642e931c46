"""The hotel interview and list with a scripted model: any order, all at once, misreadings, refusals.

The model's readings are scripted; what is asserted is what code makes of them: which answers are
kept, which are dropped as not the guest's, what the guest is asked or told, and what the search
used.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from picoflow import Approvers, FlowEngine
from picoflow.exceptions import ApprovalDecided, ApprovalStale
from picoflow.models import ScriptedModel
from picoflow.session import Session
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel import flow as hotel_flow
from picoflow_demos.hotel.pricing import hotels
from picoflow_demos.hotel.scripted import day, found, wants

from .conftest import Chat

PORTLAND = "Is your stay in the Portland area?"
DATES = "What are your check-in and check-out dates?"
BUDGET = "What nightly budget do you have in mind: a minimum, a maximum or both?"
ROOM = "Which room type would you like: one bed, two beds or suite?"
AMENITIES = "Which amenities do you need? For example free WiFi, free parking or free breakfast."
DISTANCE = "Any maximum distance to the airport or the city center, in miles?"
HELLO = "Hello! I can help you find a hotel in the Portland, Oregon area."
CHOOSE = (
    "Which hotel would you like to book? Give its number or name. "
    "You can also compare hotels or change the search."
)
ALL_AT_ONCE = "A suite from August 1 to August 8, up to 300 a night, with free wifi and parking"


def chat_with(*script: str) -> Chat:
    model = ScriptedModel(list(script), grounding="small")
    return Chat(FlowEngine([HotelFlow], model=model), model, "hotel")


async def known(chat: Chat) -> dict[str, object]:
    """What Explore's form knows."""
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    return dict(session.state_of("Explore")["form"]["known"])


async def test_everything_in_one_message_is_kept_and_searched() -> None:
    chat = chat_with(
        found(),
        found(
            ("room_types", "a suite", ["suite"]),
            ("check_in", "August 1", day(8, 1)),
            ("check_out", "August 8", day(8, 8)),
            ("max_price", "up to 300", 300),
            ("amenities", "free wifi", ["freeWiFi"]),
            ("amenities", "parking", ["freeParking"]),
        ),
        found(),
    )
    replies = [result.message for result in await chat.say_all(["Hi", ALL_AT_ONCE, "none"])]
    assert replies[0] == f"{HELLO} {PORTLAND}"
    # The Portland question was asked once; a reply about the stay answers it. Only distance is left.
    assert replies[1] == (
        "Check-in Sunday August 1, 2027, check-out Sunday August 8, 2027: 7 nights. "
        f"Noted: up to $300 a night; suite; Free Wi-Fi, Free parking. {DISTANCE}"
    )
    # No suite costs $300 or less a night in August: the budget is honoured, not dropped.
    assert replies[2] == (
        "No hotel matches Aug 1 to Aug 8, 7 nights; up to $300 a night; suite; Free Wi-Fi, Free parking. "
        "Would you like to relax one of them: the budget, the room type, the amenities or the distance?"
    )
    assert (await known(chat)) == {
        "room_types": ["suite"],
        "check_in": "2027-08-01",
        "check_out": "2027-08-08",
        "max_price": 300.0,
        "amenities": ["freeWiFi", "freeParking"],
    }
    # Raising the budget later searches again with every other answer kept.
    chat.model.extend([found(("max_price", "700", 700))])
    result = await chat.say("ok, 700 then")
    assert result.step == "Present"
    assert result.message.startswith(  # said what changed, then searched again
        "Changed: up to $700 a night.\n\n"
        "**Aug 1 to Aug 8, 7 nights; up to $700 a night; suite; Free Wi-Fi, Free parking**\n\n"
        "Cheapest first:\n\n1. "
    )


async def test_a_budget_given_early_is_not_asked_for_and_is_in_the_search() -> None:
    chat = chat_with(
        found(("max_price", "under $500", 500)),
        found(("in_portland", "yes", True)),
        found(("check_in", "8/1/2027", day(8, 1, 2027)), ("check_out", "8/3/2027", day(8, 3, 2027))),
        found(("room_types", "two beds", ["two beds"])),
        found(),
        found(),
    )
    said = ["Hi, under $500 a night please", "yes", "8/1/2027 to 8/3/2027", "two beds", "nothing", "no"]
    replies = [result.message for result in await chat.say_all(said)]
    assert replies[:5] == [
        f"{HELLO}\n\nNoted: up to $500 a night. {PORTLAND}",
        f"Great. {DATES}",
        f"Check-in Sunday August 1, 2027, check-out Tuesday August 3, 2027: 2 nights. {ROOM}",
        f"Noted: two beds. {AMENITIES}",
        DISTANCE,
    ]
    assert BUDGET not in " ".join(replies)
    assert replies[5].startswith("**Aug 1 to Aug 3, 2 nights; up to $500 a night; two beds**")
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    quotes = session.state_of("Present")["hotels"]
    assert quotes and all(float(night) <= 500 for quote in quotes for night in quote["nightly"])


async def test_values_the_guest_did_not_write_are_dropped() -> None:
    # A small model answers "Hi" with a whole plausible stay, reads "2,5,8" as a price of 258, or
    # adds a pool to the wifi. Room types and amenities are kept only with their words (criteria.py).
    chat = chat_with(
        found(
            ("check_in", "next week", day(7, 20)), ("max_price", "Hi", 300), ("room_types", "Hi", ["suite"])
        ),
        found(("in_portland", "yes", True), ("max_price", "yes 2,5,8", 258)),
        found(),  # 2, 5 and 8 were written but not kept: a second look, which reads nothing
        found(("amenities", "free wifi", ["freeWiFi", "indoorPool"]), ("room_types", "twin", ["two beds"])),
    )
    first, second, third = await chat.say_all(["Hi", "yes 2,5,8", "free wifi and a twin room"])
    assert first.message == f"{HELLO} {PORTLAND}"
    assert second.message == f"Great. {DATES}"
    assert third.message == f"Noted: two beds; Free Wi-Fi. {DATES}"
    assert (await known(chat)) == {"in_portland": True, "room_types": ["two beds"], "amenities": ["freeWiFi"]}


async def test_a_past_check_in_goes_back_to_the_model_once_then_to_the_guest() -> None:
    past = found(("check_in", "7/1", day(7, 1, 2027)), ("check_out", "7/4", day(7, 4, 2027)))
    chat = chat_with(found(("in_portland", "yes", True)), past, past)
    await chat.say("yes")
    result = await chat.say("7/1 to 7/4")
    assert result.message == (
        f"Sorry, the check-in date must be after today, Thursday July 15, 2027. {DATES}"
    )
    assert result.usage.model_calls == 2
    [_, retry] = chat.turn_requests(2)
    correction = retry.messages[-1]
    assert (
        correction.kind == "correction"
        and "check_in: the check-in date must be after today" in correction.content
    )
    assert "7/1" not in correction.content and "2027-07-01" not in correction.content
    # The check-out alone was valid and is kept; only the dates question is asked again.
    assert (await known(chat)) == {"in_portland": True, "check_out": "2027-07-04"}


async def test_a_stay_outside_portland_is_refused_with_the_reason() -> None:
    no = found(("in_portland", "no, Seattle", False))
    chat = chat_with(no, no)
    result = await chat.say("no, Seattle")
    assert result.message == f"{HELLO}\n\nSorry, we only have hotels in the Portland, Oregon area. {PORTLAND}"
    assert "in_portland" not in (await known(chat))


@pytest.fixture
async def listed() -> Chat:
    chat = chat_with(
        found(
            ("check_in", "8/1/2027", day(8, 1, 2027)),
            ("check_out", "8/8/2027", day(8, 8, 2027)),
            ("room_types", "suite", ["suite"]),
        ),
        found(),
        found(),
        found(),
        found(),
    )
    for text in ["suite 8/1/2027 to 8/8/2027", "yes", "no", "no", "no"]:
        result = await chat.say(text)
    assert result.step == "Present", result.message
    return chat


async def test_the_list_answers_what_the_guest_asks(listed: Chat) -> None:
    listed.model.extend(
        [
            wants("book", [40]),
            wants("book", []),
            wants("compare", [1, 3], ["amenities", "price"]),
            wants("other"),
            wants("goodbye"),
        ]
    )
    replies = [
        result.message
        for result in await listed.say_all(["40", "book it", "compare 1 and 3", "what about pools?", "bye"])
    ]
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None
    names = [hotel["name"] for hotel in session.state_of("Present")["hotels"]]
    assert replies[0].startswith(
        f"The list has hotels 1 to {len(names)}. Which hotel would you like to book?"
    )
    assert (
        replies[1] == f"Which hotel would you like to book? Give one number from the list, 1 to {len(names)}."
    )
    assert replies[2].startswith(f"| Amenity | #1 {names[0]} | #3 {names[2]} |")
    assert "| Night | #1 " in replies[2] and replies[2].endswith("Another comparison or ready to book?")
    assert replies[3].startswith("I can book one of these hotels, compare them on price")
    assert replies[4] == "Thank you for visiting. Goodbye, and you are welcome back any time!"
    assert [result.step for result in listed.results[-5:]] == [
        "Present",
        "Present",
        "Compare",
        "Present",
        "Goodbye",
    ]
    assert listed.results[-1].completed
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and session.status == "completed"
    assert "booking" not in session.state_of("Goodbye")


async def test_a_hotel_chosen_by_what_it_is_is_booked_whatever_action_was_read(listed: Chat) -> None:
    """ "Let's go with the one closest to the airport" read as a new search books that hotel (the
    words of choosing are declared beside the picks); "closer to the airport" without them searches."""
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None
    quotes = session.state_of("Present")["hotels"]
    miles = {hotel.name: hotel.airport_miles for hotel in hotels()}
    closest = min(quotes, key=lambda quote: miles[quote["name"]])
    listed.model.extend([wants("change_search", pick="closest_to_airport")])
    result = await listed.say("These all look great! Let's go with the one closest to the airport.")
    (approval,) = result.pending
    assert (result.step, approval.tool, approval.args["hotel"]) == ("Present", "book", closest["name"])
    result = await listed.decide("approve")
    assert (result.step, result.completed) == ("Goodbye", True)
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and session.state_of("Goodbye")["booking"]["hotel"] == closest["name"]


def booked(session: Session) -> list[object]:
    """Every booking the session's steps keep."""
    return [state["booking"] for state in session.states.values() if "booking" in state]


async def test_book_the_cheapest_books_nothing_until_the_guest_approves_then_books_once(listed: Chat) -> None:
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None
    cheapest = min(session.state_of("Present")["hotels"], key=lambda quote: Decimal(quote["total"]))
    listed.model.extend([wants("book", pick="cheapest")])
    result = await listed.say("book the cheapest")
    assert result.ok and (result.step, result.completed) == ("Present", False)
    assert listed.model.remaining == 0 and result.usage.model_calls == 1  # the reading only
    (approval,) = result.pending
    assert approval.tool == "book" and approval.approvers == Approvers(principal=True)
    assert dict(approval.args) == {
        "hotel": cheapest["name"],
        "room_type": "suite",
        "check_in": "2027-08-01",
        "check_out": "2027-08-08",
        "nightly": cheapest["nightly"],
        "total": cheapest["total"],
        "language": "en",
    }
    nightly = sorted(Decimal(price) for price in cheapest["nightly"])
    assert approval.summary == (
        f"Book {cheapest['name']}, suite: check-in Sunday August 1, 2027, check-out Sunday August 8, "
        f"2027 (7 nights), ${nightly[0]:,} to ${nightly[-1]:,} a night, ${Decimal(cheapest['total']):,} "
        "in total"
    )
    assert result.message == f"Waiting for approval: {approval.summary} (the customer must approve)"
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and session.status == "awaiting_approval" and booked(session) == []
    assert session.state_of("Present")["proposed"] == {
        key: approval.args[key] for key in ("hotel", "room_type", "check_in", "check_out", "total")
    }

    done = await listed.decide("approve")
    assert done.ok and (done.step, done.completed, done.usage.model_calls) == ("Goodbye", True, 0)
    code = hotel_flow.confirmation_number(approval.id)
    assert done.message.startswith("**Your booking is confirmed.**\n- Hotel: " + cheapest["name"])
    assert f"- Confirmation number: **{code}**" in done.message
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and "proposed" not in session.state_of("Present")
    assert booked(session) == [
        {
            "hotel": cheapest["name"],
            "room_type": "suite",
            "check_in": "2027-08-01",
            "check_out": "2027-08-08",
            "total": cheapest["total"],
            "confirmation": code,
        }
    ]
    for decision in ("approve", "deny"):  # decided: a second decision is refused, nothing runs again
        again = await listed.decide(decision, approval)
        assert again.error is not None and again.error.is_a(ApprovalDecided)
    after = await listed.engine.store.load(listed.session_id or "")
    assert after is not None and booked(after) == booked(session) and after.revision == session.revision
    assert [a.status for a in after.approvals] == ["approved"]


async def test_a_denied_booking_is_back_at_the_list(listed: Chat) -> None:
    listed.model.extend([wants("compare", [1, 2], ["price"]), wants("book", [2])])
    await listed.say("compare 1 and 2 on price")
    result = await listed.say("book 2")
    (approval,) = result.pending
    assert (result.step, approval.step) == ("Compare", "Compare")  # chosen after a table
    denied = await listed.decide("deny", reason="too far")
    assert denied.ok and (denied.step, denied.completed) == ("Present", False)
    assert denied.message.startswith(
        "OK, nothing was booked.\n\n**Aug 1 to Aug 8, 7 nights; suite**\n\nCheapest first:\n\n1. "
    )
    assert denied.message.endswith(CHOOSE)
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and booked(session) == [] and session.status == "running"
    assert [(a.status, a.reason) for a in session.approvals] == [("denied", "too far")]
    assert "proposed" not in session.state_of("Present")
    # The list takes the guest's next choice as before: a new booking to approve.
    listed.model.extend([wants("book", pick="cheapest")])
    again = await listed.say("the cheapest then")
    assert len(again.pending) == 1 and again.pending[0].id != approval.id


async def test_a_message_sent_while_the_booking_waits_withdraws_it(listed: Chat) -> None:
    listed.model.extend([wants("book", pick="cheapest"), wants("compare", [1, 2], ["price"])])
    waiting = await listed.say("book the cheapest")
    (approval,) = waiting.pending
    result = await listed.say("compare 1 and 2 on price")  # no decision: read as any message
    assert result.ok and result.step == "Compare" and result.message.startswith("| Night | #1 ")
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and booked(session) == [] and session.status == "running"
    assert [a.status for a in session.approvals] == ["withdrawn"]
    assert "proposed" not in session.state_of("Present")
    late = await listed.decide("approve", approval)
    assert late.error is not None and late.error.is_a(ApprovalStale)
    after = await listed.engine.store.load(listed.session_id or "")
    assert after is not None and booked(after) == []


async def test_a_pick_without_words_of_choosing_is_no_booking(listed: Chat) -> None:
    listed.model.extend([wants("change_search", pick="closest_to_airport"), found()])
    result = await listed.say("Hmm, do you have hotels closer to the airport?")
    # Back to the search, which read nothing new in it: the list again, and nothing booked.
    assert result.step == "Present" and not result.completed
    assert listed.model.remaining == 0 and result.message.startswith("**")
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and "booking" not in session.state_of("Goodbye")


@pytest.mark.parametrize(
    ("said", "quote", "changed"),
    [
        ("Actually I'd prefer two beds, my son is coming along", "two beds", "Changed: two beds."),
        ("Hm, lieber doch zwei Betten", "zwei Betten", "Geändert: zwei Betten."),
    ],
)
async def test_a_new_room_type_read_as_a_comparison_changes_the_search(
    listed: Chat, said: str, quote: str, changed: str
) -> None:
    # The small model read the room type as a comparison of hotels the guest never named (its
    # "beds" a comparison's word): with no hotel named and no other word of a comparison, it is
    # a new value for the search, in any language the search step reads.
    listed.model.extend([wants("compare", [1, 4], ["roomType"]), found(("room_types", quote, ["two beds"]))])
    result = await listed.say(said)
    assert result.step == "Present" and result.message.startswith(f"{changed}\n\n**")
    assert (await known(listed))["room_types"] == ["two beds"]


@pytest.mark.parametrize(
    ("said", "quote", "changed"),
    [
        ("Actually, make it one bed instead and search again", "one bed", "Changed: one bed."),
        ("Mejor una cama, y busca otra vez", "una cama", "Cambiado: una cama."),
    ],
)
async def test_a_new_room_type_read_as_the_list_again_changes_the_search(
    listed: Chat, said: str, quote: str, changed: str
) -> None:
    # The small model read the hotels with that room type and the list again (as the embedded
    # model does, 3 runs of 3): a new value for the search, as when it is read as a comparison.
    # Its "one" ("una") is the room type's word, not hotel 1 named.
    listed.model.extend(
        [
            wants("show_list", [1, 4, 7], ["roomType"]),
            found(("room_types", quote, ["one bed"])),
        ]
    )
    result = await listed.say(said)
    assert result.step == "Present" and result.message.startswith(f"{changed}\n\n**")
    assert (await known(listed))["room_types"] == ["one bed"]
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and booked(session) == [] and session.approvals == ()


async def test_the_list_asked_again_without_a_new_value_is_the_list(listed: Chat) -> None:
    listed.model.extend([wants("show_list")])
    result = await listed.say("show me the list again")
    assert result.step == "Present" and result.message.startswith("**") and listed.model.remaining == 0


async def test_a_comparison_that_names_an_amenity_is_still_a_comparison(listed: Chat) -> None:
    listed.model.extend([wants("compare", [1, 2], ["amenities"])])
    result = await listed.say("compare the first two on amenities, I need a pool")
    assert result.step == "Compare" and result.message.startswith("| Amenity |")


@pytest.mark.parametrize(
    ("said", "quote", "changed"),
    [
        ("actually I'd rather have two beds", "two beds", "Changed: two beds."),
        ("mejor con dos camas", "dos camas", "Cambiado: dos camas."),
    ],
)
async def test_a_correction_while_the_booking_waits_withdraws_it_and_searches_again(
    listed: Chat, said: str, quote: str, changed: str
) -> None:
    listed.model.extend(
        [
            wants("book", pick="cheapest"),
            wants("change_search"),
            found(("room_types", quote, ["two beds"])),
        ]
    )
    (approval,) = (await listed.say("book the cheapest")).pending
    # The booking waited on a suite; the guest changes the room type: what waited is withdrawn,
    # the search step takes the new value, says what changed, and lists again. Nothing is booked.
    result = await listed.say(said)
    assert result.ok and result.step == "Present" and result.message.startswith(f"{changed}\n\n**")
    assert result.pending == ()
    session = await listed.engine.store.load(listed.session_id or "")
    assert session is not None and booked(session) == []
    assert [a.status for a in session.approvals] == ["withdrawn"]
    assert session.state_of("Explore")["form"]["known"]["room_types"] == ["two beds"]
    late = await listed.decide("approve", approval)
    assert late.error is not None and late.error.is_a(ApprovalStale)
