"""The one reader: ``read`` without a flow, grounding as a visible policy of named rules, verdicts on the
event stream, in session warnings and in eval transcripts, and a strong model not held back.

Every behaviour is checked in English and in another language: the rules know no word of any
language, the words they look for are declared beside the slots model.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel

from picoflow import (
    Flow,
    FlowDefinitionError,
    FlowEngine,
    Outcome,
    Said,
    SlotStep,
    TerminateStep,
    ask,
    direct,
)
from picoflow.evals import load_scenarios, run_eval
from picoflow.events import ReadingJudged, TurnEvent
from picoflow.messages import Message
from picoflow.models import FunctionModel, ScriptedModel
from picoflow.slots import Evidence, Form, Grounding, Item, Reading, Rule, Seen, Verdict, read


def found(*items: tuple[str, str, Any]) -> str:
    """The model's answer: one item (field, quote, value) per thing it read."""
    return json.dumps({"found": [{"field": f, "quote": q, "value": v} for f, q, v in items]})


Room = Annotated[
    Literal["single", "double", "suite"],
    Said(options={"double": ("two beds", "dos camas", "doble"), "suite": ("suite",)}),
]
Budget = Annotated[float, Said(words=("under", "at most", "max", "como máximo", "hasta"))]
Floor = Annotated[float, Said(words=("from", "at least", "desde", "mínimo"))]


class Stay(BaseModel):
    """A hotel stay."""

    hotel: str | None = None
    check_in: date | None = None
    room: Room | None = None
    max_price: Budget | None = None
    min_price: Floor | None = None
    pets: Annotated[bool | None, Said(yes=("dog", "perro", "pets"), no=("no", "sin"))] = None


YES_NO = Said(yes=("yes", "sounds great", "sí", "perfecto"), no=("no",))


def answering(*answers: str, grounding: str = "small") -> FunctionModel:
    """A model that gives ``answers`` in order, recording every request."""
    queue = list(answers)
    return FunctionModel(lambda request: queue.pop(0), grounding=grounding)


# --- read, without a flow -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "quote_price", "quote_room"),
    [
        ("A suite, max 300 a night", "max 300", "A suite"),
        ("Una suite, como máximo 300 la noche", "como máximo 300", "Una suite"),
    ],
)
async def test_read_keeps_what_the_message_bears_out_and_says_why_of_every_item(
    message: str, quote_price: str, quote_room: str
) -> None:
    model = answering(
        found(
            ("room", quote_room, "suite"),
            ("max_price", quote_price, 300),
            ("hotel", "Hotel Monaco", "Hotel Monaco"),  # nobody wrote it
        )
    )
    reading = await read(Stay, [Message.assistant("How can I help?")], message, model=model)
    assert isinstance(reading, Reading)
    assert reading.form.known == {"room": "suite", "max_price": 300.0}
    assert reading.accepted == ("room", "max_price")
    kept_room, kept_price, dropped = reading.verdicts
    assert (kept_room.field, kept_room.action, kept_room.rule) == ("room", "kept", None)
    assert kept_price.evidence == Evidence(
        "user", message.index(quote_price), message.index(quote_price) + len(quote_price), quote_price
    )
    assert (dropped.field, dropped.value, dropped.action, dropped.rule) == (
        "hotel",
        "Hotel Monaco",
        "dropped",
        "quoted",
    )
    assert dropped.why.startswith("A quote that is not the user's words")
    assert reading.dropped == (dropped,)
    # One request: the question it answers and the message, the format as the output schema.
    [request] = model.requests
    assert [(m.role, m.content) for m in request.messages] == [
        ("assistant", "How can I help?"),
        ("user", message),
    ]
    assert request.output is not None and request.output.name == "StayReading"


