"""SlotStep: each turn the model reads the user's latest words into items; its Form keeps them and code asks.

Whole conversations through the runner with a scripted model (every script item is the model's JSON
reading of one message), asserting the replies, the number of model calls, what each request showed
the model, the transcript and the final state; then what the step leaves to its author (its hooks,
its prompt, its own state keys) and the class-definition checks. The Form, grounding and the reading
format are tested on their own in test_form.py, test_grounding.py and test_reading.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from picoflow import (
    Ask,
    Flow,
    FlowDefinitionError,
    FlowEngine,
    Form,
    Outcome,
    Said,
    SlotStep,
    Step,
    TerminateStep,
    ask,
    direct,
    direct_to,
)
from picoflow._schema import json_schema, strict_variant
from picoflow.exceptions import AttemptsExhausted
from picoflow.models import ScriptedModel
from picoflow.session import Session, session_to_json
from picoflow.slots.reading import EXTRACT_RULES, FORMAT_HINT, reading_of
from picoflow.testing import request_lines, transcript_lines
from trip_slots import Trip

INTRO = "Welcome to trip planning!"
NAME = "What is your name?"
AGE = "How old are you?"
CITIES = "Which cities would you like to see?"
DATES = "When does your trip start and end?"


class Interview(SlotStep):
    """Plan the traveller's trip."""

    slots = Trip
    intro = INTRO
    questions = [
        ask(NAME, "name"),
        ask(AGE, "age"),
        ask(CITIES, "cities", optional=True),
        ask(DATES, "start", "end"),
    ]

    def on_complete(self, values: Trip) -> Outcome:
        cities = ", ".join(values.cities) if values.cities else "anywhere"
        summary = f"Planned: {values.name}, {values.age}, {values.start} to {values.end}, {cities}."
        return direct_to(Planned, summary).with_state(trip=values)


class Planned(Step):
    """The trip is planned; answer questions about it."""


class TripFlow(Flow):
    name = "trip"
    steps = [Interview, Planned]


SYSTEM = f"system: Plan the traveller's trip.\n\n{EXTRACT_RULES}"
FORMAT_CORRECTION = f"Your answer must be one JSON object matching the required schema. {FORMAT_HINT}"
AGE_RULE = "age: input should be less than or equal to 120"
DATE_RULE = "end: the end date must be after the start date"


def refused(*rules: str) -> str:
    """The correction the model gets when fields of its answer were refused: each field and its rule."""
    listed = "".join(f"- {rule}\n" for rule in rules)
    return (
        f"These fields were not accepted:\n{listed}"
        "Answer again with those items corrected, or without them where the message does not give them."
    )


def found(*items: tuple[str, str, Any]) -> str:
    """The model's answer: one item (field, quote, value) per thing it read."""
    return json.dumps({"found": [{"field": f, "quote": q, "value": v} for f, q, v in items]})


class Chat:
    """One conversation with TripFlow: each turn the user's words and the model's answers to them."""

    def __init__(self, flow: type[Flow] = TripFlow) -> None:
        self.flow = flow
        self.model = ScriptedModel([], grounding="small")  # stands in for the embedded model
        self.engine = FlowEngine([flow], model=self.model)
        self.session_id: str | None = None

    async def say(self, text: str, *answers: str) -> str:
        """One turn; the model is called once per answer given, no more, no less."""
        self.model.extend(answers)
        result = await self.engine.run(self.flow.name, text, self.session_id)
        assert result.ok, result.error
        assert result.usage.model_calls == len(answers)
        assert self.model.remaining == 0
        self.session_id = result.session_id
        return result.message

    async def session(self) -> Session:
        session = await self.engine.store.load(self.session_id or "")
        assert session is not None
        return session

    async def transcript(self) -> list[str]:
        return await transcript_lines(self.engine, self.session_id or "")

    def requests(self) -> list[list[str]]:
        return [request_lines(request) for request in self.model.requests]

    async def state(self, step: str = "Interview") -> dict[str, Any]:
        return dict((await self.session()).state_of(step))

    async def form(self, step: str = "Interview") -> Form:
        return Form.model_validate((await self.state(step))["form"])


def form(
    known: dict[str, Any],
    *,
    declined: Sequence[str] = (),
    asking: str | None = None,
    introduced: bool = True,
) -> dict[str, Any]:
    """A form as the step state stores it."""
    return {
        "known": known,
        "declined": list(declined),
        "asking": asking,
        "introduced": introduced,
    }


# --- whole conversations ---------------------------------------------------------------------------


