"""Grounding: an item of a reading is kept only as far as the user's words bear it out — its quote,
its numbers, a text value's words, an option's words declared with ``Said`` — checked on its own,
without an engine or a model."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from picoflow import Extraction, FlowDefinitionError, Said, SlotStep
from picoflow._schema import json_schema
from picoflow.slots.grounding import evidence_of
from picoflow.slots.reading import Reading, reading_of

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


def kept(said: str, *items: Reading, slots: type[BaseModel] | None = None) -> list[Reading]:
    return list(Extraction(items).grounded(said, slots).items)


# --- the quote and the numbers, for any reading ------------------------------------------------------


def test_the_quote_must_be_the_users_words_as_written_ignoring_case_and_spacing() -> None:
    name = Reading("name", "ada  LOVELACE", "Ada Lovelace")
    assert kept("I am Ada\nLovelace.", name) == [name]
    assert kept("I am Grace Hopper.", name) == []
    assert kept("I am Ada Lovelace.", Reading("name", "", "Ada Lovelace")) == []
    assert kept("I am Ada Lovelace.", Reading("name", "   ", "Ada Lovelace")) == []


def test_the_quote_may_be_the_users_words_in_another_order_but_whole_words() -> None:
    parking = Reading("amenities", "free parking", ["freeParking"])
    wifi = Reading("amenities", "Free WiFi", ["freeWiFi"])
    breakfast = Reading("amenities", "free breakfast", ["freeBreakfast"])
    assert kept("free wifi, parking", parking, wifi, breakfast) == [parking, wifi]
    # Parts of words are not words: "park" is not in "parking".
    assert kept("free wifi, parking", Reading("amenities", "free park", ["freeParking"])) == []


def test_a_value_holding_numbers_needs_one_of_them_written_in_the_quote() -> None:
    said = "compare 2,5,8 and keep it under $1,250.50, max 700"
    assert kept(said, Reading("hotels", "2,5,8", 258)) == []
    assert kept(said, Reading("hotels", "2,5,8", [2, 5, 8])) == [Reading("hotels", "2,5,8", [2, 5, 8])]
    assert kept(said, Reading("price", "$1,250.50", 1250.5)) == [Reading("price", "$1,250.50", 1250.5)]
    assert kept(said, Reading("price", "max 700", 700)) == [Reading("price", "max 700", 700)]
    assert kept(said, Reading("price", "max 700", 7000)) == []
    # The number must be in the quote, not anywhere in the message.
    assert kept(said, Reading("price", "max", 700)) == []


def test_numbers_inside_objects_count_and_booleans_are_not_numbers() -> None:
    day = Reading("check_in", "8/1", {"month": 8, "day": 1, "year": None})
    invented = Reading("check_in", "next month", {"month": 9, "day": 1, "year": 2027})
    yes = Reading("in_portland", "yes", True)
    name = Reading("name", "Ada", "Ada")
    assert kept("8/1 please, next month, yes, Ada", day, invented, yes, name) == [day, yes, name]


def test_a_number_written_as_text_is_still_a_number_to_find() -> None:
    assert kept("2,5,8", Reading("age", "2,5,8", "258")) == []
    assert kept("I am 58", Reading("age", "58", "58")) == [Reading("age", "58", "58")]


# --- what the slots model declares ----------------------------------------------------------------------


def test_an_option_needs_one_of_its_words_or_its_own_name_in_the_quote() -> None:
    said = "I love jazz and good food, and a hike"
    jazz = Reading("interests", "jazz and good food", ["music", "food"])
    assert kept(said, jazz, slots=Wishes) == [jazz]
    # Only the options borne out stay: the model added outdoors and art to "jazz". The marker
    # declares no words for "art", so it does not speak for it: only the quote is checked.
    wide = Reading("interests", "I love jazz", ["music", "outdoors", "art"])
    assert kept(said, wide, slots=Wishes) == [Reading("interests", "I love jazz", ["music", "art"])]
    # None left: the item goes.
    assert kept(said, Reading("interests", "a hike", ["outdoors"]), slots=Wishes) == []
    # Its own name says an option; case does not matter.
    assert kept("MUSIC please", Reading("interests", "MUSIC", ["music"]), slots=Wishes) == [
        Reading("interests", "MUSIC", ["music"])
    ]


def test_a_phrase_of_several_words_must_be_written_in_that_order() -> None:
    good = Reading("interests", "good food", ["food"])
    assert kept("good food", good, slots=Wishes) == [good]
    assert kept("food, good", Reading("interests", "food good", ["food"]), slots=Wishes) == [
        Reading("interests", "food good", ["food"])  # its own name, "food", is in the quote
    ]
    assert kept("a good restaurant", Reading("interests", "good", ["food"]), slots=Wishes) == []


def test_the_marker_may_sit_on_the_field_and_without_a_reading_schema_change() -> None:
    twin = Reading("room", "a twin room", "two beds")
    assert kept("a twin room", twin, slots=Wishes) == [twin]
    assert kept("a room", Reading("room", "a room", "two beds"), slots=Wishes) == []
    assert kept("one bed", Reading("room", "one bed", "one bed"), slots=Wishes) == [
        Reading("room", "one bed", "one bed")
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
    assert kept(said, Reading("city", "NOLA", "New Orleans"), slots=Wishes) == [
        Reading("city", "NOLA", "New Orleans")
    ]
    assert kept(said, Reading("city", "NOLA", "nola"), slots=Wishes) == [Reading("city", "NOLA", "nola")]
    # A city the words do not name: a known one without its words, or another one not written.
    assert kept(said, Reading("city", "NOLA", "San Francisco"), slots=Wishes) == []
    assert kept(said, Reading("city", "OK", "Paris"), slots=Wishes) == []
    assert kept("Paris, please", Reading("city", "Paris", "Paris"), slots=Wishes) == [
        Reading("city", "Paris", "Paris")
    ]
    assert kept(said, Reading("name", "I'm Ada", "Ada"), slots=Wishes) == [Reading("name", "I'm Ada", "Ada")]
    assert kept(said, Reading("name", "I'm Ada", "Grace"), slots=Wishes) == []


def test_numbers_and_booleans_are_left_to_the_quote_and_number_checks() -> None:
    three = Reading("nights", "3 nights", 3)
    pets = Reading("pets", "a dog", True)
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
