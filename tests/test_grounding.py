"""Grounding: an item of a reading is kept only as far as the user's words bear it out — its quote,
its numbers, a text value's words, an option's words declared with ``Said`` — checked on its own,
without an engine or a model."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from picoflow import FlowDefinitionError, Said, SlotStep
from picoflow._schema import json_schema
from picoflow.slots import as_written, bears_out, says_field, says_option, written_days
from picoflow.slots.dates import WrittenDates
from picoflow.slots.grounding import Grounding, Heard, Item
from picoflow.slots.reading import reading_of
from picoflow.slots.said import date_parts, evidence_of, left_out, told

Interest = Annotated[
    Literal["music", "food", "outdoors", "art"],
    Said(
        options={
            "music": ("jazz", "concert"),
            "food": ("restaurant", "good food"),
            "outdoors": ("hiking", "nature"),
        }
    ),
]


class Wishes(BaseModel):
    """What a traveller wants."""

    city: (
        Annotated[str, Said(options={"New Orleans": ("nola",), "San Francisco": ("sf", "frisco")})] | None
    ) = None
    interests: list[Interest] | None = Field(None, description="What they enjoy")
    room: Annotated[Literal["one bed", "two beds"] | None, Said(options={"two beds": ("2 beds", "twin")})] = (
        None
    )
    name: str | None = None
    nights: int | None = None
    pets: bool | None = None


class Nothing(BaseModel):
    """A slots model declaring no words: only the quote and the numbers are judged."""


def kept(said: str, *items: Item, slots: type[BaseModel] | None = None) -> list[Item]:
    """What the small-model profile keeps of ``items`` read from ``said``."""
    found, _ = Grounding.for_small_models().judge(slots or Nothing, items, Heard(said, slips=True))
    return list(found)


# --- the quote and the numbers, for any reading ------------------------------------------------------


def test_the_quote_must_be_the_users_words_as_written_ignoring_case_and_spacing() -> None:
    name = Item("name", "ada  LOVELACE", "Ada Lovelace")
    assert kept("I am Ada\nLovelace.", name) == [name]
    assert kept("I am Grace Hopper.", name) == []
    assert kept("I am Ada Lovelace.", Item("name", "", "Ada Lovelace")) == []
    assert kept("I am Ada Lovelace.", Item("name", "   ", "Ada Lovelace")) == []


def test_the_quote_may_be_the_users_words_in_another_order_but_whole_words() -> None:
    parking = Item("amenities", "free parking", ["freeParking"])
    wifi = Item("amenities", "Free WiFi", ["freeWiFi"])
    breakfast = Item("amenities", "free breakfast", ["freeBreakfast"])
    assert kept("free wifi, parking", parking, wifi, breakfast) == [parking, wifi]
    # Parts of words are not words: "park" is not in "parking".
    assert kept("free wifi, parking", Item("amenities", "free park", ["freeParking"])) == []
    # A quote the model spelt right for the user's slip of the keys is still their words.
    date = Item("check_in", "august 10", {"month": 8, "day": 10})
    assert kept("chek in agust 10", date) == [date]
    assert kept("chek in july 10", date) == []


def test_a_value_holding_numbers_needs_one_of_them_written_in_the_quote() -> None:
    said = "compare 2,5,8 and keep it under $1,250.50, max 700"
    assert kept(said, Item("hotels", "2,5,8", 258)) == []
    assert kept(said, Item("hotels", "2,5,8", [2, 5, 8])) == [Item("hotels", "2,5,8", [2, 5, 8])]
    assert kept(said, Item("price", "$1,250.50", 1250.5)) == [Item("price", "$1,250.50", 1250.5)]
    assert kept(said, Item("price", "max 700", 700)) == [Item("price", "max 700", 700)]
    assert kept(said, Item("price", "max 700", 7000)) == []
    # The number must be in the quote, not anywhere in the message.
    assert kept(said, Item("price", "max", 700)) == []


def test_numbers_inside_objects_count_and_booleans_are_not_numbers() -> None:
    day = Item("check_in", "8/1", {"month": 8, "day": 1, "year": None})
    invented = Item("check_in", "next month", {"month": 9, "day": 1, "year": 2027})
    yes = Item("in_portland", "yes", True)
    name = Item("name", "Ada", "Ada")
    assert kept("8/1 please, next month, yes, Ada", day, invented, yes, name) == [day, yes, name]


def test_dates_and_thousands_written_with_dots_are_their_numbers() -> None:
    date = Item("check_in", "20.10.2027", {"month": 10, "day": 20, "year": 2027})
    assert kept("from 20.10.2027 on", date) == [date]
    assert kept("up to 1.250.000 euros", Item("budget", "1.250.000", 1250000)) == [
        Item("budget", "1.250.000", 1250000)
    ]


def test_a_number_written_as_text_is_still_a_number_to_find() -> None:
    assert kept("2,5,8", Item("age", "2,5,8", "258")) == []
    assert kept("I am 58", Item("age", "58", "58")) == [Item("age", "58", "58")]


# --- what the slots model declares ----------------------------------------------------------------------


def test_an_option_needs_one_of_its_words_or_its_own_name_in_the_quote() -> None:
    said = "I love jazz and good food, and a hike"
    jazz = Item("interests", "jazz and good food", ["music", "food"])
    assert kept(said, jazz, slots=Wishes) == [jazz]
    # Only the options borne out stay: the model added outdoors and art to "jazz". The marker
    # declares no words for "art", so it does not speak for it: only the quote is checked.
    wide = Item("interests", "I love jazz", ["music", "outdoors", "art"])
    assert kept(said, wide, slots=Wishes) == [Item("interests", "I love jazz", ["music", "art"])]
    # None left: the item goes.
    assert kept(said, Item("interests", "a hike", ["outdoors"]), slots=Wishes) == []
    # Its own name says an option; case does not matter.
    assert kept("MUSIC please", Item("interests", "MUSIC", ["music"]), slots=Wishes) == [
        Item("interests", "MUSIC", ["music"])
    ]


def test_a_phrase_of_several_words_must_be_written_in_that_order() -> None:
    good = Item("interests", "good food", ["food"])
    assert kept("good food", good, slots=Wishes) == [good]
    assert kept("food, good", Item("interests", "food good", ["food"]), slots=Wishes) == [
        Item("interests", "food good", ["food"])  # its own name, "food", is in the quote
    ]
    assert kept("a good meal", Item("interests", "good", ["food"]), slots=Wishes) == []
    # A quote naming no option is judged by its part of the message, where "restaurant" says food.
    assert kept("a good restaurant", Item("interests", "good", ["food"]), slots=Wishes) == [
        Item("interests", "good", ["food"])
    ]


def test_the_marker_may_sit_on_the_field_and_without_a_reading_schema_change() -> None:
    twin = Item("room", "a twin room", "two beds")
    assert kept("a twin room", twin, slots=Wishes) == [twin]
    assert kept("a room", Item("room", "a room", "two beds"), slots=Wishes) == []
    assert kept("one bed", Item("room", "one bed", "one bed"), slots=Wishes) == [
        Item("room", "one bed", "one bed")
    ]
    # The model sees the field's type and description, never the words.
    schema = json.dumps(json_schema(reading_of(Wishes)))
    assert "jazz" not in schema and "twin" not in schema and "nola" not in schema
    assert json_schema(reading_of(Wishes))["$defs"]["Wishes_room"]["properties"]["value"] == {
        "enum": ["one bed", "two beds"],
        "type": "string",
    }


def test_a_text_value_is_made_of_the_quotes_words_unless_it_is_a_named_option() -> None:
    said = "OK, NOLA then, I'm Ada"
    assert kept(said, Item("city", "NOLA", "New Orleans"), slots=Wishes) == [
        Item("city", "NOLA", "New Orleans")
    ]
    assert kept(said, Item("city", "NOLA", "nola"), slots=Wishes) == [Item("city", "NOLA", "nola")]
    # A known city read from the words of another one is that one; another one not written is
    # dropped, and so is a known one whose words are not written.
    assert kept(said, Item("city", "NOLA", "San Francisco"), slots=Wishes) == [
        Item("city", "NOLA", "New Orleans")
    ]
    assert kept(said, Item("city", "OK", "San Francisco"), slots=Wishes) == []
    assert kept(said, Item("city", "OK", "Paris"), slots=Wishes) == []
    assert kept("Paris, please", Item("city", "Paris", "Paris"), slots=Wishes) == [
        Item("city", "Paris", "Paris")
    ]
    assert kept(said, Item("name", "I'm Ada", "Ada"), slots=Wishes) == [Item("name", "I'm Ada", "Ada")]
    assert kept(said, Item("name", "I'm Ada", "Grace"), slots=Wishes) == []


def test_numbers_and_booleans_are_left_to_the_quote_and_number_checks() -> None:
    three = Item("nights", "3 nights", 3)
    pets = Item("pets", "a dog", True)
    assert kept("3 nights with a dog", three, pets, slots=Wishes) == [three, pets]


def test_evidence_is_read_once_per_slots_model() -> None:
    evidence = evidence_of(Wishes)
    assert evidence is evidence_of(Wishes)
    assert evidence["city"].text and not evidence["interests"].text and not evidence["room"].text
    assert evidence["nights"].said == () and not evidence["nights"].text


# --- declaring it wrong ------------------------------------------------------------------------------------


def test_words_for_an_option_the_field_does_not_have_are_refused_when_the_step_is_defined() -> None:
    class Typo(BaseModel):
        interests: list[Annotated[Literal["music"], Said(options={"musik": ("jazz",)})]] | None = None

    with pytest.raises(FlowDefinitionError, match=r"Typo\.interests: Said names musik, not an option"):

        class Bad(SlotStep):
            slots = Typo


def test_an_options_words_must_be_a_tuple_of_words() -> None:
    with pytest.raises(FlowDefinitionError, match=r"'music': \.\.\.\}\): give the words as a tuple"):
        Said(options={"music": "jazz"})
    with pytest.raises(FlowDefinitionError, match="is not an option's name"):
        Said(options={" ": ("jazz",)})


# --- which field, yes or no, and options quoted by name ---------------------------------------------


class Stay(BaseModel):
    """A stay, its bounds and its yes-or-no."""

    max_price: Annotated[float | None, Said(words=("under", "max", "up to"))] = None
    min_price: Annotated[float | None, Said(words=("from", "at least"))] = None
    airport_miles: Annotated[float | None, Said(words=("airport",))] = None
    center_miles: Annotated[float | None, Said(words=("center", "downtown"))] = None
    nights: int | None = None
    name: str | None = None
    dates: list[dict[str, int]] | None = None
    pets: Annotated[bool | None, Said(yes=("yes", "dog", "pets"), no=("no", "without"))] = None
    amenities: list[Annotated[Literal["freeParking", "freeWiFi"], Said(
        options={"freeParking": ("parking",), "freeWiFi": ("wifi",)}
    )]] | None = None  # fmt: skip


def test_the_words_of_a_field_decide_the_field_a_value_is_kept_in() -> None:
    said = "under $400 a night, within 3 miles of the airport"
    assert kept(said, Item("min_price", "under $400", 400), slots=Stay) == [
        Item("max_price", "under $400", 400)
    ]
    assert kept(said, Item("center_miles", "3 miles of the airport", 3), slots=Stay) == [
        Item("airport_miles", "3 miles of the airport", 3)
    ]
    # Its own words, or no field's words at all: the field read is kept.
    assert kept("from $100", Item("min_price", "from $100", 100), slots=Stay) == [
        Item("min_price", "from $100", 100)
    ]
    assert kept("$400", Item("min_price", "$400", 400), slots=Stay) == [Item("min_price", "$400", 400)]
    # A field without words of its own is never moved, even when its quote says another's.
    assert kept("5 nights from June", Item("nights", "5 nights from June", 5), slots=Stay) == [
        Item("nights", "5 nights from June", 5)
    ]


def test_a_range_quoted_whole_for_both_bounds_keeps_both() -> None:
    said = "from $100 to $300"
    low, high = Item("min_price", said, 100), Item("max_price", said, 300)
    assert kept(said, low, high, slots=Stay) == [low, high]
    # The same value read for both fields stays only in the one its words say.
    said = "within 5 miles of downtown"
    airport, center = Item("airport_miles", said, 5), Item("center_miles", said, 5)
    assert kept(said, airport, center, slots=Stay) == [center]
    assert kept(said, center, airport, slots=Stay) == [center]


def test_a_number_quoted_in_the_models_words_is_judged_by_the_part_that_writes_it() -> None:
    said = "Portland, Aug 14 to 17, we can spend up to $350 a night, from $200 is fine"
    # "at most $350" is not the user's words; the part writing 350 is, and it says a maximum ("up to").
    assert kept(said, Item("max_price", "at most $350", 350), slots=Stay) == [
        Item("max_price", "we can spend up to $350 a night", 350)
    ]
    # "a minimum" (its own question's words) for the part "from $200 is fine": a minimum, as read...
    assert kept(said, Item("min_price", "a minimum", 200), slots=Stay) == [
        Item("min_price", "from $200 is fine", 200)
    ]
    # ...and read as a maximum, the part's words move it.
    assert kept(said, Item("max_price", "max 200", 200), slots=Stay) == [
        Item("min_price", "from $200 is fine", 200)
    ]
    # Not anchored: a part that says no field of a field that has words ("400 a night" is no bound),
    # a number no part writes, or written in two parts.
    assert kept("400 a night", Item("max_price", "four hundred", 400), slots=Stay) == []
    assert kept(said, Item("max_price", "at most $300", 300), slots=Stay) == []
    assert kept("3 nights, 3 guests", Item("nights", "three nights", 3), slots=Stay) == []
    # A field without words of its own needs none there; every number of the value must be written.
    assert kept("a quiet room, 4 nights", Item("nights", "four nights", 4), slots=Stay) == [
        Item("nights", "4 nights", 4)
    ]
    date = Item("dates", "August 10th", [{"month": 8, "day": 10}])
    assert kept("arriving on July 10, for a week", date, slots=Stay) == []


def test_a_yes_or_no_is_what_its_quote_says_and_a_denial_wins() -> None:
    assert kept("yes please", Item("pets", "yes", True), slots=Stay) == [Item("pets", "yes", True)]
    assert kept("we travel without the dog", Item("pets", "without the dog", True), slots=Stay) == [
        Item("pets", "without the dog", False)
    ]
    assert kept("no", Item("pets", "no", True), slots=Stay) == [Item("pets", "no", False)]
    # A quote that neither affirms nor denies keeps nothing: "search" is no yes.
    assert kept("search", Item("pets", "search", True), slots=Stay) == []
    with pytest.raises(FlowDefinitionError, match="give the words of both, or of neither"):
        Said(yes=("yes",))


def test_an_option_quoted_by_its_name_is_looked_for_in_the_message() -> None:
    # A small model quotes "freeParking" rather than the user's "free parking": the message decides.
    # The item then quotes the words that said it.
    by_name = Item("amenities", "freeParking", ["freeParking"])
    assert kept("a suite with free parking", by_name, slots=Stay) == [replace(by_name, quote="parking")]
    assert kept("a suite with a view", by_name, slots=Stay) == []
    both = Item("amenities", "freeParking, freeWiFi", ["freeParking", "freeWiFi"])
    assert kept("parking please", both, slots=Stay) == [replace(both, quote="parking", value=["freeParking"])]
    # Only options whose words are declared: a number or a bool quoted from elsewhere is dropped.
    assert kept("400 a night", Item("max_price", "four hundred", 400), slots=Stay) == []
    assert kept("we have a dog", Item("pets", "pets: true", True), slots=Stay) == []


def test_bears_out_checks_an_answer_read_without_a_quote() -> None:
    assert bears_out(Stay, "amenities", ["freeWiFi"], "is there wifi?")
    assert not bears_out(Stay, "amenities", ["freeWiFi", "freeParking"], "is there wifi?")
    assert bears_out(Stay, "pets", False, "no pets")
    assert not bears_out(Stay, "pets", True, "no pets")
    # Free text is made of the words said.
    assert bears_out(Stay, "name", "Ada", "call me Ada") and not bears_out(Stay, "name", "Ada", "anything")
    # A value holding numbers needs one of them written, each item of a list on its own.
    assert bears_out(Stay, "nights", 3, "3 nights") and not bears_out(Stay, "nights", 3, "a few nights")
    assert bears_out(Stay, "dates", [{"month": 10, "day": 20}], "from 20.10.2027")
    assert not bears_out(Stay, "dates", [{"month": 10, "day": 20}, {"month": 11, "day": 2}], "from 20.10.")
    with pytest.raises(KeyError):
        bears_out(Stay, "rooms", 1, "one room")
    # With no reading at all: whether the words of a field, or of one of its options, are said.
    assert says_field(Stay, "max_price", "up to 300") and not says_field(Stay, "max_price", "from 300")
    assert says_option(Stay, "amenities", "any parking?") and not says_option(Stay, "amenities", "a view")


MONTH = Said(options={9: ("september", "sept", "09"), 10: ("october", "oct", "oktober")})


class Day(BaseModel):
    month: Annotated[int, MONTH]
    day: int


class Search(BaseModel):
    since: Day | None = None
    until: Day | None = None


def test_a_number_may_be_an_option_said_in_words_and_a_model_is_borne_out_field_by_field() -> None:
    october_first = Day(month=10, day=1)
    assert bears_out(Search, "since", october_first, "since October 1st")
    assert bears_out(Search, "since", october_first, "seit dem 1.10.2026")  # its own digits say it
    assert bears_out(Search, "since", october_first, "seit 1. Oktober")
    assert not bears_out(Search, "since", october_first, "since November 1")  # the month is not said
    assert not bears_out(Search, "since", october_first, "since October")  # nor the day
    assert bears_out(Search, "until", {"month": 9, "day": 30}, "until 2026-09-30")
    with pytest.raises(FlowDefinitionError, match="is not an option's name"):
        Said(options={True: ("yes",)})


class WrittenDay(BaseModel):
    month: Annotated[int, MONTH, Said(date="month")]
    day: Annotated[int, Said(date="day")]
    year: Annotated[int | None, Said(date="year")] = None


class Range(BaseModel):
    since: WrittenDay | None = None
    until: WrittenDay | None = None
    days: list[WrittenDay] = []


def test_a_date_written_in_digits_is_read_in_the_order_the_message_writes_its_dates() -> None:
    uk = "between 01/10/2026 and 15/10/2026"  # 15 is no month: day first
    us = "between 10/01/2026 and 10/15/2026"  # 15 is no month: month first
    january_10, october_1 = WrittenDay(month=1, day=10), WrittenDay(month=10, day=1)
    assert as_written(Range, "since", january_10, uk) == october_1
    assert as_written(Range, "since", {"month": 1, "day": 10}, uk) == {"month": 10, "day": 1}
    assert as_written(Range, "since", october_1, us) == october_1  # as written
    assert as_written(Range, "since", january_10, us) == october_1
    assert as_written(Range, "days", [january_10, october_1], uk) == [october_1, october_1]
    # A date every reading of which could be both stays as read; so does one no date of it is.
    assert as_written(Range, "since", january_10, "since 01/10/2026") == january_10
    assert as_written(Range, "since", WrittenDay(month=10, day=10), uk) == WrittenDay(month=10, day=10)
    # Borne out: a written date in the message's order, or a day written outside such dates.
    assert bears_out(Range, "since", october_1, uk)
    assert not bears_out(Range, "since", january_10, uk)
    assert not bears_out(Range, "since", WrittenDay(month=10, day=10), uk)  # 10 only inside the dates
    assert bears_out(Range, "since", october_1, "October 1 till 15/10/2026")
    assert bears_out(Range, "since", WrittenDay(month=10, day=21, year=2026), "seit dem 21.10.2026")
    assert not bears_out(Range, "since", WrittenDay(month=10, day=21, year=2025), "seit dem 21.10.2026")
    assert bears_out(Range, "since", WrittenDay(month=10, day=21, year=2026), "since 21/10/26")
    assert bears_out(Range, "until", WrittenDay(month=9, day=30, year=2026), "until 2026-09-30")


def test_written_days_are_the_dates_in_digits_as_values_of_the_field() -> None:
    uk = "between 01/10/2026 and 15/10/2026"
    assert written_days(Range, "since", uk) == [
        {"day": 1, "month": 10, "year": 2026},
        {"day": 15, "month": 10, "year": 2026},
    ]
    assert written_days(Range, "since", "between 01/10 and 03/10") == []  # either order: not told
    assert written_days(Range, "since", "since October 1") == []
    assert written_days(Search, "since", uk) == []  # its days declare no date parts


def test_written_dates_are_dates_only_where_their_numbers_make_one() -> None:
    dates = WrittenDates.of("seit 21.10.2026, 2026-10-21 or 10/15/26 for $1.50 within 10-15 miles, 3/45")
    assert [[dict(reading) for reading in readings] for readings in dates.read] == [
        [{"day": 21, "month": 10, "year": 2026}],
        [{"year": 2026, "month": 10, "day": 21}],
        [{"month": 10, "day": 15, "year": 26}],  # each its own order when they disagree
    ]
    # A decimal, a span and no date are plain numbers ("1.50" read every way a reader may mean it,
    # with no locale declared); the dates' own numbers are not among them.
    assert dates.outside == {1.5, 1, 50, 10, 15, 3, 45}
    assert not WrittenDates.of("a room for 2 at $400")
    assert [len(readings) for readings in WrittenDates.of("on 03/04").read] == [2]  # either order


class Choice(BaseModel):
    """An answer read without quotes, with words in English and in German."""

    pick: Annotated[
        Literal["cheapest", "none"],
        Said(options={"cheapest": ("lowest price",)}, words=("book", "take"), locale="en"),
        Said(options={"cheapest": ("günstigste",)}, words=("buche", "nehme"), locale="de"),
    ] = "none"
    distance: float | None = None
    day: WrittenDay | None = None


@pytest.mark.parametrize(
    ("locales", "english", "german"),
    [(("en",), True, False), (("de",), False, True), (("en", "de"), True, True), ((), True, True)],
)
def test_bears_out_and_says_field_count_the_words_of_the_locales_given(
    locales: tuple[str, ...], english: bool, german: bool
) -> None:
    assert bears_out(Choice, "pick", "cheapest", "the one with the lowest price", locales) is english
    assert bears_out(Choice, "pick", "cheapest", "ich buche das günstigste", locales) is german
    assert says_field(Choice, "pick", "I'll take number 2", locales) is english
    assert says_field(Choice, "pick", "ich nehme Nummer 2", locales) is german


def test_bears_out_reads_numbers_and_dates_as_the_one_locale_given_writes_them() -> None:
    assert bears_out(Choice, "distance", 2.5, "höchstens 2,5 km vom Zentrum", ("de",))
    assert not bears_out(Choice, "distance", 2.5, "at most 2,5 miles from downtown", ("en",))
    assert bears_out(Choice, "distance", 1250, "at most 1,250 meters", ("en",))
    assert not bears_out(Choice, "distance", 1250, "höchstens 1,250 Meter", ("de",))
    # Several locales: every plausible reading, as with none.
    assert bears_out(Choice, "distance", 2.5, "at most 2,5 miles", ("en", "de"))
    # "03/04/2027" alone is April 3 in German and March 4 in American English.
    april_3 = {"month": 4, "day": 3, "year": 2027}
    assert bears_out(Choice, "day", april_3, "am 03/04/2027", ("de",))
    assert not bears_out(Choice, "day", april_3, "on 03/04/2027", ("en-US",))
    assert bears_out(Choice, "day", april_3, "am 03/04/2027", ("en-US", "de"))


def test_date_parts_are_declared_once_and_need_a_day_and_a_month() -> None:
    assert dict(date_parts(WrittenDay)) == {"month": "month", "day": "day", "year": "year"}
    assert dict(date_parts(Day)) == {}

    class Twice(BaseModel):
        start: Annotated[int, Said(date="day")]
        end: Annotated[int, Said(date="day")]

    class Half(BaseModel):
        day: Annotated[int, Said(date="day")]

    with pytest.raises(FlowDefinitionError, match="both start and end are said to be the day"):
        date_parts(Twice)
    with pytest.raises(FlowDefinitionError, match="needs its day and its month"):
        date_parts(Half)
    with pytest.raises(FlowDefinitionError, match="one of day, month or year"):
        Said(date="week")  # type: ignore[arg-type]


def test_a_declared_word_of_five_letters_or_more_survives_one_slip_of_the_keys() -> None:
    search = Said(options={"search": ("search", "results")})
    for typed in ("serch", "searhc", "seaarch", "saerch", "seerch", "resluts"):
        assert search.bears("search", [typed]), typed
    for typed in ("sear", "srch", "research", "searching", "sea rch", "se4rch"):
        assert not search.bears("search", [typed]), typed
    # Short words must be written as they are: "shoe" is not "show", "pool" not "poll".
    assert not Said(options={"show": ("show",)}).bears("show", ["shoe"])


@pytest.mark.parametrize(
    ("declared", "typed", "same"),
    [
        # A slip inside the word, in English and in Spanish and German.
        ("search", "serch", True),
        ("reservar", "reserbar", True),
        ("zimmer", "zimmre", True),
        # Never in the first letter: another word is likelier than a typo.
        ("suite", "quite", False),
        ("salle", "falle", False),
        ("balkon", "falkon", False),
        # Never a letter added or left out at the end, where languages put their endings.
        ("nicht", "nichts", False),
        ("hotel", "hotels", False),
        ("habitación", "habitacione", False),
    ],
)
def test_a_slip_of_the_keys_is_inside_a_word_never_its_first_letter_or_its_ending(
    declared: str, typed: str, same: bool
) -> None:
    marker = Said(options={"x": (declared,)})
    assert bool(marker.bears("x", [typed])) is same
    assert marker.bears("x", [typed], exact=True) is (declared == typed)


def test_left_out_finds_the_parts_a_reading_did_not_take() -> None:
    stay = "A suite in Portland, September 3 to September 6, 2027"
    said = f"{stay}, no pets, parking, within 10 miles of the airport"
    kept_items = [
        ("amenities", "parking", ["freeParking"]),
        ("check_in", "September 3", {"month": 9, "day": 3}),
        ("check_out", "September 6", {"month": 9, "day": 6}),
    ]
    # 2027 and 10 are held by no kept value; "no pets" holds only a no-word (it answers whatever was
    # asked), "parking" was read.
    assert left_out(said, kept_items, Stay) == [
        "September 3 to September 6, 2027",
        "within 10 miles of the airport",
    ]
    # A date kept as text holds the numbers of its quote.
    assert left_out("from 2027-05-10", [("start", "2027-05-10", "2027-05-10")], Stay) == []
    # An option's words not read: "wifi" is a part to look at again.
    assert left_out("3 nights, wifi", [("nights", "3 nights", 3)], Stay) == ["wifi"]


def test_told_is_what_declared_words_say_on_their_own() -> None:
    class Visit(BaseModel):
        local: Annotated[bool | None, Said(yes=("yes", "portland", "pdx"), no=("no", "not"))] = None
        go: Annotated[Literal["search"] | None, Said(options={"search": ("show", "list")})] = None
        room: Annotated[Literal["one bed", "two beds"] | None, Said(options={"two beds": ("twin",)})] = None
        rooms: list[Annotated[Literal["suite"], Said(options={"suite": ("suites",)})]] | None = None
        nights: int | None = None

    said = "A suite in Portland, twin beds. Could you show me the hotels?"
    assert [told(said, Visit, name) for name in ("local", "go", "room", "rooms", "nights")] == [
        True, "search", "two beds", None, None,
    ]  # fmt: skip
    # Only a yes word that tells (not "yes" alone, nor a short one as "pdx"), and never beside a no word.
    assert told("yes, and fly into pdx", Visit, "local") is None
    assert told("not in Portland", Visit, "local") is None
    assert told("in Portland, not downtown", Visit, "local") is True  # each part on its own
    assert told("flying home from Portland", Visit, "local") is True
    assert told("show me a list", Visit, "go") == "search" and told("hello", Visit, "go") is None
    assert told("a lisst", Visit, "go") is None and told("flying home from Portlnd", Visit, "local") is None


def test_named_words_tell_a_yes_however_short() -> None:
    class Stay(BaseModel):
        local: Annotated[
            bool | None, Said(yes=("yes", "ok"), no=("no", "not"), named=("portland", "pdx"))
        ] = None

    # "pdx" names the stay: it tells on its own, is a yes, and a part with it is worth a second look.
    assert told("pdx aug 20 to aug 22 2027", Stay, "local") is True
    assert told("not pdx", Stay, "local") is None
    assert told("ok", Stay, "local") is None  # a short yes word answers whatever was asked
    assert left_out("pdx, aug 20", [], Stay) == ["pdx", "aug 20"]
    assert left_out("ok, 3 nights", [("nights", "3 nights", 3)], Stay) == []


def test_a_dates_month_needs_evidence_of_its_own_apart_from_its_day() -> None:
    """ "The first day" is no January 1: a month is borne out by a month the conversation names in a
    declared locale's words, a date written in digits, or a date the form already holds."""

    def judged(
        said: str,
        value: dict[str, int],
        *,
        locale: str,
        known: dict[str, object] | None = None,
        previous: str | None = None,
        others: tuple[Item, ...] = (),
    ) -> list[str | None]:
        item = Item("since", said, value)
        _, verdicts = Grounding.for_small_models().judge(
            Range, (item, *others), Heard(said, previous, slips=True, locales=(locale,)), known=known
        )
        return [verdict.rule if verdict.action == "dropped" else verdict.action for verdict in verdicts][:1]

    january_1 = {"month": 1, "day": 1, "year": 2027}
    september_18 = {"month": 9, "day": 18}
    # An ordinal of a day, nothing naming a month: dropped, in French and in English.
    assert judged("le premier jour", january_1, locale="fr") == ["month_given"]
    assert judged("the first day", january_1, locale="en") == ["month_given"]
    # A month named in the locale's words, in the message or in the assistant's question.
    assert judged("le premier janvier", january_1, locale="fr") == ["kept"]
    assert judged("the first of January", january_1, locale="en") == ["kept"]
    assert judged(
        "le 18", september_18, locale="fr", previous="Arrivée le 12 septembre : et le départ ?"
    ) == ["kept"]
    assert judged(
        "the 18th", september_18, locale="en", previous="Check-in September 12: and check-out?"
    ) == ["kept"]
    # Another locale's month word is no evidence: "septiembre" is not English.
    assert judged("18 septiembre", september_18, locale="en") == ["month_given"]
    # A date written in digits gives its month, and one read in the other order is put right first.
    assert judged("18/09", september_18, locale="fr") == ["kept"]
    assert judged("9/18", september_18, locale="en") == ["kept"]
    assert judged("10/08/2027 - 13/08/2027", {"month": 10, "day": 8, "year": 2027}, locale="es") == [
        "repaired"
    ]
    # The month of a date the form already holds, or of another date of the reading, carries over.
    held = {"until": {"month": 9, "day": 12}}
    assert judged("le 18", september_18, locale="fr", known=held) == ["kept"]
    assert judged("on the 18th", september_18, locale="en", known=held) == ["kept"]
    assert judged("on the 18th", september_18, locale="en", known={"until": {"month": 8, "day": 12}}) == [
        "month_given"
    ]
    # Another date of the reading counts when its own month has evidence (here, its digits)...
    until = Item("until", "12/09", {"month": 9, "day": 12})
    assert judged("du 12/09 au 18", september_18, locale="fr", others=(until,)) == ["kept"]
    assert judged("from 9/12 to the 18th", september_18, locale="en", others=(until,)) == ["kept"]
    # ...but two dates read from one bare number bear each other out no more than one does.
    second = Item("until", "1", {"month": 1, "day": 2})
    assert judged("1", {"month": 1, "day": 1}, locale="es", others=(second,)) == ["month_given"]
    assert judged("1", {"month": 1, "day": 1}, locale="en", others=(second,)) == ["month_given"]


