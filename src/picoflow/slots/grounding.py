"""Grounding: a reading is kept only as far as the words of the conversation bear it out, by a policy
the application can see, change and predict.

A model reading a message proposes values, each with the words it says them with. A small model
also fills in what it would like to hear (a whole stay for "Hi", "2,5,8" read as a price of 258, the
interests of an example it was shown). A ``Grounding`` is an ordered list of named ``Rule`` units;
each item of a reading passes through them in order, and every item leaves a ``Verdict``: kept,
dropped (by the rule that dropped it) or repaired (moved to another field, its value put right),
with the evidence that bore it out, a span of the user's message or of the assistant's previous
message.

Two profiles are built in:

* ``Grounding.default()`` (any model unless it asks for more): the rules that act on evidence
  *against* a reading: a quote nobody wrote, the words of another field, a written date read in
  the other order, a yes or no the words contradict. A strong model's reading that holds no such
  contradiction is kept as it was read.
* ``Grounding.for_small_models()`` (the embedded model turns it on): adds the rules that need
  evidence *for* a reading (the numbers written, an option's declared words, a text made of the
  quote's words, a yes or no said) and the rescues a 1.5B model needs: a slip of the keys, a quote
  in the model's own words put back on the user's, a second look at what it left out, values the
  declared words tell on their own, a goodbye in bare words.

Every word a rule looks for is declared by the application with ``Said`` beside the slots model;
the framework holds no word of any language.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cache, cached_property
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from picoflow.exceptions import FlowDefinitionError
from picoflow.locale import Locale, months_in_any_language
from picoflow.slots.dates import DatePart, WrittenDates
from picoflow.slots.said import FieldEvidence, Said, evidence_of
from picoflow.slots.words import (
    locale_numbers,
    may_slip,
    numbers_in,
    parts_of,
    phrase_of,
    same_word,
    squeezed,
    words,
)

Action = Literal["kept", "dropped", "repaired"]
Source = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """Where the words that bear a value out are: ``text`` at ``start:end`` of the user's message
    (``source="user"``) or of the assistant's message before it (``"assistant"``, a value it put
    forward and the user accepted)."""

    source: Source
    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What grounding decided about one item of a reading."""

    field: str
    """The field the item is kept under (for a repaired item, the field it was moved to)."""
    value: Any
    """The value kept (put right, for a repaired item), or the value read (for a dropped one)."""
    action: Action
    rule: str | None = None
    """The rule that dropped or repaired the item, or that bore it out in its own way (a value
    the assistant offered, words that tell a field on their own); None when every rule let it pass."""
    evidence: Evidence | None = None
    read_as: tuple[str, Any] | None = None
    """For a repaired item: the field and the value the model read."""
    why: str = ""
    """The rule's reason, in words for the flow's author (never shown to the user)."""

    def to_json(self) -> dict[str, Any]:
        """The verdict as plain JSON (events, traces, eval transcripts)."""
        data: dict[str, Any] = {"field": self.field, "value": self.value, "action": self.action}
        if self.rule is not None:
            data["rule"] = self.rule
        if self.evidence is not None:
            e = self.evidence
            data["evidence"] = {"source": e.source, "start": e.start, "end": e.end, "text": e.text}
        if self.read_as is not None:
            data["read_as"] = {"field": self.read_as[0], "value": self.read_as[1]}
        if self.why:
            data["why"] = self.why
        return data


@dataclass(frozen=True, slots=True)
class Item:
    """One thing the model read: a field, the words quoted, the value; and where grounding found it."""

    field: str
    quote: str
    value: Any
    source: Source = "user"
    """Whose words bear it out: the user's message, or the assistant's offer the user accepted."""


