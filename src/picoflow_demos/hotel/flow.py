"""HotelFlow: find, compare and book a hotel in the Portland area.

The model reads; code decides. Each turn the model turns the guest's latest message into a small
JSON value: what the guest said about their stay (Explore), or what they want done with the list
(Present and Compare). Code keeps every answer, asks the next question, searches, lists, compares
and books; every price, table and confirmation is written by code and reaches the guest as written.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from picoflow import (
    Ask,
    Direct,
    Flow,
    Go,
    Outcome,
    Prompt,
    Said,
    SlotStep,
    Step,
    TerminateStep,
    ask,
    direct,
    direct_to,
    go,
    since_last_user,
)
from picoflow.messages import Message
from picoflow.slots import bears_out, says_field
from picoflow_demos._common import usd
from picoflow_demos.hotel.criteria import GOODBYE_WORDS, Criteria, long_date, today
from picoflow_demos.hotel.pricing import HotelQuote, hotels, stay_nights
from picoflow_demos.hotel.tables import Feature, comparison, hotel_list, night_label

EXPLORE = Prompt.file("explore.md")
CHOOSE_PROMPT = Prompt.file("present.md")

GREETING = "Hello! I can help you find a hotel in the Portland, Oregon area."
CHOOSE = (
    "Which hotel would you like to book? Give its number or name. "
    "You can also compare hotels or change the search."
)
FOLLOW_UP = "Another comparison or ready to book?"
HELP = (
    "I can book one of these hotels, compare them on price, room type, amenities or distance, "
    "or change the search."
)
THANKS = "Thank you for booking with us. Enjoy your stay in Portland!"
FAREWELL = "Thank you for visiting. Goodbye, and you are welcome back any time!"

# No 0/O or 1/I: the guest may read the number out over the phone.
_CONFIRMATION_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def new_confirmation_number() -> str:
    """A fresh booking reference such as ``HF-7K3QX9TB``."""
    return "HF-" + "".join(secrets.choice(_CONFIRMATION_ALPHABET) for _ in range(8))


def choice_reply(quotes: Sequence[HotelQuote], nights: int) -> str:
    """The numbered list and the question the guest answers by choosing, all written in code."""
    return f"{hotel_list(quotes, nights)}\n\n{CHOOSE}"


# What memory keeps of a list or tables the guest was shown: what they were, and the question they
# ended with, which the guest's next words answer. Present's prompt holds the list itself.


def listed_note(quotes: Sequence[HotelQuote]) -> str:
    return f"Showed the list of {len(quotes)} hotel{'s' if len(quotes) != 1 else ''}.\n\n{CHOOSE}"


def compared_note(numbers: Sequence[int], features: Sequence[Feature]) -> str:
    names = {"roomType": "room type"}
    hotels = _joined([str(number) for number in numbers])
    return f"Compared hotels {hotels} on {_joined([names.get(f, f) for f in features])}.\n\n{FOLLOW_UP}"


def _joined(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


class Booking(BaseModel):
    """A confirmed booking, as kept in the session."""

    hotel: str
    room_type: str
    check_in: date
    check_out: date
    total: Decimal
    confirmation: str

    def summary(self) -> str:
        nights = len(stay_nights(self.check_in, self.check_out))
        return "\n".join(
            [
                "**Your booking is confirmed.**",
                f"- Hotel: {self.hotel}",
                f"- Room: {self.room_type}",
                f"- Stay: {night_label(self.check_in)} to {night_label(self.check_out)} "
                f"({nights} night{'s' if nights != 1 else ''})",
                f"- Total: {usd(self.total)}",
                f"- Confirmation number: **{self.confirmation}**",
            ]
        )


class Explore(SlotStep):
    """Learn the guest's stay criteria one answer at a time, then search."""

    memory = "hotel-explore"
    crossing_message = "I'd like to change my search."
    slots = Criteria
    go_ahead = "request"
    goodbye = "goodbye"
    intro = GREETING
    questions = [
        ask("Is your stay in the Portland area?", "in_portland", optional=True),
        ask("What are your check-in and check-out dates?", "check_in", "check_out"),
        ask(
            "What nightly budget do you have in mind: a minimum, a maximum or both?",
            "max_price",
            "min_price",
            optional=True,
        ),
        ask("Which room type would you like: one bed, two beds or suite?", "room_types", optional=True),
        ask(
            "Which amenities do you need? For example free WiFi, free parking or free breakfast.",
            "amenities",
            optional=True,
        ),
        ask(
            "Any maximum distance to the airport or the city center, in miles?",
            "max_airport_miles",
            "max_city_center_miles",
            optional=True,
        ),
    ]

    def prompt(self) -> str:
        # The reading rules are SlotStep's standing instructions: they follow this prompt on their own.
        return EXPLORE.render(today=f"{today():%A} {today().isoformat()}")

    def acknowledge(self, values: Criteria, accepted: Sequence[str]) -> str:
        """What code understood, said back, so the guest can correct a misreading at once."""
        said = ["Great."] if "in_portland" in accepted else []
        if values.check_in and values.check_out and {"check_in", "check_out"} & set(accepted):
            nights = len(values.nights)
            said.append(
                f"Check-in {long_date(values.check_in)}, check-out {long_date(values.check_out)}: "
                f"{nights} night{'s' if nights != 1 else ''}."
            )
        noted = values.phrases(accepted)
        if noted:
            said.append(f"Noted: {'; '.join(noted)}.")
        return " ".join(said)

    def phrase(self, question: Ask, values: Criteria) -> str:
        if question.key == "check_in" and values.check_in and not values.check_out:
            return f"Check-in {long_date(values.check_in)}. What is your check-out date?"
        return question.question

    def on_complete(self, values: Criteria) -> Outcome:
        quotes = values.search()
        if not quotes:
            return direct(
                f"No hotel matches {values.summary()}. Would you like to relax one of them: the budget, "
                "the room type, the amenities or the distance?"
            )
        searched = values.summary()
        found = f"**{searched}**\n\n{choice_reply(quotes, len(values.nights))}"
        listing = direct_to(Present, found).remember_as(listed_note(quotes))
        return listing.with_state(
            hotels=quotes,
            check_in=values.check_in,
            check_out=values.check_out,
            searched=searched,
            compared=[],
            feature=None,
        )


