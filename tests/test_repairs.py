"""Repair patterns: what a flow does when the user leaves the path (``picoflow.repairs``).

Whole conversations through the runner: a ``SlotStep`` whose slots hold a ``request`` field of
repair options, borne out by declared words in English and Spanish, and a step with tools that
return ``repair(...)``. Each asserts the replies, the ``pattern`` events, the model calls and the
final state.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from picoflow import (
    Flow,
    FlowDefinitionError,
    FlowEngine,
    Handoff,
    Outcome,
    Repairs,
    RepairTexts,
    Said,
    SlotStep,
    Step,
    ask,
    direct,
    direct_to,
    repair,
    tool,
)
from picoflow.events import PatternFired, TurnEvent
from picoflow.models import ScriptedModel, ToolCall

NAME = "What is your name?"
CITY = "Which city?"
NIGHTS = "How many nights?"

# The words that say each repair, per language: the application's, never the framework's.
REQUEST_WORDS = (
    Said(
        options={
            "cancel": ("forget it", "start over", "never mind"),
            "repeat": ("say that again", "sorry what", "repeat"),
            "skip": ("rather not say", "skip"),
            "handoff": ("a person", "a human", "an agent"),
        },
        locale="en",
    ),
    Said(
        options={
            "cancel": ("olvídalo", "empezar de nuevo", "da igual"),
            "repeat": ("repite", "cómo dices"),
            "skip": ("prefiero no decirlo", "paso"),
            "handoff": ("una persona", "un agente"),
        },
        locale="es",
    ),
)
ANSWERS = (Said(yes=("yes", "sure"), no=("no", "keep")), Said(yes=("sí", "claro"), no=("no", "sigamos")))


class Booking(BaseModel):
    """What the guest said."""

    name: str | None = None
    city: str | None = None
    nights: int | None = Field(None, gt=0, le=30)
    request: Annotated[Literal["cancel", "repeat", "skip", "handoff"] | None, *REQUEST_WORDS] = Field(
        None, description="what the guest asks of the conversation itself"
    )


class Desk(SlotStep):
    """Take a booking."""

    slots = Booking
    questions = [
        ask(NAME, "name"),
        ask(CITY, "city", optional=True),
        ask(NIGHTS, "nights", example="3 nights"),
    ]
    repairs_from = "request"
    accept = ANSWERS[0]
    locales = ("en", "es")

    def on_complete(self, values: Booking) -> Outcome:
        return direct_to(Person, f"Booked {values.nights} nights for {values.name}.")


class Person(Handoff):
    """A person takes over."""

    reply = "Someone will help you shortly."


class DeskFlow(Flow):
    name = "desk"
    steps = [Desk, Person]


def found(*items: tuple[str, str, Any]) -> str:
    return json.dumps({"found": [{"field": f, "quote": q, "value": v} for f, q, v in items]})


class Chat:
    def __init__(self, flow: type[Flow] = DeskFlow) -> None:
        self.flow = flow
        self.model = ScriptedModel([], grounding="small")
        self.engine = FlowEngine([flow], model=self.model)
        self.session_id: str | None = None
        self.patterns: list[tuple[str, str, str | None]] = []

    async def say(self, text: str, *answers: str | ToolCall) -> str:
        self.model.extend(answers)

        def heard(event: TurnEvent) -> None:
            if isinstance(event, PatternFired):
                self.patterns.append((event.step, event.pattern, event.detail))

        result = await self.engine.run(self.flow.name, text, self.session_id, on_event=heard)
        assert result.ok, result.error
        assert self.model.remaining == 0
        self.session_id = result.session_id
        return result.message

    async def state(self, step: str = "Desk") -> dict[str, Any]:
        session = await self.engine.store.load(self.session_id or "")
        assert session is not None
        return dict(session.state_of(step))

    async def step(self) -> str:
        session = await self.engine.store.load(self.session_id or "")
        assert session is not None
        return session.current_step


async def test_repeat_sends_the_last_message_again_word_for_word() -> None:
    chat = Chat()
    assert await chat.say("hi", found()) == NAME
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == CITY
    assert await chat.say("sorry what?", found(("request", "sorry what", "repeat"))) == CITY
    assert chat.patterns == [("Desk", "repeat", None)]
    # In Spanish, by its own words; and a small model that reads nothing gets it from bare words.
    # (the small model's profile looks twice at a message whose declared words it did not read)
    assert await chat.say("¿cómo dices?", found(), found()) == CITY
    assert chat.patterns[-1] == ("Desk", "repeat", None)


async def test_an_answer_is_an_answer_even_with_repair_words_in_it() -> None:
    chat = Chat()
    await chat.say("hi", found())
    reply = await chat.say(
        "Ada, sorry, what was it again?", found(("name", "Ada", "Ada"), ("request", "what was it", "repeat"))
    )
    assert reply == CITY and chat.patterns == []


async def test_cancel_asks_first_when_it_would_throw_answers_away_then_starts_over() -> None:
    chat = Chat()
    await chat.say("hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    confirm = await chat.say("forget it", found(("request", "forget it", "cancel")))
    assert (
        confirm == "Shall I drop everything you told me so far (name) and start over? Please say yes or no."
    )
    assert (await chat.state())["form"]["known"] == {"name": "Ada"}
    assert await chat.say("yes", found()) == f"All right, I have dropped that. {NAME}"
    assert [pattern for _, pattern, _ in chat.patterns] == ["cancel", "cancel"]
    assert (await chat.state())["form"]["known"] == {}
    assert await chat.say("Bob", found(("name", "Bob", "Bob"))) == CITY


async def test_a_cancel_not_confirmed_goes_on_where_it_was() -> None:
    chat = Chat()
    await chat.say("hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    await chat.say("olvídalo", found(("request", "olvídalo", "cancel")))
    assert await chat.say("no, keep going", found()) == f"Fine, let's go on. {CITY}"
    assert (await chat.state())["form"]["known"] == {"name": "Ada"}
    # A reply that answers instead of confirming is an answer.
    await chat.say("forget it", found(("request", "forget it", "cancel")))
    assert await chat.say("Lisbon", found(("city", "Lisbon", "Lisbon"))) == NIGHTS
    assert (await chat.state())["form"]["known"] == {"name": "Ada", "city": "Lisbon"}


async def test_cancel_with_nothing_given_starts_over_at_once() -> None:
    chat = Chat()
    await chat.say("hi", found())
    assert await chat.say("never mind", found(("request", "never mind", "cancel"))) == (
        f"All right, I have dropped that. {NAME}"
    )


async def test_a_required_question_skipped_is_asked_once_more_then_handed_off() -> None:
    chat = Chat()
    await chat.say("hi", found())
    assert await chat.say("I'd rather not say", found(("request", "rather not say", "skip"))) == (
        f"I need this one to go on. {NAME}"
    )
    said = found(("request", "prefiero no decirlo", "skip"))
    reply = await chat.say("prefiero no decirlo", said)
    assert await chat.step() == "Person" and reply == "Someone will help you shortly."
    assert [pattern for _, pattern, _ in chat.patterns] == ["skip", "skip", "handoff"]
    assert (await chat.state("Person"))["reason"] == "name"


async def test_an_optional_question_skipped_is_left_and_the_next_asked() -> None:
    chat = Chat()
    await chat.say("hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    assert await chat.say("skip", found(("request", "skip", "skip"))) == NIGHTS
    assert (await chat.state())["form"]["declined"] == ["city"]


async def test_a_question_twice_without_progress_is_not_asked_a_third_time_in_the_same_words() -> None:
    chat = Chat()
    await chat.say("hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    await chat.say("Lisbon", found(("city", "Lisbon", "Lisbon")))
    wrong = found(("nights", "forty", 40))
    assert (
        await chat.say("forty", wrong, wrong)
        == f"Sorry, nights: input should be less than or equal to 30. {NIGHTS}"
    )
    # Asked twice, unanswered twice: the third time says what went wrong and gives an example.
    third = await chat.say("hmm", found())
    assert third == f"I could not use that answer. {NIGHTS} For example: 3 nights"
    assert chat.patterns == [("Desk", "no_progress", None)]
    # The count starts over: a refused value is explained as ever, then the change of course says why.
    refusal = "Sorry, nights: input should be less than or equal to 30."
    assert await chat.say("forty!", wrong, wrong) == f"{refusal} {NIGHTS}"
    assert await chat.say("forty!!", wrong, wrong) == (
        f"I could not use that answer. {refusal} {NIGHTS} For example: 3 nights"
    )
    assert chat.patterns[-1] == ("Desk", "no_progress", refusal)
    assert await chat.say("3", found(("nights", "3", 3))) == "Booked 3 nights for Ada."


async def test_a_handoff_asked_for_goes_to_the_step_that_awaits_a_human() -> None:
    chat = Chat()
    await chat.say("hi", found())
    said = found(("request", "a person", "handoff"))
    assert await chat.say("I want to talk to a person", said) == "Someone will help you shortly."
    assert await chat.step() == "Person" and chat.patterns == [("Desk", "handoff", None)]
    assert (await chat.state("Person"))["reason"] == "asked for a person"


class Counter(Step):
    """Answer questions about orders; refuse the rest."""

    repairs = Repairs(
        max_out_of_scope=1, texts={"": RepairTexts(out_of_scope="Only orders here. {question}")}
    )

    @tool
    def elsewhere(self) -> Outcome:
        """The user asks for something this counter does not do."""
        return repair("out_of_scope")

    @tool
    def which(self) -> Outcome:
        """The user's choice could be one of two orders."""
        return repair("clarify", detail="which order", options=("#40004", "#40006"))