class Heard:
    """The words a reading is judged against: the user's message, and the assistant's message
    before it (what it asked or offered), compared with or without a slip of the keys."""

    def __init__(
        self,
        message: str,
        previous: str | None = None,
        *,
        slips: bool = False,
        accept: Said | None = None,
        locales: Sequence[str] = (),
        told: str | None = None,
    ) -> None:
        self.locales = tuple(Locale.of(tag).tag for tag in locales)
        """The locales declared: only their words count (all when none is declared)."""
        told = Locale.of(told).tag if told is not None else None
        writing = self.locales[0] if len(self.locales) == 1 else told if told in self.locales else None
        self.locale = Locale.of(writing) if writing is not None else Locale.any()
        """How dates are read: in the order the one locale declared writes them; of several, the
        order of the one the conversation's words told (``told``: "03.09.2027" is September 3 to a
        German guest and March 9 to an American one); else as the message writes them."""
        self.message = message
        self.previous = previous or ""
        self.slips = slips
        self.text = squeezed(message)
        self.sequence = tuple(words(message))
        self.words = frozenset(self.sequence)
        self.parts = tuple(parts_of(message))
        self.dates = WrittenDates.of(message, self.locale.date_order())
        self.numbers = self.numbers_of(message)
        self.asked = tuple(_questions(self.previous))
        """The questions of the assistant's previous message: what it put forward to accept."""
        self.accepted = accept.answer(self.sequence, exact=not slips) if accept is not None else None
        """Whether the message accepts what the assistant put forward, by the words the application
        declared for a yes and a no (a denial wins); None when it says neither or none are declared."""

    def numbers_of(self, text: str) -> set[float]:
        """The numbers ``text`` writes, in digits or in words, as one of the declared locales writes
        them (every plausible way when none is declared)."""
        return locale_numbers(text, self.locales)

    @cached_property
    def months_written(self) -> frozenset[int]:
        """The months the message names, in a declared locale's words (in any language's when none
        is declared). Worked out when a rule first asks: a reading without a date never pays."""
        return self.months_named(self.message)

    @cached_property
    def months(self) -> frozenset[int]:
        """The months the message or the assistant's previous message names."""
        return self.months_written | self.months_named(self.previous)

    def months_named(self, text: str) -> frozenset[int]:
        """The months ``text`` names: in a declared locale's words, or, with none declared, in any
        language's; with slips allowed, also a declared name written with one slip ("agust")."""
        said = words(text)
        if not said:
            return frozenset()
        tags = self.locales or (Locale.any().tag,)
        if self.locales:
            names = [Locale.of(tag).months() for tag in tags]
            found = {month for months in names for word in said if (month := months.get(word)) is not None}
        else:
            anywhere = months_in_any_language()
            found = {month for word in said for month in anywhere.get(word, ())}
        # Only a word that may hold a slip of the keys is compared with the names of its initial.
        slipped = [word for word in said if may_slip(word)] if self.slips else []
        for tag in tags if slipped else ():
            months, by_initial = Locale.of(tag).months(), _month_names_by_initial(tag)
            found |= {
                month
                for word in slipped
                if word not in months
                for name, month in by_initial.get(word[0], ())
                if same_word(name, word)
            }
        return frozenset(found)

    @property
    def exact(self) -> bool:
        """Whether words match only as written (no slip of the keys)."""
        return not self.slips

    def beside(self, quote: str, reach: int | None = 2) -> tuple[str, ...] | None:
        """The quote's words with up to ``reach`` words either side of them (the whole part with
        None), within the part of the message they stand in ("400 $ maximum par nuit" around
        "400"); None unless the message writes the quote's words exactly once."""
        phrase = phrase_of(quote)
        size = len(phrase)
        found: list[tuple[str, ...]] = []
        for part in self.part_words:
            for start in range(len(part) - size + 1):
                if size and part[start : start + size] == phrase:
                    around = part if reach is None else part[max(0, start - reach) : start + size + reach]
                    found.append(around)
        return found[0] if len(found) == 1 else None

    @cached_property
    def part_words(self) -> tuple[tuple[str, ...], ...]:
        """The words of each part of the message (``parts_of``)."""
        return tuple(phrase_of(part) for part in self.parts)

    def quotes(self, quote: str) -> bool:
        """Whether ``quote`` is the user's words: as written, or word for word."""
        written = squeezed(quote)
        return bool(written) and (written in self.text or all(self.has(word) for word in words(quote)))

    def has(self, word: str) -> bool:
        """Whether the user wrote ``word`` (with one slip of the keys, when slips are allowed: a small
        model quotes "august 10" for the "agust 10" it read)."""
        if word in self.words:
            return True
        return self.slips and any(same_word(word, written) for written in self.words)

    def offers(self, quote: str) -> bool:
        """Whether ``quote`` is words of a question of the assistant's previous message ("Shall I
        book the Hotel Monaco?"), as written or word for word: what it put forward for the user to
        take. What it stated ("It has no pool.") is no offer."""
        written = squeezed(quote)
        if not written:
            return False
        quoted = words(quote)
        return any(
            written in squeezed(question) or set(quoted) <= set(words(question)) for question in self.asked
        )

    def span(self, quote: str, source: Source) -> Evidence | None:
        """Where ``quote`` stands in the message it came from, as written there."""
        text = self.message if source == "user" else self.previous
        found = _locate(text, quote)
        if found is None:
            return None
        start, end = found
        return Evidence(source, start, end, text[start:end])


