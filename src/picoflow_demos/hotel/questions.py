"""The hotels' policies a guest may ask about in the middle of the search (the ``digression``
repair pattern): each topic with the words that name it, per language, and its answer, per
language. ``HotelQuestions`` answers from this table in code, then the step the question
interrupted asks its question again.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import BaseModel

from picoflow import Said
from picoflow_demos._common import as_typed

Topic = Literal["cancellation", "arrival", "payment", "smoking"]

# The words that name each topic. Amenities (pets, breakfast, parking) are search criteria, not
# questions: they are not here.
TOPIC_WORDS: Mapping[str, Mapping[Topic, tuple[str, ...]]] = MappingProxyType({
    "en": {
        "cancellation": ("cancellation policy", "cancellation", "cancel policy", "refundable",
                         "free cancellation"),
        "arrival": ("check-in time", "check in time", "checkout time", "check-out time", "what time",
                    "early check-in", "late checkout", "late check-out"),
        "payment": ("deposit", "pay at the hotel", "payment", "credit card", "pay in advance"),
        "smoking": ("smoking", "smoke", "smoker"),
    },
    "es": {
        "cancellation": as_typed("política de cancelación", "cancelación", "reembolsable",
                                 "cancelación gratuita"),
        "arrival": as_typed("hora de entrada", "hora de salida", "a qué hora", "hora del check-in",
                            "entrada anticipada", "salida tardía"),
        "payment": as_typed("depósito", "pagar en el hotel", "pago", "tarjeta de crédito",
                            "pagar por adelantado"),
        "smoking": as_typed("fumar", "fumadores", "fumador"),
    },
    "de": {
        "cancellation": as_typed("stornierungsbedingungen", "stornierung", "stornieren", "erstattbar",
                                 "kostenlose stornierung"),
        "arrival": as_typed("check-in-zeit", "um wie viel uhr", "wann kann ich einchecken",
                            "wann muss ich auschecken", "früher einchecken", "später auschecken"),
        "payment": as_typed("anzahlung", "kaution", "im hotel bezahlen", "bezahlung", "kreditkarte",
                            "im voraus bezahlen"),
        "smoking": as_typed("rauchen", "raucher", "nichtraucher"),
    },
    "fr": {
        "cancellation": as_typed("conditions d'annulation", "politique d'annulation", "annulation gratuite",
                                 "remboursable"),
        "arrival": as_typed("heure d'arrivée", "heure de départ", "à quelle heure", "arrivée anticipée",
                            "départ tardif"),
        "payment": as_typed("acompte", "caution", "payer à l'hôtel", "paiement", "carte de crédit",
                            "payer d'avance"),
        "smoking": as_typed("fumer", "fumeur", "fumeurs", "non-fumeur"),
    },
})  # fmt: skip

ANSWERS: Mapping[str, Mapping[Topic, str]] = MappingProxyType({
    "en": {
        "cancellation": "Every hotel here can be cancelled free of charge until 48 hours before arrival.",
        "arrival": "Check-in is from 3 pm and check-out until 11 am; the front desk can arrange other "
                   "times.",
        "payment": "You pay at the hotel when you arrive; no deposit is taken when you book.",
        "smoking": "All the hotels are non-smoking, rooms and public areas alike.",
    },
    "es": {
        "cancellation": "Todos los hoteles se pueden cancelar sin coste hasta 48 horas antes de la llegada.",
        "arrival": "La entrada es a partir de las 15:00 y la salida hasta las 11:00; recepción puede acordar "
                   "otros horarios.",
        "payment": "Se paga en el hotel al llegar; no se cobra ningún depósito al reservar.",
        "smoking": "Todos los hoteles son para no fumadores, tanto las habitaciones como las zonas comunes.",
    },
    "de": {
        "cancellation": "Jedes Hotel hier kann bis 48 Stunden vor der Anreise kostenlos storniert werden.",
        "arrival": "Check-in ist ab 15 Uhr, Check-out bis 11 Uhr; die Rezeption kann andere Zeiten "
                   "vereinbaren.",
        "payment": "Sie bezahlen bei der Ankunft im Hotel; bei der Buchung wird keine Anzahlung verlangt.",
        "smoking": "Alle Hotels sind Nichtraucherhotels, in den Zimmern wie in den öffentlichen Bereichen.",
    },
    "fr": {
        "cancellation": "Chaque hôtel peut être annulé sans frais jusqu'à 48 heures avant l'arrivée.",
        "arrival": "L'arrivée se fait à partir de 15 h et le départ jusqu'à 11 h ; la réception peut "
                   "convenir d'autres horaires.",
        "payment": "Vous payez à l'hôtel à votre arrivée ; aucun acompte n'est demandé à la réservation.",
        "smoking": "Tous les hôtels sont non-fumeurs, chambres et parties communes comprises.",
    },
})  # fmt: skip

TOPICS = tuple(
    Said(options={str(topic): said for topic, said in words.items()}, locale=locale)
    for locale, words in TOPIC_WORDS.items()
)
ASKS_ABOUT = tuple(
    Said(options={"digression": tuple(word for topic in words.values() for word in topic)}, locale=locale)
    for locale, words in TOPIC_WORDS.items()
)
"""The words that make a message a question about the hotels' policies (the ``digression``
option of the search step's ``repair`` field)."""


class Question(BaseModel):
    """What a guest's side question is about (read from its declared words, in code)."""

    topic: Annotated[Topic | None, *TOPICS] = None
