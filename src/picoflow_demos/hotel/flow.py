"""HotelFlow: find, compare and book a hotel in the Portland area.

The model reads; code decides. Each turn the model turns the guest's latest message into a small
JSON value: what the guest said about their stay (Explore), or what they want done with the list
(Present and Compare). Code keeps every answer, asks the next question, searches, lists, compares
and books; every price, table and confirmation is written by code and reaches the guest as written.

A booking is a side effect, so no reading makes one: the hotel the guest chose (by its number, or
"the cheapest", found in code over the list shown) is proposed as a call of the step's ``book``
tool (``call``), which waits for the guest's own decision on an approval card that code writes in
the guest's language: the hotel, the room, the dates, the price per night and the total. Approved,
the booking is made once, its confirmation number derived from the approval's id; denied, the guest
is back at the list; a message sent instead withdraws it and is read as any other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from datetime import date
from decimal import Decimal
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from picoflow import (
    Approval,
    Ask,
    Call,
    Direct,
    Flow,
    LogicStep,
    Outcome,
    Prompt,
    Repairs,
    RunContext,
    Said,
    SlotStep,
    Step,
    TerminateStep,
    ToolError,
    ask,
    call,
    direct,
    direct_to,
    repair,
    since_last_user,
    tool,
)
from picoflow.messages import Message
from picoflow.slots import bears_out, options_said, says_field
from picoflow.slots.words import words
from picoflow_demos._common import as_typed
from picoflow_demos.hotel.criteria import (
    AMENITY_WORDS,
    CONFIRM,
    GOODBYE_WORDS,
    ROOM_WORDS,
    Criteria,
    refusal,
    today,
)
from picoflow_demos.hotel.pricing import HotelQuote, RoomType, hotels, stay_nights
from picoflow_demos.hotel.questions import ANSWERS, Question
from picoflow_demos.hotel.replies import (
    ENGLISH,
    LOCALES,
    REPAIR_TEXTS,
    Language,
    full_day,
    joined,
    listed,
    night_day,
    nights,
    per_night,
    say,
)
from picoflow_demos.hotel.tables import Feature, comparison, hotel_list

EXPLORE = Prompt.file("explore.md")
CHOOSE_PROMPT = Prompt.file("present.md")

# No 0/O or 1/I: the guest may read the number out over the phone.
_CONFIRMATION_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def confirmation_number(key: str) -> str:
    """The booking reference of the approval ``key``, such as ``HF-7K3QX9TB``: the same approval
    always gives the same booking, so a booking carried out again is the same one."""
    digest = hashlib.sha256(key.encode()).digest()
    return "HF-" + "".join(_CONFIRMATION_ALPHABET[byte % len(_CONFIRMATION_ALPHABET)] for byte in digest[:8])


def answering_in(step: Step) -> str:
    """The language to answer the guest in: the one their words told the search step (its state's
    ``"locale"``, which ``SlotStep`` keeps), else English. The list, the tables and the booking
    follow the search step, so a guest is answered in one language from the greeting to the end."""
    told = step.state_of(Explore).get("locale")
    return told if isinstance(told, str) and told in LOCALES else ENGLISH


def choice_reply(
    quotes: Sequence[HotelQuote], nights: int, locale: str = ENGLISH, *, nightly: bool = False
) -> str:
    """The numbered list and the question the guest answers by choosing, all written in code;
    ``nightly`` adds each hotel's price per night (the guest's budget was per night)."""
    return f"{hotel_list(quotes, nights, locale, nightly=nightly)}\n\n{say('choose', locale)}"


# What memory keeps of a list or tables the guest was shown: what they were, and the question they
# ended with, which the guest's next words answer. Present's prompt holds the list itself.


def listed_note(quotes: Sequence[HotelQuote], locale: str = ENGLISH) -> str:
    # Not the list's order: numbers are places in the list as shown (the prompt numbers the names
    # in that order), mapped by code; the model's memory of a list stays the short note it was.
    shown = say("listed_note_one" if len(quotes) == 1 else "listed_note_other", locale, count=len(quotes))
    return f"{shown}\n\n{say('choose', locale)}"


def compared_note(numbers: Sequence[int], features: Sequence[Feature], locale: str = ENGLISH) -> str:
    hotels = joined([str(number) for number in numbers], locale)
    compared = joined([say(f"feature:{feature}", locale) for feature in features], locale)
    return f"{say('compared_note', locale, hotels=hotels, features=compared)}\n\n{say('follow_up', locale)}"


class Booking(BaseModel):
    """A confirmed booking, as kept in the session."""

    hotel: str
    room_type: str
    check_in: date
    check_out: date
    total: Decimal
    confirmation: str

    def summary(self, locale: str = ENGLISH) -> str:
        stay = nights(len(stay_nights(self.check_in, self.check_out)), locale)
        start, end = night_day(self.check_in, locale), night_day(self.check_out, locale)
        return "\n".join(
            [
                say("confirmed", locale),
                say("booked_hotel", locale, hotel=self.hotel),
                say("booked_room", locale, room=say(f"room:{self.room_type}", locale)),
                say("booked_stay", locale, start=start, end=end, nights=stay),
                say("booked_total", locale, total=self.total),
                say("booked_code", locale, code=self.confirmation),
            ]
        )


def booking_summary(args: Any) -> str:
    """What the guest approves, written by code in their language: the hotel, the room, the dates,
    the price per night (its range when the nights differ) and the total."""
    language = args.language
    return say(
        "book_summary",
        language,
        hotel=args.hotel,
        room=say(f"room:{args.room_type}", language),
        check_in=full_day(args.check_in, language),
        check_out=full_day(args.check_out, language),
        nights=nights(len(args.nightly), language),
        nightly=per_night(args.nightly, language),
        total=args.total,
    )


# The catalog's text of each question, by the question's key (its first field).
_QUESTIONS = {
    "in_portland": "ask_portland",
    "check_in": "ask_dates",
    "max_price": "ask_budget",
    "room_types": "ask_rooms",
    "amenities": "ask_amenities",
    "max_airport_miles": "ask_distance",
}


class Explore(SlotStep):
    """Learn the guest's stay criteria one answer at a time, then search."""

    memory = "hotel-explore"
    crossing_message = "I'd like to change my search."
    slots = Criteria
    go_ahead = "request"
    goodbye = "goodbye"
    repairs_from = "repair"
    accept = CONFIRM
    locales = LOCALES
    questions = [
        ask(say("ask_portland", ENGLISH), "in_portland", optional=True),
        ask(say("ask_dates", ENGLISH), "check_in", "check_out"),
        ask(say("ask_budget", ENGLISH), "max_price", "min_price", optional=True),
        ask(say("ask_rooms", ENGLISH), "room_types", optional=True),
        ask(say("ask_amenities", ENGLISH), "amenities", optional=True),
        ask(say("ask_distance", ENGLISH), "max_airport_miles", "max_city_center_miles", optional=True),
    ]

    # SlotStep declares the intro as a fixed text; this one is said in the guest's language.
    @property
    def intro(self) -> str:  # type: ignore[override]
        return say("greeting", self.language)

    @property
    def language(self) -> str:
        """The language to answer in (``SlotStep.locale``: the one the guest's words told)."""
        return self.locale or ENGLISH

    def prompt(self) -> str:
        # The reading rules are SlotStep's standing instructions: they follow this prompt on their own.
        return EXPLORE.render(today=f"{today():%A} {today().isoformat()}")

    def acknowledge(self, values: Criteria, accepted: Sequence[str], *, key: str = "noted") -> str:
        """What code understood, said back, so the guest can correct a misreading at once."""
        language = self.language
        said = [say("great", language)] if "in_portland" in accepted and key == "noted" else []
        if values.check_in and values.check_out and {"check_in", "check_out"} & set(accepted):
            check_in, check_out = full_day(values.check_in, language), full_day(values.check_out, language)
            stay = nights(len(values.nights), language)
            said.append(say("stay", language, check_in=check_in, check_out=check_out, nights=stay))
        noted = values.phrases(accepted, language)
        if noted:
            said.append(say(key, language, criteria=listed(noted, language)))
        return " ".join(said)

    def corrected(self, values: Criteria, changed: Sequence[str]) -> str:
        """What a correction changed, said before the new list."""
        return self.acknowledge(values, changed, key="changed")

    def phrase(self, question: Ask, values: Criteria) -> str:
        language = self.language
        if question.key == "check_in" and values.check_in and not values.check_out:
            return say("ask_check_out", language, check_in=full_day(values.check_in, language))
        return say(_QUESTIONS[question.key], language)

    def refusal(self, name: str, why: str) -> str:
        return refusal(why, self.language)

    def example(self, question: Ask) -> str | None:
        return say("example_dates", self.language) if question.key == "check_in" else None

    def given(self) -> Sequence[str]:
        """What a cancel would throw away, as the guest would say it."""
        values, language = self.form.values(self.slots), self.language
        known = [name for name in self.form.known if name not in ("request", "goodbye", "repair")]
        days = [full_day(day, language) for day in (values.check_in, values.check_out) if day is not None]
        return [*days, *values.phrases(known, language)]

    def on_complete(self, values: Criteria) -> Outcome:
        language = self.language
        quotes = values.search()
        if not quotes:
            return direct(say("no_match", language, criteria=values.summary(language)))
        searched, nightly = values.summary(language), values.nightly_budget
        # ``quotes`` is the list in the order shown (``Criteria.search``): the state keeps that
        # order, and every list number the guest or the model gives is a place in it.
        shown = choice_reply(quotes, len(values.nights), language, nightly=nightly)
        found = f"**{searched}**\n\n{shown}"
        listing = direct_to(Present, found).remember_as(listed_note(quotes, language))
        return listing.with_state(
            hotels=quotes,
            check_in=values.check_in,
            check_out=values.check_out,
            searched=searched,
            nightly=nightly,
            compared=[],
            feature=None,
        )