def test_a_date_without_evidence_of_its_month_takes_the_one_month_the_message_names() -> None:
    """ "du 10 au 13 aout" with the 13th read as October 13 is August 13: of a date whose month has
    no evidence, the month is the one the user's message names, when it names exactly one. Two
    months named, none, or one named only by the assistant: dropped as before."""

    def judged(said: str, value: object, *, locale: str, previous: str | None = None) -> tuple[str, object]:
        heard = Heard(said, previous, slips=True, locales=(locale,))
        _, verdicts = Grounding.for_small_models().judge(Range, (Item("until", said, value),), heard)
        return verdicts[0].action, verdicts[0].value if verdicts[0].action != "dropped" else verdicts[0].rule

    assert judged("du 10 au 13 aout", {"month": 10, "day": 13}, locale="fr") == (
        "repaired",
        {"month": 8, "day": 13},
    )
    assert judged("from the 3rd to the 6th of August", {"month": 1, "day": 6, "year": 2027}, locale="en") == (
        "repaired",
        {"month": 8, "day": 6, "year": 2027},
    )
    two = "del 30 de agosto al 2 de septiembre"
    assert judged(two, {"month": 1, "day": 2}, locale="es") == ("dropped", "month_given")
    assert judged("le premier jour", {"month": 1, "day": 1}, locale="fr", previous="Arrivée le 10 août") == (
        "dropped",
        "month_given",
    )
    assert judged("the 31st of September", {"month": 1, "day": 31}, locale="en")[0] == "repaired"


