"""What the hotel demo says, in the languages it speaks: every reply code writes, from one ``Catalog``.

The guest is answered in the language their words told the search step (``SlotStep.locale``), one
of ``LOCALES``. Prices are written by the catalog (``{total:USD}``: "$864.00", "864,00 US$"); the
English dates keep the demo's own formats ("Sunday August 1, 2027", "Aug 1", "Sun 8/1/2027"), the
others are their locale's (CLDR's full and medium dates), so ``full_day``, ``short_day`` and
``night_day`` write them before they fill a placeholder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import Literal, get_args

from picoflow import Catalog, Locale, RepairTexts
from picoflow_demos.hotel.pricing import AMENITY_LABELS

Language = Literal["en", "es", "de", "fr"]
LOCALES: tuple[Language, ...] = get_args(Language)
"""The languages of the demo: its declared words (``Said(locale=...)``) and its replies."""
ENGLISH = "en"

_ENGLISH: Mapping[str, str] = {
    # The search step.
    "greeting": "Hello! I can help you find a hotel in the Portland, Oregon area.",
    "ask_portland": "Is your stay in the Portland area?",
    "example_dates": "August 3 to August 6, 2027",
    "ask_dates": "What are your check-in and check-out dates?",
    "ask_budget": "What nightly budget do you have in mind: a minimum, a maximum or both?",
    "ask_rooms": "Which room type would you like: one bed, two beds or suite?",
    "ask_amenities": "Which amenities do you need? For example free WiFi, free parking or free breakfast.",
    "ask_distance": "Any maximum distance to the airport or the city center, in miles?",
    "ask_check_out": "Check-in {check_in}. What is your check-out date?",
    "great": "Great.",
    "stay": "Check-in {check_in}, check-out {check_out}: {nights}.",
    "noted": "Noted: {criteria}.",
    "no_answer": "I'm sorry, I have no answer to that here.",
    "changed": "Changed: {criteria}.",
    "nights_one": "{count} night",
    "nights_other": "{count} nights",
    "budget_range": "${low:number} to ${high:number} a night",
    "budget_max": "up to ${high:number} a night",
    "budget_min": "from ${low:number} a night",
    "near_airport": "within {miles:number} mi of the airport",
    "near_center": "within {miles:number} mi of the city center",
    "near_airport_one": "within {miles:number} mi of the airport",
    "near_center_one": "within {miles:number} mi of the city center",
    "dates": "{start} to {end}, {nights}",
    "or": " or ",
    "and": " and ",
    "then": "; ",
    "no_match": (
        "No hotel matches {criteria}. Would you like to relax one of them: the budget, the room type, "
        "the amenities or the distance?"
    ),
    # What the guest gave that a rule refused, as the slots model's validators word it.
    "sorry": "Sorry, {why}.",
    "refused": "Sorry, I could not take that answer.",
    "rule_portland": "we only have hotels in the Portland, Oregon area",
    "rule_check_in_past": "the check-in date must be after today, {today}",
    "rule_horizon": "bookings open at most {days} days ahead",
    "rule_check_out": "the check-out date must be after the check-in date",
    "rule_nights": "a stay can be at most {nights} nights",
    "rule_prices": "the lowest nightly price must not be more than the highest",
    "rule_no_such_day": "that month has no such day",
    "rule_day_numbers": "give the month and the day as numbers",
    # The list, the comparisons and the booking.
    "choose": (
        "Which hotel would you like to book? Give its number or name. "
        "You can also compare hotels or change the search."
    ),
    "follow_up": "Another comparison or ready to book?",
    "help": (
        "I can book one of these hotels, compare them on price, room type, amenities or distance, "
        "or change the search."
    ),
    "listed": "{number}. **{hotel}** ({room}): {total:USD} total for {nights}",
    "listed_nightly": "{number}. **{hotel}** ({room}): {total:USD} total for {nights}, {nightly} a night",
    "list_order": "Cheapest first:",
    "listed_note_one": "Showed the list of {count} hotel.",
    "listed_note_other": "Showed the list of {count} hotels.",
    "compared_note": "Compared hotels {hotels} on {features}.",
    "list_range": "The list has hotels 1 to {count}.",
    "book_which": "Which hotel would you like to book? Give one number from the list, 1 to {count}.",
    "compare_which": "Which hotels shall I compare? Give their numbers from the list, 1 to {count}.",
    "confirmed": "**Your booking is confirmed.**",
    "booked_hotel": "- Hotel: {hotel}",
    "booked_room": "- Room: {room}",
    "booked_stay": "- Stay: {start} to {end} ({nights})",
    "booked_total": "- Total: {total:USD}",
    "booked_code": "- Confirmation number: **{code}**",
    "book_summary": (
        "Book {hotel}, {room}: check-in {check_in}, check-out {check_out} ({nights}), {nightly} a night, "
        "{total:USD} in total"
    ),
    "nightly_range": "{low:USD} to {high:USD}",
    "not_booked": "OK, nothing was booked.",
    "thanks": "Thank you for booking with us. Enjoy your stay in Portland!",
    "farewell": "Thank you for visiting. Goodbye, and you are welcome back any time!",
    "goodbye_prompt": "The guest has ended the conversation. Thank them briefly and say goodbye.",
    # The tables.
    "money": "{amount:USD}",
    "night": "Night",
    "room": "Room",
    "total": "**Total**",
    "distance": "Distance",
    "airport": "Airport",
    "city_center": "City center",
    "room_type": "Room type",
    "amenity": "Amenity",
    "miles": "{miles:number} mi",
    "feature:price": "price",
    "feature:roomType": "room type",
    "feature:amenities": "amenities",
    "feature:distance": "distance",
    "room:one bed": "one bed",
    "room:two beds": "two beds",
    "room:suite": "suite",
    **{f"amenity:{name}": label for name, label in AMENITY_LABELS.items()},
}

_SPANISH: Mapping[str, str] = {
    "greeting": "¡Hola! Puedo ayudarle a encontrar un hotel en la zona de Portland, Oregón.",
    "ask_portland": "¿Su estancia es en la zona de Portland?",
    "example_dates": "del 3 al 6 de agosto de 2027",
    "ask_dates": "¿Cuáles son sus fechas de llegada y de salida?",
    "ask_budget": "¿Qué presupuesto por noche tiene en mente: un mínimo, un máximo o ambos?",
    "ask_rooms": "¿Qué tipo de habitación prefiere: una cama, dos camas o suite?",
    "ask_amenities": (
        "¿Qué servicios necesita? Por ejemplo wifi gratis, aparcamiento gratis o desayuno gratis."
    ),
    "ask_distance": "¿Alguna distancia máxima al aeropuerto o al centro de la ciudad, en millas?",
    "ask_check_out": "Llegada el {check_in}. ¿Cuál es su fecha de salida?",
    "great": "Perfecto.",
    "stay": "Llegada el {check_in}, salida el {check_out}: {nights}.",
    "noted": "Anotado: {criteria}.",
    "no_answer": "Lo siento, no tengo respuesta para eso aquí.",
    "changed": "Cambiado: {criteria}.",
    "nights_one": "{count} noche",
    "nights_other": "{count} noches",
    "budget_range": "de {low:number} a {high:number} US$ por noche",
    "budget_max": "hasta {high:number} US$ por noche",
    "budget_min": "desde {low:number} US$ por noche",
    "near_airport": "a menos de {miles:number} millas del aeropuerto",
    "near_center": "a menos de {miles:number} millas del centro",
    "near_airport_one": "a menos de {miles:number} milla del aeropuerto",
    "near_center_one": "a menos de {miles:number} milla del centro",
    "dates": "del {start} al {end}, {nights}",
    "or": " o ",
    "and": " y ",
    "then": "; ",
    "no_match": (
        "Ningún hotel cumple: {criteria}. ¿Quiere flexibilizar alguno de estos criterios: el presupuesto, "
        "el tipo de habitación, los servicios o la distancia?"
    ),
    "sorry": "Lo siento, {why}.",
    "refused": "Lo siento, no he podido aceptar esa respuesta.",
    "rule_portland": "solo tenemos hoteles en la zona de Portland, Oregón",
    "rule_check_in_past": "la fecha de llegada debe ser posterior a hoy, {today}",
    "rule_horizon": "las reservas se abren como máximo con {days} días de antelación",
    "rule_check_out": "la fecha de salida debe ser posterior a la de llegada",
    "rule_nights": "una estancia puede durar como máximo {nights} noches",
    "rule_prices": "el precio mínimo por noche no puede ser mayor que el máximo",
    "rule_no_such_day": "ese mes no tiene ese día",
    "rule_day_numbers": "indique el mes y el día con números",
    "choose": (
        "¿Qué hotel quiere reservar? Indique su número o su nombre. "
        "También puede comparar hoteles o cambiar la búsqueda."
    ),
    "follow_up": "¿Otra comparación, o prefiere reservar?",
    "help": (
        "Puedo reservar uno de estos hoteles, compararlos por precio, tipo de habitación, servicios o "
        "distancia, o cambiar la búsqueda."
    ),
    "listed": "{number}. **{hotel}** ({room}): {total:USD} en total por {nights}",
    "listed_nightly": (
        "{number}. **{hotel}** ({room}): {total:USD} en total por {nights}, {nightly} por noche"
    ),
    "list_order": "Del más barato al más caro:",
    "listed_note_one": "Mostré la lista de {count} hotel.",
    "listed_note_other": "Mostré la lista de {count} hoteles.",
    "compared_note": "Comparé los hoteles {hotels} por {features}.",
    "list_range": "La lista tiene los hoteles del 1 al {count}.",
    "book_which": "¿Qué hotel quiere reservar? Indique un solo número de la lista, del 1 al {count}.",
    "compare_which": "¿Qué hoteles comparo? Indique sus números de la lista, del 1 al {count}.",
    "confirmed": "**Su reserva está confirmada.**",
    "booked_hotel": "- Hotel: {hotel}",
    "booked_room": "- Habitación: {room}",
    "booked_stay": "- Estancia: del {start} al {end} ({nights})",
    "booked_total": "- Total: {total:USD}",
    "booked_code": "- Número de confirmación: **{code}**",
    "book_summary": (
        "Reservar {hotel}, {room}: llegada el {check_in}, salida el {check_out} ({nights}), {nightly} "
        "por noche, {total:USD} en total"
    ),
    "nightly_range": "de {low:USD} a {high:USD}",
    "not_booked": "De acuerdo, no se ha reservado nada.",
    "thanks": "Gracias por reservar con nosotros. ¡Disfrute de su estancia en Portland!",
    "farewell": "Gracias por su visita. ¡Adiós, y vuelva cuando quiera!",
    "goodbye_prompt": (
        "El huésped ha terminado la conversación. Dale las gracias brevemente y despídete, en español."
    ),
    "money": "{amount:USD}",
    "night": "Noche",
    "room": "Habitación",
    "total": "**Total**",
    "distance": "Distancia",
    "airport": "Aeropuerto",
    "city_center": "Centro",
    "room_type": "Tipo de habitación",
    "amenity": "Servicio",
    "miles": "{miles:number} mi",
    "feature:price": "precio",
    "feature:roomType": "tipo de habitación",
    "feature:amenities": "servicios",
    "feature:distance": "distancia",
    "room:one bed": "una cama",
    "room:two beds": "dos camas",
    "room:suite": "suite",
    "amenity:freeWiFi": "Wifi gratis",
    "amenity:freeParking": "Aparcamiento gratis",
    "amenity:freeBreakfast": "Desayuno gratis",
    "amenity:indoorPool": "Piscina cubierta",
    "amenity:outdoorPool": "Piscina exterior",
    "amenity:fitnessCenter": "Gimnasio",
    "amenity:petFriendly": "Se admiten mascotas",
    "amenity:nonSmoking": "Sin humo",
    "amenity:digitalKey": "Llave digital",
    "amenity:evCharging": "Carga de coches eléctricos",
    "amenity:airportShuttle": "Traslado al aeropuerto",
    "amenity:onSiteRestaurant": "Restaurante en el hotel",
    "amenity:roomService": "Servicio de habitaciones",
    "amenity:businessCenter": "Centro de negocios",
    "amenity:meetingRoom": "Salas de reuniones",
    "amenity:connectingRooms": "Habitaciones comunicadas",
    "amenity:streaming": "TV con streaming",
    "amenity:kitchen": "Cocina",
    "amenity:concierge": "Conserjería",
    "amenity:boutique": "Hotel boutique",
    "amenity:eveningReception": "Cóctel por la tarde",
    "amenity:tennis": "Tenis",
    "amenity:newHotel": "Hotel nuevo",
}

_GERMAN: Mapping[str, str] = {
    "greeting": "Hallo! Ich helfe Ihnen gern, ein Hotel in der Gegend von Portland, Oregon, zu finden.",
    "ask_portland": "Ist Ihr Aufenthalt in der Gegend von Portland?",
    "example_dates": "vom 3. bis 6. August 2027",
    "ask_dates": "An welchem Tag reisen Sie an, und an welchem reisen Sie ab?",
    "ask_budget": "An welches Budget pro Nacht denken Sie: ein Minimum, ein Maximum oder beides?",
    "ask_rooms": "Welchen Zimmertyp möchten Sie: ein Bett, zwei Betten oder eine Suite?",
    "ask_amenities": (
        "Welche Ausstattung brauchen Sie? Zum Beispiel kostenloses WLAN, kostenloses Parken oder "
        "kostenloses Frühstück."
    ),
    "ask_distance": "Eine maximale Entfernung zum Flughafen oder zum Stadtzentrum, in Meilen?",
    "ask_check_out": "Anreise am {check_in}. An welchem Tag reisen Sie ab?",
    "great": "Sehr gut.",
    "stay": "Anreise am {check_in}, Abreise am {check_out}: {nights}.",
    "noted": "Notiert: {criteria}.",
    "no_answer": "Darauf habe ich hier leider keine Antwort.",
    "changed": "Geändert: {criteria}.",
    "nights_one": "{count} Nacht",
    "nights_other": "{count} Nächte",
    "budget_range": "{low:number} bis {high:number} $ pro Nacht",
    "budget_max": "bis {high:number} $ pro Nacht",
    "budget_min": "ab {low:number} $ pro Nacht",
    "near_airport": "höchstens {miles:number} Meilen vom Flughafen",
    "near_center": "höchstens {miles:number} Meilen vom Stadtzentrum",
    "near_airport_one": "höchstens {miles:number} Meile vom Flughafen",
    "near_center_one": "höchstens {miles:number} Meile vom Stadtzentrum",
    "dates": "{start} bis {end}, {nights}",
    "or": " oder ",
    "and": " und ",
    "then": "; ",
    "no_match": (
        "Kein Hotel passt zu: {criteria}. Möchten Sie eines davon lockern: das Budget, den Zimmertyp, "
        "die Ausstattung oder die Entfernung?"
    ),
    "sorry": "Entschuldigung, {why}.",
    "refused": "Entschuldigung, diese Antwort konnte ich nicht übernehmen.",
    "rule_portland": "wir haben nur Hotels in der Gegend von Portland, Oregon",
    "rule_check_in_past": "die Anreise muss nach dem heutigen Tag liegen, {today}",
    "rule_horizon": "Buchungen sind höchstens {days} Tage im Voraus möglich",
    "rule_check_out": "die Abreise muss nach der Anreise liegen",
    "rule_nights": "ein Aufenthalt darf höchstens {nights} Nächte dauern",
    "rule_prices": "der niedrigste Preis pro Nacht darf nicht über dem höchsten liegen",
    "rule_no_such_day": "diesen Tag hat der Monat nicht",
    "rule_day_numbers": "bitte nennen Sie Monat und Tag als Zahlen",
    "choose": (
        "Welches Hotel möchten Sie buchen? Nennen Sie seine Nummer oder seinen Namen. "
        "Sie können auch Hotels vergleichen oder die Suche ändern."
    ),
    "follow_up": "Noch ein Vergleich, oder möchten Sie buchen?",
    "help": (
        "Ich kann eines dieser Hotels buchen, sie nach Preis, Zimmertyp, Ausstattung oder Entfernung "
        "vergleichen oder die Suche ändern."
    ),
    "listed": "{number}. **{hotel}** ({room}): {total:USD} insgesamt für {nights}",
    "listed_nightly": (
        "{number}. **{hotel}** ({room}): {total:USD} insgesamt für {nights}, {nightly} pro Nacht"
    ),
    "list_order": "Das günstigste zuerst:",
    "listed_note_one": "Die Liste mit {count} Hotel gezeigt.",
    "listed_note_other": "Die Liste mit {count} Hotels gezeigt.",
    "compared_note": "Die Hotels {hotels} nach {features} verglichen.",
    "list_range": "Die Liste hat die Hotels 1 bis {count}.",
    "book_which": "Welches Hotel möchten Sie buchen? Nennen Sie eine Nummer aus der Liste, 1 bis {count}.",
    "compare_which": (
        "Welche Hotels soll ich vergleichen? Nennen Sie ihre Nummern aus der Liste, 1 bis {count}."
    ),
    "confirmed": "**Ihre Buchung ist bestätigt.**",
    "booked_hotel": "- Hotel: {hotel}",
    "booked_room": "- Zimmer: {room}",
    "booked_stay": "- Aufenthalt: {start} bis {end} ({nights})",
    "booked_total": "- Gesamt: {total:USD}",
    "booked_code": "- Bestätigungsnummer: **{code}**",
    "book_summary": (
        "{hotel} buchen, {room}: Anreise am {check_in}, Abreise am {check_out} ({nights}), {nightly} "
        "pro Nacht, insgesamt {total:USD}"
    ),
    "nightly_range": "{low:USD} bis {high:USD}",
    "not_booked": "In Ordnung, es wurde nichts gebucht.",
    "thanks": "Vielen Dank für Ihre Buchung. Genießen Sie Ihren Aufenthalt in Portland!",
    "farewell": "Danke für Ihren Besuch. Auf Wiedersehen, Sie sind jederzeit wieder willkommen!",
    "goodbye_prompt": (
        "Der Gast hat das Gespräch beendet. Bedanke dich kurz und verabschiede dich, auf Deutsch."
    ),
    "money": "{amount:USD}",
    "night": "Nacht",
    "room": "Zimmer",
    "total": "**Gesamt**",
    "distance": "Entfernung",
    "airport": "Flughafen",
    "city_center": "Stadtzentrum",
    "room_type": "Zimmertyp",
    "amenity": "Ausstattung",
    "miles": "{miles:number} mi",
    "feature:price": "Preis",
    "feature:roomType": "Zimmertyp",
    "feature:amenities": "Ausstattung",
    "feature:distance": "Entfernung",
    "room:one bed": "ein Bett",
    "room:two beds": "zwei Betten",
    "room:suite": "Suite",
    "amenity:freeWiFi": "Kostenloses WLAN",
    "amenity:freeParking": "Kostenloses Parken",
    "amenity:freeBreakfast": "Kostenloses Frühstück",
    "amenity:indoorPool": "Hallenbad",
    "amenity:outdoorPool": "Außenpool",
    "amenity:fitnessCenter": "Fitnessraum",
    "amenity:petFriendly": "Haustiere erlaubt",
    "amenity:nonSmoking": "Nichtraucher",
    "amenity:digitalKey": "Digitaler Schlüssel",
    "amenity:evCharging": "Ladestation für E-Autos",
    "amenity:airportShuttle": "Flughafen-Shuttle",
    "amenity:onSiteRestaurant": "Restaurant im Haus",
    "amenity:roomService": "Zimmerservice",
    "amenity:businessCenter": "Businesscenter",
    "amenity:meetingRoom": "Tagungsräume",
    "amenity:connectingRooms": "Verbindungszimmer",
    "amenity:streaming": "Streaming-TV",
    "amenity:kitchen": "Küche",
    "amenity:concierge": "Concierge",
    "amenity:boutique": "Boutique-Hotel",
    "amenity:eveningReception": "Abendempfang",
    "amenity:tennis": "Tennis",
    "amenity:newHotel": "Neues Hotel",
}

_FRENCH: Mapping[str, str] = {
    "greeting": "Bonjour ! Je peux vous aider à trouver un hôtel dans la région de Portland, dans l'Oregon.",
    "ask_portland": "Votre séjour est-il dans la région de Portland ?",
    "example_dates": "du 3 au 6 août 2027",
    "ask_dates": "Quelles sont vos dates d'arrivée et de départ ?",
    "ask_budget": "Quel budget par nuit envisagez-vous : un minimum, un maximum ou les deux ?",
    "ask_rooms": "Quel type de chambre souhaitez-vous : un lit, deux lits ou une suite ?",
    "ask_amenities": (
        "De quels équipements avez-vous besoin ? Par exemple le wifi gratuit, le parking gratuit ou le "
        "petit-déjeuner gratuit."
    ),
    "ask_distance": "Une distance maximale de l'aéroport ou du centre-ville, en miles ?",
    "ask_check_out": "Arrivée le {check_in}. Quelle est votre date de départ ?",
    "great": "Très bien.",
    "stay": "Arrivée le {check_in}, départ le {check_out} : {nights}.",
    "noted": "C'est noté : {criteria}.",
    "no_answer": "Désolé, je n'ai pas de réponse à cela ici.",
    "changed": "Modifié : {criteria}.",
    "nights_one": "{count} nuit",
    "nights_other": "{count} nuits",
    "budget_range": "de {low:number} à {high:number} $ par nuit",
    "budget_max": "jusqu'à {high:number} $ par nuit",
    "budget_min": "à partir de {low:number} $ par nuit",
    "near_airport": "à moins de {miles:number} miles de l'aéroport",
    "near_center": "à moins de {miles:number} miles du centre-ville",
    "near_airport_one": "à moins de {miles:number} mile de l'aéroport",
    "near_center_one": "à moins de {miles:number} mile du centre-ville",
    "dates": "du {start} au {end}, {nights}",
    "or": " ou ",
    "and": " et ",
    "then": " ; ",
    "no_match": (
        "Aucun hôtel ne correspond à : {criteria}. Voulez-vous assouplir l'un de ces critères : le budget, "
        "le type de chambre, les équipements ou la distance ?"
    ),
    "sorry": "Désolé, {why}.",
    "refused": "Désolé, je n'ai pas pu retenir cette réponse.",
    "rule_portland": "nous n'avons des hôtels que dans la région de Portland, dans l'Oregon",
    "rule_check_in_past": "la date d'arrivée doit être postérieure à aujourd'hui, {today}",
    "rule_horizon": "les réservations ouvrent au plus {days} jours à l'avance",
    "rule_check_out": "la date de départ doit être postérieure à la date d'arrivée",
    "rule_nights": "un séjour peut durer au plus {nights} nuits",
    "rule_prices": "le prix minimum par nuit ne doit pas dépasser le prix maximum",
    "rule_no_such_day": "ce mois n'a pas ce jour-là",
    "rule_day_numbers": "indiquez le mois et le jour en chiffres",
    "choose": (
        "Quel hôtel souhaitez-vous réserver ? Donnez son numéro ou son nom. "
        "Vous pouvez aussi comparer des hôtels ou modifier la recherche."
    ),
    "follow_up": "Une autre comparaison, ou souhaitez-vous réserver ?",
    "help": (
        "Je peux réserver l'un de ces hôtels, les comparer selon le prix, le type de chambre, les "
        "équipements ou la distance, ou modifier la recherche."
    ),
    "listed": "{number}. **{hotel}** ({room}) : {total:USD} au total pour {nights}",
    "listed_nightly": (
        "{number}. **{hotel}** ({room}) : {total:USD} au total pour {nights}, {nightly} par nuit"
    ),
    "list_order": "Du moins cher au plus cher :",
    "listed_note_one": "Liste de {count} hôtel affichée.",
    "listed_note_other": "Liste de {count} hôtels affichée.",
    "compared_note": "Hôtels {hotels} comparés selon {features}.",
    "list_range": "La liste compte les hôtels 1 à {count}.",
    "book_which": "Quel hôtel souhaitez-vous réserver ? Donnez un seul numéro de la liste, de 1 à {count}.",
    "compare_which": "Quels hôtels dois-je comparer ? Donnez leurs numéros dans la liste, de 1 à {count}.",
    "confirmed": "**Votre réservation est confirmée.**",
    "booked_hotel": "- Hôtel : {hotel}",
    "booked_room": "- Chambre : {room}",
    "booked_stay": "- Séjour : du {start} au {end} ({nights})",
    "booked_total": "- Total : {total:USD}",
    "booked_code": "- Numéro de confirmation : **{code}**",
    "book_summary": (
        "Réserver {hotel}, {room} : arrivée le {check_in}, départ le {check_out} ({nights}), {nightly} "
        "par nuit, {total:USD} au total"
    ),
    "nightly_range": "de {low:USD} à {high:USD}",
    "not_booked": "D'accord, rien n'a été réservé.",
    "thanks": "Merci d'avoir réservé chez nous. Profitez bien de votre séjour à Portland !",
    "farewell": "Merci de votre visite. Au revoir, et à bientôt !",
    "goodbye_prompt": (
        "Le client a mis fin à la conversation. Remercie-le brièvement et dis-lui au revoir, en français."
    ),
    "money": "{amount:USD}",
    "night": "Nuit",
    "room": "Chambre",
    "total": "**Total**",
    "distance": "Distance",
    "airport": "Aéroport",
    "city_center": "Centre-ville",
    "room_type": "Type de chambre",
    "amenity": "Équipement",
    "miles": "{miles:number} mi",
    "feature:price": "prix",
    "feature:roomType": "type de chambre",
    "feature:amenities": "équipements",
    "feature:distance": "distance",
    "room:one bed": "un lit",
    "room:two beds": "deux lits",
    "room:suite": "suite",
    "amenity:freeWiFi": "Wi-Fi gratuit",
    "amenity:freeParking": "Parking gratuit",
    "amenity:freeBreakfast": "Petit-déjeuner gratuit",
    "amenity:indoorPool": "Piscine intérieure",
    "amenity:outdoorPool": "Piscine extérieure",
    "amenity:fitnessCenter": "Salle de sport",
    "amenity:petFriendly": "Animaux acceptés",
    "amenity:nonSmoking": "Non-fumeur",
    "amenity:digitalKey": "Clé numérique",
    "amenity:evCharging": "Borne de recharge",
    "amenity:airportShuttle": "Navette aéroport",
    "amenity:onSiteRestaurant": "Restaurant sur place",
    "amenity:roomService": "Service en chambre",
    "amenity:businessCenter": "Centre d'affaires",
    "amenity:meetingRoom": "Salles de réunion",
    "amenity:connectingRooms": "Chambres communicantes",
    "amenity:streaming": "TV en streaming",
    "amenity:kitchen": "Cuisine",
    "amenity:concierge": "Conciergerie",
    "amenity:boutique": "Hôtel de charme",
    "amenity:eveningReception": "Cocktail du soir",
    "amenity:tennis": "Tennis",
    "amenity:newHotel": "Hôtel récent",
}

REPAIR_TEXTS: Mapping[str, RepairTexts] = {
    "en": RepairTexts(),
    "es": RepairTexts(
        confirm_cancel="¿Descarto todo lo que me ha dicho ({lost}) y empezamos de nuevo? Responda sí o no.",
        cancelled="De acuerdo, lo he descartado. {question}",
        kept_going="Bien, sigamos. {question}",
        out_of_scope="Lo siento, con eso no puedo ayudarle aquí. {question}",
        skip_required="Necesito este dato para seguir. {question}",
        clarify="¿Cuál de ellos? {options}",
        no_progress="No he podido usar esa respuesta. {why} {question} {example}",
        example="Por ejemplo: {example}",
        handoff_unavailable="Lo siento, aquí no hay nadie que pueda atenderle. {question}",
    ),
    "de": RepairTexts(
        confirm_cancel="Soll ich alles verwerfen, was Sie mir gesagt haben ({lost}), und neu beginnen? "
        "Bitte antworten Sie mit ja oder nein.",
        cancelled="In Ordnung, ich habe das verworfen. {question}",
        kept_going="Gut, machen wir weiter. {question}",
        out_of_scope="Das kann ich hier leider nicht. {question}",
        skip_required="Diese Angabe brauche ich, um weiterzumachen. {question}",
        clarify="Welches meinen Sie? {options}",
        no_progress="Diese Antwort konnte ich nicht verwenden. {why} {question} {example}",
        example="Zum Beispiel: {example}",
        handoff_unavailable="Leider kann hier niemand übernehmen. {question}",
    ),
    "fr": RepairTexts(
        confirm_cancel="Dois-je oublier tout ce que vous m'avez dit ({lost}) et recommencer ? "
        "Répondez oui ou non.",
        cancelled="Entendu, j'ai tout oublié. {question}",
        kept_going="Bien, continuons. {question}",
        out_of_scope="Désolé, je ne peux pas vous aider pour cela ici. {question}",
        skip_required="J'ai besoin de cette information pour continuer. {question}",
        clarify="Lequel voulez-vous dire ? {options}",
        no_progress="Je n'ai pas pu utiliser cette réponse. {why} {question} {example}",
        example="Par exemple : {example}",
        handoff_unavailable="Désolé, personne ne peut prendre le relais ici. {question}",
    ),
}
"""What the repair patterns say (``picoflow.repairs``), in each of ``LOCALES``."""

TEXTS: Mapping[str | Locale, Mapping[str, str]] = {
    "en": _ENGLISH,
    "es": _SPANISH,
    "de": _GERMAN,
    "fr": _FRENCH,
}
"""The replies' texts by language. A text a language lacks would be said in English: the tests
check that each language has them all."""
REPLIES = Catalog(TEXTS, default=ENGLISH)
"""Every reply the demo writes in code, in each of ``LOCALES`` (checked when built: the same
placeholders in every language)."""


def say(key: str, locale: str, /, **values: object) -> str:
    """The reply ``key`` in ``locale``, its placeholders written that locale's way."""
    return REPLIES.say(key, locale, **values)


