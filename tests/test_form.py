"""Form: where a slot-filling conversation stands, as a value. No engine, no model: each operation
is called on its own and returns a new form, the one it was called on unchanged."""

from __future__ import annotations

from datetime import date

import pytest
from pydantic import ValidationError

from picoflow import Form, ask
from picoflow.slots.form import Merge
from trip_slots import Trip

NAME = ask("What is your name?", "name")
AGE = ask("How old are you?", "age")
CITIES = ask("Which cities would you like to see?", "cities", optional=True)
DATES = ask("When does your trip start and end?", "start", "end")
QUESTIONS = [NAME, AGE, CITIES, DATES]


def merged(known: dict[str, object], given: dict[str, object]) -> Merge:
    return Form(known=known).merge(Trip, given)


# --- the value -----------------------------------------------------------------------------------


def test_a_new_form_knows_nothing_and_round_trips_through_json() -> None:
    assert Form().model_dump(mode="json") == {
        "known": {},
        "declined": [],
        "asking": None,
        "introduced": False,
    }
    form = Form(
        known={"name": "Ada", "cities": ["Rome"]}, declined=("cities",), asking="age", introduced=True
    )
    stored = form.model_dump(mode="json")
    assert stored == {
        "known": {"name": "Ada", "cities": ["Rome"]},
        "declined": ["cities"],
        "asking": "age",
        "introduced": True,
    }
    assert Form.model_validate(stored) == form
    assert Form.model_validate_json(form.model_dump_json()) == form


def test_a_form_cannot_be_changed_in_place() -> None:
    form = Form(known={"name": "Ada"})
    with pytest.raises(ValidationError):
        form.asking = "age"  # type: ignore[misc]
    with pytest.raises(TypeError):
        form.known["age"] = 36  # type: ignore[index]
    with pytest.raises(ValidationError):
        Form.model_validate({"known": {}, "slots": {}})  # no stray keys


def test_values_are_the_typed_slots_value() -> None:
    form = Form(known={"name": "Ada", "start": "2027-05-10"})
    assert form.values(Trip) == Trip(name="Ada", start=date(2027, 5, 10))
    assert Form().values(Trip) == Trip()


# --- the questions -------------------------------------------------------------------------------


def test_pending_is_the_first_question_not_answered() -> None:
    assert Form().pending(QUESTIONS) == NAME
    assert Form(known={"name": "Ada"}).pending(QUESTIONS) == AGE
    # An optional question is answered by one of its fields or by being declined.
    assert Form(known={"name": "Ada", "age": 36}).pending(QUESTIONS) == CITIES
    assert Form(known={"name": "Ada", "age": 36}, declined=("cities",)).pending(QUESTIONS) == DATES
    # A required one needs all its fields.
    both = {"name": "Ada", "age": 36, "cities": ["Rome"], "start": "2027-05-10"}
    assert Form(known=both).pending(QUESTIONS) == DATES
    assert Form(known={**both, "end": "2027-05-12"}).pending(QUESTIONS) is None


def test_asking_now_records_the_question_and_counts_the_intro_as_said() -> None:
    form = Form(known={"name": "Ada"})
    asking = form.asking_now(AGE)
    assert (asking.asking, asking.introduced) == ("age", True)
    assert asking.asked(QUESTIONS) == AGE
    done = asking.asking_now(None)
    assert (done.asking, done.introduced) == (None, True)
    # Completing without a question leaves the intro unsaid.
    assert Form().asking_now(None).introduced is False
    assert form == Form(known={"name": "Ada"})


def test_a_form_stored_with_the_readers_bookkeeping_loads_without_it() -> None:
    # Sessions stored before the reader kept corrections and second looks to itself.
    stored = {
        "known": {"name": "Ada"},
        "declined": [],
        "asking": "age",
        "corrections": 1,
        "introduced": True,
        "heard": ["name"],
        "rereading": "I'm Ada, 36",
    }
    form = Form.model_validate(stored)
    assert form == Form(known={"name": "Ada"}, asking="age", introduced=True)
    assert form.model_dump(mode="json") == {
        "known": {"name": "Ada"},
        "declined": [],
        "asking": "age",
        "introduced": True,
    }


def test_forget_makes_fields_unknown_and_their_questions_open_again() -> None:
    form = Form(known={"name": "Ada", "age": 36, "start": "2027-05-10"}, declined=("cities",))
    forgotten = form.forget("start", "cities")
    assert forgotten.known == {"name": "Ada", "age": 36}
    assert forgotten.declined == ()
    assert forgotten.pending(QUESTIONS) == CITIES
    assert form.known == {"name": "Ada", "age": 36, "start": "2027-05-10"}


# --- merging a reading -----------------------------------------------------------------------------