Pick = Literal["cheapest", "priciest", "closest_to_airport", "closest_to_center", "none"]
# A hotel named by what it is rather than its number, each resolved in code over the list shown;
# the words say which, so "book it" is never read as "the cheapest".
PICK_WORDS = Said(
    options={
        "cheapest": ("cheaper", "lowest", "least expensive", "budget", "cheap", "lowest price"),
        "priciest": ("most expensive", "fanciest", "luxury", "luxurious", "best", "nicest"),
        "closest_to_airport": ("airport", "pdx"),
        "closest_to_center": ("center", "centre", "downtown", "city"),
    },
    # The words of choosing: "let's go with the one closest to the airport" books it, whatever
    # action was read; "show me hotels closer to the airport" is a new search.
    words=("go with", "take", "book", "reserve", "choose", "pick", "i'll have", "we'll have", "let's do"),
)


# What the list's actions need said: a comparison names one, or what it is on; a goodbye its words.
ACTION_WORDS = Said(
    options={
        "goodbye": GOODBYE_WORDS,
        "compare": ("compare", "comparison", "side by side", "versus", "vs", "difference", "differ",
                    "against", "price", "prices", "cost", "costs", "amenities", "amenity", "distance",
                    "distances", "far", "room", "rooms", "bed", "beds", "type", "types"),
    }
)  # fmt: skip


class GuestRequest(BaseModel):
    """What the guest asks for in their latest message."""

    # Every field is required, so the model writes them in this order: the numbers the guest said
    # come before the action they decide ("8" is read as hotels [8], then book).
    hotels: list[int] = Field(max_length=10, description="List numbers of the hotels the guest names")
    features: list[Feature] = Field(
        max_length=4,
        description="What to compare: price (cost), roomType (rooms, beds), amenities, distance",
    )
    action: Annotated[
        Literal["book", "compare", "change_search", "show_list", "goodbye", "other"], ACTION_WORDS
    ] = Field(
        description="book: the guest picks one hotel (a message that is only a number picks that hotel); "
        "compare: hotels side by side; change_search: new or changed criteria; show_list: the list again "
        "or resume booking; goodbye: the guest ends the conversation; other: anything else"
    )
    pick: Annotated[Pick, PICK_WORDS] = Field(
        description="A hotel named by a quality: cheapest, priciest, closest_to_airport, closest_to_center; "
        "none when the guest names none that way"
    )


def picked(quotes: Sequence[HotelQuote], pick: Pick) -> int:
    """The list number of the hotel ``pick`` names among ``quotes`` (the first of equals)."""
    where = {hotel.name: hotel for hotel in hotels()}
    keys: dict[str, Any] = {
        "cheapest": lambda quote: quote.total,
        "priciest": lambda quote: -quote.total,
        "closest_to_airport": lambda quote: where[quote.name].airport_miles,
        "closest_to_center": lambda quote: where[quote.name].city_center_miles,
    }
    key = keys[pick]
    return min(range(len(quotes)), key=lambda index: key(quotes[index])) + 1