Pick = Literal["cheapest", "priciest", "closest_to_airport", "closest_to_center", "none"]
# A hotel named by what it is rather than its number, each resolved in code over the list shown;
# the words say which, so "book it" is never read as "the cheapest". The words of choosing ("let's
# go with the one closest to the airport") book it, whatever action was read; "show me hotels closer
# to the airport" is a new search.
PICK_WORDS = (
    Said(
        options={
            "cheapest": ("cheaper", "lowest", "least expensive", "budget", "cheap", "lowest price"),
            "priciest": ("most expensive", "fanciest", "luxury", "luxurious", "best", "nicest"),
            "closest_to_airport": ("airport", "pdx"),
            "closest_to_center": ("center", "centre", "downtown", "city"),
        },
        words=("go with", "take", "book", "reserve", "choose", "pick", "i'll have", "we'll have", "let's do"),
        locale="en",
    ),
    Said(
        options={
            "cheapest": as_typed("más barato", "más barata", "barato", "barata", "más económico",
                                 "más económica", "económico", "económica", "precio más bajo",
                                 "menor precio"),
            "priciest": as_typed("más caro", "más cara", "lujo", "lujoso", "de lujo", "el mejor", "la mejor"),
            "closest_to_airport": ("aeropuerto", "pdx"),
            "closest_to_center": ("centro", "ciudad", "downtown"),
        },
        words=as_typed("reservar", "reserva", "resérvame", "reservo", "reservamos", "me quedo con",
                       "nos quedamos con", "elijo", "escojo", "tomo", "vamos con", "me lo quedo"),
        locale="es",
    ),
    Said(
        options={
            "cheapest": as_typed("günstigste", "günstigsten", "günstigstes", "billigste", "billigsten",
                                 "billigstes", "preiswerteste", "preiswertesten", "am günstigsten", "günstig",
                                 "billig", "günstiger", "billiger"),
            "priciest": as_typed("teuerste", "teuersten", "teuerstes", "luxus", "luxuriös", "beste", "besten",
                                 "bestes", "schönste", "schönsten"),
            "closest_to_airport": as_typed("flughafen", "pdx", "airport"),
            "closest_to_center": ("zentrum", "innenstadt", "stadtmitte", "stadtzentrum", "city", "downtown"),
        },
        words=as_typed("buchen", "buche", "reservieren", "reserviere", "nehme", "nehmen", "wähle",
                       "entscheide mich für", "entscheiden uns für"),
        locale="de",
    ),
    Said(
        options={
            "cheapest": as_typed("moins cher", "moins chère", "pas cher", "pas chère", "bon marché",
                                 "économique", "prix le plus bas"),
            "priciest": as_typed("plus cher", "plus chère", "luxe", "luxueux", "meilleur", "meilleure",
                                 "plus beau", "plus belle"),
            "closest_to_airport": as_typed("aéroport", "pdx"),
            "closest_to_center": ("centre", "centre ville", "ville", "downtown"),
        },
        words=as_typed("réserver", "réserve", "réservez", "je prends", "on prend", "nous prenons", "prendre",
                       "je choisis", "on choisit", "nous choisissons", "va pour", "je vais prendre"),
        locale="fr",
    ),
)  # fmt: skip