def test_a_date_field_without_evidence_of_its_month_takes_the_month_named_as_an_iso_day() -> None:
    from datetime import date

    class Trip(BaseModel):
        leave: date | None = None

    def judged(said: str, value: str, locale: str) -> tuple[str, object]:
        heard = Heard(said, slips=True, locales=(locale,))
        _, verdicts = Grounding.for_small_models().judge(Trip, (Item("leave", said, value),), heard)
        return verdicts[0].action, verdicts[0].value

    assert judged("el 12 de agosto de 2027", "2027-01-12", "es") == ("repaired", "2027-08-12")
    assert judged("am 12. August 2027", "2027-01-12", "de") == ("repaired", "2027-08-12")
    assert judged("am 31. September 2027", "2027-01-31", "de")[0] == "dropped"  # no such day


def test_a_date_fields_month_needs_evidence_whether_read_as_parts_or_as_an_iso_day() -> None:
    """The same rule for a ``datetime.date`` field: its value read as parts or as an ISO day, the
    form's dates held as ISO days."""
    from datetime import date

    class Trip(BaseModel):
        arrive: date | None = None
        leave: date | None = None

    def rule(said: str, value: object, *, locale: str, known: dict[str, object] | None = None) -> str | None:
        _, verdicts = Grounding.for_small_models().judge(
            Trip, (Item("arrive", said, value),), Heard(said, slips=True, locales=(locale,)), known=known
        )
        return verdicts[0].rule if verdicts[0].action == "dropped" else verdicts[0].action

    assert rule("el primer día", {"month": 1, "day": 1, "year": 2027}, locale="es") == "month_given"
    assert rule("el primer día", "2027-01-01", locale="es") == "month_given"
    assert rule("el 1 de enero", "2027-01-01", locale="es") == "kept"
    assert rule("am ersten Tag", {"month": 1, "day": 1, "year": 2027}, locale="de") == "month_given"
    assert rule("am 1. Januar", {"month": 1, "day": 1, "year": 2027}, locale="de") == "kept"
    leaving = {"leave": "2027-09-15"}
    assert rule("el día 12", {"month": 9, "day": 12, "year": None}, locale="es", known=leaving) == "kept"
    assert rule("am 12.", {"month": 9, "day": 12, "year": None}, locale="de", known=leaving) == "kept"
    assert (
        rule("el día 12", {"month": 11, "day": 12, "year": None}, locale="es", known=leaving) == "month_given"
    )
    # A date written in digits, read in the other order, is put right, as parts or as an ISO day.
    for said, locale in (("10/08/2027 - 13/08/2027", "es"), ("10.08.2027 bis 13.08.2027", "de")):
        _, verdicts = Grounding.for_small_models().judge(
            Trip,
            (Item("arrive", said, {"month": 10, "day": 8, "year": 2027}), Item("leave", said, "2027-10-08")),
            Heard(said, slips=True, locales=(locale,)),
        )
        assert [(v.action, v.rule, v.value) for v in verdicts] == [
            ("repaired", "written_dates", {"month": 8, "day": 10, "year": 2027}),
            ("repaired", "written_dates", "2027-08-10"),
        ]


