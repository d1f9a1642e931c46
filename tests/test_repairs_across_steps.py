"""Repair patterns that cross steps: a correction of something said in an earlier step, and a
digression answered elsewhere that resumes the step it interrupted (a stack of them).

Whole conversations through the runner, in English and in Spanish: each asserts the replies, the
``pattern`` events, where the conversation stands and the final state.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from tests.test_repairs import Chat, found

from picoflow import (
    Flow,
    Outcome,
    Repairs,
    Said,
    SlotStep,
    Step,
    TerminateStep,
    ask,
    direct_to,
    repair,
    tool,
)
from picoflow.models import ToolCall

CITY = "Which city?"
NIGHTS = "How many nights?"
CIUDAD = "¿Qué ciudad?"
NOCHES = "¿Cuántas noches?"

ASKS = (
    Said(options={"digression": ("by the way", "question"), "cancel": ("forget it",)}, locale="en"),
    Said(options={"digression": ("por cierto", "pregunta"), "cancel": ("olvídalo",)}, locale="es"),
)


class Stay(BaseModel):
    """What the guest said of their stay."""

    city: str | None = None
    nights: int | None = Field(None, gt=0, le=30)
    request: Annotated[Literal["digression", "cancel"] | None, *ASKS] = Field(
        None, description="what the guest asks of the conversation itself"
    )


class Search(SlotStep):
    """Ask where and how long, then offer a hotel."""

    slots = Stay
    questions = [ask(CITY, "city"), ask(NIGHTS, "nights")]
    repairs_from = "request"
    locales = ("en", "es")

    def phrase(self, question: Any, values: Stay) -> str:
        spanish = self.locale == "es"
        if question.key == "city":
            return CIUDAD if spanish else CITY
        return NOCHES if spanish else NIGHTS

    def acknowledge(self, values: Stay, accepted: Any) -> str:
        said = [f"{name}={getattr(values, name)}" for name in accepted if name in ("city", "nights")]
        return ("Anotado: " if self.locale == "es" else "Noted: ") + ", ".join(said) if said else ""

    def corrected(self, values: Stay, changed: Any) -> str:
        said = ", ".join(f"{name}={getattr(values, name)}" for name in changed)
        return ("Cambiado: " if self.locale == "es" else "Changed: ") + said

    def on_complete(self, values: Stay) -> Outcome:
        offers = self.state_of("Offer").get("offers", 0) + 1
        offer = f"Offer {offers}: Hotel {values.city} for {values.nights} nights. Book it?"
        return direct_to(Offer, offer).with_state(offers=offers)


class Offer(Step):
    """The guest books the offer, or changes what they said."""

    terminate_tool = False

    @tool
    def change(self) -> Outcome:
        """The guest changes the city or the nights."""
        return repair("correction")

    @tool
    def book(self) -> Outcome:
        """The guest books the offer."""
        return direct_to(Done, "Booked.")


class Done(TerminateStep):
    """The end."""


class StayFlow(Flow):
    name = "stay"
    steps = [Search, Offer, Done]


class Busca(Search):
    """The same search, answering in Spanish unless the guest's words say otherwise."""

    name = "Search"
    locales = ("es", "en")


class EstanciaFlow(Flow):
    name = "estancia"
    steps = [Busca, Offer, Done]


async def test_a_correction_inside_the_form_fires_and_the_next_question_follows() -> None:
    chat = Chat(StayFlow)
    assert await chat.say("hi", found()) == CITY
    assert await chat.say("Paris", found(("city", "Paris", "Paris"))) == f"Noted: city=Paris {NIGHTS}"
    # The city said again, differently: a correction of the form, reported as the pattern.
    reply = await chat.say("no wait, Lyon", found(("city", "Lyon", "Lyon")))
    assert reply == f"Noted: city=Lyon {NIGHTS}"
    assert chat.patterns == [("Search", "correction", "city")]
    # The same value said again is no correction.
    await chat.say("Lyon, yes", found(("city", "Lyon", "Lyon")))
    assert [fired for fired in chat.patterns if fired[1] == "correction"] == [
        ("Search", "correction", "city")
    ]


