"""Language as a value: a ``Locale`` reads the user's words, numbers and dates, and writes replies,
the way one locale does; a ``Catalog`` holds the replies a flow writes in code, per locale.

Everything a locale knows comes from library data: the symbols, grouping, month names and date
patterns of CLDR (through Babel), the number words of the languages text2num reads, and the Unicode
database for what a word is. picoflow itself holds no word of any language.

``Locale.any()`` is the locale of a flow that declares none. It reads a number every way a reader
might have meant it ("1.250" is 1.25 and 1250) and words as English, picoflow's language before
locales: a value is then borne out when any plausible reading of the user's words holds it, while a
declared locale reads numbers exactly as that locale writes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import string
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal, TypeAlias

import babel
import babel.dates
import babel.lists
import babel.localedata
import babel.numbers
import text_to_num

from picoflow.exceptions import FlowDefinitionError

DateOrder: TypeAlias = Literal["dmy", "mdy", "ymd"]
"""The order a date written in digits gives its day, month and year."""

DateStyle: TypeAlias = Literal["short", "medium", "long", "full"]
"""How much of a date a reply writes: CLDR's four widths ("3/8/26" to "Monday, August 3, 2026")."""

Number: TypeAlias = Decimal | int | float

UNDETERMINED = "und"
"""BCP 47's tag for an undetermined language: the tag of ``Locale.any()``."""

_ANY_READS_AS = "en"
"""The locale whose words (numbers spelled out, month names) and formats ``Locale.any()`` uses:
English, what picoflow read before a flow could declare a locale."""


