"""What the guest is looking for: the slots the Explore step fills, with the rules every value must keep.

The model reads each message into a partial ``Criteria``; the rules below run on every merge, so
a stay ending before it starts, a check-in in the past or a budget upside down is refused with a
reason (given to the model once, then to the guest) and the answers already given are kept.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import date, timedelta
from types import MappingProxyType
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from picoflow import Said
from picoflow_demos._common import FAREWELLS, CalendarDay, as_typed, today_from
from picoflow_demos.hotel.pricing import (
    Amenity,
    HotelQuote,
    RoomType,
    cheapest_first,
    quote_hotels,
    stay_nights,
)
from picoflow_demos.hotel.questions import ASKS_ABOUT
from picoflow_demos.hotel.replies import ENGLISH, either, full_day, listed, nights, say, short_day, whole

TODAY_VARIABLE = "HOTEL_FLOW_CURRENT_DATE"
MAX_NIGHTS = 30
BOOKING_HORIZON = 500


def today() -> date:
    """The flow's today: ``HOTEL_FLOW_CURRENT_DATE`` when set, else the real date."""
    return today_from(TODAY_VARIABLE)


def long_date(day: date) -> str:
    """ "Sunday August 1, 2027": a day as the English replies write it."""
    return full_day(day, ENGLISH)


def _rules(locale: str) -> dict[str, dict[str, object]]:
    """The values each rule's words need, written for ``locale``: the catalog's key of every reason
    the validators below (and ``CalendarDay``) give."""
    return {
        "rule_portland": {},
        "rule_check_in_past": {"today": full_day(today(), locale)},
        "rule_horizon": {"days": BOOKING_HORIZON},
        "rule_check_out": {},
        "rule_nights": {"nights": MAX_NIGHTS},
        "rule_prices": {},
        "rule_no_such_day": {},
        "rule_day_numbers": {},
    }


def _rule(key: str) -> str:
    """A rule's words as the validators give them (in English, the language the model reads)."""
    return say(key, ENGLISH, **_rules(ENGLISH)[key])


def refusal(why: str, locale: str) -> str:
    """The "Sorry, ..." sentence for a refused value in ``locale``: ``why`` is the rule as a validator
    worded it; a reason no rule of the catalog gives is said as written in English, or in general
    words in another language."""
    for key, values in _rules(ENGLISH).items():
        if say(key, ENGLISH, **values) == why.rstrip("."):
            return say("sorry", locale, why=say(key, locale, **_rules(locale)[key]))
    if locale == ENGLISH:
        return say("sorry", locale, why=why.rstrip("."))
    return say("refused", locale)


Day = Annotated[date, CalendarDay(today)]

