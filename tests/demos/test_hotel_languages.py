"""The hotel demo in Spanish, German and French: a guest is answered in the language their words tell.

The model's readings are scripted; what is asserted is what code makes of them, word for word: every
reply of the conversation in the guest's language, the criteria kept, the approval card of the
booking and the booking. An English conversation reads as it always did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import picoflow_demos
from picoflow import FlowEngine
from picoflow.models import ScriptedModel
from picoflow.slots.said import detect_locale
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel import flow as hotel_flow
from picoflow_demos.hotel.criteria import Criteria, refusal
from picoflow_demos.hotel.flow import GuestRequest
from picoflow_demos.hotel.replies import ENGLISH, LOCALES, TEXTS
from picoflow_demos.hotel.scripted import day, found, wants

from .conftest import Chat

SCENARIOS = Path(picoflow_demos.__file__).parent / "scenarios"
# Babel writes a no-break space between an amount and its currency, and a narrow one between French
# thousands: "864,00 US$", "1 856,26 $US".
NBSP, NNBSP = "\xa0", "\u202f"


@pytest.fixture(autouse=True)
def fixed_confirmation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hotel_flow, "confirmation_number", lambda key: "HF-TEST2345")


def chat_with(*script: object) -> Chat:
    model = ScriptedModel(list(script), grounding="small")  # stands in for the embedded model
    return Chat(FlowEngine([HotelFlow], model=model), model, "hotel")


async def states(chat: Chat) -> dict[str, dict[str, Any]]:
    session = await chat.engine.store.load(chat.session_id or "")
    assert session is not None
    return {name: dict(state) for name, state in session.states.items()}


async def test_a_spanish_guest_is_answered_in_spanish_from_the_greeting_to_the_booking() -> None:
    past = found(
        ("check_in", "Del 10", day(7, 10, 2027)), ("check_out", "12 de julio de 2027", day(7, 12, 2027))
    )
    chat = chat_with(
        found(("room_types", "dos camas", ["two beds"]), ("in_portland", "Portland", True)),
        past,
        past,  # read again after the rule was given back: the guest is told
        found(("check_in", "del 10", day(8, 10)), ("check_out", "13 de agosto", day(8, 13))),
        found(("max_price", "Máximo 400 dólares la noche", 400)),
        found(("amenities", "desayuno", ["freeBreakfast"])),
        found(("max_airport_miles", "A menos de 5 millas del aeropuerto", 5)),
        wants("compare", [1, 2], ["price"]),
        wants("book", pick="cheapest"),
    )
    said = [
        "Hola, busco una habitación con dos camas en Portland.",
        "Del 10 al 12 de julio de 2027.",
        "Perdón, quería decir del 10 al 13 de agosto.",
        "Máximo 400 dólares la noche.",
        "Con desayuno, por favor.",
        "A menos de 5 millas del aeropuerto.",
        "Compara el 1 y el 2 por precio.",
        "Reserva el más barato.",
    ]
    replies = [result.message for result in await chat.say_all(said)]
    usd = f"{NBSP}US$"
    assert replies == [
        "¡Hola! Puedo ayudarle a encontrar un hotel en la zona de Portland, Oregón.\n\nPerfecto. Anotado: "
        "dos camas. ¿Cuáles son sus fechas de llegada y de salida?",
        "Lo siento, la fecha de llegada debe ser posterior a hoy, jueves, 15 de julio de 2027. ¿Cuáles son "
        "sus fechas de llegada y de salida?",
        "Llegada el martes, 10 de agosto de 2027, salida el viernes, 13 de agosto de 2027: 3 noches. ¿Qué "
        "presupuesto por noche tiene en mente: un mínimo, un máximo o ambos?",
        "Anotado: hasta 400 US$ por noche. ¿Qué servicios necesita? Por ejemplo wifi gratis, aparcamiento "
        "gratis o desayuno gratis.",
        "Anotado: Desayuno gratis. ¿Alguna distancia máxima al aeropuerto o al centro de la ciudad, en "
        "millas?",
        "**del 10 ago 2027 al 13 ago 2027, 3 noches; hasta 400 US$ por noche; dos camas; Desayuno gratis; a "
        "menos de 5 millas del aeropuerto**\n\n"
        "Del más barato al más caro:\n\n"  # equal totals by name; the budget is per night
        f"1. **Tru by Hilton Portland Airport** (dos camas): 864,00{usd} en total por 3 noches, "
        f"288,00{usd} por noche\n"
        f"2. **Hampton Inn Portland-Airport** (dos camas): 1.149,12{usd} en total por 3 noches, "
        f"383,04{usd} por noche\n"
        f"3. **Home2 Suites by Hilton Portland Airport OR** (dos camas): 1.166,40{usd} en total por 3 "
        f"noches, 388,80{usd} por noche\n"
        f"4. **Embassy Suites by Hilton Portland Airport** (dos camas): 1.183,68{usd} en total por 3 "
        f"noches, 394,56{usd} por noche\n"
        f"5. **Homewood Suites by Hilton Portland Airport** (dos camas): 1.183,68{usd} en total por 3 "
        f"noches, 394,56{usd} por noche\n\n"
        "¿Qué hotel quiere reservar? Indique su número o su nombre. También puede comparar hoteles o cambiar "
        "la búsqueda.",
        "| Noche | #1 Tru by Hilton Portland Airport | #2 Hampton Inn Portland-Airport |\n"
        "| --- | ---: | ---: |\n"
        "| Habitación | dos camas | dos camas |\n"
        f"| 10 ago 2027 | 288,00{usd} | 383,04{usd} |\n"
        f"| 11 ago 2027 | 288,00{usd} | 383,04{usd} |\n"
        f"| 12 ago 2027 | 288,00{usd} | 383,04{usd} |\n"
        f"| **Total** | **864,00{usd}** | **1.149,12{usd}** |\n\n"
        "¿Otra comparación, o prefiere reservar?",
        "Waiting for approval: Reservar Tru by Hilton Portland Airport, dos camas: llegada el martes, 10 de "
        f"agosto de 2027, salida el viernes, 13 de agosto de 2027 (3 noches), 288,00{usd} por noche, "
        f"864,00{usd} en total (the customer must approve)",
    ]
    assert (await chat.decide("approve")).message == (
        "**Su reserva está confirmada.**\n"
        "- Hotel: Tru by Hilton Portland Airport\n"
        "- Habitación: dos camas\n"
        "- Estancia: del 10 ago 2027 al 13 ago 2027 (3 noches)\n"
        f"- Total: 864,00{usd}\n"
        "- Número de confirmación: **HF-TEST2345**\n\n"
        "Gracias por reservar con nosotros. ¡Disfrute de su estancia en Portland!"
    )
    steps = [*["Explore"] * 5, "Present", "Compare", "Compare", "Goodbye"]
    assert [result.step for result in chat.results] == steps
    assert chat.results[-1].completed and chat.model.remaining == 0
    final = await states(chat)
    assert final["Explore"]["locale"] == "es"
    assert final["Explore"]["form"]["known"] == {
        "room_types": ["two beds"],
        "in_portland": True,
        "check_in": "2027-08-10",
        "check_out": "2027-08-13",
        "max_price": 400.0,
        "amenities": ["freeBreakfast"],
        "max_airport_miles": 5.0,
    }
    assert final["Goodbye"]["booking"] == {
        "hotel": "Tru by Hilton Portland Airport",
        "room_type": "two beds",
        "check_in": "2027-08-10",
        "check_out": "2027-08-13",
        "total": "864.00",
        "confirmation": "HF-TEST2345",
    }


async def test_a_german_guest_refused_and_leaving_is_answered_in_german() -> None:
    seattle = found(("in_portland", "Nein, in Seattle", False))
    chat = chat_with(
        found(("room_types", "zwei Betten", ["two beds"])),
        seattle,
        seattle,
        found(
            ("in_portland", "ja, Portland", True),
            ("check_in", "vom 10.", day(8, 10, 2027)),
            ("check_out", "13. August 2027", day(8, 13, 2027)),
        ),
        found(
            ("min_price", "Zwischen 100 und 300 Dollar", 100),
            ("max_price", "Zwischen 100 und 300 Dollar", 300),
        ),
        found(("goodbye", "Auf Wiedersehen", "goodbye")),
        "Vielen Dank für Ihren Besuch, auf Wiedersehen!",  # the model's own closing words
    )
    said = [
        "Guten Tag, wir brauchen ein Zimmer mit zwei Betten.",
        "Nein, in Seattle.",
        "Ach so. Dann ja, Portland, vom 10. bis 13. August 2027.",
        "Zwischen 100 und 300 Dollar.",
        "Ich überlege es mir noch einmal. Auf Wiedersehen!",
    ]
    replies = [result.message for result in await chat.say_all(said)]
    assert replies == [
        "Hallo! Ich helfe Ihnen gern, ein Hotel in der Gegend von Portland, Oregon, zu finden.\n\nNotiert: "
        "zwei Betten. Ist Ihr Aufenthalt in der Gegend von Portland?",
        "Entschuldigung, wir haben nur Hotels in der Gegend von Portland, Oregon. Ist Ihr Aufenthalt in der "
        "Gegend von Portland?",
        "Sehr gut. Anreise am Dienstag, 10. August 2027, Abreise am Freitag, 13. August 2027: 3 Nächte. An "
        "welches Budget pro Nacht denken Sie: ein Minimum, ein Maximum oder beides?",
        "Notiert: bis 300 $ pro Nacht; ab 100 $ pro Nacht. Welche Ausstattung brauchen Sie? Zum Beispiel "
        "kostenloses WLAN, kostenloses Parken oder kostenloses Frühstück.",
        "Vielen Dank für Ihren Besuch, auf Wiedersehen!",
    ]
    # The closing words are the model's: it is asked for them in German.
    assert chat.requests_per_turn[4][-1].system.startswith(
        "Der Gast hat das Gespräch beendet. Bedanke dich kurz und verabschiede dich, auf Deutsch."
    )
    assert chat.results[-1].completed and chat.results[-1].step == "Goodbye"
    final = await states(chat)
    assert final["Explore"]["locale"] == "de" and "booking" not in final.get("Goodbye", {})
    assert final["Explore"]["form"]["known"] == {
        "room_types": ["two beds"],
        "in_portland": True,
        "check_in": "2027-08-10",
        "check_out": "2027-08-13",
        "min_price": 100.0,
        "max_price": 300.0,
    }


async def test_a_french_guest_compares_and_books_in_french() -> None:
    chat = chat_with(
        found(
            ("room_types", "une suite", ["suite"]),
            ("in_portland", "Portland", True),
            ("check_in", "du 3", day(9, 3, 2027)),
            ("check_out", "6 septembre 2027", day(9, 6, 2027)),
            ("max_price", "900 $ maximum la nuit", 900),
            ("max_city_center_miles", "à 1 mile du centre-ville maximum", 1),
            ("request", "Montrez-moi les résultats", "search"),
        ),
        wants("compare", [1, 2], ["distance"]),
        wants("other"),
        wants("book", pick="closest_to_center"),
    )
    said = [
        "Bonjour, une suite à Portland du 3 au 6 septembre 2027, 900 $ maximum la nuit, à 1 mile du "
        "centre-ville maximum. Montrez-moi les résultats.",
        "Quelle est la différence de distance entre le 1 et le 2 ?",
        "Hmm, je ne sais pas trop.",
        "Je prends le plus proche du centre-ville.",
    ]
    replies = [result.message for result in await chat.say_all(said)]
    usd = f"{NBSP}$US"
    listing = (
        "**du 3 sept. 2027 au 6 sept. 2027, 3 nuits ; jusqu'à 900 $ par nuit ; suite ; à moins de 1 mile du "
        "centre-ville**\n\n"
        "Du moins cher au plus cher :\n\n"
        f"1. **The Porter Portland, Curio Collection by Hilton** (suite) : 1{NNBSP}782,00{usd} au total "
        f"pour 3 nuits, de 540,00{usd} à 621,00{usd} par nuit\n"
        f"2. **Hampton Inn & Suites Portland-Pearl District** (suite) : 1{NNBSP}856,26{usd} au total pour 3 "
        f"nuits, de 562,50{usd} à 646,88{usd} par nuit\n"
        f"3. **Hilton Portland Downtown** (suite) : 1{NNBSP}900,80{usd} au total pour 3 nuits, "
        f"de 576,00{usd} à 662,40{usd} par nuit\n"
        f"4. **The Benson Portland, Curio Collection by Hilton** (suite) : 1{NNBSP}960,20{usd} au total "
        f"pour 3 nuits, de 594,00{usd} à 683,10{usd} par nuit\n"
        f"5. **Embassy Suites by Hilton Portland Downtown** (suite) : 2{NNBSP}153,26{usd} au total pour 3 "
        f"nuits, de 652,50{usd} à 750,38{usd} par nuit\n\n"
        "Quel hôtel souhaitez-vous réserver ? Donnez son numéro ou son nom. Vous pouvez aussi comparer des "
        "hôtels ou modifier la recherche."
    )
    assert replies == [
        listing,
        "| Distance | #1 The Porter Portland, Curio Collection by Hilton | #2 Hampton Inn & Suites "
        "Portland-Pearl "
        "District |\n"
        "| --- | ---: | ---: |\n"
        "| Aéroport | 12,4 mi | 12 mi |\n"
        "| Centre-ville | 0,5 mi | 0 mi |\n\n"
        "Une autre comparaison, ou souhaitez-vous réserver ?",
        "Je peux réserver l'un de ces hôtels, les comparer selon le prix, le type de chambre, les "
        "équipements ou "
        f"la distance, ou modifier la recherche.\n\n{listing}",
        "Waiting for approval: Réserver Hampton Inn & Suites Portland-Pearl District, suite : arrivée le "
        f"vendredi 3 septembre 2027, départ le lundi 6 septembre 2027 (3 nuits), de 562,50{usd} à "
        f"646,88{usd} par nuit, 1{NNBSP}856,26{usd} au total (the customer must approve)",
    ]
    assert (await chat.decide("approve")).message == (
        "**Votre réservation est confirmée.**\n"
        "- Hôtel : Hampton Inn & Suites Portland-Pearl District\n"
        "- Chambre : suite\n"
        "- Séjour : du 3 sept. 2027 au 6 sept. 2027 (3 nuits)\n"
        f"- Total : 1{NNBSP}856,26{usd}\n"
        "- Numéro de confirmation : **HF-TEST2345**\n\n"
        "Merci d'avoir réservé chez nous. Profitez bien de votre séjour à Portland !"
    )
    assert [result.step for result in chat.results] == ["Present", "Compare", "Present", "Present", "Goodbye"]
    final = await states(chat)
    assert final["Explore"]["locale"] == "fr"
    assert final["Goodbye"]["booking"] == {
        "hotel": "Hampton Inn & Suites Portland-Pearl District",
        "room_type": "suite",
        "check_in": "2027-09-03",
        "check_out": "2027-09-06",
        "total": "1856.26",
        "confirmation": "HF-TEST2345",
    }


async def test_a_guest_booking_two_hotels_at_once_is_asked_which_in_their_language() -> None:
    # The clarification is a repair pattern's text (RepairTexts): the list and the tables say it in
    # the guest's language like every other reply of theirs.
    spanish = chat_with(
        found(
            ("room_types", "dos camas", ["two beds"]),
            ("in_portland", "Portland", True),
            ("check_in", "1", day(9, 1, 2027)),
            ("check_out", "4 de septiembre de 2027", day(9, 4, 2027)),
            ("request", "muéstrame las opciones", "search"),
        ),
        wants("book", [3, 4]),
    )
    await spanish.say_all(
        [
            "Hola, dos camas en Portland del 1 al 4 de septiembre de 2027, muéstrame las opciones",
            "Me quedo con el 3 o el 4",
        ]
    )
    assert spanish.results[-1].message == (
        "¿Cuál de ellos?\n- #3 DoubleTree by Hilton Hotel Portland - Tigard\n"
        "- #4 Hampton Inn Sherwood Portland"
    )
    german = chat_with(
        found(
            ("room_types", "einem Bett", ["one bed"]),
            ("in_portland", "Portland", True),
            ("check_in", "vom 10.", day(8, 10, 2027)),
            ("check_out", "13. August 2027", day(8, 13, 2027)),
            ("request", "Zeigen Sie mir", "search"),
        ),
        wants("compare", [1, 2], ["price"]),
        wants("book", [1, 2]),
    )
    said = [
        "Hallo, ein Zimmer mit einem Bett in Portland vom 10. bis 13. August 2027. Zeigen Sie mir die "
        "Hotels.",
        "Vergleichen Sie bitte die Preise von 1 und 2",
        "Ich nehme 1 oder 2",
    ]
    await german.say_all(said)
    assert german.results[-1].message == (
        "Welches meinen Sie?\n- #1 Tru by Hilton Portland Airport\n- #2 Hilton Garden Inn Beaverton"
    )
    assert [result.step for result in german.results] == ["Present", "Compare", "Compare"]


async def test_an_english_guest_reads_the_replies_of_before() -> None:
    past = found(("check_in", "July 10", day(7, 10, 2027)), ("check_out", "July 12, 2027", day(7, 12, 2027)))
    chat = chat_with(
        found(("room_types", "two beds", ["two beds"]), ("in_portland", "Portland", True)),
        past,
        past,
        found(("check_in", "August 10", day(8, 10)), ("check_out", "August 13", day(8, 13))),
        found(("max_price", "At most $400 a night", 400)),
        found(("amenities", "breakfast", ["freeBreakfast"])),
        found(("max_airport_miles", "Within 5 miles of the airport", 5)),
        wants("compare", [1, 2], ["price"]),
        wants("book", pick="cheapest"),
    )
    said = [
        "Hi, I'm looking for a room with two beds in Portland.",
        "July 10 to July 12, 2027",
        "Sorry, I meant August 10 to August 13.",
        "At most $400 a night.",
        "With breakfast, please.",
        "Within 5 miles of the airport.",
        "Compare 1 and 2 on price.",
        "Book the cheapest.",
    ]
    replies = [result.message for result in await chat.say_all(said)]
    assert replies == [
        "Hello! I can help you find a hotel in the Portland, Oregon area.\n\nGreat. Noted: two beds. What "
        "are your check-in and check-out dates?",
        "Sorry, the check-in date must be after today, Thursday July 15, 2027. What are your check-in and "
        "check-out dates?",
        "Check-in Tuesday August 10, 2027, check-out Friday August 13, 2027: 3 nights. What nightly budget "
        "do "
        "you have in mind: a minimum, a maximum or both?",
        "Noted: up to $400 a night. Which amenities do you need? For example free WiFi, free parking or free "
        "breakfast.",
        "Noted: Free breakfast. Any maximum distance to the airport or the city center, in miles?",
        "**Aug 10 to Aug 13, 3 nights; up to $400 a night; two beds; Free breakfast; within 5 mi of the "
        "airport**\n\n"
        "Cheapest first:\n\n"
        "1. **Tru by Hilton Portland Airport** (two beds): $864.00 total for 3 nights, $288.00 a night\n"
        "2. **Hampton Inn Portland-Airport** (two beds): $1,149.12 total for 3 nights, $383.04 a night\n"
        "3. **Home2 Suites by Hilton Portland Airport OR** (two beds): $1,166.40 total for 3 nights, "
        "$388.80 a night\n"
        "4. **Embassy Suites by Hilton Portland Airport** (two beds): $1,183.68 total for 3 nights, "
        "$394.56 a night\n"
        "5. **Homewood Suites by Hilton Portland Airport** (two beds): $1,183.68 total for 3 nights, "
        "$394.56 a night\n\n"
        "Which hotel would you like to book? Give its number or name. You can also compare hotels or change "
        "the search.",
        "| Night | #1 Tru by Hilton Portland Airport | #2 Hampton Inn Portland-Airport |\n"
        "| --- | ---: | ---: |\n"
        "| Room | two beds | two beds |\n"
        "| Tue 8/10/2027 | $288.00 | $383.04 |\n"
        "| Wed 8/11/2027 | $288.00 | $383.04 |\n"
        "| Thu 8/12/2027 | $288.00 | $383.04 |\n"
        "| **Total** | **$864.00** | **$1,149.12** |\n\n"
        "Another comparison or ready to book?",
        "Waiting for approval: Book Tru by Hilton Portland Airport, two beds: check-in Tuesday August 10, "
        "2027, check-out Friday August 13, 2027 (3 nights), $288.00 a night, $864.00 in total (the customer "
        "must approve)",
    ]
    assert (await chat.decide("approve")).message == (
        "**Your booking is confirmed.**\n"
        "- Hotel: Tru by Hilton Portland Airport\n"
        "- Room: two beds\n"
        "- Stay: Tue 8/10/2027 to Fri 8/13/2027 (3 nights)\n"
        "- Total: $864.00\n"
        "- Confirmation number: **HF-TEST2345**\n\n"
        "Thank you for booking with us. Enjoy your stay in Portland!"
    )
    final = await states(chat)
    assert final["Explore"]["locale"] == "en"
    assert final["Goodbye"]["booking"]["hotel"] == "Tru by Hilton Portland Airport"


def _messages(path: Path) -> list[str]:
    return [
        turn["user"]
        for scenario in yaml.safe_load_all(path.read_text("utf-8"))
        for turn in scenario["turns"]
        if "user" in turn  # not a decision
    ]


@pytest.mark.parametrize(
    ("language", "files"),
    [
        ("en", ("hotel-guests.yaml", "hotel.yaml")),
        ("es", ("hotel-guests-es.yaml",)),
        ("de", ("hotel-guests-de.yaml",)),
        ("fr", ("hotel-guests-fr.yaml",)),
    ],
)
def test_no_guest_message_tells_another_language(language: str, files: tuple[str, ...]) -> None:
    """The words declared per language tell each guest's language, or nothing ("2", "wifi", "Hola"):
    a word declared in one language that a guest of another writes would answer them in the wrong one."""
    told = {
        message: {detect_locale(message, model, LOCALES) for model in (Criteria, GuestRequest)} - {None}
        for name in files
        for message in _messages(SCENARIOS / name)
    }
    assert {message: tags for message, tags in told.items() if tags - {language}} == {}
    # Most messages tell it: every guest is answered in their language from their first words on.
    assert sum(tags == {language} for tags in told.values()) > len(told) // 2


@pytest.mark.parametrize(
    ("locale", "refused"),
    [
        ("en", "Sorry, the check-out date must be after the check-in date."),
        ("es", "Lo siento, la fecha de salida debe ser posterior a la de llegada."),
        ("de", "Entschuldigung, die Abreise muss nach der Anreise liegen."),
        ("fr", "Désolé, la date de départ doit être postérieure à la date d'arrivée."),
    ],
)
def test_a_rule_of_the_criteria_is_given_in_the_guests_language(locale: str, refused: str) -> None:
    assert refusal("the check-out date must be after the check-in date", locale) == refused


def test_a_reason_no_rule_words_is_said_as_written_in_english_and_in_general_words_otherwise() -> None:
    why = "max_price: input should be greater than 0"
    assert refusal(why, "en") == "Sorry, max_price: input should be greater than 0."
    assert [refusal(why, locale) for locale in ("es", "de", "fr")] == [
        "Lo siento, no he podido aceptar esa respuesta.",
        "Entschuldigung, diese Antwort konnte ich nicht übernehmen.",
        "Désolé, je n'ai pas pu retenir cette réponse.",
    ]


def test_every_language_has_every_reply() -> None:
    assert tuple(TEXTS) == LOCALES
    assert {language: set(TEXTS[ENGLISH]) - set(texts) for language, texts in TEXTS.items()} == {
        language: set() for language in LOCALES
    }


@pytest.mark.parametrize(
    ("search", "choice", "card"),
    [
        (
            "Una suite en Portland del 3 al 6 de septiembre de 2027, 900 dólares máximo, "
            "a 1 milla del centro como mucho. Enséñeme los hoteles.",
            "¡Todo tiene muy buena pinta! Nos quedamos con el que esté más cerca del aeropuerto.",
            "Waiting for approval: Reservar Embassy Suites by Hilton Portland Downtown, suite: llegada ",
        ),
        (
            "A suite in Portland from September 3 to September 6, 2027, at most $900, within 1 mile "
            "of the center. Show me the hotels.",
            "It all looks great! We'll take the one closest to the airport.",
            "Waiting for approval: Book Embassy Suites by Hilton Portland Downtown, suite: check-in ",
        ),
    ],
)
async def test_the_words_of_choosing_book_the_hotel_a_quality_names_whatever_action_was_read(
    search: str, choice: str, card: str
) -> None:
    """A small model reads "we'll take the one closest to the airport" as a comparison: no word of
    one was said, but the words of choosing and of the quality were, so code finds that hotel in the
    list and proposes its booking (which waits for the guest's approval)."""
    chat = chat_with(
        found(
            ("room_types", "suite", ["suite"]),
            ("in_portland", "Portland", True),
            ("check_in", "3", day(9, 3, 2027)),
            ("check_out", "6", day(9, 6, 2027)),
            ("max_price", "900", 900),
            ("max_city_center_miles", "1", 1),
            ("request", search.rsplit(". ", 1)[1].rstrip("."), "search"),
        ),
        wants("compare", [4, 5], ["distance", "price"], pick="closest_to_airport"),
    )
    listed, chosen = await chat.say_all([search, choice])
    assert listed.step == "Present" and chosen.step == "Present"
    assert chosen.message.startswith(card), chosen.message