# What the list's actions need said: a comparison names one, or what it is on; a goodbye its words.
COMPARE_WORDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "en": ("compare", "comparison", "side by side", "versus", "vs", "difference", "differ", "against",
               "price", "prices", "cost", "costs", "amenities", "amenity", "distance", "distances", "far",
               "room", "rooms", "bed", "beds", "type", "types"),
        "es": as_typed("comparar", "compara", "compárame", "compare", "comparación", "comparativa",
                       "frente a", "versus", "vs", "diferencia", "diferencias", "precio", "precios", "coste",
                       "costo", "servicios", "comodidades", "distancia", "distancias", "lejos", "habitación",
                       "habitaciones", "cama", "camas", "tipo", "tipos"),
        "de": as_typed("vergleichen", "vergleiche", "vergleich", "gegenüberstellen", "nebeneinander",
                       "versus", "vs", "unterschied", "unterschiede", "preis", "preise", "kosten",
                       "ausstattung", "entfernung", "entfernungen", "weit", "zimmer", "zimmertyp", "bett",
                       "betten", "typ"),
        "fr": as_typed("comparer", "compare", "comparez", "comparaison", "versus", "vs", "différence",
                       "différences", "prix", "coût", "équipements", "services", "distance", "distances",
                       "loin", "chambre", "chambres", "lit", "lits", "type", "types"),
    }
)  # fmt: skip
ACTION_WORDS = tuple(
    Said(options={"goodbye": GOODBYE_WORDS[locale], "compare": COMPARE_WORDS[locale]}, locale=locale)
    for locale in LOCALES
)


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
        Literal["book", "compare", "change_search", "show_list", "goodbye", "other"], *ACTION_WORDS
    ] = Field(
        description="book: the guest picks one hotel (a message that is only a number picks that hotel); "
        "compare: hotels side by side; change_search: new or changed criteria; show_list: the list again "
        "or resume booking; goodbye: the guest ends the conversation; other: anything else"
    )
    pick: Annotated[Pick, *PICK_WORDS] = Field(
        description="A hotel named by a quality: cheapest, priciest, closest_to_airport, closest_to_center; "
        "none when the guest names none that way"
    )