def test_a_day_written_without_its_month_after_a_held_date_may_be_in_the_next_month() -> None:
    """In on August 30, out "on the 2nd" is September 2, in any language; a day after the held one
    in the next month is no such reading."""
    held = {"until": {"month": 8, "day": 30}}

    def rule(said: str, value: dict[str, int], locale: str) -> str | None:
        _, verdicts = Grounding.for_small_models().judge(
            Range, (Item("since", said, value),), Heard(said, slips=True, locales=(locale,)), known=held
        )
        return verdicts[0].rule if verdicts[0].action == "dropped" else verdicts[0].action

    assert rule("out on the 2nd", {"month": 9, "day": 2}, "en") == "kept"
    assert rule("salida el día 2", {"month": 9, "day": 2}, "es") == "kept"
    assert rule("out on the 30th", {"month": 9, "day": 30}, "en") == "month_given"
    assert rule("salida el día 30", {"month": 9, "day": 30}, "es") == "month_given"
    december = {"until": {"month": 12, "day": 30}}
    _, verdicts = Grounding.for_small_models().judge(
        Range,
        (Item("since", "the 2nd", {"month": 1, "day": 2}),),
        Heard("the 2nd", slips=True),
        known=december,
    )
    assert verdicts[0].action == "kept"


def test_a_month_is_named_in_any_language_when_none_is_declared_and_with_a_slip_when_allowed() -> None:
    """With no locale declared, a month word of any language counts ("Juni", "junio"); a declared
    month name with one slip of the keys counts where slips are allowed ("agust"); a month joined
    to its day by a slash or a dot counts ("6/10-6/13", "20.06.")."""
    june_20 = {"month": 6, "day": 20}

    def verdict(said: str, value: dict[str, int], locales: tuple[str, ...] = (), slips: bool = True) -> str:
        _, verdicts = Grounding.for_small_models().judge(
            Range, (Item("since", said, value),), Heard(said, slips=slips, locales=locales)
        )
        return verdicts[0].rule if verdicts[0].action == "dropped" else verdicts[0].action

    assert verdict("vom 20. bis 23. Juni", june_20) == "kept"
    assert verdict("del 20 al 23 de junio", june_20) == "kept"
    assert verdict("vom 20. bis 23. Juni", june_20, locales=("en",)) == "month_given"  # not English
    assert verdict("chek in agust 10", {"month": 8, "day": 10}, locales=("en",)) == "kept"
    assert verdict("llegada agsoto 10", {"month": 8, "day": 10}, locales=("es",)) == "kept"
    assert verdict("chek in agust 10", {"month": 8, "day": 10}, locales=("en",), slips=False) == "month_given"
    assert verdict("6/10-6/13", {"month": 6, "day": 10}) == "kept"
    assert verdict("am 20.06. bitte", june_20, locales=("de",)) == "kept"
    assert verdict("the 3-6", {"month": 6, "day": 3}, locales=("en",)) == "month_given"