@cache
def _month_names_by_initial(tag: str) -> Mapping[str, tuple[tuple[str, int], ...]]:
    """The month names of locale ``tag`` (``Locale.months``) by their first letter, each with its
    month: a slip of the keys is never in the first letter (``same_word``)."""
    grouped: dict[str, list[tuple[str, int]]] = {}
    for name, month in Locale.of(tag).months().items():
        grouped.setdefault(name[0], []).append((name, month))
    return {initial: tuple(names) for initial, names in grouped.items()}


@cache
def _question_marks() -> frozenset[str]:
    """Every script's question mark ("?", "¿", "؟", "？", the Greek one), from the Unicode database."""
    return frozenset(
        mark for mark in map(chr, range(0x10000)) if "QUESTION MARK" in unicodedata.name(mark, "")
    )


def asks(text: str) -> bool:
    """Whether ``text`` asks something: one of its sentences holds a question mark, of any script
    ("?", "¿", "؟", "？")."""
    return bool(_questions(text))


def _questions(text: str) -> list[str]:
    """The sentences of ``text`` that ask something: those holding a question mark."""
    if not text:
        return []
    marks = _question_marks()
    sentences = re.split(r"(?<=[.!\n\u3002\uff01])\s+|(?<=[?\uff1f\u037e\u061f])\s*", text)
    return [sentence for sentence in sentences if marks & set(sentence)]


def _locate(text: str, quote: str) -> tuple[int, int] | None:
    """The span of ``text`` that writes ``quote``: as one run (any spacing), else from the first of
    its words found to the last."""
    quoted = words(quote)
    if not quoted:
        return None
    run = r"\W+".join(re.escape(word) for word in quoted)
    match = re.search(run, text, re.IGNORECASE)
    if match is not None:
        return match.span()
    spans = [m.span() for word in quoted if (m := re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE))]
    if not spans:
        return None
    return min(start for start, _ in spans), max(end for _, end in spans)


@dataclass(frozen=True, slots=True)
class Seen:
    """What a rule may look at besides the item: the words heard, the declared evidence of every
    field of the slots model, and every item of the reading (two items may decide each other)."""

    heard: Heard
    evidence: Mapping[str, FieldEvidence]
    items: Sequence[Item]
    asked: tuple[str, ...] = ()
    """The fields of the question the message answers (none when no question is open)."""
    known: Mapping[str, Any] = field(default_factory=dict)
    """What the form held before this message: a later message may lean on it ("... and leave on
    the 18th", the month of the check-in)."""


Judged = Item | None
"""What a rule makes of an item: the item (as it was, or put right), or None to drop it."""


class Rule:
    """One named unit of grounding. Subclass it with a ``name`` and ``judge``; the class docstring
    says which misreading the rule guards against (it is shown as the verdict's ``why``)."""

    name: ClassVar[str]

    def judge(self, item: Item, seen: Seen) -> Judged:
        raise NotImplementedError

    @property
    def why(self) -> str:
        doc = (type(self).__doc__ or "").strip()
        return " ".join(doc.split("\n\n")[0].split())

    def __repr__(self) -> str:
        return f"<rule {self.name}>"


class AnchoredNumber(Rule):
    """A number quoted in the model's own words ("at most $350" for the user's "no more than $350")
    is judged by the one part of the message that writes it, when that part says which field it is
    where fields have words for it (a bare "400 a night" is no bound)."""

    name = "anchored_number"

    def judge(self, item: Item, seen: Seen) -> Judged:
        numbers = numbers_in(item.value)
        heard = seen.heard
        if not numbers or heard.quotes(item.quote):
            return item
        holding = [part for part in heard.parts if numbers <= heard.numbers_of(part)]
        if len(holding) != 1:
            return item
        part = holding[0]
        own = seen.evidence.get(item.field)
        if own is not None and own.has_field_words:
            quote = words(part)
            if not any(other.names_field(quote, exact=heard.exact) for other in seen.evidence.values()):
                return item
        return replace(item, quote=part)


class OptionNamed(Rule):
    """A small model often quotes the option it chose ("freeParking") instead of the words that say
    it: an option whose words are declared is then looked for in the whole message."""

    name = "option_named"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        if own is None or seen.heard.quotes(item.quote) or not own.has_options(item.value):
            return item
        heard = seen.heard
        value = own.options_kept(item.value, heard.sequence, exact=heard.exact)
        if value is None:
            return None
        said = own.option_words(value, heard.sequence, exact=heard.exact)
        return replace(item, quote=", ".join(said) or heard.message, value=value)