async def test_one_answer_per_turn_each_reply_is_the_next_question_word_for_word() -> None:
    chat = Chat()
    assert await chat.say("Hi", found()) == f"{INTRO} {NAME}"
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == AGE
    assert await chat.say("I am 36", found(("age", "36", 36))) == CITIES
    assert await chat.say("Rome and Paris", found(("cities", "Rome and Paris", ["Rome", "Paris"]))) == DATES
    reading = found(("start", "May 10, 2027", "2027-05-10"), ("end", "May 14, 2027", "2027-05-14"))
    done = await chat.say("From May 10, 2027 to May 14, 2027", reading)
    assert done == "Planned: Ada, 36, 2027-05-10 to 2027-05-14, Rome, Paris."

    session = await chat.session()
    assert session.current_step == "Planned" and session.sequence == ["Interview", "Planned"]
    assert session.state_of("Planned") == {
        "trip": {
            "name": "Ada",
            "age": 36,
            "start": "2027-05-10",
            "end": "2027-05-14",
            "cities": ["Rome", "Paris"],
        }
    }
    assert session.state_of("Interview") == {
        "form": form(
            {
                "name": "Ada",
                "age": 36,
                "start": "2027-05-10",
                "end": "2027-05-14",
                "cities": ["Rome", "Paris"],
            }
        )
    }
    assert await chat.transcript() == [
        "Interview | user: Hi",
        f"Interview | assistant [direct]: {INTRO} {NAME}",
        "Interview | user: Ada",
        f"Interview | assistant [direct]: {AGE}",
        "Interview | user: I am 36",
        f"Interview | assistant [direct]: {CITIES}",
        "Interview | user: Rome and Paris",
        f"Interview | assistant [direct]: {DATES}",
        "Interview | user: From May 10, 2027 to May 14, 2027",
        "Planned | assistant [direct]: Planned: Ada, 36, 2027-05-10 to 2027-05-14, Rome, Paris.",
    ]
    # Each request holds the question the user answered and the answer, nothing older.
    assert chat.requests() == [
        [SYSTEM, "user: Hi"],
        [SYSTEM, f"assistant [direct]: {INTRO} {NAME}", "user: Ada"],
        [SYSTEM, f"assistant [direct]: {AGE}", "user: I am 36"],
        [SYSTEM, f"assistant [direct]: {CITIES}", "user: Rome and Paris"],
        [SYSTEM, f"assistant [direct]: {DATES}", "user: From May 10, 2027 to May 14, 2027"],
    ]


async def test_answers_in_another_order_are_all_kept() -> None:
    chat = Chat()
    # Not asked yet, but said: kept, and the first open question is asked (with the intro).
    assert await chat.say("Hi, I'm 36", found(("age", "I'm 36", 36))) == f"{INTRO} {NAME}"
    dates = found(("start", "june 1 2027", "2027-06-01"), ("end", "june 3 2027", "2027-06-03"))
    assert await chat.say("I travel June 1 2027 to June 3 2027", dates) == NAME
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == CITIES
    done = await chat.say("Lisbon", found(("cities", "Lisbon", ["Lisbon"])))
    assert done == "Planned: Ada, 36, 2027-06-01 to 2027-06-03, Lisbon."
    session = await chat.session()
    assert session.state_of("Planned")["trip"] == {
        "name": "Ada",
        "age": 36,
        "start": "2027-06-01",
        "end": "2027-06-03",
        "cities": ["Lisbon"],
    }


async def test_everything_in_one_message_completes_at_once_without_the_intro() -> None:
    chat = Chat()
    said = "I'm Ada, 36, going to Rome from 2027-05-10 to 2027-05-14"
    reading = found(
        ("name", "Ada", "Ada"),
        ("age", "36", 36),
        ("cities", "Rome", ["Rome"]),
        ("start", "2027-05-10", "2027-05-10"),
        ("end", "2027-05-14", "2027-05-14"),
    )
    assert await chat.say(said, reading) == "Planned: Ada, 36, 2027-05-10 to 2027-05-14, Rome."
    session = await chat.session()
    assert session.current_step == "Planned"
    assert session.state_of("Planned")["trip"] == {
        "name": "Ada",
        "age": 36,
        "start": "2027-05-10",
        "end": "2027-05-14",
        "cities": ["Rome"],
    }
    assert session.state_of("Interview") == {
        "form": form(
            {"name": "Ada", "age": 36, "cities": ["Rome"], "start": "2027-05-10", "end": "2027-05-14"},
            introduced=False,
        )
    }
    assert session.memory["Interview"].messages == []


async def test_an_optional_question_answered_with_nothing_is_declined_and_not_asked_again() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    assert await chat.say("36", found(("age", "36", 36))) == CITIES
    assert await chat.say("No preference", found()) == DATES
    assert await chat.state() == {
        "form": form({"name": "Ada", "age": 36}, declined=["cities"], asking="start")
    }
    # Only one date: the dates are asked again, never the cities.
    assert await chat.say("From 2027-05-10", found(("start", "2027-05-10", "2027-05-10"))) == DATES
    done = await chat.say("Until 2027-05-12", found(("end", "2027-05-12", "2027-05-12")))
    assert done == "Planned: Ada, 36, 2027-05-10 to 2027-05-12, anywhere."
    assert (await chat.session()).state_of("Planned")["trip"]["cities"] is None


async def test_a_required_question_answered_with_nothing_is_asked_again() -> None:
    chat = Chat()
    assert await chat.say("Hi", found()) == f"{INTRO} {NAME}"
    assert await chat.say("Why do you ask?", found()) == NAME
    assert await chat.say("Fine, it's Ada", found(("name", "Ada", "Ada"))) == AGE
    assert await chat.state() == {"form": form({"name": "Ada"}, asking="age")}


async def test_an_invalid_field_gets_one_correction_with_the_rule_and_valid_fields_are_kept() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    first = found(("name", "Ada", "Ada"), ("age", "347", 347))
    corrected = found(("name", "Ada", "Ada"))
    assert await chat.say("Ada, 347 years young", first, corrected) == AGE
    correction = refused(AGE_RULE)
    assert chat.requests()[-1] == [
        SYSTEM,
        f"assistant [direct]: {INTRO} {NAME}",
        "user: Ada, 347 years young",
        f"assistant [output]: {first}",
        f"user [correction]: {correction}",
    ]
    # The correction round is over: the count starts again for the user's next message.
    assert await chat.state() == {"form": form({"name": "Ada"}, asking="age")}
    _assert_value_never_echoed(chat, "347")
    assert await chat.transcript() == [
        "Interview | user: Hi",
        f"Interview | assistant [direct]: {INTRO} {NAME}",
        "Interview | user: Ada, 347 years young",
        f"Interview | assistant [output]: {first}",
        f"Interview | user [correction]: {correction}",
        f"Interview | assistant [direct]: {AGE}",
    ]
    # The correction round is forgotten with the rest: the next request starts from the question.
    assert await chat.say("36", found(("age", "36", 36))) == CITIES
    assert chat.requests()[-1] == [SYSTEM, f"assistant [direct]: {AGE}", "user: 36"]