@pytest.mark.parametrize("message", ["a room under 400", "una habitación hasta 400"])
async def test_a_bound_read_as_the_other_field_is_repaired_with_the_rule_that_moved_it(message: str) -> None:
    quote = message.split(" ", 2)[-1] if message.startswith("a ") else "hasta 400"
    quote = "under 400" if message.startswith("a ") else quote
    reading = await read(Stay, [], message, model=answering(found(("min_price", quote, 400))))
    assert reading.form.known == {"max_price": 400.0}
    [verdict] = reading.verdicts
    assert (verdict.field, verdict.action, verdict.rule, verdict.read_as) == (
        "max_price",
        "repaired",
        "field_words",
        ("min_price", 400),
    )


class Trip(BaseModel):
    """A stay and how far from the airport."""

    max_price: Annotated[float | None, Said(words=("max", "maximum", "at most", "máximo", "höchstens"))] = (
        None
    )
    max_airport_miles: Annotated[float | None, Said(words=("airport", "aeropuerto", "flughafen"))] = None


@pytest.mark.parametrize(
    ("message", "quote"),
    [("a maximum of 10 miles", "maximum of 10 miles"), ("como máximo 10 millas", "como máximo 10 millas")],
)
async def test_a_value_answering_the_question_asked_stays_in_that_questions_fields(
    message: str, quote: str
) -> None:
    # "maximum" is a word of the budget; answering the distance question, it bounds the distance.
    distance = ask("Any maximum distance to the airport, in miles?", "max_airport_miles", optional=True)
    budget = ask("What is your nightly budget?", "max_price", optional=True)
    reading = await read(
        Trip,
        [Message.assistant(distance.question)],
        message,
        model=answering(found(("max_airport_miles", quote, 10))),
        asking=distance,
        questions=[budget, distance],
    )
    assert reading.form.known == {"max_airport_miles": 10.0}
    assert [(v.field, v.action) for v in reading.verdicts] == [("max_airport_miles", "kept")]
    # Asked nothing in particular, the words decide: the value moves to the budget.
    moved = await read(Trip, [], message, model=answering(found(("max_airport_miles", quote, 10))))
    assert moved.form.known == {"max_price": 10.0}
    assert [(v.field, v.action, v.rule) for v in moved.verdicts] == [("max_price", "repaired", "field_words")]


async def test_a_refused_value_goes_back_once_with_its_rule_then_the_reading_says_so() -> None:
    model = answering(
        found(("check_in", "the 31st of February", "2027-02-31")),
        found(("check_in", "the 31st of February", "2027-02-31")),
    )
    reading = await read(Stay, [], "arriving the 31st of February", model=model)
    assert reading.form.known == {}
    assert list(reading.problems) == ["check_in"]
    assert [(v.field, v.action, v.rule) for v in reading.verdicts][-1] == (
        "check_in",
        "dropped",
        "validation",
    )
    correction = model.requests[1].messages[-1]
    assert correction.kind == "correction" and "check_in" in correction.content
    assert "2027-02-31" not in correction.content  # never the value


async def test_an_answer_that_never_fits_the_format_reads_nothing_within_its_calls() -> None:
    model = FunctionModel(lambda request: "I think they want a suite")
    reading = await read(Stay, [], "a suite", model=model, max_calls=2)
    assert (reading.form.known, reading.verdicts, len(model.requests)) == ({}, (), 2)


# --- profiles: a strong model is not held back -----------------------------------------------------


@pytest.mark.parametrize(
    ("message", "quote"),
    [
        ("I'll arrive the day after Christmas", "the day after Christmas"),
        ("Llego el día después de Navidad", "el día después de Navidad"),
    ],
)
async def test_the_default_profile_keeps_a_correct_reading_the_small_model_rules_drop(
    message: str, quote: str
) -> None:
    answer = found(("check_in", quote, "2027-12-26"))
    hosted = await read(Stay, [], message, model=answering(answer, grounding="default"))
    assert hosted.form.known == {"check_in": "2027-12-26"}
    assert [(v.action, v.rule) for v in hosted.verdicts] == [("kept", None)]
    # The same reading from the embedded model is dropped: no number of it is written.
    small = await read(Stay, [], message, model=answering(answer, found()))
    assert small.form.known == {}
    assert (small.verdicts[0].action, small.verdicts[0].rule) == ("dropped", "numbers_written")