class Present(Step):
    """Take the guest's choice among the hotels code has listed: book, compare, search again."""

    output = GuestRequest
    terminate_tool = False

    def prompt(self) -> str:
        return CHOOSE_PROMPT.render(hotels=self._numbered_names())

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        # The guest's words and what they answer ("8" answers "Which hotel would you like to
        # book?"); lists and tables are remembered as short notes, and the list is in the prompt.
        return since_last_user(memory, before=1)

    def on_response(self, request: GuestRequest) -> Outcome:
        said = self.last_user_message
        self.erase_memory()
        listed = self._listed()
        numbers = list(dict.fromkeys(request.hotels))
        pick = request.pick if bears_out(GuestRequest, "pick", request.pick, said or "") else "none"
        if not bears_out(GuestRequest, "action", request.action, said or ""):
            # A goodbye or a comparison without a word of one: "8" alone still books hotel 8.
            lone = len(numbers) == 1 and bears_out(GuestRequest, "hotels", numbers, said or "")
            if lone and 1 <= numbers[0] <= len(listed):
                return self.book(listed[numbers[0] - 1])
            return self.show_list(with_help=True)
        action = request.action
        if pick != "none" and listed:  # "the cheapest" is found in code, whatever number was read
            numbers = [picked(listed, pick)]
            if action in ("change_search", "show_list", "other") and says_field(
                GuestRequest, "pick", said or ""
            ):
                action = "book"
        request = request.model_copy(update={"action": action})
        if any(not 1 <= number <= len(listed) for number in numbers) and request.action in (
            "book",
            "compare",
        ):
            return direct(f"The list has hotels 1 to {len(listed)}. {CHOOSE}")
        if request.action == "book" and len(numbers) != 1:
            return direct(
                f"Which hotel would you like to book? Give one number from the list, 1 to {len(listed)}."
            )
        if request.action == "book":
            return self.book(listed[numbers[0] - 1])
        if request.action == "compare":
            return self.compare(numbers or self.state_of(Present).get("compared") or [], request.features)
        if request.action == "change_search":
            return self.change_search(said)
        if request.action == "goodbye":
            return self.goodbye()
        return self.show_list(with_help=request.action != "show_list")

    def change_search(self, said: str | None) -> Go:
        return go(Explore).with_message(said) if said else go(Explore)

    def goodbye(self) -> Direct:
        return direct_to(Goodbye, FAREWELL)

    def show_list(self, *, with_help: bool = False) -> Direct:
        listing = (
            f"**{self.state_of(Present)['searched']}**\n\n{choice_reply(self._listed(), len(self._nights()))}"
        )
        reply = direct_to(Present, f"{HELP}\n\n{listing}" if with_help else listing)
        return reply.remember_as(listed_note(self._listed()))

    def _listed(self) -> list[HotelQuote]:
        return self.state_of(Present).get_as("hotels", list[HotelQuote]) or []

    def _nights(self) -> list[date]:
        state = self.state_of(Present)
        return stay_nights(date.fromisoformat(state["check_in"]), date.fromisoformat(state["check_out"]))

    def _numbered_names(self) -> str:
        return "\n".join(f"{number}. {quote.name}" for number, quote in enumerate(self._listed(), start=1))

    def book(self, quote: HotelQuote) -> Direct:
        listed = self.state_of(Present)
        booking = Booking(
            hotel=quote.name,
            room_type=quote.room_type,
            check_in=listed["check_in"],
            check_out=listed["check_out"],
            total=quote.total,
            confirmation=new_confirmation_number(),
        )
        return direct_to(Goodbye, f"{booking.summary()}\n\n{THANKS}").with_state(booking=booking)

    def compare(self, numbers: Sequence[int], features: Sequence[Feature]) -> Direct:
        if not numbers:
            return direct(
                f"Which hotels shall I compare? Give their numbers from the list, 1 to {len(self._listed())}."
            )
        state = self.state_of(Present)
        wanted: list[Any] = list(dict.fromkeys(features)) or [state.get("feature") or "price"]
        listed = self._listed()
        chosen = [(number, listed[number - 1]) for number in numbers]
        tables = [comparison(feature, chosen, self._nights()) for feature in wanted]
        state.merge({"compared": list(numbers), "feature": wanted[-1]})
        reply = direct_to(Compare, "\n\n".join([*tables, FOLLOW_UP]))
        return reply.remember_as(compared_note(numbers, wanted))


class Compare(Present):
    """Hotels of the list side by side; the guest compares more, books, or goes back to the list."""

    # One memory for both: the guest's next words are read the same way after a list or a table.
    memory = "Present"


class Goodbye(TerminateStep):
    """The end of the conversation."""

    memory = "hotel-goodbye"

    def prompt(self) -> str:
        return "The guest has ended the conversation. Thank them briefly and say goodbye."


class HotelFlow(Flow):
    """Find, compare and book a hotel in the Portland, Oregon area."""

    name = "hotel"
    steps = [Explore, Present, Compare, Goodbye]
