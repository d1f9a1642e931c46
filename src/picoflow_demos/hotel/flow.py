"""HotelFlow: find, compare and book a hotel in the Portland area.

Explore gathers the criteria over several turns and searches; Present shows the numbered matches
and takes a choice; Compare answers comparisons with tables built in code (no model call to
write them); booking ends in Goodbye, which leads with a confirmation written in code.

The model reads the guest and picks tools. Prices, lists, tables and the confirmation number are
written by code and reach the guest as written, never retyped by the model.
"""

from __future__ import annotations

import secrets
from datetime import date
from decimal import Decimal
from typing import cast

from pydantic import BaseModel, ConfigDict, Field

from picoflow import (
    Direct,
    Flow,
    Go,
    Prompt,
    Reject,
    Stay,
    Step,
    TerminateStep,
    ToolError,
    ValidCall,
    declare_tool,
    direct,
    go,
    stay,
    tool,
    tools,
)
from picoflow.messages import ModelResponse
from picoflow_demos._common import dollar_amounts, list_number, usd
from picoflow_demos.hotel.criteria import Criteria, check_in_problem, mentions_dates, raw_check_in, today
from picoflow_demos.hotel.pricing import AMENITIES, HotelQuote, stay_nights
from picoflow_demos.hotel.tables import Feature, comparison, hotel_list, night_label

EXPLORE = Prompt.file("explore.md")
PRESENT = Prompt.file("present.md")
COMPARE = Prompt.file("compare.md")
GOODBYE = Prompt.file("goodbye.md")
BOOKED = Prompt.file("booked.md")

FOLLOW_UP = "Another comparison or ready to book?"
LIST_SHOWN = (
    "The list has just been shown to the guest, right above your reply: do not repeat it. Reply with "
    'one short question, such as: "Which hotel would you like to book? Give me its number, or ask me to '
    'compare hotels or change the search."'
)
ONGOING = "Answer the guest's latest message. A message that is only a number chooses that hotel: book it."

# No 0/O or 1/I: the guest may read the number out over the phone.
_CONFIRMATION_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def new_confirmation_number() -> str:
    """A fresh booking reference such as ``HF-7K3QX9TB``."""
    return "HF-" + "".join(secrets.choice(_CONFIRMATION_ALPHABET) for _ in range(8))


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


def _alone(response: ModelResponse, name: str, why: str, *, same_repeats: bool = False) -> Reject | None:
    """Refuse a response that mixes ``name`` with other calls (or repeats it) before anything runs.

    With ``same_repeats``, a call repeated with identical arguments (small models do that) passes:
    running it twice changes nothing.
    """
    calls = response.tool_calls
    if name not in response.tool_names() or len(calls) == 1:
        return None
    if same_repeats and all(call.name == name and call.args == calls[0].args for call in calls):
        return None
    return Reject(f"call {name} alone, exactly once, with no other tool in the same response ({why}).")


class _ListedHotels(Step):
    """Shared by the steps that work on the search results Present holds."""

    def quotes(self) -> list[HotelQuote]:
        return self.state_of(Present).get_as("hotels", list[HotelQuote]) or []

    def nights(self) -> list[date]:
        state = self.state_of(Present)
        return stay_nights(date.fromisoformat(state["check_in"]), date.fromisoformat(state["check_out"]))

    def numbered_names(self) -> str:
        return "\n".join(f"{number}. {quote.name}" for number, quote in enumerate(self.quotes(), start=1))

    def resolve(self, wanted: str) -> tuple[int, HotelQuote]:
        """The listed hotel a name (any case) or list number designates; a ToolError for anything else."""
        quotes = self.quotes()
        number = list_number(wanted)
        if number is None:
            key = " ".join(wanted.split()).casefold()
            number = next((n for n, quote in enumerate(quotes, 1) if quote.name.casefold() == key), None)
        if number is None or not 1 <= number <= len(quotes):
            # The refusal lists what is allowed and never repeats what the model sent.
            raise ToolError(
                "That hotel is not in the guest's list. Use exact names from this list:\n"
                + self.numbered_names()
            )
        return number, quotes[number - 1]


