"""HotelFlow: find, compare and book a hotel in the Portland area.

Explore gathers the criteria over several turns and searches; the numbered matches are shown
by code as Present takes over, and Present's model reads the guest's next message (a choice, a
comparison, a new search). Compare answers comparisons with tables built in code, and a booking
ends in Goodbye with a confirmation written in code. None of these lists, tables or
confirmations costs a model call.

The model reads the guest and picks tools. Prices, lists, tables and the confirmation number are
written by code and reach the guest as written, never retyped by the model.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import cast

from pydantic import BaseModel, ConfigDict, Field

from picoflow import (
    Direct,
    Flow,
    Go,
    Outcome,
    Prompt,
    Reject,
    Stay,
    TerminateStep,
    ToolError,
    ValidCall,
    declare_tool,
    direct,
    direct_to,
    go,
    stay,
    tool,
    tools,
)
from picoflow.messages import ModelResponse
from picoflow_demos._common import (
    LeavesOnRequest,
    correct_once,
    dollar_amounts,
    goodbye_check,
    list_number,
    refuse,
    unanswered_question,
    usd,
    wants_to_leave,
    was_refused,
)
from picoflow_demos.hotel.criteria import (
    Criteria,
    as_the_guest_said,
    check_in_problem,
    mentions_dates,
    raw_check_in,
    today,
)
from picoflow_demos.hotel.interview import next_question, off_track, without_stock_refusal
from picoflow_demos.hotel.pricing import HotelQuote, stay_nights
from picoflow_demos.hotel.tables import Feature, comparison, hotel_list, night_label

EXPLORE = Prompt.file("explore.md")
PRESENT = Prompt.file("present.md")
COMPARE = Prompt.file("compare.md")
GOODBYE = Prompt.file("goodbye.md")

CHOOSE = (
    "Which hotel would you like to book? Give its number or name. "
    "You can also compare hotels or change the search."
)
FOLLOW_UP = "Another comparison or ready to book?"
GREETING = "Hello! I can help you find a hotel in the Portland, Oregon area."
THANKS = "Thank you for booking with us. Enjoy your stay in Portland!"

# No 0/O or 1/I: the guest may read the number out over the phone.
_CONFIRMATION_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def new_confirmation_number() -> str:
    """A fresh booking reference such as ``HF-7K3QX9TB``."""
    return "HF-" + "".join(secrets.choice(_CONFIRMATION_ALPHABET) for _ in range(8))


def name_key(text: str) -> str:
    """A hotel name as a model may copy it from the list, reduced to the name: "2. **X** (suite)" is "x"."""
    text = re.sub(r"^\s*\d{1,3}\.\s+", "", text.replace("*", ""))
    text = re.sub(r"\s*\([^()]*\)\s*$", "", text)
    return " ".join(text.split()).casefold()


# The guest's go-ahead for a search: "search", "yes" to "Shall I search?", "go ahead", "find me one".
_ASKS_TO_SEARCH = re.compile(
    r"\b(search|find|look|show|yes|yeah|yep|sure|ok|okay|go|please do|do it)\b", re.IGNORECASE
)
_SEARCH = re.compile(r"\bsearch\b", re.IGNORECASE)
# "book number 8", "reserve #3, please": a booking in so many words, with nothing else said.
_BOOK_NUMBER = re.compile(
    r"^\s*(?:please\s+)?(?:book|reserve)\s+(?:hotel\s+|number\s+|no\.?\s*|#\s*)?(\d{1,2})\s*,?\s*(?:please)?"
    r"\s*[.!]?\s*$",
    re.IGNORECASE,
)
_COMPARE = re.compile(r"\bcompar", re.IGNORECASE)
_CHANGE = re.compile(r"\b(search|change)\b", re.IGNORECASE)
_BOOKING_CLAIM = re.compile(r"\b(booked|reserved|booking is confirmed|confirmation number)\b", re.IGNORECASE)


def chosen_number(text: str | None) -> int | None:
    """The list number a guest picks and nothing else: "8", "#8", "hotel 8", "book number 8"."""
    if not text:
        return None
    number = list_number(text)
    if number is not None:
        return number
    match = _BOOK_NUMBER.match(text)
    return int(match.group(1)) if match else None


def choice_reply(quotes: Sequence[HotelQuote], nights: int) -> str:
    """The numbered list and the question the guest answers by choosing, all written in code."""
    return f"{hotel_list(quotes, nights)}\n\n{CHOOSE}"


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


def _one_search(response: ModelResponse) -> str | None:
    """Refuse several different searches in one response: which one did the guest mean?

    A search repeated with identical arguments (small models do that) passes: running it twice
    changes nothing, and the second call is told it was not applied.
    """
    calls = response.tool_calls
    if len(calls) == 1 or all(
        call.name == "capture_choices" and call.args == calls[0].args for call in calls
    ):
        return None
    return "call capture_choices alone, exactly once, with no other tool in the same response."


class _ListedHotels(LeavesOnRequest):
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
            key = name_key(wanted)
            number = next((n for n, quote in enumerate(quotes, 1) if name_key(quote.name) == key), None)
        if number is None or not 1 <= number <= len(quotes):
            # The refusal lists what is allowed and never repeats what the model sent.
            raise ToolError(
                "That hotel is not in the guest's list. Use its number or its exact name from this list:\n"
                + self.numbered_names()
            )
        return number, quotes[number - 1]

    # A booking is a side effect: it must not ride along with other calls of one response.
    @tool(exclusive=True)
    def chosen_hotel(self, hotel: str) -> Direct:
        """Book the hotel the guest chose.

        Args:
            hotel: The exact hotel name from the list, or its number.
        """
        _, quote = self.resolve(hotel)
        listed = self.state_of(Present)
        booking = Booking(
            hotel=quote.name,
            room_type=quote.room_type,
            check_in=listed["check_in"],
            check_out=listed["check_out"],
            total=quote.total,
            confirmation=new_confirmation_number(),
        )
        return (
            direct_to(Goodbye, f"{booking.summary()}\n\n{THANKS}")
            .with_state(booking=booking)
            .with_tool_feedback(f"Booked {quote.name}, confirmation number {booking.confirmation}.")
        )


class Explore(LeavesOnRequest):
    """Gather the guest's stay criteria over several turns, then search."""

    memory = "hotel-explore"
    crossing_message = "I'd like to change my search."

    def prompt(self) -> str:
        saved = self.state.get_as("criteria", Criteria)
        return EXPLORE.render(
            today=f"{today():%A} {today().isoformat()}",
            criteria=saved.model_dump_json(exclude_none=True) if saved else "none yet",
        )

    def check_response(self, response: ModelResponse) -> Reject | None:
        refused = goodbye_check(self, response)
        if refused is not None:
            return refused
        if not response.tool_calls:
            return correct_once(self, self._search_now() or self._off_track(response.text))
        problem = self._search_problem(response)
        # A refused search is explained next; no steering correction may follow it in this turn.
        return refuse(self, problem) if problem else None

    def _search_problem(self, response: ModelResponse) -> str | None:
        """Why the search this response proposes must not run, if it must not."""
        if "capture_choices" not in response.tool_names():
            return None
        problem = _one_search(response)
        said = self._guest_said()
        if problem or not mentions_dates(said):
            return problem or (
                "the guest has not given any dates yet. Ask for their check-in and check-out dates."
            )
        if not _ASKS_TO_SEARCH.search(said[-1]):
            return (
                "the guest has not asked to search yet. Write your reply to the guest: list the details in a "
                'few lines and ask "Shall I search?"'
            )
        check_in = raw_check_in(response.tool_calls[0].args)
        return check_in_problem(check_in) if check_in else None

    def on_response(self, response: str) -> str | Direct:
        # Corrected once and still off track: the next question goes out, written in code.
        if self._off_track(response) is None:
            return without_stock_refusal(response)
        first = not any(message.role == "assistant" for message in self.messages)
        return direct(f"{GREETING} {next_question(self.messages)}" if first else next_question(self.messages))

    def _search_now(self) -> str | None:
        """Why a text reply is wrong: the guest said "search" (with dates known) and nothing searched."""
        latest = unanswered_question(self.messages)
        if latest is None or not _SEARCH.search(latest) or not mentions_dates(self._guest_said()):
            return None
        return (
            "the guest asked to search: call capture_choices now, with what they said and any change "
            "they asked for."
        )

    def _guest_said(self) -> list[str]:
        """Everything the guest wrote in this step, oldest first."""
        return [message.content for message in self.messages if message.is_from_user]

    def _off_track(self, reply: str) -> str | None:
        """Why a reply does not move the questions on: it asks again for what the guest gave, or
        asks nothing the guest still has to answer."""
        if unanswered_question(self.messages) is None or wants_to_leave(self.last_user_message):
            return None  # after a tool result, asking again is the reply
        if was_refused(self):
            return None  # the reply explains why the search it proposed could not run
        return off_track(self.messages, reply)

    @tool
    def capture_choices(self, criteria: Criteria) -> Direct | Stay:
        """Search the hotels with the guest's criteria. Call it only after the guest asked to search."""
        problem = check_in_problem(criteria.check_in)
        if problem:
            raise ToolError(problem)
        criteria = as_the_guest_said(criteria, self._guest_said())
        self.state["criteria"] = criteria
        quotes = criteria.search()
        if not quotes:
            # Worded for the guest: a small model relays a tool result word for word.
            return stay(
                "No hotel found for these criteria. Would you like to relax one of them: the budget, "
                "the room type, the amenities or the distance?"
            )
        found = f"{len(quotes)} hotel{'s' if len(quotes) != 1 else ''} found; the guest now sees the list."
        return (
            direct_to(Present, choice_reply(quotes, len(criteria.nights)))
            .with_state(hotels=quotes, check_in=criteria.check_in, check_out=criteria.check_out)
            .with_tool_feedback(found)
        )


