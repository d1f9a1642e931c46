"""The hotel list a guest is shown: cheapest first (equal totals by name), said in the guest's
language; a number the guest gives is a place in that list, so the hotel on the approval card and
the one booked are the hotel shown with that number; and a guest whose budget is per night reads
each hotel's price per night beside its total.

The catalog's own order is not the list's: the searches below are chosen so that the hotel second
in the catalog is not the hotel shown second, and the test says so before relying on it.
"""

from __future__ import annotations

import re
from datetime import date

import pytest

from picoflow import FlowEngine
from picoflow.models import ScriptedModel
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel.flow import listed_note
from picoflow_demos.hotel.pricing import HotelQuote, cheapest_first, quote_hotels
from picoflow_demos.hotel.replies import say
from picoflow_demos.hotel.scripted import day, found, wants
from picoflow_demos.hotel.tables import hotel_list

from .conftest import Chat

NBSP = "\xa0"
# Two beds from Friday August 6 to Monday August 9, 2027, under $400 a night: the weekend nights cost
# more than the Sunday, so each hotel's nightly price is a range.
STAY = (date(2027, 8, 6), date(2027, 8, 9))
BUDGET = {"en": "under 400 a night", "es": "menos de 400 la noche", "de": "unter 400 pro Nacht"}
SEARCH = {
    "en": "Two beds in Portland from August 6 to August 9, {budget}, show me the hotels",
    "es": "Dos camas en Portland del 6 al 9 de agosto, {budget}, muéstrame los hoteles",
    "de": "Zwei Betten in Portland vom 6. bis 9. August, {budget}, zeigen Sie mir die Hotels",
}
WORDS = {
    "en": ("Two beds", "show me"),
    "es": ("Dos camas", "muéstrame"),
    "de": ("Zwei Betten", "zeigen Sie mir"),
}
PICK_TWO = {"en": "number 2", "es": "el número 2", "de": "Nummer 2"}


def chat_with(*script: str) -> Chat:
    model = ScriptedModel(list(script), grounding="small")
    return Chat(FlowEngine([HotelFlow], model=model), model, "hotel")


def search(locale: str, *, budget: bool = True) -> tuple[str, str]:
    """The guest's message asking for the search, and the model's reading of it."""
    rooms, show = WORDS[locale]
    message = (
        SEARCH[locale].format(budget=BUDGET[locale]) if budget else SEARCH[locale].replace(", {budget}", "")
    )
    items = [
        ("room_types", rooms, ["two beds"]),
        ("in_portland", "Portland", True),
        ("check_in", "6", day(8, 6, 2027)),
        ("check_out", "9", day(8, 9, 2027)),
        *([("max_price", BUDGET[locale].rsplit(" ", 2)[0], 400)] if budget else []),
        ("request", show, "search"),
    ]
    return message, found(*items)


def shown_hotels(reply: str) -> dict[int, str]:
    """The list numbers and hotel names a reply shows ("2. **Hampton Inn ...** (...)")."""
    return {int(number): name for number, name in re.findall(r"^(\d+)\. \*\*(.+?)\*\* \(", reply, re.M)}


@pytest.mark.parametrize("locale", ["en", "es"])
async def test_number_two_books_the_hotel_shown_as_two(locale: str) -> None:
    source = quote_hotels(*STAY, room_types=["two beds"], max_price=400)
    shown = cheapest_first(source)
    assert source[1].name != shown[1].name  # the catalog's second hotel is not the list's
    message, reading = search(locale)
    chat = chat_with(reading, wants("book", [2]))
    listing = await chat.say(message)
    assert f"\n\n{say('list_order', locale)}\n\n1. " in listing.message
    assert listing.step == "Present" and shown_hotels(listing.message) == {
        number: quote.name for number, quote in enumerate(shown, start=1)
    }
    result = await chat.say(PICK_TWO[locale])
    (approval,) = result.pending
    second = shown_hotels(listing.message)[2]
    assert approval.args["hotel"] == second == shown[1].name
    assert approval.args["total"] == str(shown[1].total)
    assert second in approval.summary
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    # The list the step keeps is the list shown, in its order: what the model's numbers index.
    assert [quote["name"] for quote in session.state_of("Present")["hotels"]] == [q.name for q in shown]
    assert f"2. {second}" in chat.model.requests[-1].system
    booked = await chat.decide("approve")
    assert booked.completed and second in booked.message
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.state_of("Goodbye")["booking"]["hotel"] == second


@pytest.mark.parametrize(
    ("locale", "order", "nightly", "currency"),
    [
        ("en", "Cheapest first:", "{total} total for 3 nights, {low} to {high} a night", "${amount}"),
        (
            "de",
            "Das günstigste zuerst:",
            "{total} insgesamt für 3 Nächte, {low} bis {high} pro Nacht",
            f"{{amount}}{NBSP}$",
        ),
    ],
)
async def test_a_nightly_budget_shows_each_hotels_price_per_night(
    locale: str, order: str, nightly: str, currency: str
) -> None:
    shown = cheapest_first(quote_hotels(*STAY, room_types=["two beds"], max_price=400))
    message, reading = search(locale)
    chat = chat_with(reading)
    reply = (await chat.say(message)).message
    _, listing, _ = reply.split("\n\n", 2)
    assert listing == order

    def money(amount: object) -> str:
        text = f"{amount:,}"
        if locale == "de":
            text = text.replace(",", "_").replace(".", ",").replace("_", ".")
        return currency.format(amount=text)

    lines = reply.split("\n\n")[2].split("\n")
    assert len(lines) == len(shown) > 1
    for number, (line, quote) in enumerate(zip(lines, shown, strict=True), start=1):
        low, high = min(quote.nightly), max(quote.nightly)
        assert low != high  # weekend nights cost more: the range is shown
        expected = nightly.format(total=money(quote.total), low=money(low), high=money(high))
        assert line.startswith(f"{number}. **{quote.name}** (") and line.endswith(f"): {expected}")


@pytest.mark.parametrize(
    ("locale", "total"), [("en", "total for 3 nights"), ("de", "insgesamt für 3 Nächte")]
)
async def test_without_a_budget_a_hotel_shows_its_total_only(locale: str, total: str) -> None:
    message, reading = search(locale, budget=False)
    chat = chat_with(reading)
    reply = (await chat.say(message)).message
    lines = [line for line in reply.split("\n") if re.match(r"\d+\. ", line)]
    assert len(lines) > 1 and all(line.endswith(total) for line in lines)


def test_a_list_kept_in_another_order_is_numbered_as_kept_without_saying_an_order() -> None:
    """A session that kept a list from before the order was stated is shown it as it was numbered
    (its numbers are what the guest saw), without claiming "cheapest first"."""
    source = quote_hotels(*STAY, room_types=["two beds"], max_price=400)[:3]
    assert source != cheapest_first(source)
    kept = hotel_list(source, 3, "en")
    assert kept.split("\n")[0].startswith(f"1. **{source[0].name}**")
    assert say("list_order", "en") not in kept
    assert listed_note(source, "en").startswith("Showed the list of 3 hotels.\n\n")
    ordered: list[HotelQuote] = cheapest_first(source)
    assert hotel_list(ordered, 3, "en").startswith("Cheapest first:\n\n1. ")
    # What the model reads of a list says no order either way: numbers are mapped by code.
    assert listed_note(ordered, "en") == listed_note(source, "en")