async def test_the_default_profile_still_drops_a_quote_nobody_wrote_and_a_contradicted_yes() -> None:
    model = answering(found(("room", "a suite", "suite"), ("pets", "sin perro", True)), grounding="default")
    reading = await read(Stay, [], "viajo sin perro", model=model)
    assert reading.form.known == {"pets": False}
    assert [(v.field, v.action, v.rule) for v in reading.verdicts] == [
        ("room", "dropped", "quoted"),
        ("pets", "repaired", "yes_no"),
    ]


def test_profiles_are_chosen_by_the_model() -> None:
    assert Grounding.for_model(ScriptedModel([], grounding="small")) == Grounding.for_small_models()
    assert Grounding.for_model(ScriptedModel([])) == Grounding.default()
    small, default = Grounding.for_small_models(), Grounding.default()
    assert (small.slips, small.second_look, small.told) == (True, True, True)
    assert (default.slips, default.second_look, default.told) == (False, False, False)
    assert set(default.names()) < set(small.names())
    assert default.names() == ("field_words", "confirmed", "quoted", "written_dates", "yes_no")


# --- confirmed values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offer", "accepted", "declined"),
    [
        ("Shall I book the Hotel Monaco for you?", "That sounds great", "no, something cheaper"),
        ("¿Le reservo el Hotel Monaco?", "Sí, perfecto", "no, algo más barato"),
    ],
)
async def test_a_value_the_assistant_offered_is_borne_out_by_its_message_once_accepted(
    offer: str, accepted: str, declined: str
) -> None:
    history = [Message.assistant(offer)]
    answer = found(("hotel", "Hotel Monaco", "Hotel Monaco"))
    for profile in ("default", "small"):
        reading = await read(
            Stay, history, accepted, model=answering(answer, grounding=profile), accept=YES_NO
        )
        assert reading.form.known == {"hotel": "Hotel Monaco"}, profile
        [verdict] = reading.verdicts
        start = offer.index("Hotel Monaco")
        assert (verdict.action, verdict.rule) == ("kept", "confirmed")
        assert verdict.evidence == Evidence("assistant", start, start + len("Hotel Monaco"), "Hotel Monaco")
        # Declining it keeps nothing.
        no = await read(
            Stay, history, declined, model=answering(answer, found(), grounding=profile), accept=YES_NO
        )
        assert no.form.known == {} and no.verdicts[0].rule == "quoted", profile
    # Without declared words, a small model's reading of an offer is not taken on its word.
    small = await read(Stay, history, accepted, model=answering(answer, found()))
    assert small.form.known == {}


async def test_a_question_naming_several_options_offers_none_of_them() -> None:
    history = [Message.assistant("Single, double or suite?")]
    model = answering(found(("room", "suite", "suite")), grounding="default")
    reading = await read(Stay, history, "sounds great", model=model, accept=YES_NO)
    assert reading.form.known == {} and reading.verdicts[0].rule == "quoted"


# --- the policy is the author's -------------------------------------------------------------------


class NoHotelChains(Rule):
    """A hotel name the application will not book is dropped (an example of an author's own rule)."""

    name = "no_chains"

    def judge(self, item: Item, seen: Seen) -> Item | None:
        return None if item.field == "hotel" and "chain" in item.value.casefold() else item