# The words that say each room type and amenity, beside the options, in each language the demo
# speaks: a reading of "Hi" as a suite, or of "free wifi" as a pool too, is dropped because none of
# their words was written. A word said alike in several languages ("suite", "wifi", "parking") is
# declared in each, so that it tells none of them apart from the others.
ROOM_WORDS = (
    Said(
        options={
            "one bed": ("1 bed", "single", "king", "queen", "one queen", "one king"),
            "two beds": ("two bed", "2 beds", "2 bed", "double", "doubles", "twin", "twins", "two queens"),
            "suite": ("suite", "suites"),
        },
        locale="en",
    ),
    Said(
        options={
            "one bed": as_typed("una cama", "1 cama", "una sola cama", "sola cama", "cama doble",
                                "cama de matrimonio", "matrimonio", "cama grande", "individual", "sencilla",
                                "king", "queen"),
            "two beds": as_typed("dos camas", "2 camas", "camas separadas", "dos camas individuales",
                                 "twin"),
            "suite": ("suite", "suites"),
        },
        locale="es",
    ),
    Said(
        options={
            "one bed": as_typed("ein bett", "1 bett", "einem bett", "doppelbett", "einzelbett",
                                "einzelzimmer",
                                "französisches bett", "king", "queen", "kingsize", "queensize"),
            "two beds": as_typed("zwei betten", "2 betten", "zwei einzelbetten", "getrennte betten",
                                 "zweibettzimmer", "twin", "zwei doppelbetten"),
            "suite": ("suite", "suiten", "suites"),
        },
        locale="de",
    ),
    Said(
        options={
            "one bed": as_typed("un lit", "1 lit", "un seul lit", "seul lit", "lit double", "grand lit",
                                "lit simple", "chambre double", "chambre simple", "chambre individuelle",
                                "king", "queen"),
            "two beds": as_typed("deux lits", "2 lits", "lits jumeaux", "lits séparés", "twin",
                                 "chambre twin", "deux lits doubles"),
            "suite": ("suite", "suites"),
        },
        locale="fr",
    ),
)  # fmt: skip
AMENITY_WORDS = (
    Said(
        options={
            "freeWiFi": ("wifi", "wi fi", "internet"),
            "freeParking": ("parking", "park"),
            "freeBreakfast": ("breakfast",),
            "indoorPool": ("pool", "pools", "swimming", "swim"),
            "outdoorPool": ("pool", "pools", "swimming", "swim"),
            "fitnessCenter": ("gym", "fitness", "workout", "exercise"),
            "petFriendly": ("pet", "pets", "dog", "dogs", "cat", "cats"),
            "nonSmoking": ("non smoking", "no smoking", "nonsmoking", "smoke free", "smoking"),
            "digitalKey": ("digital key", "keyless", "key"),
            "evCharging": ("ev", "charging", "charger", "electric"),
            "airportShuttle": ("shuttle",),
            "onSiteRestaurant": ("restaurant", "dining", "dinner"),
            "roomService": ("room service",),
            "businessCenter": ("business", "printer", "printing"),
            "meetingRoom": ("meeting", "meetings", "conference"),
            "connectingRooms": ("connecting", "adjoining"),
            "streaming": ("streaming", "netflix", "tv"),
            "kitchen": ("kitchenette", "cook", "cooking"),
            "concierge": ("concierge",),
            "boutique": (),
            "eveningReception": ("reception",),
            "tennis": ("tennis",),
            "newHotel": ("new",),
        },
        locale="en",
    ),
    Said(
        options={
            "freeWiFi": ("wifi", "wi fi", "internet"),
            "freeParking": as_typed("parking", "aparcamiento", "estacionamiento", "aparcar", "estacionar",
                                    "garaje", "parqueadero"),
            "freeBreakfast": ("desayuno", "desayunos", "desayunar"),
            "indoorPool": as_typed("piscina", "piscinas", "alberca", "nadar", "piscina cubierta",
                                   "piscina climatizada", "piscina interior"),
            "outdoorPool": as_typed("piscina", "piscinas", "alberca", "nadar", "piscina exterior",
                                    "piscina al aire libre"),
            "fitnessCenter": ("gimnasio", "gym", "fitness", "ejercicio"),
            "petFriendly": ("mascota", "mascotas", "perro", "perros", "perrito", "gato", "gatos"),
            "nonSmoking": as_typed("no fumadores", "no fumar", "sin humo", "libre de humo", "fumar",
                                   "fumadores"),
            "digitalKey": as_typed("llave digital", "sin llave", "llave"),
            "evCharging": as_typed("cargador", "recarga", "coche eléctrico", "vehículo eléctrico",
                                   "eléctrico"),
            "airportShuttle": as_typed("shuttle", "traslado", "lanzadera", "transporte al aeropuerto"),
            "onSiteRestaurant": ("restaurante", "cena", "cenar"),
            "roomService": ("servicio de habitaciones", "room service"),
            "businessCenter": ("centro de negocios", "negocios", "impresora", "imprimir"),
            "meetingRoom": as_typed("sala de reuniones", "reunión", "reuniones", "conferencia",
                                    "conferencias"),
            "connectingRooms": ("comunicadas", "conectadas", "contiguas"),
            "streaming": as_typed("streaming", "netflix", "tv", "tele", "televisión"),
            "kitchen": ("cocina", "cocinar", "kitchenette"),
            "concierge": as_typed("conserje", "conserjería"),
            "eveningReception": as_typed("cóctel", "aperitivo", "copa de bienvenida"),
            "tennis": ("tenis",),
            "newHotel": as_typed("hotel nuevo", "recién abierto", "recién inaugurado"),
        },
        locale="es",
    ),
    Said(
        options={
            "freeWiFi": ("wlan", "w lan", "wifi", "wi fi", "internet"),
            "freeParking": as_typed("parkplatz", "parkplätze", "parken", "parkhaus", "tiefgarage", "garage",
                                    "stellplatz", "parkmöglichkeit"),
            "freeBreakfast": as_typed("frühstück", "frühstücken"),
            "indoorPool": as_typed("pool", "schwimmbad", "hallenbad", "innenpool", "schwimmen",
                                   "swimmingpool"),
            "outdoorPool": as_typed("pool", "schwimmbad", "freibad", "außenpool", "schwimmen",
                                    "swimmingpool"),
            "fitnessCenter": ("fitness", "fitnessstudio", "fitnessraum", "gym", "trainieren"),
            "petFriendly": as_typed("haustier", "haustiere", "hund", "hunde", "hündin", "katze", "katzen"),
            "nonSmoking": ("nichtraucher", "nichtraucherzimmer", "rauchfrei", "rauchen", "raucher"),
            "digitalKey": as_typed("digitaler schlüssel", "digitalen schlüssel", "schlüssellos", "schlüssel"),
            "evCharging": as_typed("ladestation", "ladesäule", "e auto", "elektroauto", "aufladen",
                                   "wallbox"),
            "airportShuttle": ("shuttle", "flughafentransfer", "zubringer"),
            "onSiteRestaurant": ("restaurant", "abendessen"),
            "roomService": ("zimmerservice", "room service"),
            "businessCenter": ("business", "businesscenter", "drucker", "drucken"),
            "meetingRoom": ("tagungsraum", "besprechungsraum", "konferenzraum", "meeting", "tagung",
                            "konferenz"),
            "connectingRooms": as_typed("verbindungstür", "verbundene zimmer", "verbindungszimmer"),
            "streaming": ("streaming", "netflix", "tv", "fernseher", "fernsehen"),
            "kitchen": as_typed("küche", "kochen", "kochnische", "küchenzeile"),
            "concierge": ("concierge", "portier"),
            "eveningReception": as_typed("abendempfang", "umtrunk", "aperitif"),
            "tennis": ("tennis", "tennisplatz"),
            "newHotel": as_typed("neues hotel", "neu eröffnet", "neueröffnet", "neubau"),
        },
        locale="de",
    ),
    Said(
        options={
            "freeWiFi": ("wifi", "wi fi", "internet"),
            "freeParking": as_typed("parking", "stationnement", "se garer", "garer", "garage",
                                    "place de parking"),
            "freeBreakfast": as_typed("petit déjeuner", "petits déjeuners", "petit déj", "petit dej"),
            "indoorPool": as_typed("piscine", "piscines", "nager", "baignade", "piscine couverte",
                                   "piscine intérieure", "piscine chauffée"),
            "outdoorPool": as_typed("piscine", "piscines", "nager", "baignade", "piscine extérieure",
                                    "piscine en plein air"),
            "fitnessCenter": ("salle de sport", "salle de gym", "gym", "fitness", "musculation"),
            "petFriendly": ("animal", "animaux", "chien", "chiens", "chienne", "chaton"),
            "nonSmoking": as_typed("non fumeur", "non fumeurs", "sans tabac", "fumer", "fumeur"),
            "digitalKey": as_typed("clé numérique", "clé digitale", "sans clé", "clé"),
            "evCharging": as_typed("borne de recharge", "borne", "recharge", "voiture électrique",
                                   "véhicule électrique", "électrique"),
            "airportShuttle": ("navette", "shuttle"),
            "onSiteRestaurant": ("restaurant", "dîner", "diner"),
            "roomService": ("service en chambre", "room service"),
            "businessCenter": as_typed("centre d'affaires", "affaires", "imprimante", "imprimer"),
            "meetingRoom": as_typed("salle de réunion", "salles de réunion", "réunion", "réunions",
                                    "séminaire",
                                    "conférence"),
            "connectingRooms": ("communicantes", "communicante", "chambres communicantes"),
            "streaming": as_typed("streaming", "netflix", "tv", "télé", "télévision"),
            "kitchen": ("cuisine", "cuisiner", "kitchenette", "coin cuisine"),
            "concierge": as_typed("concierge", "conciergerie"),
            "eveningReception": ("cocktail", "apéritif", "aperitif", "verre de bienvenue"),
            "tennis": ("tennis",),
            "newHotel": as_typed("nouvel hôtel", "hôtel neuf", "hôtel récent", "récent", "récente"),
        },
        locale="fr",
    ),
)  # fmt: skip