async def test_an_invalid_value_repeated_is_explained_to_the_user_and_its_question_asked() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    wrong = found(("age", "347", 347), ("cities", "Rome", ["Rome"]))
    reply = await chat.say("347, and I want to see Rome", wrong, wrong)
    assert reply == f"Sorry, age: input should be less than or equal to 120. {AGE}"
    assert len(chat.model.requests) == 4  # one correction only, then the user is asked
    # The age question goes unanswered once: counted, so a third ask would change course.
    assert await chat.state() == {
        "form": form({"name": "Ada", "cities": ["Rome"]}, asking="age"),
        "repair": {"unanswered_age": 1},
    }
    _assert_value_never_echoed(chat, "347")
    # The cities given with the wrong age are kept: once the age is known the dates come next.
    assert await chat.say("36", found(("age", "36", 36))) == DATES


async def test_a_cross_field_rule_broken_across_two_turns_is_explained() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    await chat.say("36", found(("age", "36", 36)))
    await chat.say("Nowhere special", found())
    assert await chat.say("I leave May 10 2027", found(("start", "May 10 2027", "2027-05-10"))) == DATES
    back = found(("end", "May 1 2027", "2027-05-01"))
    reply = await chat.say("I'm back May 1 2027", back, back)
    assert reply == f"Sorry, the end date must be after the start date. {DATES}"
    assert chat.requests()[-1][-1] == (f"user [correction]: {refused(DATE_RULE)}")
    assert (await chat.form()).known == {"name": "Ada", "age": 36, "start": "2027-05-10"}
    _assert_value_never_echoed(chat, "2027-05-01")
    done = await chat.say("Sorry, May 12 2027", found(("end", "May 12 2027", "2027-05-12")))
    assert done == "Planned: Ada, 36, 2027-05-10 to 2027-05-12, anywhere."


async def test_a_model_that_corrects_a_cross_field_value_after_the_rule_is_told() -> None:
    chat = Chat()
    await chat.say("I'm Ada, 36", found(("name", "Ada", "Ada"), ("age", "36", 36)))
    await chat.say("Rome", found(("cities", "Rome", ["Rome"])))
    # Both dates written, each read as the other (a date nobody wrote is dropped before any rule).
    wrong = found(("start", "2027-05-12", "2027-05-12"), ("end", "2027-05-10", "2027-05-10"))
    right = found(("start", "2027-05-10", "2027-05-10"), ("end", "2027-05-12", "2027-05-12"))
    done = await chat.say("2027-05-10 to 2027-05-12", wrong, right)
    assert done == "Planned: Ada, 36, 2027-05-10 to 2027-05-12, Rome."
    # The dates contradict each other and are asked for together: both go back, on one line.
    assert chat.requests()[-1][-1] == "user [correction]: " + refused(
        "start, end: " + DATE_RULE.removeprefix("end: ")
    )


def _assert_value_never_echoed(chat: Chat, value: str) -> None:
    """The refused value appears only where the user or the model wrote it, never in what code wrote."""
    for request in chat.model.requests:
        assert value not in request.system
        for message in request.messages:
            written_by_code = message.kind == "direct" or (
                message.role == "user" and message.kind is not None
            )
            if written_by_code:
                assert value not in message.content, message


# --- hooks a SlotStep offers ------------------------------------------------------------------------


class WeekTrip(Interview):
    """Plan the traveller's trip."""

    def acknowledge(self, values: Trip, accepted: Sequence[str]) -> str:
        return f"Thanks, {values.name}." if "name" in accepted else ""

    def phrase(self, question: Ask, values: Trip) -> str:
        if question.key == "start" and values.start and not values.end:
            return f"You leave on {values.start}. When do you come back?"
        return question.question

    def on_complete(self, values: Trip) -> Outcome:
        assert values.start and values.end
        if (values.end - values.start).days > 7:
            self.forget("start", "end")
            return direct(f"At most a week, please. {DATES}")
        return super().on_complete(values)


class WeekFlow(Flow):
    name = "week"
    steps = [WeekTrip, Planned]


async def test_acknowledge_and_phrase_shape_the_reply_around_the_question() -> None:
    chat = Chat(WeekFlow)
    assert await chat.say("Hi, I'm Ada", found(("name", "Ada", "Ada"))) == f"{INTRO}\n\nThanks, Ada. {AGE}"
    await chat.say("36", found(("age", "36", 36)))
    await chat.say("Rome", found(("cities", "Rome", ["Rome"])))
    reply = await chat.say("From 2027-05-10", found(("start", "2027-05-10", "2027-05-10")))
    assert reply == "You leave on 2027-05-10. When do you come back?"


