"""Locales: a message's words, numbers, dates and months read the way one locale writes them, and
replies written its way, from CLDR (Babel) and text2num; ``Locale.any()`` reads a number every
plausible way; a ``Catalog`` holds a flow's replies per locale and is checked when built."""

from __future__ import annotations

import json
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path

import babel
import pytest
from hypothesis import given
from hypothesis import strategies as st

import picoflow.locale
from picoflow import Catalog, FlowDefinitionError, Locale
from picoflow.locale import months_in_any_language
from picoflow.slots.words import written_numbers

NARROW_NBSP = "\u202f"  # what CLDR puts between groups of digits in French
NBSP = "\u00a0"

EN, US, GB, DE, ES, FR, JA = (Locale.of(tag) for tag in ("en", "en-US", "en-GB", "de", "es", "fr", "ja"))


def numbers(*values: str) -> frozenset[Decimal]:
    return frozenset(Decimal(value) for value in values)


# --- tags -----------------------------------------------------------------------------------------


def test_a_locale_is_its_canonical_tag_checked_against_cldr() -> None:
    assert Locale.of("de-de") == Locale("de_DE") == Locale.of(Locale("de-DE"))
    assert Locale.of("de-de").tag == "de-DE"
    assert [Locale.of(tag).tag for tag in ("EN", "en-us", "es-419", "zh-TW", "zh-Hant-TW")] == [
        "en",
        "en-US",
        "es-419",
        "zh-Hant-TW",
        "zh-Hant-TW",
    ]
    assert (DE.language, Locale.of("de-CH").language, Locale.of("pt-BR").language) == ("de", "de", "pt")
    assert str(Locale.of("fr-CA")) == "fr-CA"
    assert Locale.of("iw").language == "he"  # CLDR's alias for a retired code
    assert {Locale.of("es"), Locale.of("ES")} == {ES}
    assert Locale.any() == Locale.of("und") and not Locale.any().declared and DE.declared


@pytest.mark.parametrize("tag", ["xx", "english", "en-ZZ", "", "en-", "de-Klingon"])
def test_an_unknown_tag_is_a_definition_error_naming_it(tag: str) -> None:
    with pytest.raises(FlowDefinitionError) as raised:
        Locale.of(tag)
    assert str(raised.value).startswith(f"unknown locale {tag!r}")


def test_a_tag_is_text() -> None:
    with pytest.raises(FlowDefinitionError, match="a locale is a BCP 47 tag such as 'en' or 'de-DE', not 7"):
        Locale(7)  # type: ignore[arg-type]


# --- numbers in digits ----------------------------------------------------------------------------


def test_digits_are_read_with_the_locales_decimal_and_group_symbols() -> None:
    assert DE.numbers("2,5 km") == numbers("2.5")
    assert DE.numbers("1.250 Euro") == numbers("1250")
    assert DE.numbers("1.250,50 €") == numbers("1250.5")
    assert ES.numbers("1.250,50 €") == numbers("1250.5")
    assert EN.numbers("1,250") == numbers("1250")
    assert EN.numbers("$1,250.50") == numbers("1250.5")
    assert EN.numbers("1.250") == numbers("1.25")
    assert Locale.of("es-MX").numbers("$1,250.50") == numbers("1250.5")  # Mexico writes numbers as the US
    assert Locale.of("en-IN").numbers("₹12,34,567") == numbers("1234567")  # groups of two, then three


def test_a_space_of_any_width_groups_digits_where_the_locale_groups_with_one() -> None:
    for space in (NARROW_NBSP, NBSP, " "):
        assert FR.numbers(f"1{space}250,50 €") == numbers("1250.5")
    assert FR.numbers("chambres 12 15 20") == numbers("12", "15", "20")  # no groups of three: a list
    # English groups with commas: a space parts two numbers.
    assert EN.numbers("1 250") == numbers("1", "250")


def test_percent_and_currency_signs_are_left_aside() -> None:
    assert DE.numbers("25 % Rabatt, 80 EUR") == numbers("25", "80")
    assert EN.numbers("25% off, €80 or 80€") == numbers("25", "80")