class FieldWords(Rule):
    """The words that say which field a value belongs to decide it: "under $400" read as a minimum
    is the maximum; for a quote of the value alone, the words right beside it in the message do
    ("400 $ maximum par nuit" quoted as "400"). When the reading gives that other field too, a
    range quoted whole for both bounds ("from 100 to 300") keeps both, and the same value read for
    both ("within 5 miles of downtown" as the distance to the airport and to the center) is kept
    only where its words say. A value read for a field of the question being answered is not
    moved to a field that question does not ask: "a maximum of 10 miles", the answer to the
    distance question, is no budget."""

    name = "field_words"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        if own is None or not own.has_field_words:
            return item
        exact = seen.heard.exact
        quote: Sequence[str] = words(item.quote)
        if own.names_field(quote, exact=exact):
            return item
        others = _naming(seen, item.field, quote)
        if not others and item.source == "user":
            # A quote of the value alone ("400"): the words right beside it in the message say it.
            beside = seen.heard.beside(item.quote)
            if beside is None or own.names_field(beside, exact=exact):
                return item
            others = _naming(seen, item.field, beside)
        if len(others) != 1 or (item.field in seen.asked and others[0] not in seen.asked):
            return item
        twins = [other for other in seen.items if other.field == others[0]]
        if not twins:
            return replace(item, field=others[0])
        return None if any(twin.value == item.value for twin in twins) else item


def _naming(seen: Seen, field: str, quote: Sequence[str]) -> list[str]:
    """The fields other than ``field`` whose declared words ``quote`` holds."""
    return [
        name
        for name, other in seen.evidence.items()
        if name != field and other.has_field_words and other.names_field(quote, exact=seen.heard.exact)
    ]


class Confirmed(Rule):
    """A value the assistant put forward in its previous message ("Shall I book the Hotel
    Monaco?") and the user accepted ("That sounds great") is borne out by that message, though the
    user never wrote it: the quote is the words of a question of that message, or the value's own
    words are. What it stated is no offer; a question naming several options of the field offers
    none of them; a declared no declines it.
    With ``needs_yes`` (small models), the user's message must hold a declared yes word."""

    name = "confirmed"

    def __init__(self, *, needs_yes: bool = False) -> None:
        self.needs_yes = needs_yes

    def judge(self, item: Item, seen: Seen) -> Judged:
        heard = seen.heard
        if heard.quotes(item.quote) or not heard.asked or heard.accepted is False:
            return item
        if self.needs_yes and heard.accepted is not True:
            return item
        own = seen.evidence.get(item.field)
        if own is not None and own.options_named(words(heard.previous)) > 1:
            return item  # a choice asked for, not an offer
        if heard.offers(item.quote):
            return replace(item, source="assistant")
        if isinstance(item.value, str) and heard.offers(item.value):
            return replace(item, quote=item.value, source="assistant")
        return item


class Quoted(Rule):
    """A quote that is not the user's words (nor, for a value the assistant offered, its words) is
    the model's own invention: "Hi" read as a whole stay quotes nothing the user wrote. A date
    quoted in other words than the user's (a small model translates "le 10 août 2027" into "10
    august 2027") is quoted by the one part of the message that writes its day and names its month."""

    name = "quoted"

    def judge(self, item: Item, seen: Seen) -> Judged:
        if item.source == "assistant" or seen.heard.quotes(item.quote):
            return item
        own = seen.evidence.get(item.field)
        day = _calendar_day(own, item.value) if own is not None else None
        if day is None:
            return None
        heard = seen.heard
        writing = [
            part
            for part in heard.parts
            if day["day"] in heard.numbers_of(part) and day["month"] in heard.months_named(part)
        ]
        return replace(item, quote=writing[0]) if len(writing) == 1 else None


class NumbersWritten(Rule):
    """A value holding numbers needs one of them written in its quote: "2,5,8" is no price of 258,
    and a date nobody wrote is no date. A declared option is judged by its words instead."""

    name = "numbers_written"

    def judge(self, item: Item, seen: Seen) -> Judged:
        numbers = numbers_in(item.value)
        if not numbers:
            return item
        own = seen.evidence.get(item.field)
        if own is not None and own.has_options(item.value):
            return item
        return item if numbers & seen.heard.numbers_of(item.quote) else None