async def test_an_answer_to_the_first_words_is_a_paragraph_after_the_intro() -> None:
    chat = Chat(WeekFlow)
    # The intro, then what answers the user's words: two paragraphs, not one run of sentences.
    reply = await chat.say("Hi, I'm Ada", found(("name", "Ada", "Ada")))
    assert reply == f"{INTRO}\n\nThanks, Ada. {AGE}"
    assert await chat.say("36", found(("age", "36", 36))) == CITIES
    assert await chat.transcript() == [
        "WeekTrip | user: Hi, I'm Ada",
        f"WeekTrip | assistant [direct]: {INTRO}\n\nThanks, Ada. {AGE}",
        "WeekTrip | user: 36",
        f"WeekTrip | assistant [direct]: {CITIES}",
    ]
    # The model reads the first reply as one line, as it did before the paragraph.
    assert chat.requests()[1] == [SYSTEM, f"assistant [direct]: {INTRO} Thanks, Ada. {AGE}", "user: 36"]
    # With nothing to answer, the intro and the question stay one paragraph.
    other = Chat(WeekFlow)
    assert await other.say("Hi", found()) == f"{INTRO} {NAME}"


async def test_on_complete_may_forget_fields_and_their_question_is_asked_again() -> None:
    chat = Chat(WeekFlow)
    await chat.say("Hi", found())
    await chat.say("Ada, 36", found(("name", "Ada", "Ada"), ("age", "36", 36)))
    await chat.say("No idea", found())
    dates = found(("start", "2027-05-01", "2027-05-01"), ("end", "2027-05-30", "2027-05-30"))
    assert await chat.say("2027-05-01 to 2027-05-30", dates) == f"At most a week, please. {DATES}"
    assert await chat.state("WeekTrip") == {"form": form({"name": "Ada", "age": 36}, declined=["cities"])}
    dates = found(("start", "2027-05-01", "2027-05-01"), ("end", "2027-05-05", "2027-05-05"))
    done = await chat.say("Then 2027-05-01 to 2027-05-05", dates)
    assert done == "Planned: Ada, 36, 2027-05-01 to 2027-05-05, anywhere."


class Stop(BaseModel):
    """A trip being planned, or the wish to stop."""

    name: str | None = Field(None, description="The traveller's first name")
    city: str | None = Field(None, description="The city to visit")
    stop: bool | None = Field(None, description="true when they want to stop")


class Counted(SlotStep):
    """Plan the traveller's trip."""

    slots = Stop
    intro = INTRO
    questions = [ask(NAME, "name"), ask("Which city?", "city")]

    # Hooks of Step that stay the author's: the prompt (the reading rules follow it on their own),
    # and the step's own state keys beside the form.
    def prompt(self) -> str:
        return f"Plan the trip of traveller number {self.state.get('turns', 0) + 1}."

    def on_reading(self, values: Stop, accepted: Sequence[str]) -> Outcome | None:
        self.state["turns"] = self.state.get("turns", 0) + 1
        if "stop" in accepted and values.stop:
            return direct_to(Planned, "Stopped: nothing was planned.")
        return None

    async def on_complete(self, values: Stop) -> Outcome:
        summary = await self.summarise(values)
        return direct_to(Planned, summary)

    async def summarise(self, values: Stop) -> str:
        return f"{values.name} goes to {values.city}."


class CountedFlow(Flow):
    name = "counted"
    steps = [Counted, Planned]


async def test_the_prompt_and_the_state_beside_the_form_are_the_authors() -> None:
    chat = Chat(CountedFlow)
    assert await chat.say("Hi", found()) == f"{INTRO} {NAME}"
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == "Which city?"
    assert await chat.state("Counted") == {"form": form({"name": "Ada"}, asking="city"), "turns": 2}
    # prompt() is the author's, and the reading rules still follow it.
    assert [request.system for request in chat.model.requests] == [
        f"Plan the trip of traveller number 1.\n\n{EXTRACT_RULES}",
        f"Plan the trip of traveller number 2.\n\n{EXTRACT_RULES}",
    ]
    # An async on_complete is awaited.
    assert await chat.say("Rome", found(("city", "Rome", "Rome"))) == "Ada goes to Rome."
    assert await chat.state("Counted") == {"form": form({"name": "Ada", "city": "Rome"}), "turns": 3}


async def test_on_reading_acts_on_what_was_said_whatever_question_is_pending() -> None:
    chat = Chat(CountedFlow)
    await chat.say("Hi", found())
    reply = await chat.say(
        "Rome, but actually let's stop", found(("city", "Rome", "Rome"), ("stop", "stop", True))
    )
    assert reply == "Stopped: nothing was planned."
    session = await chat.session()
    assert session.current_step == "Planned"
    # What was said is kept in the form, and the question it had asked is still the one open.
    assert session.state_of("Counted") == {
        "form": form({"city": "Rome", "stop": True}, asking="name"),
        "turns": 2,
    }
    assert await chat.transcript() == [
        "Counted | user: Hi",
        f"Counted | assistant [direct]: {INTRO} {NAME}",
        "Counted | user: Rome, but actually let's stop",
        "Planned | assistant [direct]: Stopped: nothing was planned.",
    ]


async def test_the_form_occupies_only_on_response_and_parse_output_of_steps_hooks() -> None:
    assert TripFlow.spec().steps["Interview"].overrides == {"on_response"}
    assert CountedFlow.spec().steps["Counted"].overrides == {"on_response", "prompt"}
    assert SlotStep.parse_output is not Step.parse_output
    assert TripFlow.spec().steps["Interview"].instructions == EXTRACT_RULES