CRITERION_WORDS = tuple(
    sorted(
        {
            phrase.casefold()
            for marker in (*ROOM_WORDS, *AMENITY_WORDS)
            for option, phrases in marker.options.items()
            for phrase in (str(option), *phrases)
        },
        key=len,
        reverse=True,
    )
)
"""The words of every room type and amenity the search step reads, longest first."""


def changes_criterion(said: str) -> bool:
    """Whether the guest's words name a value of a search criterion (a room type, an amenity) and,
    once those words are set aside, say nothing of a comparison: "I'd rather have two beds" read
    as a comparison (its "beds" a comparison's word) is a change of the search."""
    if not any(options_said(Criteria, name, said, LOCALES) for name in ("room_types", "amenities")):
        return False
    return not bears_out(GuestRequest, "action", "compare", beside_criteria(said), LOCALES)


def beside_criteria(said: str) -> str:
    """The guest's words with every room type's and amenity's words set aside: what they say
    besides a value of the search ("one bed" names a room type, not hotel 1 of the list)."""
    rest = f" {' '.join(words(said))} "
    for phrase in CRITERION_WORDS:
        rest = rest.replace(f" {' '.join(words(phrase))} ", " ")
    return rest


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

    def active_tools(self) -> Collection[str]:
        # The model only reads the guest's words: code proposes the booking (``call``).
        return ()

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        # The guest's words and what they answer ("8" answers "Which hotel would you like to
        # book?"); lists and tables are remembered as short notes, and the list is in the prompt.
        return since_last_user(memory, before=1)

    @property
    def language(self) -> str:
        return answering_in(self)

    @property
    def answer_locale(self) -> str:
        # What a repair pattern says here (a clarification) is in the guest's language too.
        return self.language

    def on_response(self, request: GuestRequest) -> Outcome:
        said = self.last_user_message or ""
        self.erase_memory()
        listed = self._listed()
        numbers = list(dict.fromkeys(request.hotels))
        pick = request.pick if bears_out(GuestRequest, "pick", request.pick, said, LOCALES) else "none"
        if not bears_out(GuestRequest, "action", request.action, said, LOCALES):
            # A goodbye or a comparison without a word of one: "8" alone still books hotel 8, and
            # a hotel named by a quality in words that say so ("we'll take the one closest to the
            # airport") is the guest's choice, found in code. Booking it only asks for approval.
            lone = len(numbers) == 1 and bears_out(GuestRequest, "hotels", numbers, said, LOCALES)
            if lone and 1 <= numbers[0] <= len(listed):
                return self.choose(listed[numbers[0] - 1])
            if pick != "none" and listed and says_field(GuestRequest, "pick", said, LOCALES):
                return self.choose(listed[picked(listed, pick) - 1])
            return self.show_list(with_help=True)
        action = request.action
        named = [n for n in numbers if bears_out(GuestRequest, "hotels", [n], said, LOCALES)]
        apart = beside_criteria(said)  # a number in a room type's words names no hotel
        named_apart = [n for n in named if bears_out(GuestRequest, "hotels", [n], apart, LOCALES)]
        if (
            action in ("compare", "show_list")
            and pick == "none"
            and not named_apart
            and changes_criterion(said)
        ):
            # "I'd rather have two beds", "make it one bed instead and search again": a new value
            # for a search criterion, with no hotel named and no word of a comparison besides that
            # value's, changes the search, whether it was read as a comparison or as the list again.
            return repair("correction", detail="the search")
        if pick != "none" and listed:  # "the cheapest" is found in code, whatever number was read
            numbers = [picked(listed, pick)]
            if action in ("change_search", "show_list", "other") and says_field(
                GuestRequest, "pick", said, LOCALES
            ):
                action = "book"
        request = request.model_copy(update={"action": action})
        if any(not 1 <= number <= len(listed) for number in numbers) and request.action in (
            "book",
            "compare",
        ):
            language = self.language
            return direct(f"{say('list_range', language, count=len(listed))} {say('choose', language)}")
        if request.action == "book" and len(numbers) > 1:  # which one is the guest's to say
            options = tuple(f"#{number} {listed[number - 1].name}" for number in numbers)
            return repair("clarify", detail="which hotel to book", options=options)
        if request.action == "book" and not numbers:
            return direct(say("book_which", self.language, count=len(listed)))
        if request.action == "book":
            return self.choose(listed[numbers[0] - 1])
        if request.action == "compare":
            return self.compare(numbers or self.state_of(Present).get("compared") or [], request.features)
        if request.action == "change_search":  # Explore, which holds the criteria, takes the change
            return repair("correction", detail="the search")
        if request.action == "goodbye":
            return self.goodbye()
        return self.show_list(with_help=request.action != "show_list")

    def goodbye(self) -> Direct:
        return direct_to(Goodbye, say("farewell", self.language))

    def listed_options(self, options: Sequence[str]) -> str:
        # The options carry their list numbers ("#2 Hampton Inn"): one per line, not numbered again.
        return "".join(f"\n- {option}" for option in options)

    def show_list(self, *, with_help: bool = False, saying: str | None = None) -> Direct:
        language = self.language
        state = self.state_of(Present)
        listed = choice_reply(
            self._listed(), len(self._nights()), language, nightly=bool(state.get("nightly"))
        )
        listing = f"**{state['searched']}**\n\n{listed}"
        before = saying or (say("help", language) if with_help else None)
        reply = direct_to(Present, f"{before}\n\n{listing}" if before else listing)
        return reply.remember_as(listed_note(self._listed(), language))

    def _listed(self) -> list[HotelQuote]:
        return self.state_of(Present).get_as("hotels", list[HotelQuote]) or []

    def _nights(self) -> list[date]:
        state = self.state_of(Present)
        return stay_nights(date.fromisoformat(state["check_in"]), date.fromisoformat(state["check_out"]))

    def _numbered_names(self) -> str:
        return "\n".join(f"{number}. {quote.name}" for number, quote in enumerate(self._listed(), start=1))

    def choose(self, quote: HotelQuote) -> Call:
        """Propose booking ``quote`` for the stay searched: it waits for the guest's approval, and
        the list's state keeps it as ``proposed`` until the guest decides or writes again."""
        listed = self.state_of(Present)
        stay = {
            "hotel": quote.name,
            "room_type": quote.room_type,
            "check_in": listed["check_in"],
            "check_out": listed["check_out"],
            "total": quote.total,
        }
        listed["proposed"] = stay
        return call(self.book, **stay, nightly=quote.nightly, language=self.language)

    # Proposed by code only (``choose``), from the list code showed; the guest approves every call,
    # on a card that labels each argument with its title.
    @tool(approval=True, approval_summary=booking_summary)
    def book(
        self,
        hotel: Annotated[str, Field(title="Hotel")],
        room_type: Annotated[RoomType, Field(title="Room")],
        check_in: Annotated[date, Field(title="Check-in")],
        check_out: Annotated[date, Field(title="Check-out")],
        nightly: Annotated[list[Decimal], Field(title="Price per night")],
        total: Annotated[Decimal, Field(title="Total")],
        language: Annotated[Language, Field(title="Language")],
        ctx: RunContext[Any],
    ) -> Outcome:
        """Book the hotel the guest chose for their stay, once the guest approves it."""
        if ctx.idempotency_key is None:  # every call asks the guest: never without a decision
            raise ToolError("A booking is made only once the guest approves it.")
        self.state_of(Present).pop("proposed", None)
        booking = Booking(
            hotel=hotel,
            room_type=room_type,
            check_in=check_in,
            check_out=check_out,
            total=total,
            confirmation=confirmation_number(ctx.idempotency_key),
        )
        confirmed = f"{booking.summary(language)}\n\n{say('thanks', language)}"
        return direct_to(Goodbye, confirmed).with_state(booking=booking)

    def on_denied(self, approval: Approval) -> Outcome | None:
        self.state_of(Present).pop("proposed", None)
        # Withdrawn by a new message: this step reads that message as any other.
        if approval.status == "withdrawn":
            return None
        return self.show_list(saying=say("not_booked", self.language))

    def compare(self, numbers: Sequence[int], features: Sequence[Feature]) -> Direct:
        language = self.language
        if not numbers:
            return direct(say("compare_which", language, count=len(self._listed())))
        state = self.state_of(Present)
        wanted: list[Any] = list(dict.fromkeys(features)) or [state.get("feature") or "price"]
        listed = self._listed()
        chosen = [(number, listed[number - 1]) for number in numbers]
        tables = [comparison(feature, chosen, self._nights(), language) for feature in wanted]
        state.merge({"compared": list(numbers), "feature": wanted[-1]})
        reply = direct_to(Compare, "\n\n".join([*tables, say("follow_up", language)]))
        return reply.remember_as(compared_note(numbers, wanted, language))