async def test_an_author_adds_removes_and_replaces_rules() -> None:
    policy = Grounding.default().with_rule(NoHotelChains(), after="quoted")
    assert policy.names() == ("field_words", "confirmed", "quoted", "no_chains", "written_dates", "yes_no")
    model = answering(found(("hotel", "Chain Inn", "Chain Inn")))
    reading = await read(Stay, [], "the Chain Inn please", model=model, grounding=policy)
    assert reading.form.known == {} and reading.verdicts[0].rule == "no_chains"
    assert reading.verdicts[0].why.startswith("A hotel name the application will not book")
    # Without the quote rule, a reading nobody wrote is kept: the author decides.
    lax = Grounding.default().without("quoted")
    reading = await read(Stay, [], "hola", model=answering(found(("room", "suite", "suite"))), grounding=lax)
    assert reading.form.known == {"room": "suite"}
    assert Grounding.for_small_models().without("slips", "second_look").slips is False
    replaced = Grounding.default().replacing("quoted", NoHotelChains())
    assert replaced.names()[2] == "no_chains"
    with pytest.raises(FlowDefinitionError, match="no rule nope"):
        Grounding.default().without("nope")
    with pytest.raises(FlowDefinitionError, match="listed twice"):
        Grounding.default().with_rule(NoHotelChains()).with_rule(NoHotelChains())


# --- verdicts are visible wherever a turn is -------------------------------------------------------


class Explore(SlotStep):
    """Learn the stay."""

    slots = Stay
    questions = [ask("Which room?", "room"), ask("Your budget?", "max_price")]
    second_look = False

    def on_complete(self, values: Stay) -> Outcome:
        return direct(f"Searching {values.room} rooms under {values.max_price:g}.")


class StayFlow(Flow):
    name = "stay"
    steps = [Explore, TerminateStep]


async def test_a_dropped_reading_is_an_event_and_a_session_warning_naming_its_rule() -> None:
    model = ScriptedModel(
        [found(("room", "a suite", "suite"), ("max_price", "cheap", 100))], grounding="small"
    )
    engine = FlowEngine([StayFlow], model=model)
    events: list[TurnEvent] = []
    result = await engine.run("stay", "a suite, something cheap", on_event=events.append)
    assert result.message == "Your budget?"
    [judged] = [event for event in events if isinstance(event, ReadingJudged)]
    assert judged.step == "Explore"
    assert [dict(v) for v in judged.verdicts] == [
        {
            "field": "room",
            "value": "suite",
            "action": "kept",
            "evidence": {"source": "user", "start": 0, "end": 7, "text": "a suite"},
        },
        {
            "field": "max_price",
            "value": 100,
            "action": "dropped",
            "rule": "numbers_written",
            "evidence": {"source": "user", "start": 19, "end": 24, "text": "cheap"},
            "why": Grounding.for_small_models().rules[5].why,
        },
    ]
    session = await engine.store.load(result.session_id or "")
    assert session is not None
    assert [(w.code, w.message) for w in session.warnings] == [
        ("reading_dropped", "max_price was read but not kept: rule numbers_written")
    ]


SCENARIO = """\
flow: stay
name: a budget nobody wrote
turns:
  - user: a suite, something cheap
    scripted: ['{answer}']
    expect:
      step: Explore
      field_set: {{room: suite}}
      field_dropped: {{max_price: numbers_written}}
      field_not_set: [max_price]
"""


async def test_an_eval_transcript_holds_the_verdicts_and_a_scenario_asserts_on_them(tmp_path: Path) -> None:
    answer = found(("room", "a suite", "suite"), ("max_price", "cheap", 100))
    path = tmp_path / "stay.yaml"
    path.write_text(SCENARIO.format(answer=answer), encoding="utf-8")
    result = await run_eval(load_scenarios(path), [StayFlow], model="scripted")
    [scenario] = result.scenarios
    [run] = scenario.runs
    [turn] = run.turns
    assert turn.passed, turn.failures
    assert [c.name for c in turn.checks] == [
        "step",
        "field_set: room",
        "field_dropped: max_price",
        "field_not_set: max_price",
    ]
    record = turn.as_json()
    assert [(v["field"], v["action"], v.get("rule"), v["step"]) for v in record["verdicts"]] == [
        ("room", "kept", None, "Explore"),
        ("max_price", "dropped", "numbers_written", "Explore"),
    ]
    # The same scenario expecting another rule fails, naming what grounding decided.
    path.write_text(
        SCENARIO.format(answer=answer).replace("max_price: numbers_written", "max_price: quoted"),
        encoding="utf-8",
    )
    failed = await run_eval(load_scenarios(path), [StayFlow], model="scripted")
    [check] = failed.scenarios[0].runs[0].turns[0].failures
    assert check.name == "field_dropped: max_price" and check.expected == "quoted"
    assert {
        "field": "max_price",
        "value": 100,
        "action": "dropped",
        "rule": "numbers_written",
    } in check.actual