class Refusing(Interview):
    """Plan the traveller's trip."""

    # The age rule refuses what the user said, not how it was read: no correction round.
    max_corrections = 0


class RefusingFlow(Flow):
    name = "refusing"
    steps = [Refusing, Planned]


async def test_without_corrections_a_refused_field_goes_straight_to_the_user() -> None:
    chat = Chat(RefusingFlow)
    await chat.say("Hi, I'm Ada", found(("name", "Ada", "Ada")))
    reply = await chat.say("I am 347", found(("age", "347", 347)))
    assert reply == f"Sorry, age: input should be less than or equal to 120. {AGE}"
    assert await chat.state("Refusing") == {
        "form": form({"name": "Ada"}, asking="age"),
        "repair": {"unanswered_age": 1},
    }


# --- grounding in a conversation ---------------------------------------------------------------------


async def test_an_item_whose_quote_the_user_never_said_is_dropped() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    invented = found(("name", "Ada", "Ada"), ("age", "I'm 30", 30))
    assert await chat.say("Ada", invented) == AGE
    assert (await chat.form()).known == {"name": "Ada"}


async def test_an_item_whose_number_is_not_written_in_the_quote_is_dropped() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    # Its numbers were written but not kept: they get a second look, which reads nothing more.
    assert await chat.say("2,5,8", found(("age", "2,5,8", 258)), found()) == AGE
    assert (await chat.form()).known == {"name": "Ada"}


async def test_a_quote_is_matched_word_for_word_and_list_items_of_two_readings_are_joined() -> None:
    chat = Chat()
    await chat.say("Ada, 36", found(("name", "Ada", "Ada"), ("age", "36", 36)))
    said = "Rome, maybe Paris, and Venice"
    reading = found(
        ("cities", "Rome Venice", ["Rome", "Venice"]),  # not as written, but every word is the user's
        ("cities", "Paris", ["Paris"]),
        ("cities", "Milan", ["Milan"]),  # never said
    )
    assert await chat.say(said, reading) == DATES
    assert (await chat.form()).known["cities"] == ["Rome", "Venice", "Paris"]


async def test_a_greeting_read_as_values_keeps_none_of_them() -> None:
    chat = Chat()
    invented = found(("name", "John", "John"), ("age", "30", 30), ("start", "tomorrow", "2027-01-01"))
    assert await chat.say("Hello there", invented) == f"{INTRO} {NAME}"
    assert await chat.state() == {"form": form({}, asking="name")}


# --- answers that cannot be read ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "Hello! How can I help?",
        '{"name": "Ada"}',
        '{"found": {"field": "name", "quote": "Ada", "value": "Ada"}}',
        '{"found": ["Ada"]}',
        '{"found": [{"field": "email", "quote": "Ada", "value": "ada@example.com"}]}',
        '["found"]',
    ],
)
async def test_an_answer_that_is_not_a_reading_gets_a_correction_then_a_good_one_works(bad: str) -> None:
    chat = Chat()
    await chat.say("Hi", found())
    assert await chat.say("Ada", bad, found(("name", "Ada", "Ada"))) == AGE
    assert chat.requests()[-1] == [
        SYSTEM,
        f"assistant [direct]: {INTRO} {NAME}",
        "user: Ada",
        f"assistant [correction]: {bad}",
        f"user [correction]: {FORMAT_CORRECTION}",
    ]
    # The refused answer and its correction were only shown to the model, not kept.
    assert await chat.transcript() == [
        "Interview | user: Hi",
        f"Interview | assistant [direct]: {INTRO} {NAME}",
        "Interview | user: Ada",
        f"Interview | assistant [direct]: {AGE}",
    ]


async def test_a_field_name_that_is_not_a_string_gets_a_correction() -> None:
    # BUG: `item.get("field") not in cls.slots.model_fields` raises TypeError for a list or an object,
    # which is not a ValueError, so the turn fails as an internal error instead of being corrected.
    chat = Chat()
    await chat.say("Hi", found())
    bad = '{"found": [{"field": ["name"], "quote": "Ada", "value": "Ada"}]}'
    assert await chat.say("Ada", bad, found(("name", "Ada", "Ada"))) == AGE
    assert chat.requests()[-1][-1] == f"user [correction]: {FORMAT_CORRECTION}"


async def test_an_answer_in_a_code_fence_is_read() -> None:
    chat = Chat()
    fenced = f"```json\n{found(('name', 'Ada', 'Ada'))}\n```"
    assert await chat.say("Ada here", fenced) == f"{INTRO} {AGE}"


async def test_blank_values_are_no_answer() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    blank = json.dumps(
        {
            "found": [
                {"field": "name", "quote": "Ada", "value": "  "},
                {"field": "age", "quote": "Ada", "value": None},
            ]
        }
    )
    assert await chat.say("Ada", blank) == NAME
    assert (await chat.form()).known == {}


async def test_attempts_exhausted_fail_the_turn_and_leave_the_stored_session_as_it_was() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    before = await chat.session()
    transcript = await chat.transcript()
    chat.model.extend(["no JSON", '{"name": "Ada"}', '{"found": "Ada"}'])
    result = await chat.engine.run("trip", "Ada", chat.session_id)
    assert not result.ok and result.error is not None
    assert result.error.is_a(AttemptsExhausted)
    assert result.usage.model_calls == 3 and chat.model.remaining == 0
    after = await chat.session()
    assert session_to_json(after) == session_to_json(before)
    assert await chat.transcript() == transcript
    # The next turn starts from the same place, with the same request as a first try would have.
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == AGE
    assert chat.requests()[-1] == [SYSTEM, f"assistant [direct]: {INTRO} {NAME}", "user: Ada"]