def test_a_dot_after_a_digit_ends_no_part_so_a_date_written_with_ordinals_stays_whole() -> None:
    """German and Norwegian write a day as an ordinal ("10."): the parts a second look reads keep
    the day with its month; a sentence ending after a word still ends a part."""
    from picoflow.slots.words import parts_of

    assert parts_of("Guten Tag, ein Zimmer vom 10. bis 13. August 2027. Mit Frühstück.") == [
        "Guten Tag",
        "ein Zimmer vom 10. bis 13. August 2027. Mit Frühstück",
    ]
    assert parts_of("Et rom fra 10. til 13. august, takk") == ["Et rom fra 10. til 13. august", "takk"]
    assert parts_of("Portland. Two beds. From August 10") == ["Portland", "Two beds", "From August 10"]


def test_an_option_read_from_the_words_of_another_is_that_one_in_any_language() -> None:
    """ "Doppelbett" declares one bed: a reading of two beds from it is the one bed its words say; a
    list gains the options its quote says and loses those it does not; a quote that says two options
    of a single field decides neither."""

    class Room(BaseModel):
        bed: Annotated[
            Literal["one bed", "two beds", "suite"] | None,
            Said(
                options={
                    "one bed": ("doppelbett", "double bed"),
                    "two beds": ("zwei betten", "twin beds"),
                    "suite": ("suite",),
                }
            ),
        ] = None
        extras: list[
            Annotated[
                Literal["wifi", "parking"],
                Said(options={"wifi": ("wlan", "wifi"), "parking": ("parkplatz",)}),
            ]
        ] = []

    def judged(said: str, *items: Item) -> list[tuple[str, object, str | None]]:
        _, verdicts = Grounding.for_small_models().judge(Room, items, Heard(said, slips=True))
        return [(v.action, v.value, v.rule) for v in verdicts]

    assert judged("Ein Zimmer mit Doppelbett", Item("bed", "Doppelbett", "two beds")) == [
        ("repaired", "one bed", "option_words")
    ]
    assert judged("A room with a double bed", Item("bed", "double bed", "two beds")) == [
        ("repaired", "one bed", "option_words")
    ]
    assert judged("Doppelbett oder zwei Betten", Item("bed", "Doppelbett oder zwei Betten", "suite")) == [
        ("dropped", "suite", "option_words")
    ]
    # A list fully borne out stays as read (what it left out is the second look's to find).
    assert judged("WLAN und Parkplatz", Item("extras", "WLAN und Parkplatz", ["wifi"])) == [
        ("kept", ["wifi"], None)
    ]
    assert judged("nur WLAN", Item("extras", "nur WLAN", ["parking"])) == [
        ("repaired", ["wifi"], "option_words")
    ]
    assert judged("with parking", Item("extras", "with parking", ["wifi"])) == [
        ("repaired", ["parking"], "option_words")
    ]
    # A quote naming no option at all is judged by its part of the message, in any language.
    assert judged("Hallo, ein Zimmer mit Doppelbett, ab Montag", Item("bed", "ein Zimmer", "one bed")) == [
        ("kept", "one bed", None)
    ]
    assert judged("Hi, a room with twin beds, from Monday", Item("bed", "a room", "one bed")) == [
        ("repaired", "two beds", "option_words")
    ]
    # Another part saying the option bears nothing out.
    assert judged("Hallo, ein Zimmer, mit Doppelbett", Item("bed", "ein Zimmer", "one bed")) == [
        ("dropped", "one bed", "option_words")
    ]
    assert judged("Hi, a room, twin beds", Item("bed", "a room", "two beds")) == [
        ("dropped", "two beds", "option_words")
    ]