class Compare(Present):
    """Hotels of the list side by side; the guest compares more, books, or goes back to the list."""

    # One memory for both: the guest's next words are read the same way after a list or a table.
    memory = "Present"


class HotelQuestions(LogicStep):
    """Answer a guest's question about the hotels' policies, in code from ``questions.ANSWERS``;
    then the step the question interrupted asks its question again (the ``digression`` pattern)."""

    memory = "hotel-questions"

    def run_logic(self) -> Direct:
        said = self.last_user_message or ""
        self.erase_memory()
        language = answering_in(self)
        topics = options_said(Question, "topic", said, LOCALES)
        answer = " ".join(ANSWERS[language][topic] for topic in topics) or say("no_answer", language)
        return self.resume(answer)


class Goodbye(TerminateStep):
    """The end of the conversation."""

    memory = "hotel-goodbye"

    def prompt(self) -> str:
        # The closing words after a goodbye read by the search step are the model's: asked in the
        # guest's language, they come in it.
        return say("goodbye_prompt", answering_in(self))


class HotelFlow(Flow):
    """Find, compare and book a hotel in the Portland, Oregon area."""

    name = "hotel"
    steps = [Explore, Present, Compare, HotelQuestions, Goodbye]
    repairs = Repairs(on_required_skip="ask_again", digress_to=HotelQuestions, texts=REPAIR_TEXTS)
