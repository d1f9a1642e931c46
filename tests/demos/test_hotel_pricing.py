"""Hotel pricing against hand-computed vectors: seasons, room types, holidays, weekends, rounding.

Every expected number below was worked out by hand from the rule
``nightly = level × season × room × holiday × weekend`` (rounded to cents, half up).
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from picoflow_demos.hotel.pricing import (
    AMENITIES,
    HotelQuote,
    federal_holidays,
    hotels,
    night_price,
    quote_hotels,
    stay_nights,
)

D = Decimal


def only(quotes: list[HotelQuote], name: str) -> HotelQuote:
    matches = [quote for quote in quotes if quote.name == name]
    assert len(matches) == 1, [quote.name for quote in quotes]
    return matches[0]


def test_catalog_is_the_shipped_file_in_order() -> None:
    catalog = hotels()
    assert len(catalog) == 32
    assert catalog[0].name == "The Porter Portland, Curio Collection by Hilton"
    assert catalog[-1].name == "Hilton Garden Inn Wilsonville Portland"
    assert {name for hotel in catalog for name in hotel.amenities} == set(AMENITIES)
    assert len(AMENITIES) == 23


def test_federal_holidays_2027_on_their_actual_dates() -> None:
    assert federal_holidays(2027) == {
        date(2027, 1, 1),
        date(2027, 1, 18),  # 3rd Monday of January
        date(2027, 2, 15),  # 3rd Monday of February
        date(2027, 5, 31),  # last Monday of May
        date(2027, 6, 19),  # a Saturday: no observed Friday
        date(2027, 7, 4),  # a Sunday: no observed Monday
        date(2027, 9, 6),  # 1st Monday of September
        date(2027, 10, 11),  # 2nd Monday of October
        date(2027, 11, 11),
        date(2027, 11, 25),  # 4th Thursday of November
        date(2027, 12, 25),
    }


def test_federal_holidays_2028() -> None:
    assert sorted(federal_holidays(2028)) == [
        date(2028, 1, 1),
        date(2028, 1, 17),
        date(2028, 2, 21),
        date(2028, 5, 29),
        date(2028, 6, 19),
        date(2028, 7, 4),
        date(2028, 9, 4),
        date(2028, 10, 9),
        date(2028, 11, 11),
        date(2028, 11, 23),
        date(2028, 12, 25),
    ]


@pytest.mark.parametrize(
    ("night", "expected"),
    [
        (date(2027, 1, 13), D("120.00")),  # Wed, Jan: 100 × 1.2
        (date(2027, 3, 31), D("120.00")),  # Wed, last day at 1.2
        (date(2027, 4, 1), D("140.00")),  # Thu, Apr: 1.4
        (date(2027, 6, 30), D("140.00")),  # Wed
        (date(2027, 7, 1), D("180.00")),  # Thu, Jul: 1.8
        (date(2027, 9, 30), D("180.00")),  # Thu
        (date(2027, 10, 1), D("150.00")),  # Fri, Oct: 1.5
        (date(2027, 11, 1), D("120.00")),  # Mon, Nov: 1.2
        (date(2027, 12, 1), D("120.00")),  # Wed, Dec: 1.2
        (date(2027, 1, 16), D("138.00")),  # Sat: 100 × 1.2 × 1.15
        (date(2027, 1, 1), D("144.00")),  # Fri holiday: 100 × 1.2 × 1.2
        (date(2027, 7, 4), D("248.40")),  # Sun holiday: 100 × 1.8 × 1.2 × 1.15
        (date(2027, 7, 5), D("180.00")),  # Mon after: no observed-day shift
        (date(2027, 11, 25), D("144.00")),  # Thanksgiving: 100 × 1.2 × 1.2
    ],
)
def test_one_bed_night_at_level_100(night: date, expected: Decimal) -> None:
    assert night_price(D(100), "one bed", night) == expected


def test_room_factors() -> None:
    wednesday = date(2027, 1, 13)
    assert night_price(D(100), "two beds", wednesday) == D("192.00")  # 100 × 1.2 × 1.6
    assert night_price(D(100), "suite", wednesday) == D("300.00")  # 100 × 1.2 × 2.5


def test_half_cent_rounds_up_and_total_is_the_sum_of_rounded_nights() -> None:
    # Hampton Inn & Suites Portland-Pearl District, level 125, suite, April (1.4):
    # Fri 125 × 1.4 × 2.5 = 437.50; Sat and Sun × 1.15 = 503.125 -> 503.13 (banker's rounding: 503.12).
    quotes = quote_hotels(date(2027, 4, 2), date(2027, 4, 5), room_types=["suite"])
    quote = only(quotes, "Hampton Inn & Suites Portland-Pearl District")
    assert quote == HotelQuote(
        "Hampton Inn & Suites Portland-Pearl District",
        "suite",
        [D("437.50"), D("503.13"), D("503.13")],
        D("1443.76"),  # the unrounded nights would sum to 1443.75
    )


def test_holiday_weekend_stay_vector() -> None:
    # Tru by Hilton Portland Airport (level 100) is the only hotel with a concierge and a shuttle.
    quotes = quote_hotels(date(2027, 7, 3), date(2027, 7, 6), amenities=["concierge", "airportShuttle"])
    assert quotes == [
        HotelQuote(
            "Tru by Hilton Portland Airport",
            "one bed",
            [D("207.00"), D("248.40"), D("180.00")],  # Sat; Sun July 4th; Mon (not observed)
            D("635.40"),
        )
    ]


def test_priced_room_is_the_first_requested_type_the_hotel_offers() -> None:
    quotes = quote_hotels(
        date(2027, 1, 13), date(2027, 1, 14), room_types=["suite", "two beds"], amenities=["kitchen"]
    )
    assert [(quote.name, quote.room_type, quote.total) for quote in quotes] == [
        ("Home2 Suites by Hilton Portland Airport OR", "suite", D("405.00")),  # 135 × 1.2 × 2.5
        ("Homewood Suites by Hilton Vancouver-Portland", "two beds", D("384.00")),  # 200 × 1.2 × 1.6
        ("Homewood Suites by Hilton Portland Airport", "suite", D("411.00")),
        ("Homewood Suites by Hilton Hillsboro/Beaverton", "suite", D("399.00")),
        ("Home2 Suites by Hilton Portland Hillsboro", "suite", D("375.00")),
        ("Hampton Inn & Suites Portland/Vancouver", "suite", D("570.00")),
    ]


def test_requested_room_type_must_be_offered() -> None:
    names = [quote.name for quote in quote_hotels(date(2027, 1, 13), date(2027, 1, 14), room_types=["suite"])]
    assert len(names) == 21
    assert "The Duniway Portland, a Hilton Hotel" not in names


def test_no_room_type_prices_one_bed_at_every_hotel_in_file_order() -> None:
    quotes = quote_hotels(date(2027, 1, 13), date(2027, 1, 14))
    assert [quote.name for quote in quotes] == [hotel.name for hotel in hotels()]
    assert {quote.room_type for quote in quotes} == {"one bed"}
    assert quotes[0].nightly == [D("144.00")]  # The Porter: 120 × 1.2


def test_distances_are_strict_maximums() -> None:
    near_airport = quote_hotels(date(2027, 1, 13), date(2027, 1, 14), max_airport=2)
    # Three hotels sit exactly 2 miles from the airport; "closer than 2" leaves only the 0.1-mile one.
    assert [quote.name for quote in near_airport] == ["Hampton Inn Portland-Airport"]
    downtown = quote_hotels(date(2027, 1, 13), date(2027, 1, 14), max_city_center=0.5)
    assert [quote.name for quote in downtown] == [
        "The Duniway Portland, a Hilton Hotel",
        "Canopy by Hilton Portland Pearl District",
        "Hampton Inn & Suites Portland-Pearl District",
    ]


def test_every_requested_amenity_is_required() -> None:
    quotes = quote_hotels(date(2027, 1, 13), date(2027, 1, 14), amenities=["tennis", "kitchen"])
    assert [quote.name for quote in quotes] == ["Homewood Suites by Hilton Vancouver-Portland"]
    assert quote_hotels(date(2027, 1, 13), date(2027, 1, 14), amenities=["tennis", "newHotel"]) == []


def test_budget_bounds_use_the_highest_and_lowest_night() -> None:
    stay = (date(2027, 1, 15), date(2027, 1, 17))  # Fri 120.00, Sat 138.00 at Tru Airport
    shuttle = ["concierge", "airportShuttle"]

    def names(min_price: float | None = None, max_price: float | None = None) -> list[str]:
        quotes = quote_hotels(*stay, amenities=shuttle, min_price=min_price, max_price=max_price)
        return [quote.name for quote in quotes]

    assert names(max_price=138) == ["Tru by Hilton Portland Airport"]  # equal to the highest night: kept
    assert names(max_price=137.99) == []
    assert names(min_price=120) == ["Tru by Hilton Portland Airport"]  # equal to the lowest night: kept
    assert names(min_price=120.01) == []
    assert only(quote_hotels(*stay, amenities=shuttle), "Tru by Hilton Portland Airport").total == (
        D("258.00")
    )


def test_nights_exclude_the_check_out_day() -> None:
    assert stay_nights(date(2027, 12, 30), date(2028, 1, 2)) == [
        date(2027, 12, 30),
        date(2027, 12, 31),
        date(2028, 1, 1),
    ]
    # New Year's Day 2028 is a Saturday: holiday and weekend, priced with 2028's holidays.
    assert night_price(D(100), "one bed", date(2028, 1, 1)) == D("165.60")  # 100 × 1.2 × 1.2 × 1.15


def test_invalid_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="check_out must be after check_in"):
        quote_hotels(date(2027, 8, 8), date(2027, 8, 8))
    with pytest.raises(ValueError, match=r"unknown amenity; allowed: freeWiFi, freeParking"):
        quote_hotels(date(2027, 8, 1), date(2027, 8, 2), amenities=["sauna"])
    with pytest.raises(ValueError, match="unknown room type; allowed: one bed, two beds, suite"):
        quote_hotels(date(2027, 8, 1), date(2027, 8, 2), room_types=["penthouse"])