@dataclass(frozen=True, slots=True)
class Locale:
    """A BCP 47 locale ("en", "en-US", "es", "de-DE", "fr", "ja"), as a value.

    ``Locale("de-de")`` and ``Locale.of("de_DE")`` are the same locale, ``Locale("de-DE")``: the
    tag is checked against CLDR and kept in its canonical spelling. An unknown tag is a
    ``FlowDefinitionError`` naming it. The data each locale needs is read once per process.
    """

    tag: str
    """The canonical BCP 47 tag ("und" for ``Locale.any()``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tag", _canonical(self.tag))

    @classmethod
    def of(cls, tag: str | Locale) -> Locale:
        """The locale of ``tag`` (a locale comes back as it is)."""
        return tag if isinstance(tag, Locale) else cls(tag)

    @classmethod
    def any(cls) -> Locale:
        """No locale declared: numbers read every plausible way, words read as English."""
        return cls(UNDETERMINED)

    @property
    def declared(self) -> bool:
        """False for ``Locale.any()``."""
        return self.tag != UNDETERMINED

    @property
    def language(self) -> str:
        """The language subtag ("de" for "de-CH"; "und" for ``Locale.any()``)."""
        return self.tag.split("-", 1)[0]

    def __str__(self) -> str:
        return self.tag

    # --- reading ----------------------------------------------------------------------------------

    def words(self, text: str) -> tuple[str, ...]:
        """The words of ``text``, casefolded, in order.

        A word is a run of letters and digits (with the marks that combine with them, so a
        Devanagari or Thai word is not cut at its vowel signs). In the scripts written without
        spaces between words (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar, ...) each
        character is a word, so a phrase like ホテル is found as a run of words in
        東京のホテルを探しています. Accents are kept ("café"; see ``fold``). Compatibility forms are
        unified first: full-width ｈｏｔｅｌ is hotel, half-width ﾎﾃﾙ is ホテル."""
        if text.isascii():  # most messages: no marks, no unspaced scripts, nothing to normalize
            return tuple(_ASCII_WORD.findall(text.lower()))
        return tuple(_word_pattern().findall(unicodedata.normalize("NFKC", text).casefold()))

    @staticmethod
    def fold(text: str) -> str:
        """``text`` casefolded without its accents, to compare words written with or without
        them: "Café" and "cafe" fold to "cafe", "Mädchen" to "madchen"."""
        return _without_marks(text.casefold())

    def numbers(self, text: str, *, spelled: bool = True) -> frozenset[Decimal]:
        """Every number ``text`` writes, as its value (a sign is not read: "-" is more often a dash).

        * Digits, with this locale's decimal and group symbols: in "de", "2,5 km" is 2.5 and
          "1.250" is 1250; in "en", "1,250" is 1250; in "fr", "1 250,50" is 1250.5, grouped with a
          space of any width. Currency and percent signs are left aside ("1.250,50 €").
        * Digits that make no number of this locale are read one by one: "2,5,8" is 2, 5 and 8,
          "20.10.2027" is 20, 10 and 2027.
        * Ordinals give their number: "the 18th", "3rd", "18.", "le 3", "el 3 de agosto".
        * Numbers spelled out in the languages text2num reads (English, Spanish, German, French,
          Italian, Portuguese, Dutch, Danish): "three hundred fifty", "trescientos cincuenta",
          "dreihundertfünfzig", "trois cent cinquante" are 350, "eighteenth" is 18, and a number
          in digits before a scale word is multiplied by it ("2 million", "5 mil").

        For ``Locale.any()`` each number is read every way a reader may have meant it: "1.250" is
        1.25 and 1250, "2,5" is 2.5 and also 2 and 5, "20.10" is 20.1 and also 20 and 10 (a date),
        "1 250" is 1250 and also 1 and 250; "1,250.50" is only 1250.5, as a mark between groups of
        three says thousands. Numbers are spelled out in English.

        ``spelled=False`` reads the numbers written in digits only."""
        return _numbers(_data(self.tag), text, spelled)

    def written(self, text: str) -> tuple[frozenset[Decimal], ...]:
        """The numbers ``text`` writes in digits, one set of readings per number, in order: "1,200"
        is one number, read as {1200} in "en" and, with no locale, as {1200, 1.2, 1, 200}. What a
        value holds takes a number when it holds one of its readings."""
        return _numbers_written(_data(self.tag), text)

    def date_order(self) -> DateOrder | None:
        """The order of a date written in digits in this locale, from its short date pattern:
        "mdy" for en-US (8/3/26), "dmy" for en-GB, de, es, fr, "ymd" for ja. None for
        ``Locale.any()``: the order is then read from the message's own dates."""
        return _data(self.tag).date_order

    def months(self) -> Mapping[str, int]:
        """Month names and abbreviations (CLDR's wide and abbreviated, in their format and
        stand-alone forms, and the unambiguous prefixes of three letters or more of the wide
        names), casefolded, each also without accents and trailing dots, and with a letter
        written with a diaeresis also as that letter and "e": "august", "aug", "sept" are 8 in
        English, "agosto" in Spanish, "août" and "aout" in French, "märz", "marz" and "maerz"
        3 in German. English for ``Locale.any()``."""
        return _data(self.tag).months

    # --- writing ----------------------------------------------------------------------------------

    def format_decimal(self, number: Number) -> str:
        """``number`` as this locale writes it: 1250.5 is "1,250.5" in en, "1.250,5" in de."""
        return babel.numbers.format_decimal(number, locale=self._babel)

    def format_percent(self, number: Number) -> str:
        """``number`` as a percentage (0.25 is "25%" in en, "25 %" in de)."""
        return babel.numbers.format_percent(number, locale=self._babel)

    def format_currency(self, amount: Number, currency: str) -> str:
        """``amount`` of ``currency`` (an ISO 4217 code): "€1,250.50" in en, "1.250,50 €" in de."""
        return babel.numbers.format_currency(amount, currency, locale=self._babel)

    def format_date(self, day: date, style: DateStyle = "medium") -> str:
        """``day`` in this locale's ``style``: "Aug 3, 2026" (en, medium), "3. August 2026" (de, long)."""
        if isinstance(day, datetime):
            return babel.dates.format_datetime(day, style, locale=self._babel)
        return babel.dates.format_date(day, style, locale=self._babel)

    def format_time(self, moment: time | datetime, style: DateStyle = "short") -> str:
        """The time of ``moment`` in this locale's ``style``: "3:30 PM" (en), "15:30" (de)."""
        return babel.dates.format_time(moment, style, locale=self._babel)

    def format_list(self, items: Sequence[str], style: Literal["and", "or"] = "and") -> str:
        """``items`` as one phrase: "jazz, food, and art" (en), "jazz, food o art" (es, "or")."""
        return babel.lists.format_list(
            list(items), "standard" if style == "and" else "or", locale=self._babel
        )

    @property
    def _babel(self) -> babel.Locale:
        return _data(self.tag).babel