def test_digits_that_make_no_number_of_the_locale_are_read_one_by_one() -> None:
    for locale in (EN, DE):
        assert locale.numbers("compare 2,5,8") == numbers("2", "5", "8")
        assert locale.numbers("from 20.10.2027") == numbers("20", "10", "2027")
        assert locale.numbers("2026-10-21, 8/1, 10:30") == numbers("2026", "10", "21", "8", "1", "30")
    assert EN.numbers("2,5 km") == numbers("2", "5")
    assert EN.numbers("2.5,3") == numbers("2.5", "3")  # the pieces between commas, each a number
    assert DE.numbers("2,5.3") == numbers("2.5", "3")


def test_full_width_digits_and_marks_are_digits() -> None:
    assert JA.numbers("１，２５０円で") == numbers("1250")
    assert EN.numbers("１，２５０ yen") == numbers("1250")


def test_a_sign_is_not_read() -> None:
    assert EN.numbers("-5 degrees, 10-15 miles") == numbers("5", "10", "15")
    assert DE.numbers("-5 Grad") == numbers("5")


ODD_PIECES = [
    *"0123456789 ,.'’-/:%€$aé東ホ\u00a0\u202f\ue000١，",
    "three hundred",
    " million ",
    "dos",
    "zwei",
]


@given(st.lists(st.sampled_from(ODD_PIECES), max_size=30).map("".join) | st.text(max_size=40))
def test_any_text_gives_words_and_non_negative_numbers(text: str) -> None:
    for locale in (EN, DE, FR, JA, Locale.any()):
        assert all(number.is_finite() and number >= 0 for number in locale.numbers(text))
        assert all(word and word == word.casefold() and not word.isspace() for word in locale.words(text))


# --- numbers in words and ordinals ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("locale", "said"),
    [
        (EN, "three hundred fifty dollars at most"),
        (ES, "trescientos cincuenta euros como mucho"),
        (DE, "höchstens dreihundertfünfzig Euro"),
        (FR, "trois cent cinquante euros au maximum"),
        (Locale.of("it"), "trecentocinquanta euro al massimo"),
    ],
)
def test_numbers_spelled_out_are_read_in_the_locales_language(locale: Locale, said: str) -> None:
    assert locale.numbers(said) == numbers("350")


def test_spelled_and_written_numbers_are_read_together() -> None:
    assert EN.numbers("2 rooms for two adults, one hundred twenty each") == numbers("2", "120")
    assert FR.numbers("deux chambres à 120 euros") == numbers("2", "120")
    assert EN.numbers("one point five km") == numbers("1.5")
    assert DE.numbers("eins komma fünf Kilometer") == numbers("1.5")
    # A number in digits before a scale word is multiplied by it.
    assert EN.numbers("2 million dollars") == numbers("2", "1000000", "2000000")
    assert ES.numbers("5 mil euros") == numbers("5", "1000", "5000")
    assert DE.numbers("1,5 Millionen") == numbers("1.5", "1000000", "1500000")


def test_words_are_numbers_only_in_their_language() -> None:
    assert EN.numbers("trescientos cincuenta") == frozenset()
    assert ES.numbers("three hundred fifty") == frozenset()
    assert EN.numbers("I will go once") == frozenset()
    assert ES.numbers("once noches") == numbers("11")
    assert JA.numbers("三百五十円") == frozenset()  # text2num reads no Japanese


@pytest.mark.parametrize(
    ("locale", "said", "day"),
    [
        (EN, "from the 18th", "18"),
        (EN, "the 3rd of August", "3"),
        (EN, "the eighteenth of August", "18"),
        (DE, "ab dem 18. August", "18"),
        (DE, "ab dem achtzehnten August", "18"),
        (FR, "le 3 août", "3"),
        (FR, "le premier août", "1"),
        (ES, "el 3 de agosto", "3"),
        (ES, "el dieciocho de agosto", "18"),
    ],
)
def test_an_ordinal_gives_its_number(locale: Locale, said: str, day: str) -> None:
    assert locale.numbers(said) == numbers(day)


# --- no locale declared: every plausible reading --------------------------------------------------


def test_with_no_locale_a_number_is_read_every_way_a_reader_may_have_meant_it() -> None:
    anywhere = Locale.any()
    assert anywhere.numbers("1.250") == numbers("1.25", "1250")
    assert anywhere.numbers("1,250") == numbers("1250", "1.25")
    assert anywhere.numbers("2,5 km") == numbers("2.5", "2", "5")
    assert anywhere.numbers("1 250") == numbers("1250", "1", "250")
    assert anywhere.numbers(f"1{NARROW_NBSP}250,50") == numbers("1250.5", "1", "250.5", "250", "50")
    # A comma or dot between groups of three is a thousands mark: the groups are not a list.
    assert anywhere.numbers("$1,250.50 or 1.250.000") == numbers("1250.5", "1250000")
    assert anywhere.numbers("$1.50 from 20.10.") == numbers("1.5", "1", "50", "20.1", "20", "10")
    # Words are read as English.
    assert anywhere.numbers("three hundred fifty, the 18th") == numbers("350", "18")
    assert anywhere.numbers("trescientos cincuenta") == frozenset()