def test_a_verdict_is_plain_json() -> None:
    verdict = Verdict("max_price", 350, "repaired", "field_words", None, ("min_price", 350), "why")
    assert json.loads(json.dumps(verdict.to_json())) == {
        "field": "max_price",
        "value": 350,
        "action": "repaired",
        "rule": "field_words",
        "read_as": {"field": "min_price", "value": 350},
        "why": "why",
    }
    assert Form.model_validate(Form().model_dump(mode="json")) == Form()


# --- language as a value ----------------------------------------------------------------------------


class Walk(BaseModel):
    """A walk."""

    distance_km: float | None = None
    budget: Budget | None = None
    place: (
        Annotated[
            Literal["beach", "hotel"],
            Said(options={"beach": ("beach",), "hotel": ("hotel",)}, locale="en"),
            Said(options={"beach": ("playa",), "hotel": ("hotel",)}, locale="es"),
            Said(options={"beach": ("ビーチ",), "hotel": ("ホテル",)}, locale="ja"),
        ]
        | None
    ) = None


@pytest.mark.parametrize(
    ("locales", "message", "quote", "value", "kept"),
    [
        (("de",), "höchstens 2,5 km", "2,5 km", 2.5, True),
        (("de",), "höchstens 1.250 Meter", "1.250", 1250, True),
        (("en",), "at most 1,250 meters", "1,250", 1250, True),
        (("en",), "at most 2,5 km", "2,5", 2.5, False),  # not how English writes two and a half
        ((), "höchstens 2,5 km", "2,5", 2.5, True),  # no locale: every plausible reading
    ],
)
async def test_numbers_are_read_as_the_declared_locale_writes_them(
    locales: tuple[str, ...], message: str, quote: str, value: float, kept: bool
) -> None:
    model = answering(found(("distance_km", quote, value)), found())
    reading = await read(Walk, [], message, model=model, locales=locales)
    assert (reading.form.known == {"distance_km": value}) is kept


@pytest.mark.parametrize(
    ("message", "quote", "locales"),
    [
        ("three hundred fifty dollars at most", "three hundred fifty dollars at most", ("en",)),
        ("trescientos cincuenta dólares como máximo", "trescientos cincuenta dólares como máximo", ("es",)),
        ("höchstens dreihundertfünfzig Euro", "höchstens dreihundertfünfzig Euro", ("de",)),
    ],
)
async def test_a_number_written_in_words_is_borne_out(
    message: str, quote: str, locales: tuple[str, ...]
) -> None:
    grounding = Grounding.for_small_models().without("field_words")  # "höchstens" is declared for no field
    model = answering(found(("budget", quote, 350)), found())
    reading = await read(Walk, [], message, model=model, locales=locales, grounding=grounding)
    assert reading.form.known == {"budget": 350.0}


async def test_an_unspaced_sentence_is_read_word_by_character_and_only_declared_locales_count() -> None:
    message = "東京のビーチの近くのホテルを探しています"
    reading = await read(
        Walk, [], message, model=answering(found(("place", "ビーチ", "beach"))), locales=("ja",)
    )
    assert reading.form.known == {"place": "beach"}
    # The words of a locale not declared do not bear an option out: "playa" is Spanish.
    spanish = answering(found(("place", "playa", "beach")), found())
    assert (await read(Walk, [], "una playa", model=spanish, locales=("en", "ja"))).form.known == {}
    assert (
        await read(
            Walk, [], "una playa", model=answering(found(("place", "playa", "beach"))), locales=("en", "es")
        )
    ).form.known == {"place": "beach"}