def test_a_date_read_from_a_quote_that_writes_one_date_in_digits_is_that_date() -> None:
    """A small model takes a month from the date before ("13.08.2027" read as October 13): the quote
    writes one date, which the message reads one way, so the value is that date, in any order a
    language writes dates; a quote writing two dates decides nothing."""
    from datetime import date

    class Trip(BaseModel):
        arrive: date | None = None
        leave: date | None = None

    def judged(said: str, quote: str, value: dict[str, int]) -> tuple[str, object]:
        _, verdicts = Grounding.for_small_models().judge(
            Trip, (Item("leave", quote, value),), Heard(said, slips=True, locales=("en", "de"))
        )
        return verdicts[0].action, verdicts[0].value

    german = "Portland, 10.08.2027 bis 13.08.2027, ein Bett"
    assert judged(german, "13.08.2027", {"month": 10, "day": 13, "year": 2027}) == (
        "repaired",
        {"month": 8, "day": 13, "year": 2027},
    )
    english = "Portland, 08/10/2027 to 08/13/2027, one bed"
    assert judged(english, "08/13/2027", {"month": 10, "day": 13, "year": 2027}) == (
        "repaired",
        {"month": 8, "day": 13, "year": 2027},
    )
    assert judged(english, "08/10/2027 to 08/13/2027", {"month": 10, "day": 13, "year": 2027})[0] == "dropped"