# Every message and quote of tests/test_grounding.py that writes a number, with what no locale reads
# in it, and the numbers its tests need absent (a reading holding them is dropped there).
GROUNDING_CASES: list[tuple[str, set[str], set[str]]] = [
    ("compare 2,5,8 and keep it under $1,250.50, max 700", {"2", "5", "8", "1250.5", "700"}, {"258", "7000"}),
    ("2,5,8", {"2", "5", "8"}, {"258"}),
    ("$1,250.50", {"1250.5"}, set()),
    ("max 700", {"700"}, {"7000"}),
    ("max", set(), {"700"}),
    ("8/1 please, next month, yes, Ada", {"8", "1"}, {"9", "2027"}),
    ("from 20.10.2027 on", {"20", "10", "2027"}, set()),
    ("up to 1.250.000 euros", {"1250000"}, set()),
    ("I am 58", {"58"}, set()),
    ("3 nights with a dog", {"3"}, set()),
    ("under $400 a night, within 3 miles of the airport", {"400", "3"}, set()),
    ("from $100 to $300", {"100", "300"}, set()),
    ("within 5 miles of downtown", {"5"}, set()),
    (
        "Portland, Aug 14 to 17, we can spend up to $350 a night, from $200 is fine",
        {"14", "17", "350", "200"},
        {"300"},
    ),
    ("400 a night", {"400"}, set()),
    ("3 nights, 3 guests", {"3"}, set()),
    ("a quiet room, 4 nights", {"4"}, set()),
    ("arriving on July 10, for a week", {"10"}, {"8"}),
    ("a few nights", set(), {"3"}),
    ("from 20.10.", {"20.1", "20", "10"}, {"11", "2"}),
    ("seit dem 1.10.2026", {"1", "10", "2026"}, set()),
    ("since October 1st", {"1"}, set()),
    ("since November 1", {"1"}, {"10"}),
    ("until 2026-09-30", {"2026", "9", "30"}, set()),
    ("between 01/10/2026 and 15/10/2026", {"1", "10", "2026", "15"}, set()),
    ("since 21/10/26", {"21", "10", "26"}, set()),
    (
        "seit 21.10.2026, 2026-10-21 or 10/15/26 for $1.50 within 10-15 miles, 3/45",
        {"21", "10", "2026", "15", "26", "1.5", "1", "50", "3", "45"},
        set(),
    ),
    ("a room for 2 at $400", {"2", "400"}, set()),
    (
        "A suite in Portland, September 3 to September 6, 2027, no pets, within 10 miles of the airport",
        {"3", "6", "2027", "10"},
        set(),
    ),
    ("pdx aug 20 to aug 22 2027", {"20", "22", "2027"}, set()),
    ("chek in agust 10", {"10"}, set()),
    ("ok, 3 nights", {"3"}, set()),
]


@pytest.mark.parametrize(
    ("said", "read", "absent"), GROUNDING_CASES, ids=[case[0] for case in GROUNDING_CASES]
)
def test_with_no_locale_numbers_agree_with_what_grounding_reads_today(
    said: str, read: set[str], absent: set[str]
) -> None:
    found = Locale.any().numbers(said)
    assert found == numbers(*read)
    assert written_numbers(said) <= {float(number) for number in found}
    assert not found & numbers(*absent)


# --- dates and months -----------------------------------------------------------------------------


def test_the_order_of_a_date_in_digits_comes_from_the_locales_short_date_pattern() -> None:
    orders = {locale.tag: locale.date_order() for locale in (US, GB, DE, ES, FR, JA, EN)}
    assert orders == {
        "en-US": "mdy",
        "en-GB": "dmy",
        "de": "dmy",
        "es": "dmy",
        "fr": "dmy",
        "ja": "ymd",
        "en": "mdy",
    }
    assert Locale.of("zh-TW").date_order() == "ymd"
    assert Locale.any().date_order() is None  # read from the message's own dates