# --- memory ---------------------------------------------------------------------------------------------


async def test_memory_holds_only_the_last_question_and_each_request_only_the_question_and_answer() -> None:
    chat = Chat()
    assert "history" not in TripFlow.spec().steps["Interview"].overrides  # the request shows all of memory
    turns = [
        ("Hi", found(), f"{INTRO} {NAME}"),
        ("Ada", found(("name", "Ada", "Ada")), AGE),
        ("41", found(("age", "41", 41)), CITIES),
        ("Oslo", found(("cities", "Oslo", ["Oslo"])), DATES),
        ("From 2027-05-10", found(("start", "2027-05-10", "2027-05-10")), DATES),
    ]
    previous: str | None = None
    for said, reading, question in turns:
        assert await chat.say(said, reading) == question
        memory = (await chat.session()).memory["Interview"].messages
        assert [(m.role, m.kind, m.content) for m in memory] == [("assistant", "direct", question)]
        shown = [f"assistant [direct]: {previous}"] if previous else []
        assert chat.requests()[-1] == [SYSTEM, *shown, f"user: {said}"]
        previous = question
    assert len(await chat.transcript()) == 2 * len(turns)


# --- merging through the runner ---------------------------------------------------------------


async def test_changing_both_dates_with_a_wrong_age_only_the_age_is_refused() -> None:
    # BUG (same as above, through the runner): the model is told its correct new start broke the date rule.
    chat = Chat()
    await chat.say("Hi", found())
    dates = found(
        ("name", "Ada", "Ada"), ("start", "2027-05-10", "2027-05-10"), ("end", "2027-05-12", "2027-05-12")
    )
    assert await chat.say("Ada, 2027-05-10 to 2027-05-12", dates) == AGE
    moved = found(
        ("start", "2027-06-01", "2027-06-01"), ("end", "2027-06-05", "2027-06-05"), ("age", "347", 347)
    )
    without_age = found(("start", "2027-06-01", "2027-06-01"), ("end", "2027-06-05", "2027-06-05"))
    assert await chat.say("No: 2027-06-01 to 2027-06-05. Age 347", moved, without_age) == AGE
    assert chat.requests()[-1][-1] == (f"user [correction]: {refused(AGE_RULE)}")
    assert (await chat.form()).known == {"name": "Ada", "start": "2027-06-01", "end": "2027-06-05"}


# --- the answer format and the standing instructions -------------------------------------------


async def test_the_step_sends_the_reading_schema_as_its_strict_output() -> None:
    spec = TripFlow.spec().steps["Interview"]
    assert Interview.output is not None and spec.output is not None
    assert spec.output.name == "TripReading" and spec.output.strict
    assert spec.output.schema == strict_variant(json_schema(Interview.output))
    assert "terminate_session" not in spec.tools
    chat = Chat()
    await chat.say("Hi", found())
    assert chat.model.requests[0].output == spec.output
    assert chat.model.requests[0].tools == ()


# --- class-definition errors ---------------------------------------------------------------------------


def test_a_slot_step_may_not_set_its_own_output() -> None:
    class Other(BaseModel):
        name: str

    with pytest.raises(
        FlowDefinitionError, match=r"SlotStep Bad: do not set `output`; .*reading_of\(slots\)"
    ):

        class Bad(SlotStep):
            slots = Trip
            output = Other

    class WithOutput:
        output = Other

    with pytest.raises(FlowDefinitionError, match="do not set `output`"):

        class Mixed(WithOutput, SlotStep):  # type: ignore[misc]
            slots = Trip


def test_a_subclass_with_other_slots_gets_their_reading_format() -> None:
    class Name(BaseModel):
        """Just a name."""

        name: str | None = None

    class Renamed(Interview):
        slots = Name
        questions = [ask(NAME, "name")]

    assert Interview.output is reading_of(Trip)
    assert Renamed.output is reading_of(Name) and Renamed.output.__name__ == "NameReading"


def test_a_slots_field_without_a_default_is_refused() -> None:
    class Strict(BaseModel):
        name: str
        age: int | None

    with pytest.raises(FlowDefinitionError, match=r"must default to None .*name, age does not"):

        class Bad(SlotStep):
            slots = Strict


def test_a_slots_field_with_a_default_other_than_none_is_refused() -> None:
    # BUG: the check is `is_required()`, so a default of 0 (or a default_factory) passes although the
    # rule, its message and the docstring say every field must default to None.
    class Counted(BaseModel):
        nights: int = 0

    with pytest.raises(FlowDefinitionError, match="must default to None"):

        class Bad(SlotStep):
            slots = Counted


def test_slots_that_is_not_a_pydantic_model_is_refused() -> None:
    with pytest.raises(FlowDefinitionError, match="`slots` must be a Pydantic model class"):

        class Bad(SlotStep):
            slots = dict  # type: ignore[assignment]


def test_a_question_naming_an_unknown_field_is_refused() -> None:
    with pytest.raises(FlowDefinitionError, match=r"ask\('Your email\?'\) names email, not a field of Trip"):

        class Bad(SlotStep):
            slots = Trip
            questions = [ask(NAME, "name"), ask("Your email?", "email")]