class Explore(Step):
    """Gather the guest's stay criteria over several turns, then search."""

    memory = "hotel-explore"
    crossing_message = "I'd like to change my search."

    def prompt(self) -> str:
        saved = self.state.get_as("criteria", Criteria)
        return EXPLORE.render(
            today=f"{today():%A} {today().isoformat()}",
            amenities=", ".join(AMENITIES),
            criteria=saved.model_dump_json(exclude_none=True) if saved else "none yet",
        )

    def check_response(self, response: ModelResponse) -> Reject | None:
        refused = _alone(response, "capture_choices", "one search at a time", same_repeats=True)
        if refused:
            return refused
        if "capture_choices" not in response.tool_names():
            return None
        guest = [
            message.content for message in self.messages if message.role == "user" and message.kind is None
        ]
        forwarded = [message.content for message in self.messages if message.kind == "forwarded"]
        if not mentions_dates([*guest, *forwarded]):
            return Reject(
                "the guest has not given any dates yet. Ask for their check-in and check-out dates."
            )
        check_in = raw_check_in(response.tool_calls[0].args)
        problem = check_in_problem(check_in) if check_in else None
        return Reject(problem) if problem else None

    @tool
    def capture_choices(self, criteria: Criteria) -> Go | Stay:
        """Search the hotels with the guest's criteria. Call it only after the guest asked to search."""
        problem = check_in_problem(criteria.check_in)
        if problem:
            raise ToolError(problem)
        self.state["criteria"] = criteria
        quotes = criteria.search()
        if not quotes:
            return stay(
                "No hotel found for these criteria. Tell the guest and suggest relaxing one criterion "
                "(budget, room type, amenities or distance); search again when they say so."
            )
        found = f"{len(quotes)} hotel{'s' if len(quotes) != 1 else ''} found; the guest now sees the list."
        return (
            go(Present)
            .with_state(hotels=quotes, check_in=criteria.check_in, check_out=criteria.check_out)
            .with_tool_feedback(found)
        )


class Present(_ListedHotels):
    """Show the hotels that match and take the guest's choice."""

    crossing_message = "Which hotels match my search?"

    def on_enter(self) -> None:
        # Each visit starts clean: the list lives in state, so old turns would only cost tokens.
        self.erase_memory()
        self.state["fresh"] = True

    def prompt(self) -> str:
        situation = LIST_SHOWN if self.state.get("fresh") else ONGOING
        return PRESENT.render(hotels=self.listing(), situation=situation)

    def listing(self) -> str:
        return hotel_list(self.quotes(), len(self.nights()))

    def check_response(self, response: ModelResponse) -> Reject | None:
        if response.tool_calls:
            return _alone(response, "chosen_hotel", "a booking is final")
        # A price the guest reads must be one the code computed (or the guest's own budget).
        known = {price for quote in self.quotes() for price in (quote.total, *quote.nightly)}
        criteria = self.state_of(Explore).get_as("criteria", Criteria)
        if criteria:
            known |= {
                Decimal(str(limit)) for limit in (criteria.min_price, criteria.max_price) if limit is not None
            }
        if any(amount not in known for amount in dollar_amounts(response.text)):
            return Reject(
                "quote prices only exactly as they appear in the list; never compute or estimate one."
            )
        return None

    def on_response(self, response: str) -> str:
        if not self.state.get("fresh"):
            return response
        # The list the guest picks from is written by code, above the model's words.
        self.state["fresh"] = False
        return f"{self.listing()}\n\n{response}"

    @tool
    def chosen_hotel(self, hotel: str) -> Go:
        """Book the hotel the guest chose.

        Args:
            hotel: The exact hotel name from the list.
        """
        _, quote = self.resolve(hotel)
        booking = Booking(
            hotel=quote.name,
            room_type=quote.room_type,
            check_in=self.state["check_in"],
            check_out=self.state["check_out"],
            total=quote.total,
            confirmation=new_confirmation_number(),
        )
        self.state["booking"] = booking
        return (
            go(Goodbye)
            .with_prompt(BOOKED.render(hotel=quote.name))
            .with_tool_feedback(f"Booked {quote.name}, confirmation number {booking.confirmation}.")
        )

    @tool
    def search_again(self) -> Go:
        """The guest wants to change the search criteria or search again."""
        forwarded = self.last_user_message
        # Forwarding the guest's words lets "change to two beds, search" finish in this turn.
        return go(Explore).with_message(forwarded) if forwarded else go(Explore)

    @tool
    def go_compare(self, hotels: list[str] = Field(min_length=1, max_length=6)) -> Go:
        """Compare hotels of the list side by side.

        Args:
            hotels: The exact names of the hotels to compare, from the list.
        """
        names = list(dict.fromkeys(self.resolve(name)[1].name for name in hotels))
        outcome = go(Compare).with_state(hotels=names)
        forwarded = self.last_user_message
        return outcome.with_message(forwarded) if forwarded else outcome