def nights(count: int, locale: str) -> str:
    """ "3 nights", "1 noche", "3 Nächte", "1 nuit"."""
    return say("nights_one" if count == 1 else "nights_other", locale, count=count)


def per_night(prices: Sequence[Decimal], locale: str) -> str:
    """A stay's price per night: "$311.04", or its range when the nights differ ("$311.04 to
    $357.70")."""
    low, high = min(prices), max(prices)
    if low == high:
        return say("money", locale, amount=low)
    return say("nightly_range", locale, low=low, high=high)


def either(items: Sequence[str], locale: str) -> str:
    """ "suite or two beds": the options a guest would take any of."""
    return say("or", locale).join(items)


def listed(items: Sequence[str], locale: str) -> str:
    """ "up to $400 a night; two beds": criteria one after the other."""
    return say("then", locale).join(items)


def joined(items: Sequence[str], locale: str) -> str:
    """ "1, 2 and 5": the items of a list, the last one after the locale's "and"."""
    if len(items) == 1:
        return items[0]
    return f"{', '.join(items[:-1])}{say('and', locale)}{items[-1]}"


def whole(amount: float) -> Decimal:
    """A budget in whole dollars, rounded the way the English replies always wrote it ("$1,250")."""
    return Decimal(f"{amount:.0f}")


def full_day(day: date, locale: str) -> str:
    """ "Sunday August 1, 2027" (the demo's English), "domingo, 1 de agosto de 2027"."""
    if locale == ENGLISH:
        return f"{day:%A} {day:%B} {day.day}, {day.year}"
    return Locale.of(locale).format_date(day, "full")


def short_day(day: date, locale: str) -> str:
    """ "Aug 1" (the demo's English, the year said elsewhere), "1 ago 2027", "01.08.2027"."""
    if locale == ENGLISH:
        return f"{day:%b} {day.day}"
    return Locale.of(locale).format_date(day, "medium")


def night_day(day: date, locale: str) -> str:
    """ "Sun 8/1/2027" (the demo's English, the weekday setting the price), "1 ago 2027"."""
    if locale == ENGLISH:
        return f"{day:%a} {day.month}/{day.day}/{day.year}"
    return Locale.of(locale).format_date(day, "medium")