def test_a_dates_day_must_be_written_in_its_quote() -> None:
    """ "August 2027" read as August 20: the year bears the date out to ``numbers_written``, but no
    one wrote its day; in English and German, in digits, in words and as an ordinal."""

    def rule(said: str, quote: str, value: dict[str, int], locale: str) -> str | None:
        _, verdicts = Grounding.for_small_models().judge(
            Range, (Item("since", quote, value),), Heard(said, slips=True, locales=(locale,))
        )
        return verdicts[0].rule if verdicts[0].action == "dropped" else verdicts[0].action

    august_20 = {"month": 8, "day": 20, "year": 2027}
    assert rule("from August 10 to 13, 2027", "August 2027", august_20, "en") == "day_written"
    assert rule("vom 10. bis 13. August 2027", "August 2027", august_20, "de") == "day_written"
    assert rule("from August 20, 2027", "August 20, 2027", august_20, "en") == "kept"
    assert rule("ab dem 20. August 2027", "20. August 2027", august_20, "de") == "kept"
    assert rule("from the twentieth of August", "the twentieth of August", august_20, "en") == "kept"


def test_of_several_locales_the_one_the_conversation_told_orders_its_dates_in_digits() -> None:
    """Dates every reading of which could be both ways ("03.09.2027–06.09.2027") are read in the
    order of the locale the user's words told, when the flow declares several: day first for a
    German or Spanish guest, month first for an American one. Before any told, they stay as read."""
    from datetime import date

    class Trip(BaseModel):
        arrive: date | None = None
        leave: date | None = None

    def judged(said: str, quote: str, value: object, told: str | None) -> tuple[str, object]:
        heard = Heard(said, slips=True, locales=("en", "es", "de"), told=told)
        _, verdicts = Grounding.for_small_models().judge(Trip, (Item("arrive", quote, value),), heard)
        return verdicts[0].action, verdicts[0].value

    march_9 = {"month": 3, "day": 9, "year": 2027}
    september_3 = {"month": 9, "day": 3, "year": 2027}
    german = "03.09.2027–06.09.2027"
    assert judged(german, "03.09.2027", march_9, "de") == ("repaired", september_3)
    assert judged(german, "03.09.2027", september_3, "de") == ("kept", september_3)
    assert judged(german, "03.09.2027", "2027-03-09", "de") == ("repaired", "2027-09-03")  # an ISO day
    spanish = "del 03/09/2027 al 06/09/2027"
    assert judged(spanish, "03/09/2027", march_9, "es") == ("repaired", september_3)
    english = "from 03/09/2027 to 06/09/2027"
    assert judged(english, "03/09/2027", september_3, "en") == ("repaired", march_9)
    assert judged(english, "03/09/2027", march_9, "en") == ("kept", march_9)
    # No locale told yet: either order stands; a locale not declared tells nothing.
    assert judged(german, "03.09.2027", march_9, None) == ("kept", march_9)
    assert judged(german, "03.09.2027", september_3, None) == ("kept", september_3)
    assert judged(german, "03.09.2027", march_9, "fr") == ("kept", march_9)
    # The message's own dates still win over the locale: 13 is no month.
    assert judged("03/09/2027 - 03/13/2027", "03/09/2027", september_3, "de") == ("repaired", march_9)