# A bound's direction is in its words: "under $400" is a maximum even when read as a minimum. Only
# words that say one direction whatever surrounds them: "more than" and "over" are the guest's
# minimum in "more than $100" and their maximum in "we don't want to spend more than $350" (so are
# "más de", "mehr als", "über" and "plus de").
HIGHEST = (
    Said(
        words=("under", "max", "maximum", "up to", "at most", "below", "less than", "no more than", "or less",
               "tops", "cheaper than", "budget"),
        locale="en",
    ),
    Said(
        words=as_typed("máximo", "máx", "max", "como máximo", "hasta", "menos de", "por debajo de",
                       "no más de",
                       "o menos", "tope", "presupuesto", "más barato que"),
        locale="es",
    ),
    Said(
        words=as_typed("maximal", "max", "maximum", "höchstens", "bis", "bis zu", "unter", "weniger als",
                       "nicht mehr als", "oder weniger", "budget", "günstiger als", "billiger als"),
        locale="de",
    ),
    Said(
        words=as_typed("maximum", "max", "au maximum", "jusqu'à", "moins de", "en dessous de", "au plus",
                       "pas plus de", "ou moins", "budget", "moins cher que", "plafond"),
        locale="fr",
    ),
)  # fmt: skip
LOWEST = (
    Said(words=("from", "min", "minimum", "at least", "above", "or more", "starting"), locale="en"),
    Said(
        words=as_typed("desde", "mínimo", "mín", "min", "como mínimo", "al menos", "por lo menos",
                       "a partir de",
                       "o más", "por encima de"),
        locale="es",
    ),
    Said(words=("ab", "von", "min", "minimum", "mindestens", "wenigstens", "oder mehr"), locale="de"),
    Said(
        words=as_typed("à partir de", "dès", "min", "minimum", "au moins", "au minimum",
                       "ou plus"), locale="fr"
    ),
)  # fmt: skip
AIRPORT = (
    Said(words=("airport", "airfield", "pdx", "flight", "flights"), locale="en"),
    Said(words=("aeropuerto", "pdx", "vuelo", "vuelos"), locale="es"),
    Said(words=as_typed("flughafen", "airport", "pdx", "flug", "flüge"), locale="de"),
    Said(words=as_typed("aéroport", "pdx", "vol", "vols"), locale="fr"),
)
CENTER = (
    Said(words=("center", "centre", "downtown", "city"), locale="en"),
    Said(words=("centro", "ciudad", "downtown"), locale="es"),
    Said(words=("zentrum", "innenstadt", "stadtmitte", "stadtzentrum", "city", "downtown"), locale="de"),
    Said(words=("centre", "centre ville", "ville", "downtown"), locale="fr"),
)
# "yes" answers the question "Is your stay in the Portland area?", and so does naming the city.
PORTLAND = (
    Said(
        yes=("yes", "yeah", "yep", "yup", "sure", "correct", "right", "indeed", "of course", "ok", "okay"),
        no=("no", "not", "nope", "elsewhere", "outside"),
        named=("portland", "pdx", "oregon"),
        locale="en",
    ),
    Said(
        yes=as_typed("sí", "claro", "correcto", "exacto", "efectivamente", "por supuesto", "vale",
                     "de acuerdo",
                     "ok", "okay"),
        no=("no", "otra ciudad", "otro sitio", "fuera"),
        named=("portland", "pdx", "oregon"),
        locale="es",
    ),
    Said(
        yes=as_typed("ja", "jawohl", "genau", "richtig", "stimmt", "korrekt", "natürlich", "klar", "ok",
                     "okay"),
        no=as_typed("nein", "nicht", "woanders", "außerhalb"),
        named=("portland", "pdx", "oregon"),
        locale="de",
    ),
    Said(
        yes=as_typed("oui", "ouais", "si", "exact", "exactement", "effectivement", "bien sûr", "tout à fait",
                     "d'accord", "correct", "ok", "okay"),
        no=("non", "pas", "ailleurs"),
        named=("portland", "pdx", "oregon"),
        locale="fr",
    ),
)  # fmt: skip
# Asking to see the hotels now, whatever question is pending ("hotels" alone names them, asks nothing,
# and neither does "I'm looking for a hotel": "busco", "ich suche", "je cherche" are left out).
SEARCH = (
    Said(
        options={"search": ("show", "list", "results", "go ahead", "options", "see", "book", "cheapest")},
        locale="en",
    ),
    Said(
        options={"search": as_typed("buscar", "busca", "búscame", "busque", "muestra", "muéstrame", "mostrar",
                                    "enséñame", "ver", "lista", "resultados", "opciones", "adelante",
                                    "el más barato", "la más barata")},
        locale="es",
    ),
    Said(
        options={"search": as_typed("such", "bitte suchen", "jetzt suchen", "suchen sie", "zeig", "zeige",
                                    "zeigen", "anzeigen", "liste", "ergebnisse", "optionen", "leg los",
                                    "los geht's", "sehen", "günstigste", "günstigsten", "billigste")},
        locale="de",
    ),
    Said(
        options={"search": as_typed("rechercher", "cherchez", "lance la recherche", "lancez la recherche",
                                    "lancer la recherche", "relancer la recherche", "relancez la recherche",
                                    "nouvelle recherche",
                                    "montre", "montrez", "montrer", "liste", "résultats", "options", "voir",
                                    "allez y", "vas y", "le moins cher", "la moins chère")},
        locale="fr",
    ),
)  # fmt: skip