class MonthGiven(Rule):
    """A date's month needs evidence of its own, apart from its day: a month the message or the
    assistant's previous message names in a declared locale's words, a date written in digits with
    that month, or the month of a date the conversation already holds (the form's dates, another
    date of this reading), or the next month for a day before that date's. "The first day" is no
    January 1; "and leave on the 18th" takes the check-in's month. A date without such evidence
    takes the month the user's message names when it names exactly one ("du 10 au 13 aout" with
    the 13th read as October 13 is August 13); else it is dropped."""

    name = "month_given"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        day = _calendar_day(own, item.value) if own is not None else None
        if day is None:
            return item
        anchored = [
            _calendar_day(seen.evidence[name], value)
            for name, value in seen.known.items()
            if name in seen.evidence
        ]
        # Another date of this reading counts only when its own month has evidence: two dates
        # read from the same bare "1" bear each other out no more than one does.
        anchored += [
            other_day
            for other in seen.items
            if other is not item
            and (evidence := seen.evidence.get(other.field)) is not None
            and (other_day := _calendar_day(evidence, other.value)) is not None
            and _month_said(other_day, seen)
        ]
        if _month_said(day, seen) or any(held is not None and _month_follows(held, day) for held in anchored):
            return item
        if len(seen.heard.months_written) != 1 or own is None:
            return None
        (month,) = seen.heard.months_written
        value = _with_part(own, item.value, "month", month)
        return None if value is None else replace(item, value=value)


def _with_part(own: FieldEvidence, value: Any, part: DatePart, number: int) -> Any:
    """The date value ``value`` with ``number`` for its ``part`` (its day or its month), in the form
    it was read in; None when that is no date (the 31st of a shorter month)."""
    if isinstance(value, date | str):
        day = _calendar_day(own, value)
        if day is None or "year" not in day:
            return None
        parts = {**day, part: number}
        try:
            moved = date(parts["year"], parts["month"], parts["day"])
        except ValueError:
            return None
        return moved if isinstance(value, date) else moved.isoformat()
    key = (own.date_fields or _PARTS)[part]
    if isinstance(value, BaseModel):
        return value.model_copy(update={key: number})
    return {**value, key: number} if isinstance(value, Mapping) else None


def _month_said(day: Mapping[DatePart, int], seen: Seen) -> bool:
    """Whether the words bear out ``day``'s month themselves: a month named, a date written in
    digits with that month, or its number joined to the day's by a slash or a dot, either way round
    ("6/10-6/13", "20.06."; a hyphen joins the days of a range too often: "the 3-6")."""
    heard = seen.heard
    if heard.dates.reads(_PARTS, day):
        return True
    month, number = day["month"], day["day"]
    joined = rf"(?<!\d)0?{month}\s?[/.]\s?0?{number}(?!\d)|(?<!\d)0?{number}\s?[/.]\s?0?{month}(?!\d)"
    # The months named last: the names of every language are read only when the digits say nothing.
    return re.search(joined, heard.message) is not None or month in heard.months


_PARTS: Mapping[DatePart, str] = {"day": "day", "month": "month", "year": "year"}


def _month_follows(held: Mapping[DatePart, int], day: Mapping[DatePart, int]) -> bool:
    """Whether ``day``'s month is the one a day written without it takes beside the date ``held``:
    the same month, or the next one for a day that comes before ``held``'s (in at the 30th of
    August, out "on the 2nd" is September 2)."""
    if day["month"] == held["month"]:
        return True
    return day["month"] == held["month"] % 12 + 1 and day["day"] < held["day"]


def _calendar_day(own: FieldEvidence, value: Any) -> dict[DatePart, int] | None:
    """The day, month (and year) of a date value: a model's parts marked ``Said(date=...)``, or a
    ``datetime.date`` field's value (an ISO day, a date, or its parts ``month``, ``day``, ``year``)."""
    plain = value.model_dump() if isinstance(value, BaseModel) else value
    if own.date_fields:
        fields = own.date_fields
    elif own.calendar:
        if isinstance(plain, date):
            return {"day": plain.day, "month": plain.month, "year": plain.year}
        if isinstance(plain, str):
            try:
                iso = date.fromisoformat(plain)
            except ValueError:
                return None
            return {"day": iso.day, "month": iso.month, "year": iso.year}
        fields = _PARTS
    else:
        return None
    if not isinstance(plain, Mapping):
        return None
    day: dict[DatePart, int] = {}
    for part, name in fields.items():
        number = plain.get(name)
        if isinstance(number, int) and not isinstance(number, bool):
            day[part] = number
    return day if {"day", "month"} <= day.keys() else None


class DayWritten(Rule):
    """A date's day must be written in its quote, in digits or in words: "August 2027" read as
    August 20 is a day nobody wrote (the year bore the date out to ``numbers_written``)."""

    name = "day_written"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        day = _calendar_day(own, item.value) if own is not None else None
        if day is None or item.source != "user":
            return item
        return item if day["day"] in seen.heard.numbers_of(item.quote) else None