# --- the data of one locale, read once ------------------------------------------------------------


@cache
def _canonical(tag: str) -> str:
    """``tag`` in its canonical BCP 47 spelling, or a FlowDefinitionError when CLDR does not know it."""
    if not isinstance(tag, str):
        raise FlowDefinitionError(f"a locale is a BCP 47 tag such as 'en' or 'de-DE', not {tag!r}")
    asked = tag.strip().replace("_", "-")
    if asked.casefold() == UNDETERMINED:
        return UNDETERMINED
    try:
        parsed = babel.Locale.parse(asked, sep="-")
    except (babel.UnknownLocaleError, ValueError, TypeError) as error:
        raise FlowDefinitionError(f"unknown locale {tag!r}: {error}") from None
    # Babel falls back to a likely locale for a region it lacks ("en-ZZ" becomes en_US): a tag is
    # known when the region and variant it asks for survive (a language may be an alias: "iw" is "he").
    _, territory, _, variant, *_ = babel.core.parse_locale(asked, sep="-")
    for wanted, found in ((territory, parsed.territory), (variant, parsed.variant)):
        if wanted and wanted.casefold() != (found or "").casefold():
            raise FlowDefinitionError(f"unknown locale {tag!r}: CLDR has no data for it")
    return str(parsed).replace("_", "-")


@dataclass(frozen=True, slots=True)
class _Data:
    babel: babel.Locale
    conventions: tuple[_Convention, ...]
    """How digits are grouped and split: one for a declared locale, several for ``any``."""
    runs: re.Pattern[str]
    """Digits joined by the symbols any convention puts between them."""
    ascii_runs: re.Pattern[str]
    """The same, for a text of ASCII characters only (quicker to match)."""
    spelled: str | None
    """The text2num language numbers are spelled out in, if it reads this locale's."""
    date_order: DateOrder | None
    months: Mapping[str, int]


@cache
def _data(tag: str) -> _Data:
    if tag == UNDETERMINED:
        reads_as = babel.Locale.parse(_ANY_READS_AS)
        conventions = (
            _Convention.of(",", ".", (3, 3)),
            _Convention.of(".", ",", (3, 3)),
            _Convention.of(" ", ",", (3, 3)),
        )
        return _Data(
            reads_as, conventions, *_runs(conventions), _spelled(_ANY_READS_AS), None, _months(reads_as)
        )
    locale = babel.Locale.parse(tag, sep="-")
    grouping = babel.numbers.parse_pattern(locale.decimal_formats[None]).grouping
    convention = _Convention.of(
        babel.numbers.get_group_symbol(locale),
        babel.numbers.get_decimal_symbol(locale),
        (grouping[0], grouping[1]),
    )
    return _Data(
        locale,
        (convention,),
        *_runs((convention,)),
        _spelled(locale.language),
        _date_order(babel.dates.get_date_format("short", locale=locale).pattern),
        _months(locale),
    )


@cache
def months_in_any_language() -> Mapping[str, frozenset[int]]:
    """Every language's month names (``Locale.months`` of each language CLDR knows), each with the
    months it names in some language ("listopad" is 10 in Croatian and 11 in Polish): what a month
    word may mean when a flow declares no locale. Built once, on first use.

    Building it reads the CLDR data of every language (a second or more, and some 150 MB held
    by Babel afterwards), so the table is kept in the user's cache folder (``$XDG_CACHE_HOME``,
    else ``~/.cache``, under ``picoflow/locale``), one file per Babel version: a later process
    reads it back in milliseconds. A folder that cannot be written only means building it again."""
    path = _months_file()
    found = _read_months(path) if path is not None else None
    if found is None:
        found = _every_language_months()
        if path is not None:
            _write_months(path, found)
    return MappingProxyType({name: frozenset(months) for name, months in found.items()})


_MONTHS_FORMAT = 1
"""Raise it whenever ``_months`` or ``_spellings`` reads CLDR's names otherwise: a table kept by an
earlier picoflow is then built again."""