class Budget(BaseModel):
    """A night's price bounds and a distance, with words in French, German and English."""

    max_price: Annotated[
        float | None, Said(words=("under", "at most", "maximum", "au plus", "höchstens", "bis zu"))
    ] = None
    min_price: Annotated[
        float | None, Said(words=("from", "at least", "minimum", "au moins", "mindestens"))
    ] = None
    airport_miles: Annotated[float | None, Said(words=("airport", "aéroport", "flughafen"))] = None


def test_a_value_quoted_alone_is_decided_by_the_words_right_beside_it() -> None:
    """A small model quotes only the number ("400") and puts it in the wrong bound: the field words
    right beside the number in the message decide, in any language; words further off, or beside
    a number written twice, decide nothing."""
    french = "Bonjour, du 10 au 13 août, deux lits, 400 $ maximum par nuit, avec le petit-déjeuner."
    assert kept(french, Item("min_price", "400", 400), slots=Budget) == [Item("max_price", "400", 400)]
    german = "Ein Zimmer für höchstens 400 Euro pro Nacht"
    assert kept(german, Item("min_price", "400", 400), slots=Budget) == [Item("max_price", "400", 400)]
    english = "I can pay 300 at most"
    assert kept(english, Item("min_price", "300", 300), slots=Budget) == [Item("max_price", "300", 300)]
    # Its own words beside it, or none at all: kept as read.
    assert kept("au moins 100 $ par nuit", Item("min_price", "100", 100), slots=Budget) == [
        Item("min_price", "100", 100)
    ]
    assert kept("400 dollars", Item("min_price", "400", 400), slots=Budget) == [Item("min_price", "400", 400)]
    # Another field's words three words off, in another part, or beside a number written twice.
    far = "300 dollars a night near the airport"
    assert kept(far, Item("max_price", "300", 300), slots=Budget) == [Item("max_price", "300", 300)]
    parts = "300 a night, at most 5 miles to the airport"
    assert kept(parts, Item("min_price", "300", 300), slots=Budget) == [Item("min_price", "300", 300)]
    twice = "300 maximum, or 300 at least"
    assert kept(twice, Item("min_price", "300", 300), slots=Budget) == [Item("min_price", "300", 300)]


def test_a_date_quoted_in_other_words_is_quoted_by_the_part_that_writes_it() -> None:
    """A small model translates the user's date into its quote ("le 10 août 2027" quoted "10 august
    2027"): the one part of the message writing its day and naming its month is the quote, in any
    language. A date no part writes that way, or two parts do, is still nobody's words."""

    def judged(said: str, quote: str, value: dict[str, int], locale: str) -> tuple[str, str | None]:
        heard = Heard(said, slips=True, locales=(locale,))
        _, verdicts = Grounding.for_small_models().judge(Range, (Item("since", quote, value),), heard)
        verdict = verdicts[0]
        if verdict.action == "dropped" or verdict.evidence is None:
            return verdict.action, verdict.rule
        return verdict.action, verdict.evidence.text

    august_10 = {"month": 8, "day": 10, "year": 2027}
    french = "Bonjour ! Nous arriverons le 10 août 2027 et repartirons le 13, avec deux lits."
    assert judged(french, "10 august 2027", august_10, "fr") == (
        "kept",
        "Nous arriverons le 10 août 2027 et repartirons le 13",
    )
    german = "Hallo, Anreise am 10. August 2027, Abreise drei Tage später"
    assert judged(german, "10th of August 2027", august_10, "de") == ("kept", "Anreise am 10. August 2027")
    assert judged("le premier jour", "the first day", {"month": 8, "day": 1}, "fr") == ("dropped", "quoted")
    twice = "Anreise am 10. August. Oder am 10. August 2028?"
    assert judged(twice, "August 10th", august_10, "de") == ("dropped", "quoted")


def test_a_range_read_as_one_of_its_ends_gives_the_other_end_its_day() -> None:
    """A small model reads "vom 1. bis 3. September 2027" as the check-in alone: of a slots model
    with two date fields (a range's start, then its end), the end left out takes the quote's other
    day, in any language. Both ends read, a quote writing one day or two months: nothing added."""
    from picoflow.slots.grounding import range_ends

    class Stay(BaseModel):
        arrive: WrittenDay | None = None
        leave: WrittenDay | None = None

    def added(said: str, item: Item, locale: str) -> list[tuple[str, object, str | None]]:
        items, verdicts = range_ends(Stay, (item,), Heard(said, slips=True, locales=(locale,)))
        return [(i.field, i.value, v.rule) for i, v in zip(items, verdicts, strict=True)]

    september_1 = {"month": 9, "day": 1, "year": 2027}
    german = "Guten Abend! Vom 1. bis 3. September 2027, ein Bett"
    assert added(german, Item("arrive", "Vom 1. bis 3. September 2027", september_1), "de") == [
        ("leave", {"month": 9, "day": 3, "year": 2027}, "date_range")
    ]
    english = "from the 3rd to the 6th of August"
    assert added(english, Item("leave", english, {"month": 8, "day": 6}), "en") == [
        ("arrive", {"month": 8, "day": 3}, "date_range")
    ]
    # The day read must be the end it was read for; one day, or two months: nothing.
    assert (
        added(german, Item("arrive", "Vom 1. bis 3. September 2027", {**september_1, "day": 3}), "de") == []
    )
    assert added("am 1. September 2027", Item("arrive", "am 1. September 2027", september_1), "de") == []
    two = "del 30 de agosto al 2 de septiembre"
    assert added(two, Item("arrive", two, {"month": 8, "day": 30}), "es") == []
    # Written in digits, a date's month is no day: "until 2027-05-12" writes one day.
    iso = "until 2027-05-12"
    assert added(iso, Item("leave", "2027-05-12", {"month": 5, "day": 12, "year": 2027}), "en") == []


async def test_a_slot_step_reading_one_end_of_a_range_keeps_both_ends() -> None:
    from datetime import date

    from picoflow import FlowEngine, SlotStep, ask, direct
    from picoflow.flow import Flow
    from picoflow.models import ScriptedModel

    class Trip(BaseModel):
        """A trip."""

        arrive: date | None = None
        leave: date | None = None

    class Plan(SlotStep):
        slots = Trip
        locales = ("es", "en")
        questions = [ask("When?", "arrive", "leave")]

        def on_complete(self, values: Trip) -> Any:
            return direct(f"{values.arrive} → {values.leave}")

    class TripFlow(Flow):
        name = "trip"
        steps = [Plan]

    quote = "del 3 al 6 de agosto de 2027"
    reading = {"found": [{"field": "arrive", "quote": quote, "value": "2027-08-03"}]}
    model = ScriptedModel([json.dumps(reading)], grounding="small")
    result = await FlowEngine([TripFlow], model=model).run("trip", f"Hola, {quote}")
    assert result.message == "2027-08-03 → 2027-08-06"