class WrittenDatesOrder(Rule):
    """The numbers of a date written in digits ("01/10/2026") are read together, in the order the
    message writes its dates: beside "15/10/2026", a day read as January 10 is the first of October;
    a day that is no written date, though its numbers are written only in such dates, is dropped.
    For a model's date parts (``Said(date=...)``) and for a ``datetime.date`` field alike."""

    name = "written_dates"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        dates = seen.heard.dates
        if own is None or not dates:
            return item
        if own.date_fields:
            fields, read = own.date_fields, item.value
        elif own.calendar:  # a ``datetime.date``: its parts, or an ISO day taken apart
            fields, read = (
                _PARTS,
                item.value if isinstance(item.value, Mapping) else _calendar_day(own, item.value),
            )
        else:
            return item
        if not isinstance(read, Mapping):
            return item
        value = dates.put_right(fields, read)
        if not dates.reads(fields, value):
            value = _quoted_date(item.quote, seen.heard, fields, value)
        if not dates.bear(fields, value):
            return None
        if value == read:
            return item
        if not isinstance(item.value, Mapping):  # an ISO day read: an ISO day put right
            value = date(value["year"], value["month"], value["day"]).isoformat()
        return replace(item, value=value)


def _quoted_date(quote: str, heard: Heard, fields: Mapping[DatePart, str], value: Mapping[str, Any]) -> Any:
    """``value`` as the one date its quote writes in digits, read as the message reads it, when the
    quote writes exactly that date and no other number, and the message reads it one way
    ("13.08.2027" read as October 13: a month taken from the date before it); else ``value``."""
    quoted = WrittenDates.of(quote, heard.locale.date_order())
    if len(quoted.read) != 1 or quoted.outside:  # "du 12/09 au 18" writes another day too
        return value
    said = [dict(reading) for reading in quoted.read[0]]
    meant = {
        tuple(sorted(reading.items()))
        for readings in heard.dates.read
        for reading in readings
        if dict(reading) in said
    }
    if len(meant) != 1:
        return value
    update = {fields[part]: number for part, number in next(iter(meant)) if part in fields}
    return {**value, **update}


class YesNo(Rule):
    """A yes or no (a ``bool`` field) is what its quote's declared words say: "no pets" read as
    pets=true is pets=false (a denial wins)."""

    name = "yes_no"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        if own is None or not isinstance(item.value, bool):
            return item
        answer = own.answered(words(item.quote), exact=seen.heard.exact)
        if answer is None or answer == item.value:
            return item
        return replace(item, value=answer)


class YesNoSaid(Rule):
    """A yes or no whose quote holds none of its field's declared yes or no words is dropped: a
    small model answers "is that all?" for fields nobody asked about."""

    name = "yes_no_said"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        if own is None or not isinstance(item.value, bool) or not own.decides_yes_no:
            return item
        return item if own.answered(words(item.quote), exact=seen.heard.exact) is not None else None


class OptionWords(Rule):
    """An option whose words are declared is kept only when its quote holds one of them: "near the
    beach" is no pool; a list loses the options its quote does not say. An option read from words
    that declare another one is that one: "Doppelbett" read as two beds is the one bed its words
    say (for a single option, when the quote says exactly one). A quote that names no option of
    the field at all ("une chambre") is judged by the words of its part of the message instead
    ("une chambre avec un lit à Portland")."""

    name = "option_words"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        if own is None or isinstance(item.value, bool):
            return item
        quote: Sequence[str] = words(item.quote)
        value = own.options_kept(item.value, quote, exact=seen.heard.exact)
        if (
            value != item.value
            and item.source == "user"
            and not own.options_said(quote, exact=seen.heard.exact)
            and (part := seen.heard.beside(item.quote, reach=None)) is not None
        ):
            # A quote naming no option ("une chambre"): its part of the message says which
            # ("une chambre avec un lit à Portland").
            quote = part
            value = own.options_kept(item.value, quote, exact=seen.heard.exact)
        if value != item.value and own.has_options(item.value):
            # In the field's order of options (its literal ones sorted), which a list keeps.
            said = sorted(own.options_said(quote, exact=seen.heard.exact), key=own.options.index)
            if isinstance(item.value, list):
                kept = value or []
                value = [*kept, *(option for option in said if option not in kept)] or None
            elif len(said) == 1:
                value = said[0]
        if value is None:
            return None
        return item if value == item.value else replace(item, value=value)