class ComparisonRequest(BaseModel):
    """Arguments of generate_comparison."""

    model_config = ConfigDict(extra="forbid")

    hotels: list[str] = Field(
        default_factory=list,
        max_length=6,
        description="Exact hotel names from the list; empty to compare the currently selected hotels.",
    )
    feature: Feature = Field(description="What to compare: price, roomType, amenities or distance.")


class Compare(_ListedHotels):
    """Compare hotels of the list side by side; the tables are built in code."""

    crossing_message = "Compare these hotels."
    declared_tools = [
        declare_tool(
            "generate_comparison",
            ComparisonRequest,
            "Show the guest a table comparing hotels of the list on one feature.",
        )
    ]

    def on_enter(self) -> None:
        self.erase_memory()

    def prompt(self) -> str:
        last = self.state.get("hotels") or []
        return COMPARE.render(hotels=self.numbered_names(), last=", ".join(last) if last else "none yet")

    def check_response(self, response: ModelResponse) -> Reject | None:
        names = set(response.tool_names())
        if "generate_comparison" in names and len(names) > 1:
            return Reject("generate_comparison cannot be combined with other tools in one response.")
        return None

    @tools(["generate_comparison"])
    def render_comparisons(self, calls: list[ValidCall]) -> Direct:
        """One table per call, so "compare on price and amenities" is answered in one reply."""
        tables: list[str] = []
        requests = {cast(ComparisonRequest, call.args).model_dump_json(): call.args for call in calls}
        for args in requests.values():  # the same request twice shows one table
            request = cast(ComparisonRequest, args)
            wanted = request.hotels or self.state.get("hotels") or []
            if not wanted:
                raise ToolError("Say which hotels to compare: give their exact names from the list.")
            chosen = list({number: (number, quote) for number, quote in map(self.resolve, wanted)}.values())
            tables.append(comparison(request.feature, chosen, self.nights()))
            self.state["hotels"] = [quote.name for _, quote in chosen]
            self.state["feature"] = request.feature
        shown = "The comparison was shown to the guest."
        return direct("\n\n".join([*tables, FOLLOW_UP])).with_tool_feedback(shown)

    @tool
    def resume_booking(self) -> Go:
        """Go back to the hotel list: the guest wants to book, see the list or change the search."""
        forwarded = self.last_user_message
        return go(Present).with_message(forwarded) if forwarded else go(Present)


class Goodbye(TerminateStep):
    """The end of the conversation; a booking's confirmation comes first, written in code."""

    memory = "hotel-goodbye"

    def prompt(self) -> str:
        return GOODBYE.text

    def on_response(self, response: str) -> str:
        booking = self.state_of(Present).get_as("booking", Booking)
        return f"{booking.summary()}\n\n{response}" if booking else response


class HotelFlow(Flow):
    """Find, compare and book a hotel in the Portland, Oregon area."""

    name = "hotel"
    steps = [Explore, Present, Compare, Goodbye]