class CounterFlow(Flow):
    name = "counter"
    steps = [Counter, Person]


async def test_a_step_with_tools_returns_repairs_and_out_of_scope_twice_hands_off() -> None:
    chat = Chat(CounterFlow)
    assert await chat.say("hi", "Hello! Which order is it about?") == "Hello! Which order is it about?"
    assert await chat.say("the refunded one", ToolCall("which", {})) == (
        "Which one do you mean? 1. #40004 2. #40006"
    )
    # Out of scope: the fixed words, then what the user was asked before.
    assert await chat.say("book me a flight", ToolCall("elsewhere", {})) == (
        "Only orders here. Which one do you mean? 1. #40004 2. #40006"
    )
    # Again, in a row: past max_out_of_scope the session goes to a person.
    assert await chat.say("and a hotel?", ToolCall("elsewhere", {})) == "Someone will help you shortly."
    assert await chat.step() == "Person"
    assert chat.patterns == [
        ("Counter", "clarify", "which order"),
        ("Counter", "out_of_scope", None),
        ("Counter", "out_of_scope", None),
        ("Counter", "handoff", "out of scope, again"),
    ]
    assert (await chat.state("Person"))["reason"] == "out of scope, again"


async def test_a_pattern_switched_off_is_no_repair() -> None:
    class Quiet(Counter):
        name = "Counter"
        repairs = Repairs(off=frozenset({"out_of_scope"}))

    class QuietFlow(Flow):
        name = "counter"
        steps = [Quiet, Person]

    chat = Chat(QuietFlow)
    reply = await chat.say("book me a flight", ToolCall("elsewhere", {}), "I can only help with orders.")
    assert reply == "I can only help with orders." and chat.patterns == []