# Ending the conversation cannot be undone: a goodbye needs the words that say it.
GOODBYE_WORDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "en": (*FAREWELLS["en"], "stop"),
        "es": FAREWELLS["es"],
        "de": (*FAREWELLS["de"], "stopp"),
        "fr": FAREWELLS["fr"],
    }
)
GOODBYE = tuple(Said(options={"goodbye": words}, locale=locale) for locale, words in GOODBYE_WORDS.items())
# What a guest asks of the conversation itself (the repair patterns of picoflow.repairs): to drop
# the search and start over, to hear the last message again, to talk to a person.
REPAIRS = (
    Said(
        options={
            "cancel": ("never mind", "forget it", "cancel", "start over", "start again", "scrap that"),
            "repeat": ("say that again", "repeat that", "come again", "sorry what"),
            "handoff": ("a person", "a human", "real person", "an agent", "someone real"),
            "skip": ("rather not say", "skip", "prefer not to say"),
        },
        locale="en",
    ),
    Said(
        options={
            "cancel": as_typed("olvídalo", "déjalo", "cancelar", "empezar de nuevo", "volver a empezar"),
            "repeat": as_typed("repite", "repítelo", "cómo dices", "perdona qué"),
            "handoff": as_typed("una persona", "un humano", "un agente"),
            "skip": as_typed("prefiero no decirlo", "prefiero no decir", "sáltate", "pasa a la siguiente"),
        },
        locale="es",
    ),
    Said(
        options={
            "cancel": as_typed("vergiss es", "vergessen sie es", "abbrechen", "von vorne", "neu anfangen"),
            "repeat": as_typed("wie bitte", "nochmal sagen", "wiederholen"),
            "handoff": as_typed("einen menschen", "eine person", "einen mitarbeiter"),
            "skip": as_typed("lieber nicht sagen", "möchte ich nicht sagen", "überspringen"),
        },
        locale="de",
    ),
    Said(
        options={
            "cancel": as_typed(
                "laisse tomber", "laissez tomber", "annuler", "oublie ça", "oubliez ça", "recommencer"
            ),
            "repeat": as_typed("répète", "répétez", "vous dites", "tu dis"),
            "handoff": as_typed("une personne", "un humain", "un conseiller"),
            "skip": as_typed("préfère ne pas le dire", "préfère ne pas dire", "passer"),
        },
        locale="fr",
    ),
)
# A yes or a no to what the assistant asked (a cancel to confirm), in every language of the demo.
CONFIRM = Said(
    yes=tuple(dict.fromkeys(word for marker in PORTLAND for word in marker.yes)),
    no=tuple(dict.fromkeys(word for marker in PORTLAND for word in marker.no)),
)