async def test_a_correction_in_a_later_step_goes_back_redoes_the_offer_and_says_what_changed() -> None:
    chat = Chat(StayFlow)
    await chat.say("hi", found())
    reply = await chat.say("Paris, 3 nights", found(("city", "Paris", "Paris"), ("nights", "3 nights", 3)))
    assert reply == "Offer 1: Hotel Paris for 3 nights. Book it?"
    assert await chat.step() == "Offer"
    # In the offer step the guest changes a value the search step holds: back there, the value
    # changes, what depended on it (the offer) is made again, and the guest is told what changed.
    reply = await chat.say("make it 5 nights", ToolCall("change", {}), found(("nights", "5 nights", 5)))
    assert reply == "Changed: nights=5\n\nOffer 2: Hotel Paris for 5 nights. Book it?"
    assert chat.patterns == [("Offer", "correction", None), ("Search", "correction", "nights")]
    assert await chat.step() == "Offer"
    assert (await chat.state("Search"))["form"]["known"] == {"city": "Paris", "nights": 5}
    assert await chat.say("book it", ToolCall("book", {})) == "Booked."


async def test_a_correction_in_spanish_is_said_in_spanish() -> None:
    chat = Chat(EstanciaFlow)
    await chat.say("hola", found())
    await chat.say("París, 3 noches", found(("city", "París", "París"), ("nights", "3 noches", 3)))
    reply = await chat.say("mejor Madrid", ToolCall("change", {}), found(("city", "Madrid", "Madrid")))
    assert reply == "Cambiado: city=Madrid\n\nOffer 2: Hotel Madrid for 3 nights. Book it?"
    assert chat.patterns[-1] == ("Search", "correction", "city")


async def test_a_correction_with_no_earlier_step_asks_the_question_again() -> None:
    class Alone(Offer):
        name = "Offer"

    class AloneFlow(Flow):
        name = "alone"
        steps = [Alone, Done]

    chat = Chat(AloneFlow)
    assert await chat.say("hi", "Which offer would you like?") == "Which offer would you like?"
    assert await chat.say("change it", ToolCall("change", {})) == "Which offer would you like?"
    assert chat.patterns == [("Offer", "correction", None)]


async def test_a_correction_switched_off_keeps_the_form_as_a_plain_answer() -> None:
    class Plain(Search):
        name = "Search"
        repairs = Repairs(off=frozenset({"correction"}))

    class PlainFlow(Flow):
        name = "stay"
        steps = [Plain, Offer, Done]

    chat = Chat(PlainFlow)
    await chat.say("hi", found())
    await chat.say("Paris", found(("city", "Paris", "Paris")))
    assert await chat.say("Lyon", found(("city", "Lyon", "Lyon"))) == f"Noted: city=Lyon {NIGHTS}"
    assert chat.patterns == []


# --- digressions --------------------------------------------------------------------------------


class Status(Step):
    """Tell the status of an order, then go back to what the guest was doing."""

    terminate_tool = False
    repairs = Repairs(digress_to="Faq")

    @tool
    def status(self, order: int) -> Outcome:
        """The status of order ``order``."""
        return self.resume(f"Order {order} has shipped.")

    @tool
    def side_question(self) -> Outcome:
        """The guest asks something that is not about an order's status."""
        return repair("digression")

    @tool
    def drop(self) -> Outcome:
        """The guest wants to forget it all."""
        return repair("cancel")


class Faq(Step):
    """Answer a question about the hotel, then go back."""

    terminate_tool = False

    def on_response(self, response: Any) -> Outcome:
        return self.resume(str(response))


class AskingFlow(Flow):
    name = "asking"
    steps = [Search, Offer, Status, Faq, Done]
    repairs = Repairs(digress_to=Status)


class PreguntasFlow(Flow):
    name = "preguntas"
    steps = [Busca, Offer, Status, Faq, Done]
    repairs = Repairs(digress_to=Status)