def _every_language_months() -> dict[str, list[int]]:
    found: dict[str, set[int]] = {}
    for identifier in babel.localedata.locale_identifiers():
        if "_" in identifier:
            continue
        try:
            names = _data(_canonical(identifier)).months
        except (ValueError, babel.UnknownLocaleError):  # a locale without the data
            continue
        for name, month in names.items():
            found.setdefault(name, set()).add(month)
    return {name: sorted(months) for name, months in found.items()}


def _months_file() -> Path | None:
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    except RuntimeError:  # no home folder to find
        return None
    return base / "picoflow" / "locale" / f"months-babel-{babel.__version__}-{_MONTHS_FORMAT}.json"


def _read_months(path: Path) -> dict[str, list[int]] | None:
    """The table kept at ``path``; None when there is none, or not one this code wrote."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or not kept:
        return None
    for months in kept.values():
        if not (isinstance(months, list) and months and all(type(m) is int and 1 <= m <= 12 for m in months)):
            return None
    return kept


def _write_months(path: Path, found: Mapping[str, list[int]]) -> None:
    # Written whole under another name, then renamed: a process reading it meanwhile never sees
    # half a table, whichever of two processes building it at once renames last.
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(found, ensure_ascii=False, sort_keys=True), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def _spelled(language: str) -> str | None:
    """``language`` when text2num reads numbers spelled out in it."""
    try:
        text_to_num.alpha2digit("", language)
    except ValueError:
        return None
    return language


def _date_order(pattern: str) -> DateOrder:
    """The order of the day, month and year fields of a CLDR date pattern ("dd.MM.yy" is dmy)."""
    fields = re.sub(r"'[^']*'", "", pattern)
    position = {part: fields.find(letter) for part, letter in (("d", "d"), ("m", "M"), ("y", "y"))}
    if position["m"] < 0:
        position["m"] = fields.find("L")  # the stand-alone month
    if position["y"] >= 0 and position["y"] < min(position["d"], position["m"]):
        return "ymd"
    return "dmy" if position["d"] < position["m"] else "mdy"


def _months(locale: babel.Locale) -> Mapping[str, int]:
    found: dict[str, set[int]] = {}

    def add(name: str, month: int) -> None:
        found.setdefault(name, set()).add(month)

    for context in ("format", "stand-alone"):
        for width in ("wide", "abbreviated"):
            for month, name in locale.months[context][width].items():
                for spelling in _spellings(name):
                    add(spelling, month)
    for month, name in locale.months["format"]["wide"].items():
        for whole in {name.casefold(), Locale.fold(name)}:
            if whole.isalpha():
                for size in range(3, len(whole)):
                    add(whole[:size], month)
    return MappingProxyType({name: next(iter(months)) for name, months in found.items() if len(months) == 1})


def _spellings(name: str) -> set[str]:
    """The ways a name is written: casefolded, without trailing dots, without accents, and with a
    letter under a diaeresis written as that letter and "e" (what a keyboard without it types)."""
    written = " ".join(name.casefold().rstrip(".").split())
    decomposed = unicodedata.normalize("NFD", written)
    spelled_out = unicodedata.normalize("NFC", decomposed.replace("\u0308", "e"))
    return {written, Locale.fold(written), Locale.fold(spelled_out)}


def _without_marks(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


# --- words ------------------------------------------------------------------------------------------

# The blocks of the scripts written without spaces between words (Unicode's line-breaking classes ID
# and SA): each of their characters is a word of its own.
_UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff\u19e0-\u19ff"  # Khmer
    "\u1950-\u1a1f\u1a20-\u1aaf"  # Tai Le, New Tai Lue, Tai Tham
    "\u2e80-\u2fdf"  # CJK radicals
    "\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b-\u303c"  # ideographic iteration and number marks
    "\u3040-\u30ff\u3100-\u312f\u31a0-\u31bf\u31f0-\u31ff"  # Hiragana, Katakana, Bopomofo
    "\u3400-\u4dbf\u4e00-\u9fff"  # Han
    "\ua000-\ua4cf"  # Yi
    "\ua9e0-\ua9ff\uaa60-\uaa7f"  # Myanmar extensions
    "\uf900-\ufaff"  # Han compatibility
    "\U00020000-\U0003ffff"  # Han, planes 2 and 3
)


_ASCII_WORD = re.compile(r"[a-z0-9]+")


@cache
def _word_pattern() -> re.Pattern[str]:
    marks = _marks()
    letters = rf"[^\W_{_UNSPACED}]"  # letters and digits but those of unspaced scripts
    # Marks are rare in a word: the letters are matched in one go, then marks and letters in turn.
    return re.compile(rf"[{_UNSPACED}][{marks}]*|{letters}+(?:[{marks}]+{letters}*)*")


def _marks() -> str:
    """A character class of the combining marks of the Basic Multilingual Plane, from the Unicode
    database: a word goes on through them ("हिंदी", "ที่พัก"), where a regular expression's ``\\w``
    would cut it."""
    ranges: list[tuple[int, int]] = []
    start: int | None = None
    for point in range(0x10000):
        is_mark = unicodedata.category(chr(point)).startswith("M")
        if is_mark and start is None:
            start = point
        elif not is_mark and start is not None:
            ranges.append((start, point - 1))
            start = None
    return "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in ranges)


# --- numbers ----------------------------------------------------------------------------------------

_APOSTROPHES = frozenset("'\u2019")
_SCALE_AFTER = re.compile(r"\ue000\s+(10{2,})(?![\d.,]\d)")
_SPELLED = re.compile(r"\d+(?:[.,]\d+)?")
_PLACE = "\ue000"
"""Stands in for a number written in digits while numbers spelled out are read (a private-use
character, so no text writes it)."""


@dataclass(frozen=True, slots=True)
class _Convention:
    """One way of writing digits: a group symbol (with the ones typed for it), a decimal symbol,
    and the sizes of the groups (the last, and the others: 3 and 2 in en-IN's 12,34,567)."""

    group: frozenset[str]
    ungrouped: Mapping[int, None]
    """A translation table deleting the group symbols."""
    decimal: str
    spaced: bool
    """The group symbol is a space, which also separates numbers written side by side."""
    number: re.Pattern[str]
    pieces: re.Pattern[str]
    """What parts the numbers of a run that makes no number: any symbol but the decimal one."""

    @classmethod
    def of(cls, group: str, decimal: str, grouping: tuple[int, int]) -> _Convention:
        group = unicodedata.normalize("NFKC", group)
        decimal = unicodedata.normalize("NFKC", decimal)
        spaced = group.isspace()
        symbols = frozenset(" ") if spaced else _APOSTROPHES if group in _APOSTROPHES else frozenset(group)
        last, other = grouping
        joint = f"[{re.escape(''.join(sorted(symbols)))}]"
        grouped = rf"\d{{1,{other}}}(?:{joint}\d{{{other}}})*{joint}\d{{{last}}}"
        number = re.compile(rf"(?P<whole>{grouped}|\d+)(?:{re.escape(decimal)}(?P<fraction>\d+))?")
        pieces = re.compile(rf"[^\d{re.escape(decimal)}]")
        return cls(symbols, dict.fromkeys(map(ord, symbols)), decimal, spaced, number, pieces)

    def read(self, run: str) -> tuple[Decimal, bool] | None:
        """The value of ``run`` written as one number this way, and whether it is grouped."""
        match = self.number.fullmatch(run)
        if match is None:
            return None
        whole, fraction = match["whole"], (match["fraction"] or "").rstrip("0")
        grouped = not whole.isdigit()
        digits = whole.translate(self.ungrouped) if grouped else whole
        return Decimal(f"{digits}.{fraction}" if fraction else digits), grouped

    @property
    def joints(self) -> frozenset[str]:
        return self.group | {self.decimal}


def _runs(conventions: Iterable[_Convention]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Digits joined by single symbols that may stand between them: a number of any convention,
    or numbers listed without spaces ("2,5,8") or a date ("20.10.2027"); for any text, and for a
    text of ASCII characters."""
    joints = re.escape("".join(sorted({",", "."}.union(*(convention.joints for convention in conventions)))))
    return re.compile(rf"\d+(?:[{joints}]\d+)*"), re.compile(rf"[0-9]+(?:[{joints}][0-9]+)*")


def _numbers_written(data: _Data, text: str) -> tuple[frozenset[Decimal], ...]:
    if not text.isascii():
        text = text.translate(_widths())
    many = len(data.conventions) > 1
    runs = data.ascii_runs if text.isascii() else data.runs
    return tuple(
        frozenset(
            {Decimal(run)}
            if run.isdigit()
            else _read_any(data.conventions, run)
            if many
            else _read(data.conventions[0], run)
        )
        for run in (match[0] for match in runs.finditer(text))
    )


def _numbers(data: _Data, text: str, spelled: bool = True) -> frozenset[Decimal]:
    only_ascii = text.isascii()
    if not only_ascii:
        text = text.translate(_widths())
    written: list[set[Decimal]] = []
    many = len(data.conventions) > 1

    def place(match: re.Match[str]) -> str:
        run = match[0]
        if run.isdigit():  # most numbers: no symbol to read
            written.append({Decimal(run)})
        else:
            written.append(_read_any(data.conventions, run) if many else _read(data.conventions[0], run))
        return _PLACE

    placed = (data.ascii_runs if only_ascii else data.runs).sub(place, text)
    found: set[Decimal] = set().union(*written)
    if spelled and data.spelled is not None and _has_letter(placed):
        found |= _spelled_out(data.spelled, placed, written)
    return frozenset(found)


@cache
def _widths() -> Mapping[int, str]:
    """A translation table for the characters numbers are written with: every space as a plain one
    (CLDR groups French digits with a narrow no-break space; people type a plain one), the
    full-width and half-width forms as the characters they stand for ("１，２５０" is "1,250"),
    and the placeholder of ``_spelled_out`` as a space, from the Unicode database."""
    table: dict[int, str] = {ord(_PLACE): " "}
    for point in range(0x10000):
        character = chr(point)
        if unicodedata.category(character) == "Zs":
            table[point] = " "
        elif 0xFF00 <= point <= 0xFFEF:
            decomposition = unicodedata.decomposition(character).split()
            if len(decomposition) == 2 and decomposition[0] in ("<wide>", "<narrow>"):
                table[point] = chr(int(decomposition[1], 16))
    return MappingProxyType(table)


def _read(convention: _Convention, run: str) -> set[Decimal]:
    """A run of digits as one locale writes it: one number, else the numbers between the symbols
    other than its decimal one, else each group of digits."""
    read = convention.read(run)
    if read is not None:
        return {read[0]}
    found: set[Decimal] = set()
    for piece in convention.pieces.split(run):
        value = convention.read(piece)
        found |= {value[0]} if value is not None else _each_group(piece)
    return found


def _read_any(conventions: Sequence[_Convention], run: str) -> set[Decimal]:
    """A run of digits read every way: as a number of each convention that reads it whole, and as
    the numbers listed in it ("2,5,8", the date "20.10."), unless a convention groups it with a mark
    (a comma or dot between groups of three says "thousands": "1,250"; a space may as well part two
    numbers)."""
    found: set[Decimal] = set()
    grouped_by_mark = False
    for convention in conventions:
        read = convention.read(run)
        if read is not None:
            found.add(read[0])
            grouped_by_mark = grouped_by_mark or (read[1] and not convention.spaced)
    if grouped_by_mark:
        return found
    if " " in run:
        for piece in run.split(" "):
            found |= _read_any(conventions, piece)
    else:
        found |= _each_group(run)
    return found


def _each_group(run: str) -> set[Decimal]:
    return {Decimal(digits) for digits in re.findall(r"\d+", run)}


_LETTER = re.compile(r"[^\W\d_]")


def _has_letter(text: str) -> bool:
    return _LETTER.search(text) is not None


def _spelled_out(language: str, placed: str, written: Sequence[set[Decimal]]) -> set[Decimal]:
    """The numbers spelled out in words in ``placed``, the text with each number written in digits
    replaced by a placeholder (so that text2num's digits are told from the user's), and a number in
    digits followed by a scale word ("2 million") multiplied by it."""
    converted: str = text_to_num.alpha2digit(placed, language, threshold=0)
    found = {_plain(Decimal(number.replace(",", "."))) for number in _SPELLED.findall(converted)}
    for scale in _SCALE_AFTER.finditer(converted):
        at = converted.count(_PLACE, 0, scale.start())  # the index of the number before the scale
        if at < len(written):
            found |= {_plain(value.scaleb(len(scale[1]) - 1)) for value in written[at]}
    return found


def _plain(value: Decimal) -> Decimal:
    """``value`` without trailing zeros after its point nor an exponent: 1250, not 1250.0 nor
    1.25E+3 (the same number, written as a reader expects it)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # a number read from digits is finite
    if not any(digits):
        return Decimal(0)
    kept = len(digits)
    while exponent < 0 and kept > 1 and digits[kept - 1] == 0:
        kept -= 1
        exponent += 1
    if exponent > 0:
        return Decimal((sign, digits[:kept] + (0,) * exponent, 0))
    return Decimal((sign, digits[:kept], exponent))


# --- the catalog ------------------------------------------------------------------------------------

_DATE_STYLES: tuple[DateStyle, ...] = ("short", "medium", "long", "full")


def _date_style(spec: str, value: date | time) -> DateStyle | None:
    """The style a spec names for a date or time (when it names none, medium for a date, short for
    a time of day), or None when it names another thing."""
    if not spec:
        return "short" if isinstance(value, time) else "medium"
    return next((style for style in _DATE_STYLES if style == spec), None)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    spec: str


_Template = tuple[tuple[str, _Field | None], ...]
"""A text cut into literal pieces, each followed by the placeholder after it (None at the end)."""


class Catalog:
    """The replies a flow writes in code, per locale, so each user is answered in their language.

    ::

        replies = Catalog(
            {
                "en": {"arrive": "When do you arrive?", "total": "That is {total:EUR} for {nights} nights."},
                "es": {"arrive": "¿Cuándo llega?", "total": "Son {total:EUR} por {nights} noches."},
            },
            default="en",
        )
        replies.say("total", Locale.of("es"), total=Decimal("1250.5"), nights=3)
        # 'Son 1.250,50 € por 3 noches.'

    The words are the application's. A placeholder is a name; a ``Decimal`` or ``float`` is written
    as the locale writes numbers, a ``date`` or ``datetime`` as its medium date, a list of texts as
    one phrase ("a, b and c"), an ``int`` as plain digits (a room number, a year) and a ``str`` as it
    is. After the name, a spec may say more: an ISO 4217 currency code (``{total:EUR}``),
    ``percent``, ``number`` (an ``int`` written as a number: "1,250"), or a date's style
    (``short``, ``medium``, ``long``, ``full``).

    A text missing for a locale falls back to the locale's language ("es-MX" to "es"), then to the
    ``default`` locale. Built wrongly, a catalog is a ``FlowDefinitionError`` at once: an unknown
    tag, a key missing from the default locale, placeholders that differ between the locales of a
    key, a placeholder that is not a name or an unknown spec.
    """

    __slots__ = ("_default", "_templates")

    def __init__(
        self, texts: Mapping[str | Locale, Mapping[str, str]], *, default: str | Locale = "en"
    ) -> None:
        self._default = Locale.of(default)
        templates: dict[str, dict[str, _Template]] = {}
        for tag, entries in texts.items():
            locale = Locale.of(tag)
            if locale.tag in templates:
                raise FlowDefinitionError(f"Catalog: locale {locale.tag} is given twice")
            templates[locale.tag] = {key: _parse(key, locale.tag, text) for key, text in entries.items()}
        fallback = templates.get(self._default.tag)
        if fallback is None:
            raise FlowDefinitionError(f"Catalog: the default locale {self._default.tag} has no texts")
        for tag, written in templates.items():
            for key, template in written.items():
                if key not in fallback:
                    raise FlowDefinitionError(
                        f"Catalog: {key!r} is written for {tag} but not for the default locale "
                        f"{self._default.tag}"
                    )
                mine, theirs = _names(template), _names(fallback[key])
                if mine != theirs:
                    raise FlowDefinitionError(
                        f"Catalog: {key!r} has the placeholders {_listed(theirs)} in {self._default.tag} "
                        f"but {_listed(mine)} in {tag}"
                    )
        self._templates = {tag: MappingProxyType(written) for tag, written in templates.items()}

    @property
    def default(self) -> Locale:
        """The locale whose texts stand in for those another locale lacks."""
        return self._default

    @property
    def locales(self) -> tuple[Locale, ...]:
        """The locales the catalog has texts for, as given."""
        return tuple(Locale(tag) for tag in self._templates)

    def __contains__(self, key: object) -> bool:
        return key in self._templates[self._default.tag]

    def say(self, key: str, locale: Locale | str, /, **values: object) -> str:
        """The text of ``key`` for ``locale`` with its placeholders filled in from ``values``,
        written as that locale writes them. A ``KeyError`` for a key the catalog does not have, a
        ``TypeError`` for a placeholder without a value."""
        asked = Locale.of(locale)
        if key not in self:
            raise KeyError(f"Catalog has no text {key!r}")
        tag, template = self._text(key, asked)
        # Values are written the asking locale's way when the text is in its language ("es" text
        # for "es-MX": Mexican numbers), else the way of the text's own locale.
        writer = asked if asked.declared and asked.language == Locale(tag).language else Locale(tag)
        out: list[str] = []
        for literal, field in template:
            out.append(literal)
            if field is None:
                continue
            if field.name not in values:
                raise TypeError(f"Catalog.say({key!r}): no value for {{{field.name}}}")
            out.append(_written(writer, values[field.name], field, key))
        return "".join(out)

    def _text(self, key: str, locale: Locale) -> tuple[str, _Template]:
        for tag in (*_narrowing(locale.tag), self._default.tag):
            entries = self._templates.get(tag)
            if entries is not None and key in entries:
                return tag, entries[key]
        raise KeyError(key)  # unreachable: the default locale has every key


def _narrowing(tag: str) -> list[str]:
    """``tag`` and the tags it narrows: "zh-Hant-TW", "zh-Hant", "zh"."""
    parts = tag.split("-")
    return ["-".join(parts[:size]) for size in range(len(parts), 0, -1)]


def _parse(key: str, tag: str, text: str) -> _Template:
    if not isinstance(text, str):
        raise FlowDefinitionError(f"Catalog: {key!r} in {tag} is not a text: {type(text).__name__}")
    pieces: list[tuple[str, _Field | None]] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as error:
        raise FlowDefinitionError(f"Catalog: {key!r} in {tag}: {error}") from None
    for literal, name, spec, conversion in parsed:
        if name is None:
            pieces.append((literal, None))
            continue
        where = f"Catalog: {key!r} in {tag}: {{{name}}}"
        if not name.isidentifier():
            raise FlowDefinitionError(f"{where} is not a placeholder: a placeholder is a name, {{price}}")
        if conversion is not None:
            raise FlowDefinitionError(f"{where}!{conversion}: a placeholder takes no conversion")
        spec = spec or ""
        if spec and not _known_spec(spec):
            raise FlowDefinitionError(
                f"{where}:{spec}: a spec is a currency code (EUR), percent, number, or a date's style "
                f"({', '.join(_DATE_STYLES)})"
            )
        pieces.append((literal, _Field(name, spec)))
    return tuple(pieces)


def _known_spec(spec: str) -> bool:
    if spec in ("percent", "number", *_DATE_STYLES):
        return True
    return len(spec) == 3 and spec.isupper() and babel.numbers.is_currency(spec)


def _names(template: _Template) -> frozenset[str]:
    return frozenset(field.name for _, field in template if field is not None)


def _listed(names: frozenset[str]) -> str:
    return ", ".join(f"{{{name}}}" for name in sorted(names)) or "none"


def _written(locale: Locale, value: object, field: _Field, key: str) -> str:
    """``value`` as ``locale`` writes it, as ``field``'s spec says."""
    spec = field.spec
    if isinstance(value, str):
        return value
    if isinstance(value, Decimal | float | int) and not isinstance(value, bool):
        if spec == "percent":
            return locale.format_percent(value)
        if spec and spec.isupper():
            return locale.format_currency(value, spec)
        if spec == "number" or (not spec and not isinstance(value, int)):
            return locale.format_decimal(value)
        if not spec:
            return str(value)
    elif isinstance(value, date | time) and (style := _date_style(spec, value)) is not None:
        if isinstance(value, time):
            return locale.format_time(value, style)
        return locale.format_date(value, style)
    elif isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        if not spec:
            return locale.format_list(value)
    elif not spec:
        return str(value)
    raise TypeError(f"Catalog.say({key!r}): {{{field.name}:{spec}}} cannot write a {type(value).__name__}")