class TextWords(Rule):
    """A free-text value (a plain ``str`` field) must be made of its quote's words: "Portland" read
    from "somewhere warm" is the model's wish."""

    name = "text_words"

    def judge(self, item: Item, seen: Seen) -> Judged:
        own = seen.evidence.get(item.field)
        if own is None or not own.text or not isinstance(item.value, str):
            return item
        if own.has_options(item.value):
            return item
        quote = set(words(item.quote))
        return item if set(words(item.value)) <= quote else None


DEFAULT_RULES: tuple[Rule, ...] = (FieldWords(), Confirmed(), Quoted(), WrittenDatesOrder(), YesNo())
"""The rules any model gets: they act on evidence against a reading, never on its absence."""

SMALL_MODEL_RULES: tuple[Rule, ...] = (
    AnchoredNumber(),
    FieldWords(),
    Confirmed(needs_yes=True),
    OptionNamed(),
    Quoted(),
    NumbersWritten(),
    WrittenDatesOrder(),
    MonthGiven(),
    DayWritten(),
    YesNo(),
    YesNoSaid(),
    OptionWords(),
    TextWords(),
)
"""The rules the embedded model turns on: the default ones, those that need evidence for a
reading, and the rescues of a 1.5B model's quotes."""


_RESCUES = ("slips", "second_look", "told", "arguments")


@dataclass(frozen=True, slots=True)
class Grounding:
    """An ordered list of named rules every item of a reading passes through, and the rescues a
    profile turns on. Immutable: ``without``, ``with_rule`` and ``replacing`` return a new one."""

    rules: tuple[Rule, ...] = DEFAULT_RULES
    profile: str = "default"
    slips: bool = False
    """Declared words also match a word written with one slip of the keys ("serch" for "search");
    only words of five letters or more, never in their first letter or by a letter added or left
    out at the end ("nicht" is not "nichts", "suite" is not "quite")."""
    second_look: bool = False
    """Parts of a long message the reading left out go back to the model once."""
    told: bool = False
    """What two readings still left out of a yes-or-no field or the go-ahead, the declared words
    tell on their own; a message the reading kept nothing of ends the session when it holds the
    goodbye's words."""
    arguments: bool = False
    """A tool call's arguments (options, texts, numbers) must be borne out by what the user said
    in the step, unless the tool says otherwise (``@tool(grounded=...)``)."""
    _names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [rule.name for rule in self.rules]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise FlowDefinitionError(f"Grounding: rule {', '.join(twice)} is listed twice")
        object.__setattr__(self, "_names", frozenset(names))

    @classmethod
    def default(cls) -> Grounding:
        """The rules any model gets unless it asks for more."""
        return cls()

    @classmethod
    def for_small_models(cls) -> Grounding:
        """What the embedded model turns on: every rule, slips of the keys, the second look and
        the words that tell on their own."""
        return cls(SMALL_MODEL_RULES, "small", slips=True, second_look=True, told=True, arguments=True)

    @classmethod
    def for_model(cls, model: object) -> Grounding:
        """The profile ``model`` asks for (its ``grounding`` attribute: ``"small"`` or ``"default"``)."""
        small = getattr(model, "grounding", "default") == "small"
        if cls is Grounding:  # asked for on every tool call: the two profiles are built once, and shared
            return _SMALL_PROFILE if small else _DEFAULT_PROFILE
        return cls.for_small_models() if small else cls.default()

    def names(self) -> tuple[str, ...]:
        return tuple(rule.name for rule in self.rules)

    def without(self, *names: str) -> Grounding:
        """This policy without the rules ``names`` (or the rescues ``slips``, ``second_look``, ``told``,
        ``arguments``)."""
        self._known(names)
        return Grounding(
            tuple(r for r in self.rules if r.name not in names),
            self.profile,
            slips=self.slips and "slips" not in names,
            second_look=self.second_look and "second_look" not in names,
            told=self.told and "told" not in names,
            arguments=self.arguments and "arguments" not in names,
        )

    def with_rule(self, rule: Rule, *, before: str | None = None, after: str | None = None) -> Grounding:
        """This policy with ``rule`` added, before or after a named rule (else last)."""
        rules = list(self.rules)
        anchor = before or after
        if anchor is None:
            rules.append(rule)
        else:
            self._known((anchor,))
            at = [r.name for r in rules].index(anchor)
            rules.insert(at if before else at + 1, rule)
        return replace(self, rules=tuple(rules))

    def replacing(self, name: str, rule: Rule) -> Grounding:
        """This policy with the rule ``name`` replaced by ``rule``, in the same place."""
        self._known((name,))
        return replace(self, rules=tuple(rule if r.name == name else r for r in self.rules))

    def _known(self, names: Iterable[str]) -> None:
        unknown = [n for n in names if n not in self._names and n not in _RESCUES]
        if unknown:
            raise FlowDefinitionError(
                f"Grounding: no rule {', '.join(unknown)} (its rules: {', '.join(self.names())})"
            )

    def judge(
        self,
        slots: type[BaseModel],
        items: Sequence[Item],
        heard: Heard,
        asked: Sequence[str] = (),
        known: Mapping[str, Any] | None = None,
    ) -> tuple[tuple[Item, ...], tuple[Verdict, ...]]:
        """The items ``heard`` bears out (some put right), and a verdict for every item read;
        ``asked``: the fields of the question the message answers; ``known``: what the form held
        before the message."""
        seen = Seen(heard, evidence_of(slots, heard.locales), tuple(items), tuple(asked), known or {})
        kept: list[Item] = []
        verdicts: list[Verdict] = []
        for read in items:
            item: Item | None = read
            decided: Rule | None = None
            for rule in self.rules:
                assert item is not None
                judged = rule.judge(item, seen)
                if judged is None:
                    decided = rule
                    item = None
                    break
                if (judged.field, judged.value) != (item.field, item.value) or judged.source != item.source:
                    decided = rule
                item = judged
            if item is None:
                assert decided is not None
                verdicts.append(
                    Verdict(
                        read.field,
                        read.value,
                        "dropped",
                        decided.name,
                        heard.span(read.quote, "user"),
                        why=decided.why,
                    )
                )
                continue
            kept.append(item)
            repaired = (item.field, item.value) != (read.field, read.value)
            verdicts.append(
                Verdict(
                    item.field,
                    item.value,
                    "repaired" if repaired else "kept",
                    decided.name if decided is not None else None,
                    heard.span(item.quote, item.source),
                    (read.field, read.value) if repaired else None,
                    decided.why if decided is not None else "",
                )
            )
        return tuple(kept), tuple(verdicts)