def test_months_are_named_by_cldr_with_and_without_accents_dots_and_umlauts() -> None:
    assert [EN.months()[name] for name in ("august", "aug", "sep", "sept", "march", "mar", "jun")] == [
        8,
        8,
        9,
        9,
        3,
        3,
        6,
    ]
    assert "ju" not in EN.months()  # June or July: not a month
    assert [ES.months()[name] for name in ("agosto", "ago", "septiembre", "sept", "dic")] == [8, 8, 9, 9, 12]
    assert [FR.months()[name] for name in ("août", "aout", "févr", "fevr", "janv", "février")] == [
        8,
        8,
        2,
        2,
        1,
        2,
    ]
    assert [DE.months()[name] for name in ("märz", "maerz", "marz", "mär", "okt", "dezember")] == [
        3,
        3,
        3,
        3,
        10,
        12,
    ]
    assert JA.months()["8月"] == 8
    assert set(Locale.any().months().items()) == set(EN.months().items())
    assert set(EN.months().values()) == set(range(1, 13)) == set(FR.months().values())


# --- words ----------------------------------------------------------------------------------------


def test_every_languages_months_are_built_once_and_read_back_from_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    months_in_any_language.cache_clear()
    built = months_in_any_language()
    assert built["listopad"] == frozenset({10, 11})  # Croatian and Polish
    assert built["agosto"] == frozenset({8}) and built["août"] == frozenset({8})
    (kept,) = (tmp_path / "picoflow" / "locale").iterdir()
    assert kept.name == f"months-babel-{babel.__version__}-1.json"

    # A later process reads the table back: CLDR's languages are not read again.
    def never() -> dict[str, list[int]]:
        raise AssertionError("the table was built again")

    monkeypatch.setattr(picoflow.locale, "_every_language_months", never)
    months_in_any_language.cache_clear()
    assert months_in_any_language() == built

    # A table that is not one this code wrote is built again (and kept again).
    kept.write_text('{"agosto": ["8"]}', encoding="utf-8")
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    months_in_any_language.cache_clear()
    assert months_in_any_language() == built
    assert json.loads(kept.read_text(encoding="utf-8"))["agosto"] == [8]

    # A folder that cannot be written only means building it each time.
    (tmp_path / "blocked").write_text("a file, not a folder", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "blocked"))
    months_in_any_language.cache_clear()
    assert months_in_any_language() == built
    months_in_any_language.cache_clear()


def test_words_are_casefolded_runs_of_letters_and_digits() -> None:
    assert EN.words("Hello, World! It's 2,5km of the HOTEL_NAME") == (
        "hello",
        "world",
        "it",
        "s",
        "2",
        "5km",
        "of",
        "the",
        "hotel",
        "name",
    )
    assert FR.words("Hôtel près de l'Opéra") == ("hôtel", "près", "de", "l", "opéra")
    assert DE.words("STRASSE oder Straße") == ("strasse", "oder", "strasse")


def test_accents_are_kept_and_fold_compares_without_them() -> None:
    composed, decomposed = "Café", "Cafe\u0301"
    assert FR.words(composed) == FR.words(decomposed) == ("café",)
    assert [Locale.fold(word) for word in ("Café", "près", "Mädchen", "Straße")] == [
        "cafe",
        "pres",
        "madchen",
        "strasse",
    ]


def test_in_scripts_written_without_spaces_each_character_is_a_word() -> None:
    sentence = JA.words("東京のホテルを探しています")
    assert sentence == ("東", "京", "の", "ホ", "テ", "ル", "を", "探", "し", "て", "い", "ま", "す")
    hotel = JA.words("ホテル")
    assert any(sentence[at : at + len(hotel)] == hotel for at in range(len(sentence)))
    assert JA.words("ﾎﾃﾙ") == hotel  # half-width katakana
    assert JA.words("8月3日にＨｏｔｅｌ") == ("8", "月", "3", "日", "に", "hotel")
    # Thai's vowel and tone marks stay on their letter; a Devanagari word is not cut at its vowel signs.
    assert Locale.of("th").words("ที่พัก") == ("ที่", "พั", "ก")
    assert Locale.of("hi").words("हिंदी में होटल") == ("हिंदी", "में", "होटल")
    assert EN.words("東京 hotel") == ("東", "京", "hotel")  # whatever the locale