def test_repairs_are_checked_when_the_flow_is_built() -> None:
    class Bad(Flow):
        name = "bad"
        steps = [Counter]
        repairs = Repairs(cancel_to="Nowhere")

    with pytest.raises(FlowDefinitionError, match=r"Repairs\.cancel_to names 'Nowhere', not one of"):
        Bad.spec()
    with pytest.raises(ValueError, match="unknown repair pattern"):
        Repairs(off=frozenset({"shout"}))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a clarification offers at least two options"):
        repair("clarify", options=("one",))

    with pytest.raises(FlowDefinitionError, match="repairs_from names 'name'"):

        class Wrong(SlotStep):
            slots = Booking
            questions = [ask(NAME, "name")]
            repairs_from = "name"


def test_the_flow_graph_shows_where_repairs_lead() -> None:
    # The desk reads handoff and cancel from words; the counter's tools return out_of_scope and
    # clarify, which hand off past the policy's limits. A cancel in the start step stays there.
    desk = {(t.source, t.target, t.via) for t in DeskFlow.spec().transitions}
    assert ("Desk", "Person", "handoff") in desk
    assert not any(t.via == "cancel" for t in DeskFlow.spec().transitions)
    counter = {(t.source, t.target, t.via) for t in CounterFlow.spec().transitions}
    assert ("Counter", "Person", "handoff") in counter

    class Lookup(Step):
        """Look orders up."""

        @tool
        def drop(self) -> Outcome:
            """The user drops what they asked."""
            return repair("cancel")

    class Patient(Counter):
        name = "Counter"
        repairs = Repairs(max_out_of_scope=0, max_clarifications=0)

    class LookupFlow(Flow):
        name = "lookup"
        steps = [Patient, Lookup, Person]

    edges = {(t.source, t.target, t.via) for t in LookupFlow.spec().transitions}
    assert ("Lookup", "Counter", "cancel") in edges
    # Never past a limit of 0: the counter's out-of-scope and clarify do not lead to a person.
    assert not any(source == "Counter" and via == "handoff" for source, _, via in edges)