def test_a_question_naming_an_unknown_field_in_a_subclass_is_refused() -> None:
    # BUG: the checks run only when `slots` is in the class's own __dict__; a subclass that inherits
    # `slots` and changes `questions` is not checked, and its bogus question would be asked forever.
    class Base(SlotStep):
        slots = Trip
        questions = [ask(NAME, "name")]

    with pytest.raises(FlowDefinitionError, match="names email"):

        class Bad(Base):
            questions = [ask("Your email?", "email")]


def test_ask_needs_fields_and_a_question() -> None:
    with pytest.raises(FlowDefinitionError, match="names no field of the slots model"):
        ask(NAME)
    with pytest.raises(FlowDefinitionError, match="needs the question's text"):
        ask("   ", "name")
    question = ask("  Dates?  ", "start", "end", optional=True)
    assert (question.question, question.fields, question.optional, question.key) == (
        "Dates?",
        ("start", "end"),
        True,
        "start",
    )


def test_an_abstract_slot_step_without_slots_is_allowed() -> None:
    class Base(SlotStep):
        intro = "Hello."

    assert Base.output is None


async def test_a_session_stored_before_the_form_keeps_its_answers() -> None:
    # An earlier SlotStep kept its answers under keys of their own; a conversation in progress then
    # goes on from them, and the next change keeps them as the one form.
    chat = Chat()
    await chat.say("Hi", found())
    session = await chat.session()
    session.states["Interview"] = {
        "slots": {"name": "Ada"},
        "declined": [],
        "asking": "age",
        "introduced": True,
        "mine": 7,
    }
    await chat.engine.store.save(session, expected_revision=session.revision)
    reply = await chat.say("I am 36", found(("age", "36", 36)))
    assert reply == CITIES
    assert await chat.state() == {
        "form": form({"name": "Ada", "age": 36}, asking="cities"),
        "mine": 7,
    }


# --- going ahead with what is known -------------------------------------------------------------------


class Request(Trip):
    """A trip being planned, and a request to plan it now."""

    go: Literal["plan"] | None = Field(None, description="plan when the traveller asks to plan it now")


class Hurried(Interview):
    slots = Request
    go_ahead = "go"


class HurriedFlow(Flow):
    name = "hurried"
    steps = [Hurried, Planned]


async def test_going_ahead_skips_the_optional_questions_and_asks_only_the_required_ones() -> None:
    chat = Chat(HurriedFlow)
    await chat.say("Hi", found())
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == AGE
    # Cities is optional: asked to go ahead, the form asks what it must know and no more.
    reply = await chat.say("36, and just plan it", found(("age", "36", 36), ("go", "plan it", "plan")))
    assert reply == DATES
    assert await chat.state("Hurried") == {
        "form": form({"name": "Ada", "age": 36}, declined=["cities"], asking="start")
    }
    reply = await chat.say(
        "June 1 to June 9 2027",
        found(("start", "June 1", "2027-06-01"), ("end", "June 9 2027", "2027-06-09")),
    )
    assert reply == "Planned: Ada, 36, 2027-06-01 to 2027-06-09, anywhere."
    session = await chat.session()
    assert session.current_step == "Planned"
    assert "go" not in session.state_of("Hurried")["form"]["known"]


async def test_going_ahead_with_every_required_answer_known_completes_at_once() -> None:
    chat = Chat(HurriedFlow)
    await chat.say("Hi", found())
    reply = await chat.say(
        "Ada, 36, June 1 to June 9 2027; go ahead",
        found(
            ("name", "Ada", "Ada"), ("age", "36", 36), ("start", "June 1", "2027-06-01"),
            ("end", "June 9 2027", "2027-06-09"), ("go", "go ahead", "plan"),
        ),
    )  # fmt: skip
    assert reply == "Planned: Ada, 36, 2027-06-01 to 2027-06-09, anywhere."


class Abroad(Trip):
    """A trip, whether it goes abroad, and a request to plan it now."""

    abroad: Annotated[bool | None, Said(yes=("yes", "abroad", "overseas"), no=("no", "not"))] = None
    go: Annotated[Literal["plan"] | None, Said(options={"plan": ("plan it", "go ahead")})] = None


class AbroadInterview(Interview):
    slots = Abroad
    go_ahead = "go"
    questions = [*Interview.questions, ask("Going abroad?", "abroad", optional=True)]


class AbroadFlow(Flow):
    name = "abroad"
    steps = [AbroadInterview, Planned]


async def test_what_two_readings_left_out_of_a_yes_or_no_or_the_go_ahead_the_words_tell() -> None:
    chat = Chat(AbroadFlow)
    await chat.say("Hi", found())
    said = "I'm Ada, 36, going overseas to Rome, from 2027-05-10 to 2027-05-14, please plan it"
    first = found(("name", "Ada", "Ada"), ("cities", "Rome", ["Rome"]))
    second = found(
        ("age", "36", 36), ("start", "2027-05-10", "2027-05-10"), ("end", "2027-05-14", "2027-05-14")
    )
    # "overseas" says abroad and "plan it" the go-ahead: with every required answer, it is planned.
    assert await chat.say(said, first, second) == "Planned: Ada, 36, 2027-05-10 to 2027-05-14, Rome."
    known = (await chat.session()).state_of("AbroadInterview")["form"]["known"]
    assert known["abroad"] is True and "go" not in known
    # A denial is left to a reading; the words alone count only for what a second look left out.
    chat = Chat(AbroadFlow)
    await chat.say("Hi", found())
    said = "I'm Ada, 36, not going overseas"
    assert await chat.say(said, found(("name", "Ada", "Ada")), found(("age", "36", 36))) == CITIES
    assert "abroad" not in (await chat.form("AbroadInterview")).known
    chat = Chat(AbroadFlow)
    await chat.say("Hi", found())
    assert await chat.say("Ada, going abroad", found(("name", "Ada", "Ada")), found()) == AGE
    assert (await chat.form("AbroadInterview")).known == {"name": "Ada", "abroad": True}