# --- writing --------------------------------------------------------------------------------------


def test_numbers_currencies_and_percentages_are_written_the_locales_way() -> None:
    amount = Decimal("1250.5")
    assert [locale.format_decimal(amount) for locale in (EN, DE, FR, ES)] == [
        "1,250.5",
        "1.250,5",
        f"1{NARROW_NBSP}250,5",
        "1.250,5",
    ]
    assert [locale.format_currency(amount, "EUR") for locale in (EN, DE, FR)] == [
        "€1,250.50",
        f"1.250,50{NBSP}€",
        f"1{NARROW_NBSP}250,50{NBSP}€",
    ]
    assert (EN.format_percent(Decimal("0.25")), DE.format_percent(0.25)) == ("25%", f"25{NBSP}%")


def test_dates_times_and_lists_are_written_the_locales_way() -> None:
    day = date(2026, 8, 3)
    assert [EN.format_date(day), GB.format_date(day), DE.format_date(day), ES.format_date(day)] == [
        "Aug 3, 2026",
        "3 Aug 2026",
        "03.08.2026",
        "3 ago 2026",
    ]
    assert [EN.format_date(day, "long"), DE.format_date(day, "long"), FR.format_date(day, "long")] == [
        "August 3, 2026",
        "3. August 2026",
        "3 août 2026",
    ]
    assert EN.format_date(datetime(2026, 8, 3, 15, 30)) == f"Aug 3, 2026, 3:30:00{NARROW_NBSP}PM"
    assert (GB.format_time(time(15, 30)), DE.format_time(time(15, 30))) == ("15:30", "15:30")
    options = ["jazz", "food", "art"]
    assert [EN.format_list(options), ES.format_list(options), DE.format_list(options, "or")] == [
        "jazz, food, and art",
        "jazz, food y art",
        "jazz, food oder art",
    ]
    assert Locale.any().format_decimal(Decimal("1250.5")) == "1,250.5"  # as English


@given(st.decimals(min_value=0, max_value=10**15, places=3, allow_nan=False, allow_infinity=False))
def test_a_number_written_by_a_locale_is_read_back_by_it(number: Decimal) -> None:
    for locale in (EN, DE, FR, ES):
        assert locale.numbers(locale.format_decimal(number)) == {number}


@given(st.decimals(min_value=0, max_value=10**12, places=2, allow_nan=False, allow_infinity=False))
def test_an_amount_written_by_a_locale_is_read_back_by_it(amount: Decimal) -> None:
    for locale in (EN, DE, FR, ES):
        assert locale.numbers(locale.format_currency(amount, "EUR")) == {amount}


# --- the catalog ----------------------------------------------------------------------------------

REPLIES = {
    "en": {
        "arrive": "When do you arrive?",
        "total": "That is {total:EUR} for {nights} nights from {check_in}.",
        "options": "We have {rooms}.",
        "thanks": "Thank you!",
    },
    "es": {
        "arrive": "¿Cuándo llega?",
        "total": "Son {total:EUR} por {nights} noches desde el {check_in:long}.",
        "options": "Tenemos {rooms}.",
    },
    "de": {"arrive": "Wann reisen Sie an?"},
}


def test_a_catalog_answers_each_locale_in_its_words_and_formats() -> None:
    replies = Catalog(REPLIES, default="en")
    values = {"total": Decimal("1250.5"), "nights": 3, "check_in": date(2026, 8, 3)}
    assert replies.say("total", EN, **values) == "That is €1,250.50 for 3 nights from Aug 3, 2026."
    assert (
        replies.say("total", "es", **values)
        == f"Son 1.250,50{NBSP}€ por 3 noches desde el 3 de agosto de 2026."
    )
    assert replies.say("options", ES, rooms=["una doble", "una suite"]) == "Tenemos una doble y una suite."
    assert replies.say("arrive", DE) == "Wann reisen Sie an?"
    assert replies.locales == (EN, ES, DE) and replies.default == EN
    assert "arrive" in replies and "leave" not in replies