class Full(Desk):
    """Take a booking; this desk has no room for anyone."""

    name = "Desk"

    def on_complete(self, values: Booking) -> Outcome:
        return direct("No room is free for that. Shall I look at other dates?")


class FullFlow(Flow):
    name = "desk"
    steps = [Full, Person]


async def test_the_same_reply_from_code_is_not_sent_a_third_time_in_the_same_words() -> None:
    chat = Chat(FullFlow)
    await chat.say("Ada, 3 nights", found(("name", "Ada", "Ada"), ("nights", "3 nights", 3)))
    full = "No room is free for that. Shall I look at other dates?"
    assert await chat.say("Lisbon", found(("city", "Lisbon", "Lisbon"))) == full
    assert await chat.say("hmm", found()) == full  # nothing new: the same reply, a second time
    assert chat.patterns == []
    assert await chat.say("well?", found()) == f"I could not use that answer. {full}"
    assert chat.patterns == [("Desk", "no_progress", None)]
    # Something new given starts the count again.
    assert await chat.say("4 nights then", found(("nights", "4 nights", 4))) == full


class Stay(Booking):
    request: Annotated[  # type: ignore[assignment]
        Literal["cancel", "repeat", "skip", "handoff", "out_of_scope"] | None, *REQUEST_WORDS
    ] = None


class Hostel(Desk):
    """Take a booking, where the guest may ask for what the desk does not do."""

    slots = Stay


class HostelFlow(Flow):
    name = "hostel"
    steps = [Hostel, Person]


async def test_a_question_that_gives_nothing_while_one_waits_is_out_of_scope_to_a_small_model() -> None:
    """A small model rarely reads ``out_of_scope``: while a question of the step waits for its
    answer, a question of the user's own that the reading took nothing from is one, in any
    language; the pending question comes back."""
    chat = Chat(HostelFlow)
    # The first message: no question of the step was waiting, so a question is a greeting.
    assert await chat.say("Hello, can you help me book?", found()) == NAME
    assert await chat.say("Ada", found(("name", "Ada", "Ada"))) == CITY
    sorry = f"I'm sorry, I can't help with that here. {CITY}"
    assert await chat.say("Can you get me a flight too?", found()) == sorry
    assert await chat.say("¿Y un coche de alquiler?", found()) == sorry
    # Past max_out_of_scope in a row, a person takes over.
    assert await chat.say("And a train?", found()) == "Someone will help you shortly."
    assert [(step, pattern) for step, pattern, _ in chat.patterns] == [
        ("Hostel", "out_of_scope"),
        ("Hostel", "out_of_scope"),
        ("Hostel", "out_of_scope"),
        ("Hostel", "handoff"),
    ]


async def test_no_question_or_a_value_read_is_not_out_of_scope_and_a_hosted_model_reads_it_itself() -> None:
    chat = Chat(HostelFlow)
    await chat.say("hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    assert await chat.say("hmm, let me think", found()) == NIGHTS  # nothing asked: the optional city left
    assert await chat.say("3, ¿vale?", found(("nights", "3", 3))) == "Booked 3 nights for Ada."  # an answer
    assert chat.patterns == []
    hosted = Chat(HostelFlow)
    hosted.model = ScriptedModel([], grounding="default")
    hosted.engine = FlowEngine([HostelFlow], model=hosted.model)
    await hosted.say("hi", found())
    await hosted.say("Ada", found(("name", "Ada", "Ada")))
    assert await hosted.say("Can you get me a flight too?", found()) == NIGHTS  # the optional city left
    assert hosted.patterns == []


async def test_a_message_read_as_a_repair_gets_no_second_look_however_long() -> None:
    """A message about the conversation itself (a repeat, a cancel) is no answer to the form: the
    parts the reading left out are not read again, so it costs one model call, in any language."""
    chat = Chat()
    await chat.say("hi", found())
    await chat.say("Ada", found(("name", "Ada", "Ada")))
    # Each holds a number no reading kept: worth a second look, were it an answer to the form.
    long_en = "Sorry, what? I was on the phone for 20 minutes and did not catch any of it"
    assert await chat.say(long_en, found(("request", "sorry what", "repeat"))) == CITY
    long_es = "¿Cómo dices? Estuve 20 minutos al teléfono y no he oído nada de nada"
    assert await chat.say(long_es, found(("request", "cómo dices", "repeat"))) == CITY
    assert [pattern for _, pattern, _ in chat.patterns] == ["repeat", "repeat"]