class Present(_ListedHotels):
    """Take the guest's choice among the hotels code has just listed for them."""

    def on_enter(self) -> None:
        # Each visit starts clean, with only the list the guest was shown (recorded after this hook):
        # the list lives in state, so older turns would only cost tokens.
        self.erase_memory()

    def prompt(self) -> str:
        return PRESENT.text

    def check_response(self, response: ModelResponse) -> Reject | None:
        refused = goodbye_check(self, response)
        if refused is not None or response.tool_calls:
            return refused
        return correct_once(self, self._misstep(response.text))

    def on_response(self, response: str) -> str | Outcome:
        """Corrected once and still wrong: do what the guest's words plainly ask, or show the list."""
        if self._misstep(response) is None:
            return response
        asked = unanswered_question(self.messages) or ""
        quotes = self.quotes()
        chosen = chosen_number(asked)
        if chosen is not None and 1 <= chosen <= len(quotes):
            return self.chosen_hotel(str(chosen))
        numbers = [n for n in re.findall(r"\b\d{1,2}\b", asked) if 1 <= int(n) <= len(quotes)]
        if _COMPARE.search(asked) and numbers:
            return self.go_compare(list(dict.fromkeys(numbers)))
        if _CHANGE.search(asked):
            return self.search_again()
        return direct(choice_reply(quotes, len(self.nights())))

    def _misstep(self, reply: str) -> str | None:
        """Why a text reply is not what the guest's message calls for, if it is not."""
        asked = unanswered_question(self.messages)
        chosen = chosen_number(asked)
        if chosen is not None and 1 <= chosen <= len(self.quotes()):
            return f'the guest chose hotel {chosen}: call chosen_hotel with hotel "{chosen}".'
        if asked and _COMPARE.search(asked):
            return "the guest asked for a comparison: call go_compare with the hotels they named."
        if asked and _CHANGE.search(asked):
            return "the guest wants to change the search: call search_again."
        if _BOOKING_CLAIM.search(reply):
            return "nothing is booked until chosen_hotel runs: call it for the hotel the guest chose, or ask."
        # A price the guest reads must be one the code computed (or the guest's own budget).
        known = {price for quote in self.quotes() for price in (quote.total, *quote.nightly)}
        criteria = self.state_of(Explore).get_as("criteria", Criteria)
        if criteria:
            known |= {
                Decimal(str(limit)) for limit in (criteria.min_price, criteria.max_price) if limit is not None
            }
        if any(amount not in known for amount in dollar_amounts(reply)):
            return "quote prices only exactly as they appear in the list; never compute or estimate one."
        return None

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
            hotels: The hotels to compare: their numbers or exact names from the list.
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
        return COMPARE.render(hotels=self.numbered_names())

    def check_response(self, response: ModelResponse) -> Reject | None:
        names = set(response.tool_names())
        if "generate_comparison" in names and len(names) > 1:
            return Reject("generate_comparison cannot be combined with other tools in one response.")
        return goodbye_check(self, response)

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
    def resume_booking(self) -> Direct:
        """Show the hotel list again: the guest wants to see the list, resume booking or change the search."""
        return direct_to(Present, choice_reply(self.quotes(), len(self.nights()))).with_tool_feedback(
            "The guest sees the hotel list again."
        )


class Goodbye(TerminateStep):
    """The end of the conversation."""

    memory = "hotel-goodbye"

    def prompt(self) -> str:
        return GOODBYE.text


class HotelFlow(Flow):
    """Find, compare and book a hotel in the Portland, Oregon area."""

    name = "hotel"
    steps = [Explore, Present, Compare, Goodbye]