def test_merge_tries_the_whole_reading_first() -> None:
    # Moving the trip a month later: the new start alone is after the old end, but both together are valid.
    known = {"name": "Ada", "start": "2027-05-10", "end": "2027-05-12"}
    later = merged(known, {"start": date(2027, 6, 1), "end": "2027-06-05"})
    assert later.form.known == {"name": "Ada", "start": "2027-06-01", "end": "2027-06-05"}
    assert (later.accepted, later.problems) == (("start", "end"), {})
    # And a month earlier: the new end alone is before the old start.
    earlier = later.form.merge(Trip, {"start": "2027-04-01", "end": "2027-04-03"})
    assert earlier.form.known == {"name": "Ada", "start": "2027-04-01", "end": "2027-04-03"}
    assert (earlier.accepted, earlier.problems) == (("start", "end"), {})


def test_merge_sets_aside_fields_that_break_their_own_rules() -> None:
    result = merged(
        {"name": "Ada"}, {"age": 347, "cities": ["Rome"], "name": None, "email": "ada@example.com"}
    )
    assert result.form.known == {"name": "Ada", "cities": ["Rome"]}
    assert result.accepted == ("cities",)
    assert result.problems == {"age": "age: input should be less than or equal to 120"}


def test_bad_input_loses_nothing_already_known() -> None:
    form = Form(known={"age": 36, "start": "2027-05-10"}, asking="end", introduced=True)
    result = form.merge(Trip, {"age": 0, "end": "2027-05-09"})
    assert result.form == form
    assert result.accepted == ()
    # In the order the reading gave them, whatever their kind of rule.
    assert list(result.problems.items()) == [
        ("age", "age: input should be greater than 0"),
        ("end", "the end date must be after the start date"),
    ]


def test_merge_replaces_known_values_and_keeps_json_values() -> None:
    result = merged({"age": 36, "cities": ["Rome"]}, {"age": "37", "cities": ("Oslo",)})
    assert result.form.known == {"age": 37, "cities": ["Oslo"]}
    assert result.accepted == ("age", "cities")
    nothing = merged({"age": 36}, {})
    assert (nothing.form.known, nothing.accepted, nothing.problems) == ({"age": 36}, (), {})


def test_merge_refuses_a_value_of_the_wrong_type_without_quoting_it() -> None:
    result = merged({}, {"age": "thirty-six", "start": "someday"})
    assert result.form.known == {} and result.accepted == ()
    assert list(result.problems) == ["age", "start"]
    assert all("thirty-six" not in why and "someday" not in why for why in result.problems.values())


def test_merge_keeps_a_new_date_pair_together_when_another_field_is_refused() -> None:
    known = {"start": "2027-05-10", "end": "2027-05-12"}
    result = merged(known, {"start": "2027-06-01", "end": "2027-06-05", "age": 347})
    assert result.form.known == {"start": "2027-06-01", "end": "2027-06-05"}
    assert result.accepted == ("start", "end")
    assert list(result.problems) == ["age"]


def test_merge_takes_a_number_written_as_text_as_its_field_would() -> None:
    assert merged({}, {"age": "58"}).form.known == {"age": 58}


def test_merge_declines_the_optional_question_being_asked_when_the_reading_gives_none_of_its_fields() -> None:
    asking_cities = Form(known={"name": "Ada", "age": 36}, asking="cities")
    declined = asking_cities.merge(Trip, {}, QUESTIONS).form
    assert declined.declined == ("cities",) and declined.pending(QUESTIONS) == DATES
    # A reply about something else declines it too; the answer is kept.
    other = asking_cities.merge(Trip, {"start": "2027-05-10"}, QUESTIONS).form
    assert other.declined == ("cities",) and other.known["start"] == "2027-05-10"
    # Given, even refused, it is not declined: its question is asked again.
    given = asking_cities.merge(Trip, {"cities": "Rome"}, QUESTIONS)
    assert given.form.declined == () and list(given.problems) == ["cities"]
    # A required question is never declined, nor is anything without the questions.
    assert Form(asking="age").merge(Trip, {}, QUESTIONS).form.declined == ()
    assert asking_cities.merge(Trip, {}).form.declined == ()


def test_the_fields_of_one_question_that_contradict_each_other_are_refused_together() -> None:
    # Without the questions each field is tried alone: the start is kept, the end refused.
    alone = merged({"name": "Ada"}, {"start": "2027-05-10", "end": "2027-05-01"})
    assert alone.form.known == {"name": "Ada", "start": "2027-05-10"}
    assert list(alone.problems) == ["end"]
    # Asked together, neither is known to be the right one: both are asked for again.
    together = Form(known={"name": "Ada"}).merge(
        Trip, {"start": "2027-05-10", "end": "2027-05-01"}, QUESTIONS
    )
    assert together.form.known == {"name": "Ada"} and together.accepted == ()
    assert together.problems == {
        "start": "the end date must be after the start date",
        "end": "the end date must be after the start date",
    }
    # A field of the pair refused by its own rule leaves the other one standing.
    own = Form().merge(Trip, {"start": "someday", "end": "2027-05-01", "name": "Ada"}, QUESTIONS)
    assert own.form.known == {"end": "2027-05-01", "name": "Ada"}
    assert list(own.problems) == ["start"]
    # One date given against a known one is tried alone.
    later = Form(known={"start": "2027-05-10"}).merge(Trip, {"end": "2027-05-01"}, QUESTIONS)
    assert later.form.known == {"start": "2027-05-10"} and list(later.problems) == ["end"]