@pytest.mark.parametrize(
    ("message", "locale"),
    [("near the beach please", "en"), ("cerca de la playa por favor", "es"), ("nahe", None)],
)
async def test_of_several_locales_the_one_whose_words_the_user_wrote_is_told(
    message: str, locale: str | None
) -> None:
    reading = await read(Walk, [], message, model=answering(found()), locales=("en", "es"))
    assert reading.locale == locale


class Beach(SlotStep):
    """Find a beach."""

    slots = Walk
    locales = ("en", "es")
    questions = [ask("Which place?", "place"), ask("How far?", "distance_km")]

    def phrase(self, question: Any, values: Any) -> str:
        return {"es": {"distance_km": "¿A qué distancia?"}}.get(self.locale or "", {}).get(
            question.key, question.question
        )

    def on_complete(self, values: Walk) -> Outcome:
        return direct("ok")


class BeachFlow(Flow):
    name = "beach"
    steps = [Beach]


async def test_a_slot_step_keeps_the_language_its_user_wrote_and_answers_in_it() -> None:
    model = ScriptedModel([found(("place", "la playa", "beach"))], grounding="small")
    engine = FlowEngine([BeachFlow], model=model)
    result = await engine.run("beach", "Busco la playa")
    assert result.message == "¿A qué distancia?"
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.state_of("Beach")["locale"] == "es"


@pytest.mark.parametrize(
    ("said", "reply"),
    [
        ("The Hotel Monaco has no pool. Anything else?", "yes"),
        ("El Hotel Monaco no tiene piscina. ¿Algo más?", "sí"),
    ],
)
async def test_what_the_assistant_stated_is_no_offer(said: str, reply: str) -> None:
    model = answering(found(("hotel", "the Hotel Monaco", "Hotel Monaco")), grounding="default")
    reading = await read(Stay, [Message.assistant(said)], reply, model=model, accept=YES_NO)
    assert reading.form.known == {} and reading.verdicts[0].rule == "quoted"


class Outing(BaseModel):
    """An outing: where, and the day."""

    place: (
        Annotated[
            Literal["beach", "museum"],
            Said(options={"beach": ("beach",), "museum": ("museum",)}, locale="en"),
            Said(options={"beach": ("playa",), "museum": ("museo",)}, locale="es"),
        ]
        | None
    ) = None
    day: date | None = None


class PlanOuting(SlotStep):
    """Plan an outing."""

    slots = Outing
    locales = ("en", "es")
    questions = [ask("Where to?", "place"), ask("Which day?", "day")]

    def on_complete(self, values: Outing) -> Outcome:
        return direct(f"ok {values.day}")


class OutingFlow(Flow):
    name = "outing"
    steps = [PlanOuting]


@pytest.mark.parametrize(
    ("first", "quote", "read_as", "stored"),
    [
        ("a la playa", "03/09/2027", "2027-03-09", "2027-09-03"),
        ("to the beach", "03/09/2027", "2027-09-03", "2027-03-09"),
    ],
)
async def test_a_date_in_digits_is_read_in_the_order_of_the_language_the_user_wrote_earlier(
    first: str, quote: str, read_as: str, stored: str
) -> None:
    """The second message writes only a date that reads both ways; the language the first message
    told (Spanish: day first, English: month first) decides which date it is."""
    model = ScriptedModel(
        [found(("place", first.split()[-1], "beach")), found(("day", quote, read_as))], grounding="small"
    )
    engine = FlowEngine([OutingFlow], model=model)
    first_turn = await engine.run("outing", first)
    second = await engine.run("outing", quote, session_id=first_turn.session_id)
    assert second.message == f"ok {stored}"