def test_go_ahead_must_name_a_field_no_question_asks() -> None:
    with pytest.raises(FlowDefinitionError, match="go_ahead names 'hurry', not a field of Request"):
        type("Bad", (Interview,), {"slots": Request, "go_ahead": "hurry"})
    with pytest.raises(FlowDefinitionError, match="go_ahead 'age' is a request, not a field a question asks"):
        type("Bad", (Interview,), {"slots": Request, "go_ahead": "age"})


class Leaving(Trip):
    """A trip being planned, or a traveller leaving."""

    bye: Annotated[Literal["bye"] | None, Said(options={"bye": ("goodbye", "that's all")})] = None


class Leavable(Interview):
    slots = Leaving
    goodbye = "bye"


class Ended(TerminateStep):
    """The end."""


class LeavableFlow(Flow):
    name = "leavable"
    steps = [Leavable, Planned, Ended]


async def test_a_goodbye_ends_the_conversation_whatever_question_is_pending_and_needs_its_words() -> None:
    chat = Chat(LeavableFlow)
    await chat.say("Hi", found())
    # "hello" read as a goodbye holds none of its words: the question is asked again.
    assert await chat.say("hello", found(("bye", "hello", "bye"))) == NAME
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == AGE
    # The reading, then the TerminateStep's own goodbye.
    chat.model.extend([found(("bye", "that's all", "bye")), "Goodbye, Ada!"])
    result = await chat.engine.run("leavable", "ok that's all, thanks", chat.session_id)
    assert chat.model.remaining == 0 and result.completed and result.step == "Ended"
    assert result.message == "Goodbye, Ada!"
    session = await chat.session()
    assert session.state_of("Leavable") == {"form": form({"name": "Ada"}, asking=None)}


async def test_the_words_of_a_goodbye_end_a_message_the_reading_kept_nothing_of() -> None:
    chat = Chat(LeavableFlow)
    await chat.say("Hi", found())
    # A reading with something in it is not overruled: "Ada, that's all" gives a name (the words of
    # the goodbye left out get a second look, which here reads nothing more).
    assert await chat.say("Ada, that's all", found(("name", "Ada", "Ada")), found()) == AGE
    assert chat.model.requests[-1].messages[-1].content == "that's all"
    # Nothing read (or nothing kept) but the words of the goodbye are there: it ends.
    chat.model.extend([found(("age", "many", 99)), "Goodbye, Ada!"])
    result = await chat.engine.run("leavable", "thanks, that's all", chat.session_id)
    assert chat.model.remaining == 0 and result.completed and result.step == "Ended"
    # Nothing read and no goodbye's words: the question again.
    chat = Chat(LeavableFlow)
    await chat.say("Hi", found())
    assert await chat.say("thanks", found()) == NAME


async def test_the_parts_of_a_long_message_the_reading_left_out_get_one_second_look() -> None:
    chat = Chat()
    await chat.say("Hi", found())
    # Two of five parts read: the ones holding numbers no kept value holds go back to the model,
    # once; what it reads then is merged with what was kept.
    said = "I'm Ada, 36, going to Rome, from 2027-05-10 to 2027-05-14"
    first = found(("name", "Ada", "Ada"), ("cities", "Rome", ["Rome"]))
    second = found(
        ("age", "36", 36), ("start", "2027-05-10", "2027-05-10"), ("end", "2027-05-14", "2027-05-14")
    )
    assert await chat.say(said, first, second) == "Planned: Ada, 36, 2027-05-10 to 2027-05-14, Rome."
    # The second look is a message of its own: the model is not shown its first answer, which it
    # would give again.
    [again] = chat.model.requests[-1].messages
    assert again.role == "user" and again.content.splitlines() == [
        "I'm Ada, 36",  # a part without a letter stays with the one before it
        "from 2027-05-10 to 2027-05-14",
    ]
    # What it reads there is still checked against the whole message: a quote found in neither
    # the parts nor the message is dropped, and the form keeps no trace of the second look.
    chat = Chat()
    await chat.say("Hi", found())
    invented = found(("age", "36", 36), ("start", "May 11th", "2027-05-11"))
    assert await chat.say(said, first, invented) == DATES
    form = await chat.form()
    assert form.known == {"name": "Ada", "cities": ["Rome"], "age": 36}
    assert set(form.model_dump()) == {"known", "declined", "asking", "introduced"}
    # Only once per message: still left out after the second look, the next question is asked.
    chat = Chat()
    await chat.say("Hi", found())
    assert await chat.say("I'm Ada; age 36", found(("name", "Ada", "Ada")), found()) == AGE
    # A message read whole gets no second look.
    chat = Chat()
    await chat.say("Hi", found())
    assert await chat.say("I'm Ada and 36", found(("name", "Ada", "Ada"), ("age", "36", 36))) == CITIES


def test_a_slot_step_with_a_goodbye_needs_a_terminate_step_in_its_flow() -> None:
    flow = type("NoEnd", (Flow,), {"name": "noend", "steps": [Leavable, Planned]})
    with pytest.raises(FlowDefinitionError, match="a reading of 'bye' ends the conversation, but the flow"):
        flow.spec()