async def test_a_digression_inside_a_digression_resumes_twice() -> None:
    chat = Chat(AskingFlow)
    assert await chat.say("hi", found()) == CITY
    # A side question in the form: answered by the flow's digression step, which asks its own.
    reply = await chat.say(
        "by the way, where is my order?", found(("request", "by the way", "digression")), "Which order?"
    )
    assert reply == "Which order?"
    assert await chat.step() == "Status"
    # Inside that digression, another: the FAQ answers and Status asks its question again.
    reply = await chat.say("when is breakfast?", ToolCall("side_question", {}), "Breakfast is at 7.")
    assert reply == "Breakfast is at 7.\n\nWhich order?"
    assert await chat.step() == "Status"
    # Status answers, and the form the first digression interrupted asks its question again.
    reply = await chat.say("40007", ToolCall("status", {"order": 40007}))
    assert reply == f"Order 40007 has shipped.\n\n{CITY}"
    assert await chat.step() == "Search"
    assert chat.patterns == [("Search", "digression", None), ("Status", "digression", None)]
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.interrupted == []
    # The form goes on where it was.
    assert await chat.say("Paris", found(("city", "Paris", "Paris"))) == f"Noted: city=Paris {NIGHTS}"


async def test_a_digression_in_spanish_resumes_with_the_question_in_spanish() -> None:
    chat = Chat(PreguntasFlow)
    assert await chat.say("hola", found()) == CIUDAD
    await chat.say("por cierto, ¿mi pedido?", found(("request", "por cierto", "digression")), "¿Qué pedido?")
    reply = await chat.say("40007", ToolCall("status", {"order": 40007}))
    assert reply == f"Order 40007 has shipped.\n\n{CIUDAD}"


async def test_a_cancel_drops_the_digressions_it_ends() -> None:
    chat = Chat(AskingFlow)
    await chat.say("hi", found())
    await chat.say("by the way, my order?", found(("request", "by the way", "digression")), "Which order?")
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.interrupted == ["Search"]
    assert await chat.say("forget it all", ToolCall("drop", {})) == f"All right, I have dropped that. {CITY}"
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None and session.interrupted == [] and session.current_step == "Search"


async def test_without_a_digression_step_a_side_question_is_answered_as_out_of_scope() -> None:
    chat = Chat(StayFlow)
    await chat.say("hi", found())
    reply = await chat.say("by the way, is there a gym?", found(("request", "by the way", "digression")))
    assert reply == f"I'm sorry, I can't help with that here. {CITY}"
    assert chat.patterns == [("Search", "digression", None)]


class Patient(Step):
    """Answer about orders; refuse the rest, three times before a person."""

    terminate_tool = False
    repairs = Repairs(max_out_of_scope=3)

    @tool
    def elsewhere(self) -> Outcome:
        """The user asks for something this step does not do."""
        return repair("out_of_scope")


class PatientFlow(Flow):
    name = "patient"
    steps = [Patient]


async def test_repairs_in_a_row_ask_the_question_again_not_the_last_repair_s_words() -> None:
    chat = Chat(PatientFlow)
    assert await chat.say("hi", "Which order is it about?") == "Which order is it about?"
    sorry = "I'm sorry, I can't help with that here. Which order is it about?"
    assert await chat.say("a flight?", ToolCall("elsewhere", {})) == sorry
    # The second one asks the question, not "I'm sorry ... I'm sorry ... Which order ...?"
    assert await chat.say("a car then?", ToolCall("elsewhere", {})) == sorry
    assert chat.patterns == [("Patient", "out_of_scope", None)] * 2


async def test_a_correction_names_its_fields_in_the_form_s_order() -> None:
    chat = Chat(StayFlow)
    await chat.say("hi", found())
    await chat.say("Paris, 3 nights", found(("city", "Paris", "Paris"), ("nights", "3 nights", 3)))
    # The reading gives the nights first; the pattern names the fields as the slots model orders them.
    reply = await chat.say(
        "make it 4 nights in Lyon",
        ToolCall("change", {}),
        found(("nights", "4 nights", 4), ("city", "Lyon", "Lyon")),
    )
    assert reply == "Changed: city=Lyon, nights=4\n\nOffer 2: Hotel Lyon for 4 nights. Book it?"
    assert chat.patterns[-1] == ("Search", "correction", "city, nights")