class Criteria(BaseModel):
    """What the guest said about their stay."""

    model_config = ConfigDict(extra="ignore")

    in_portland: Annotated[bool | None, *PORTLAND] = Field(
        None, description="true when the guest says the stay is in Portland (a yes), false if not"
    )
    check_in: Day | None = Field(None, description="Day of arrival (the first night)")
    check_out: Day | None = Field(None, description="Day of departure")
    max_price: Annotated[float | None, *HIGHEST] = Field(
        None, gt=0, description="Highest price per night in USD (the guest says max, up to, under, at most)"
    )
    min_price: Annotated[float | None, *LOWEST] = Field(
        None, ge=0, description="Lowest price per night in USD (the guest says min, at least, from, over)"
    )
    room_types: list[Annotated[RoomType, *ROOM_WORDS]] | None = Field(
        None, max_length=3, description="Room types the guest wants"
    )
    amenities: list[Annotated[Amenity, *AMENITY_WORDS]] | None = Field(
        None,
        max_length=23,
        description="Amenities the guest needs (wifi is freeWiFi, parking is freeParking)",
    )
    max_airport_miles: Annotated[float | None, *AIRPORT] = Field(
        None, gt=0, description="Most miles from the airport"
    )
    max_city_center_miles: Annotated[float | None, *CENTER] = Field(
        None, gt=0, description="Most miles from the city center"
    )
    request: Annotated[Literal["search"] | None, *SEARCH] = Field(
        None, description="search when the guest asks to search or to see the hotels now"
    )
    goodbye: Annotated[Literal["goodbye"] | None, *GOODBYE] = Field(
        None, description="goodbye when the guest says goodbye or wants to stop"
    )
    repair: Annotated[
        Literal["cancel", "repeat", "handoff", "skip", "out_of_scope", "digression"] | None,
        *REPAIRS,
        *ASKS_ABOUT,
    ] = Field(
        None,
        description="cancel when the guest drops the search to start over, repeat when they ask to hear "
        "the last message again, handoff when they ask for a person, skip when they decline to answer, "
        "digression when they ask about the hotels' policies (cancellation, check-in times, payment, "
        "smoking), out_of_scope when they ask for something other than a hotel stay",
    )

    @field_validator("in_portland")
    @classmethod
    def _portland_only(cls, value: bool | None) -> bool | None:
        if value is False:
            raise ValueError(_rule("rule_portland"))
        return value

    @field_validator("check_in")
    @classmethod
    def _after_today(cls, value: date | None) -> date | None:
        if value is not None and value <= today():
            raise ValueError(_rule("rule_check_in_past"))
        if value is not None and value > today() + timedelta(days=BOOKING_HORIZON):
            raise ValueError(_rule("rule_horizon"))
        return value

    @field_validator("room_types", "amenities")
    @classmethod
    def _once_each(cls, values: list[str] | None) -> list[str] | None:
        return list(dict.fromkeys(values)) if values is not None else None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.check_in and self.check_out:
            if self.check_out <= self.check_in:
                raise ValueError(_rule("rule_check_out"))
            if self.check_out - self.check_in > timedelta(days=MAX_NIGHTS):
                raise ValueError(_rule("rule_nights"))
        if self.min_price is not None and self.max_price is not None and self.min_price > self.max_price:
            raise ValueError(_rule("rule_prices"))
        return self

    @property
    def nights(self) -> list[date]:
        assert self.check_in and self.check_out, "a search needs both dates"
        return stay_nights(self.check_in, self.check_out)

    def search(self) -> list[HotelQuote]:
        """The priced hotels that match, as the guest is shown them: cheapest first, equal totals by
        name (``cheapest_first``)."""
        assert self.check_in and self.check_out, "a search needs both dates"
        found = quote_hotels(
            self.check_in,
            self.check_out,
            room_types=self.room_types or [],
            amenities=self.amenities or [],
            max_airport=self.max_airport_miles,
            max_city_center=self.max_city_center_miles,
            min_price=self.min_price,
            max_price=self.max_price,
        )
        return cheapest_first(found)

    @property
    def nightly_budget(self) -> bool:
        """Whether the guest gave a budget (both price limits are per night): then each hotel of
        the list shows its price per night beside the stay's total."""
        return self.max_price is not None or self.min_price is not None

    def phrases(self, fields: Collection[str], locale: str = ENGLISH) -> list[str]:
        """The known criteria among ``fields`` (not the dates), as the guest reads them in ``locale``,
        in a fixed order.

        Each price limit is said on its own ("up to $700 a night"); ``summary`` joins both.
        """
        said = {
            "max_price": self.max_price is not None and budget(None, self.max_price, locale),
            "min_price": self.min_price is not None and budget(self.min_price, None, locale),
            "room_types": self.room_types
            and either([say(f"room:{kind}", locale) for kind in self.room_types], locale),
            "amenities": self.amenities
            and ", ".join(say(f"amenity:{name}", locale) for name in self.amenities),
            "max_airport_miles": self.max_airport_miles is not None
            and within("near_airport", self.max_airport_miles, locale),
            "max_city_center_miles": self.max_city_center_miles is not None
            and within("near_center", self.max_city_center_miles, locale),
        }
        return [text for name, text in said.items() if name in fields and isinstance(text, str)]

    def summary(self, locale: str = ENGLISH) -> str:
        """The criteria in one line, as the guest reads them above the list."""
        assert self.check_in and self.check_out, "a summary needs both dates"
        stay = say(
            "dates",
            locale,
            start=short_day(self.check_in, locale),
            end=short_day(self.check_out, locale),
            nights=nights(len(self.nights), locale),
        )
        parts = [stay]
        if self.min_price is not None or self.max_price is not None:
            parts.append(budget(self.min_price, self.max_price, locale))
        rest = ("room_types", "amenities", "max_airport_miles", "max_city_center_miles")
        return listed([*parts, *self.phrases(rest, locale)], locale)


def within(key: str, miles: float, locale: str) -> str:
    """A distance bound: "within 5 mi of the airport", "a menos de 1 milla del centro"."""
    return say(f"{key}_one" if miles == 1 else key, locale, miles=miles)


def budget(low: float | None, high: float | None, locale: str = ENGLISH) -> str:
    """A nightly price range: "$100 to $700 a night", "up to $700 a night" or "from $100 a night"."""
    if low is not None and high is not None:
        return say("budget_range", locale, low=whole(low), high=whole(high))
    if high is not None:
        return say("budget_max", locale, high=whole(high))
    assert low is not None, "a budget has a bound"
    return say("budget_min", locale, low=whole(low))