def test_a_missing_text_falls_back_to_the_language_then_to_the_default_locale() -> None:
    replies = Catalog(REPLIES, default="en")
    # es-MX has no texts of its own: Spanish words, Mexican numbers.
    mexico = Locale.of("es-MX")
    assert replies.say("total", mexico, total=Decimal("1250.5"), nights=3, check_in=date(2026, 8, 3)) == (
        "Son EUR1,250.50 por 3 noches desde el 3 de agosto de 2026."
    )
    # German has no "thanks" nor "total": the English texts, written the English way.
    assert replies.say("thanks", DE) == "Thank you!"
    assert replies.say("total", DE, total=Decimal("80"), nights=1, check_in=date(2026, 8, 3)) == (
        "That is €80.00 for 1 nights from Aug 3, 2026."
    )
    assert replies.say("arrive", "fr") == replies.say("arrive", Locale.any()) == "When do you arrive?"


def test_values_are_written_as_their_type_and_spec_say() -> None:
    replies = Catalog(
        {
            "en": {"line": "{room} {count} {count:number} {share:percent} {price} {flag} {day:short} {at}"},
            "de": {"line": "{room} {count} {count:number} {share:percent} {price} {flag} {day:short} {at}"},
        }
    )
    values = {
        "room": "1205",
        "count": 1500,
        "share": Decimal("0.25"),
        "price": 99.5,
        "flag": True,
        "day": date(2026, 8, 3),
        "at": time(15, 30),
    }
    assert replies.say("line", EN, **values) == f"1205 1500 1,500 25% 99.5 True 8/3/26 3:30{NARROW_NBSP}PM"
    assert replies.say("line", DE, **values) == f"1205 1500 1.500 25{NBSP}% 99,5 True 03.08.26 15:30"


def test_saying_needs_a_known_key_every_value_and_a_value_its_spec_can_write() -> None:
    replies = Catalog(REPLIES, default="en")
    with pytest.raises(KeyError, match="Catalog has no text 'leave'"):
        replies.say("leave", EN)
    with pytest.raises(TypeError, match=r"Catalog.say\('total'\): no value for \{check_in\}"):
        replies.say("total", EN, total=Decimal("1"), nights=1)
    with pytest.raises(TypeError, match=r"\{total:EUR\} cannot write a date"):
        replies.say("total", EN, total=date(2026, 8, 3), nights=1, check_in=date(2026, 8, 3))


@pytest.mark.parametrize(
    ("texts", "default", "message"),
    [
        (
            {"en": {"hi": "Hi"}, "es": {"bye": "Adiós"}},
            "en",
            "Catalog: 'bye' is written for es but not for the default locale en",
        ),
        (
            {"en": {"total": "{total} in all"}, "es": {"total": "{suma} en total"}},
            "en",
            r"Catalog: 'total' has the placeholders \{total\} in en but \{suma\} in es",
        ),
        ({"en": {"hi": "Hi"}}, "es", "Catalog: the default locale es has no texts"),
        ({"en": {"hi": "Hi"}, "xx": {"hi": "Hi"}}, "en", "unknown locale 'xx'"),
        ({"en": {"hi": "Hi"}}, "en-ZZ", "unknown locale 'en-ZZ'"),
        ({"en-us": {"hi": "Hi"}, "en-US": {"hi": "Hi"}}, "en-US", "Catalog: locale en-US is given twice"),
        (
            {"en": {"hi": "Hi {}"}},
            "en",
            r"Catalog: 'hi' in en: \{\} is not a placeholder: a placeholder is a name",
        ),
        (
            {"en": {"hi": "Hi {guest.name}"}},
            "en",
            r"Catalog: 'hi' in en: \{guest.name\} is not a placeholder",
        ),
        (
            {"en": {"hi": "Hi {guest!r}"}},
            "en",
            r"Catalog: 'hi' in en: \{guest\}!r: a placeholder takes no conversion",
        ),
        (
            {"en": {"hi": "{total:.2f}"}},
            "en",
            r"Catalog: 'hi' in en: \{total\}:.2f: a spec is a currency code",
        ),
        (
            {"en": {"hi": "{total:XYZ}"}},
            "en",
            r"Catalog: 'hi' in en: \{total\}:XYZ: a spec is a currency code",
        ),
        ({"en": {"hi": "Hi {guest"}}, "en", "Catalog: 'hi' in en: expected '}' before end of string"),
        ({"en": {"hi": 3}}, "en", "Catalog: 'hi' in en is not a text: int"),
    ],
)
def test_a_catalog_built_wrongly_is_a_definition_error(
    texts: dict[str, dict[str, str]], default: str, message: str
) -> None:
    with pytest.raises(FlowDefinitionError, match=message):
        Catalog(texts, default=default)