_DEFAULT_PROFILE = Grounding.default()
_SMALL_PROFILE = Grounding.for_small_models()
"""What ``Grounding.for_model`` hands out: immutable, so one of each serves every call."""


RANGE_WHY = "a date range's quote writes both its days: the end a reading left out is the other one"


def range_ends(
    slots: type[BaseModel], items: Sequence[Item], heard: Heard
) -> tuple[tuple[Item, ...], tuple[Verdict, ...]]:
    """The other end of a date range a reading took one end of (a small model's habit): for a
    slots model with exactly two date fields, a range's start and then its end in the order they
    are declared, one read from a quote of the user's that writes two days and names one month in
    words ("vom 1. bis 3. September 2027", "from the 3rd to the 6th of August"): the field left
    out gets the other day, the one it takes (the smaller for the start), in the read date's month
    and year. Items to add, with their verdicts; none when the reading gave both ends, or the
    quote writes no such range."""
    evidence = evidence_of(slots, heard.locales)
    dated = [name for name, own in evidence.items() if own.date_fields or own.calendar]
    if len(dated) != 2:
        return (), ()
    start, end = dated
    read = [item for item in items if item.field in dated]
    if len(read) != 1 or read[0].source != "user":
        return (), ()
    item = read[0]
    own = evidence[item.field]
    day = _calendar_day(own, item.value)
    if day is None or heard.months_named(item.quote) != {day["month"]}:
        return (), ()  # a range in digits is the written dates' to read; two months, no range of days
    numbers = heard.numbers_of(item.quote)
    days = sorted({int(n) for n in numbers if n.is_integer() and 1 <= n <= 31 and n != day.get("year")})
    if len(days) != 2 or day["day"] != days[0 if item.field == start else 1]:
        return (), ()
    other = end if item.field == start else start
    if (evidence[other].date_fields, evidence[other].calendar) != (own.date_fields, own.calendar):
        return (), ()  # the two ends take dates of different forms
    value = _with_part(own, item.value, "day", days[1 if other == end else 0])
    if value is None:
        return (), ()
    added = Item(other, item.quote, value)
    return (added,), (
        Verdict(other, value, "kept", "date_range", heard.span(item.quote, "user"), why=RANGE_WHY),
    )


def given(items: Iterable[Item]) -> dict[str, Any]:
    """The value of every field read; a list field read twice ("wifi ... and parking") gets both."""
    values: dict[str, Any] = {}
    for item in items:
        previous = values.get(item.field)
        if isinstance(previous, list) and isinstance(item.value, list):
            values[item.field] = [*previous, *item.value]
        else:
            values[item.field] = item.value
    return values
