"""Grounding: a reading is kept only as far as the user's words bear it out.

A model reading a message proposes a value and quotes the words that say it. A small model also
fills in what it would like to hear (a whole stay for "Hi", "2,5,8" read as a price of 258, the
interests of an example it was shown), so code keeps an item only when

* its quote is the user's words (as written, or word for word),
* a value holding numbers has one of them written in the quote,
* a text value (a plain ``str`` field) is made of the quote's words,
* an option of an enumeration has one of the words that say it in the quote (or, when a small
  model quoted the option's own name rather than the user's words, in the message),
* a yes or no (a ``bool`` field) is what the quote's words of affirmation or negation say, and
* the words that say which field a value belongs to decide it: "under $400" read as a minimum
  is kept as the maximum, "15 miles of the airport" read as the distance to the center as the
  distance to the airport, and
* the numbers of a date written in digits ("01/10/2026") are read together, in the order the
  message writes its dates: next to "15/10/2026", "01/10" is the first of October, whichever way
  a model read it.

All these words are declared in the slots model with ``Said``, beside the field or option they are
about; the framework knows no word of any language. The marker stays out of the JSON schema the
model sees.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from picoflow.exceptions import FlowDefinitionError

Phrase = tuple[str, ...]
"""Words in a row, casefolded: ("san", "francisco")."""

DatePart = Literal["day", "month", "year"]
"""Which number of a date written in digits a field holds (``Said(date=...)``)."""
_DATE_PARTS: tuple[DatePart, ...] = ("day", "month", "year")


@dataclass(frozen=True, slots=True, eq=False)
class Said:
    """What the user's words must hold for a reading of this type to be kept.

    Put it in ``Annotated`` beside the type it is about, in the slots model::

        Interest = Annotated[
            Literal["music", "food", "art"],
            Said(options={"music": ("jazz", "concert"), "food": ("restaurant", "dining")}),
        ]
        max_price: Annotated[float | None, Said(words=("under", "max", "up to"))] = None
        min_price: Annotated[float | None, Said(words=("from", "at least", "over"))] = None
        pets: Annotated[bool | None, Said(yes=("yes", "pet", "dog"), no=("no", "without"))] = None

    A phrase of several words must be written in that order ("san francisco"), as whole words.

    * ``options``: for each option, the words that say it besides its own name. An option read from
      a quote holding none of its words is dropped (for a list, only that option). Options the
      marker does not name are not checked by it, and on a ``str`` field it may name a few
      well-known values of an open set (a city and its nicknames). On an ``int`` field the options
      are numbers said in words (a month: ``{10: ("october", "oct")}``); its own digits say it too.
    * ``words``: the words that say this field rather than another (a bound's direction, what a
      distance is measured from). A value whose quote holds none of them but the words of exactly
      one other field goes to that field; a quote holding none of any field's keeps the field read.
    * ``yes`` / ``no``: the words that affirm or deny a ``bool`` field. The quote decides the value:
      a word of ``no`` makes it false, else a word of ``yes`` (or of ``named``) true; a quote with
      neither is dropped.
    * ``named``: the words that name what a ``bool`` field is about, so that saying one is a yes
      even when nobody asked ("pdx" or "oregon" for a stay in Portland). However short, they tell
      that the field is due a reading; a short ``yes`` word ("ok", "yes") does not, since it
      answers whatever was asked.
    * ``date``: the number of a date written in digits this field of a day's model holds
      (``"day"``, ``"month"`` or ``"year"``). A day read from "01/10/2026" must then be that date in
      the order the message writes its dates: day first when another date of it is "15/10/2026",
      month first beside "10/15/2026", either when every date could be both. A day read in the
      other order is put right (see ``as_written``); one that is no written date, though its
      numbers are written only in such dates, is not borne out.

    Pydantic ignores the marker: it is not in the schema the model sees.
    """

    options: Mapping[str, Sequence[str]] | Mapping[int, Sequence[str]] = field(default_factory=dict)
    words: Sequence[str] = ()
    yes: Sequence[str] = ()
    no: Sequence[str] = ()
    named: Sequence[str] = ()
    date: DatePart | None = None
    _phrases: Mapping[str, tuple[Phrase, ...]] = field(init=False, repr=False, compare=False)
    _field: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)
    _yes: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)
    _no: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)
    _named: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        options: dict[str, tuple[Phrase, ...]] = {}
        for option, words in self.options.items():
            if isinstance(option, bool) or not isinstance(option, str | int) or not str(option).strip():
                raise FlowDefinitionError(f"Said(options=...): {option!r} is not an option's name")
            listed = _listed(words, f"options={{{option!r}: ...}}")
            options[str(option).casefold()] = _phrases((str(option), *listed))
        object.__setattr__(self, "_phrases", MappingProxyType(options))
        for name, slot in (("words", "_field"), ("yes", "_yes"), ("no", "_no"), ("named", "_named")):
            object.__setattr__(self, slot, _phrases(_listed(getattr(self, name), f"{name}=...")))
        if self._named:
            object.__setattr__(self, "_yes", (*self._yes, *self._named))
        if bool(self._yes) != bool(self._no):
            raise FlowDefinitionError("Said(yes=..., no=...): give the words of both, or of neither")
        if self.date is not None and self.date not in _DATE_PARTS:
            raise FlowDefinitionError(f"Said(date={self.date!r}): a date part is one of day, month or year")

    def names(self) -> list[str]:
        """The options the marker speaks for, as declared."""
        return [str(option) for option in self.options]

    def declares(self, value: str | int) -> bool:
        """Whether the marker gives the words of option ``value``."""
        return str(value).casefold() in self._phrases

    def bears(self, value: str | int, quote: Sequence[str], *, exact: bool = False) -> bool | None:
        """Whether the words of ``quote`` say option ``value`` (``exact``: as declared, without the
        slip of the keys a long word may have); None when the marker does not name it."""
        phrases = self._phrases.get(str(value).casefold())
        if phrases is None:
            return None
        return _any(quote, phrases, exact=exact)

    def names_field(self, quote: Sequence[str]) -> bool:
        """Whether ``quote`` holds one of the words that say this field (``words``)."""
        return _any(quote, self._field)

    def answer(self, quote: Sequence[str]) -> bool | None:
        """The yes or no ``quote`` says (a denial wins), or None when it says neither or the marker
        declares no such words."""
        if _any(quote, self._no):
            return False
        return True if _any(quote, self._yes) else None

    @property
    def decides_yes_no(self) -> bool:
        return bool(self._yes)

    def telling(self) -> tuple[Phrase, ...]:
        """The phrases that tell a reading of this field is due: its options' words, its ``named``
        words, and its yes words of several words or of ``TYPO_LENGTH`` letters or more ("of
        course"). Not short yes words nor its no words ("ok", "yes", "no" answer whatever was
        asked), nor the words of a field ("from" is in "from August 1" as much as in "from $100")."""
        options = (phrase for phrases in self._phrases.values() for phrase in phrases)
        specific = (phrase for phrase in self._yes if len(phrase) > 1 or len(phrase[0]) >= TYPO_LENGTH)
        return tuple(dict.fromkeys((*options, *self._named, *specific)))


@dataclass(frozen=True, slots=True)
class FieldEvidence:
    """What a value of one field of the slots model must find in its quote."""

    said: tuple[Said, ...] = ()
    text: bool = False
    """The field holds free text (a plain ``str``): the value is made of the quote's words."""
    parts: type[BaseModel] | None = None
    """The model a value of the field is made of (a day of a month and day), checked field by field."""

    def names_field(self, quote: Sequence[str]) -> bool:
        return any(marker.names_field(quote) for marker in self.said)

    @property
    def has_field_words(self) -> bool:
        return any(marker.words for marker in self.said)

    def has_options(self, value: Any) -> bool:
        """Whether the markers declare the words of ``value`` (of every option of a list): the
        options whose words a message holds or not, wherever the model found them."""
        if isinstance(value, list):
            return bool(value) and all(self.has_options(item) for item in value)
        return _option(value) and any(marker.declares(value) for marker in self.said)

    def keeps(self, value: Any, quote: Sequence[str]) -> Any:
        """``value`` as far as ``quote`` bears it out (a list loses the items it does not), or None."""
        if isinstance(value, list):
            kept = [item for item in value if self.keeps(item, quote) is not None]
            return kept or None
        if isinstance(value, bool):
            answers = [marker.answer(quote) for marker in self.said if marker.decides_yes_no]
            if not answers:
                return value
            return next((answer for answer in answers if answer is not None), None)
        if not _option(value):
            return value
        verdicts = [verdict for marker in self.said if (verdict := marker.bears(value, quote)) is not None]
        if verdicts:
            return value if any(verdicts) else None
        if self.text and isinstance(value, str) and not set(words(value)) <= set(quote):
            return None
        return value


@cache
def evidence_of(slots: type[BaseModel]) -> Mapping[str, FieldEvidence]:
    """The evidence every field of ``slots`` needs, read off its annotations once."""
    found: dict[str, FieldEvidence] = {}
    for name, info in slots.model_fields.items():
        markers: list[Said] = [item for item in info.metadata if isinstance(item, Said)]
        options: set[str] = set()
        models: list[type[BaseModel]] = []
        text = _walk(info.annotation, markers, options, models)
        for marker in markers:
            unknown = [option for option in marker.names() if options and option not in options]
            if unknown:
                raise FlowDefinitionError(
                    f"{slots.__name__}.{name}: Said names {', '.join(unknown)}, not an option of the field "
                    f"({', '.join(sorted(options))})"
                )
        parts = models[0] if len(models) == 1 else None
        found[name] = FieldEvidence(tuple({id(marker): marker for marker in markers}.values()), text, parts)
    return MappingProxyType(found)


def bears_out(model: type[BaseModel], name: str, value: Any, said: str) -> bool:
    """Whether the user's words ``said`` hold what the ``Said`` markers of field ``name`` of
    ``model`` ask of ``value`` (the words of its option, its yes or no), and whether a value holding
    numbers has one of them written in ``said`` (each item of a list). For an answer read as a
    whole, with no quote (a step's ``output``): "book the cheapest" may pick the cheapest hotel,
    "book it" may not; "order 40006" may show order 40006, "my last order" may not. A value
    neither rule says anything about is borne out."""
    evidence = _evidence(model, name)
    plain = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    # The dates written in digits are read only for a field whose value is a day of a date.
    dated = evidence.parts is not None and bool(date_parts(evidence.parts))
    return _borne(
        evidence,
        plain,
        words(said),
        written_numbers(said),
        WrittenDates.of(said) if dated else WrittenDates(),
    )


def written_days(model: type[BaseModel], name: str, said: str) -> list[dict[str, int]]:
    """The dates ``said`` writes in digits, in the order written, each as a value of field ``name``
    of ``model`` (the fields its ``Said(date=...)`` markers name): the days a range of two written
    dates runs between, whatever a model read. Empty when the field's model declares no date
    parts, or when a date could be read both ways (then the words alone do not tell which day)."""
    evidence = _evidence(model, name)
    fields = date_parts(evidence.parts) if evidence.parts is not None else {}
    if not fields:
        return []
    days: list[dict[str, int]] = []
    for readings in WrittenDates.of(said).read:
        if len(readings) != 1:
            return []
        days.append({fields[part]: number for part, number in readings[0].items() if part in fields})
    return days


def as_written(model: type[BaseModel], name: str, value: Any, said: str) -> Any:
    """``value`` of field ``name`` of ``model`` with the numbers of a date written in digits put in
    the order the message ``said`` writes its dates (``Said(date=...)``): beside "15/10/2026", a
    day read as January 10 from "01/10/2026" is the first of October. A value that is no such date
    read the other way round, or a field whose model declares no date parts, comes back as it is
    (a list item by item)."""
    evidence = _evidence(model, name)
    if evidence.parts is None or not date_parts(evidence.parts):
        return value
    dates = WrittenDates.of(said)
    if isinstance(value, list):
        return [dates.put_right(evidence.parts, item) for item in value]
    return dates.put_right(evidence.parts, value)


def says_option(model: type[BaseModel], name: str, said: str) -> bool:
    """Whether ``said`` holds the words of an option declared for field ``name`` of ``model``
    (anywhere in it, with no reading to go by)."""
    quote = words(said)
    return any(
        marker.bears(option, quote) for marker in _evidence(model, name).said for option in marker.names()
    )


def says_field(model: type[BaseModel], name: str, said: str) -> bool:
    """Whether ``said`` holds the words that say field ``name`` of ``model`` (``Said(words=...)``):
    for an answer read without quotes, "until September 30" says the end of a range, not its start."""
    return _evidence(model, name).names_field(words(said))


def told(said: str, slots: type[BaseModel], name: str) -> Any:
    """What the words declared for field ``name`` of ``slots`` say in ``said`` on their own, with
    no reading, each as written: for a yes-or-no field, yes when a part of the message holds one of
    its telling words and none of its no words ("Looking for a suite in Portland"; a denial is left
    to a reading); for a field of one option of a ``Literal``, the option whose words a part holds,
    when only one does. None when they say nothing, or for a field of another kind (a list, a number, text).

    ``SlotStep`` asks it only of what a second look still left out: words alone are weaker
    evidence than a reading whose quote they bear out."""
    evidence = _evidence(slots, name)
    literal = _literal(slots.model_fields[name].annotation)
    for part in _parts(said):
        here = words(part)
        for marker in evidence.said:
            if marker.decides_yes_no:
                if _any(here, marker.telling(), exact=True) and marker.answer(here) is True:
                    return True
                continue
            # As written: words alone, with no reading, get no slip of the keys ("hotel" is not "hotels").
            options = [option for option in literal if marker.bears(option, here, exact=True)]
            if len(options) == 1:
                return options[0]
    return None


def _literal(annotation: Any) -> tuple[str, ...]:
    """The options of a ``Literal`` field (with or without None), else none."""
    if get_origin(annotation) in (Union, UnionType):
        kept = [arg for arg in get_args(annotation) if arg is not type(None)]
        annotation = kept[0] if len(kept) == 1 else None
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return tuple(value for value in get_args(annotation) if isinstance(value, str))
    return ()


def left_out(said: str, kept: Sequence[tuple[str, str, Any]], slots: type[BaseModel]) -> list[str]:
    """The parts of a message (split at commas, sentence ends and line breaks) that say something
    the reading ``kept`` (its field, quote and value items) did not take: a number
    written that no kept value holds, or the words of an option of a field none of whose kept items
    quotes them ("Portland, August 10 to August 13, one bed" read as one bed only). A small model
    reading a long message often stops after a few items; these parts are worth a second look."""
    parts = _parts(said)
    # The numbers a kept value holds; for a value that holds none as numbers (a date as text), the
    # numbers of its quote.
    held: set[float] = set()
    for _, quote, value in kept:
        held |= numbers_in(value) or written_numbers(quote)
    quoted: dict[str, list[list[str]]] = {}
    for name, quote, _ in kept:
        quoted.setdefault(name, []).append(words(quote))
    left = []
    for part in parts:
        if written_numbers(part) - held:
            left.append(part)
            continue
        here = words(part)
        for name, evidence in evidence_of(slots).items():
            phrases = [phrase for marker in evidence.said for phrase in marker.telling()]
            # As written, without the slip of the keys a reading may have ("night" is not "right").
            if _any(here, phrases, exact=True) and not any(
                _any(quote, phrases) for quote in quoted.get(name, [])
            ):
                left.append(part)
                break
    return left


def _parts(said: str) -> list[str]:
    """``said`` cut at commas and semicolons followed by a space, sentence ends and line breaks; a
    part without a letter ("2027" of "September 6, 2027") stays with the one before it."""
    parts: list[str] = []
    current = ""
    for index, char in enumerate(said):
        following = said[index + 1] if index + 1 < len(said) else " "
        if char == "\n" or (char in ",;.!?" and following.isspace()):
            _close(parts, current)
            current = ""
        else:
            current += char
    _close(parts, current)
    return parts


def _close(parts: list[str], part: str) -> None:
    part = part.strip()
    if not part:
        return
    if parts and not any(c.isalpha() for c in part):
        parts[-1] = f"{parts[-1]}, {part}"
    else:
        parts.append(part)


def _evidence(model: type[BaseModel], name: str) -> FieldEvidence:
    evidence = evidence_of(model).get(name)
    if evidence is None:
        raise KeyError(f"{model.__name__} has no field {name!r}")
    return evidence


def _borne(
    evidence: FieldEvidence, value: Any, said: Sequence[str], written: set[float], dates: WrittenDates
) -> bool:
    """Whether every item of ``value`` is borne out: a value made of a model's fields is borne out
    as a date written in digits when it is one (``Said(date=...)``), and field by field; a number
    declared as an option needs its words (the month of "October 1"), another value holding numbers
    one of them written (order 40006, the 1 of "October 1"); and the markers' words as ``keeps``
    asks."""
    if isinstance(value, list):
        return all(_borne(evidence, item, said, written, dates) for item in value)
    if evidence.parts is not None and isinstance(value, Mapping):
        if not dates.bear(evidence.parts, value):
            return False
        # The parts of a date written in digits are borne out together (the 2026 of "21/10/26").
        whole = set(date_parts(evidence.parts).values()) if dates.reads(evidence.parts, value) else set()
        inner = evidence_of(evidence.parts)
        return all(
            _borne(inner[key], item, said, written, dates)
            for key, item in value.items()
            if key in inner and key not in whole
        )
    if evidence.has_options(value):
        return bool(evidence.keeps(value, said) == value)
    numbers = numbers_in(value)
    if numbers and not numbers & written:
        return False
    return bool(evidence.keeps(value, said) == value)


def _walk(annotation: Any, markers: list[Said], options: set[str], models: list[type[BaseModel]]) -> bool:
    """Collect the ``Said`` markers, literal options and models inside ``annotation``; True when
    it holds a plain ``str`` (free text)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extras = get_args(annotation)
        markers.extend(extra for extra in extras if isinstance(extra, Said))
        return _walk(inner, markers, options, models)
    if origin is Literal:
        options.update(str(value) for value in get_args(annotation))
        return False
    if origin in (Union, UnionType) or origin in (list, tuple, set, frozenset) or origin is Sequence:
        found = [_walk(arg, markers, options, models) for arg in get_args(annotation) if arg is not Ellipsis]
        return any(found)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        models.append(annotation)
    return annotation is str


def _option(value: Any) -> bool:
    """Whether ``value`` may be an option a marker names: a text or a whole number."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


@dataclass(frozen=True, slots=True)
class UserWords:
    """The user's message as quotes are compared with it."""

    text: str
    """Casefolded, with its spacing squeezed."""
    words: frozenset[str]
    sequence: tuple[str, ...] = ()
    """The words in order (for the phrases of options)."""
    parts: tuple[str, ...] = ()
    """The message cut into its parts (see ``left_out``)."""
    dates: WrittenDates | None = None
    """The dates the message writes in digits."""

    @classmethod
    def of(cls, said: str) -> UserWords:
        sequence = tuple(words(said))
        return cls(squeezed(said), frozenset(sequence), sequence, tuple(_parts(said)), WrittenDates.of(said))

    def quotes(self, quote: str) -> bool:
        """Whether ``quote`` is the user's words: as written, or word for word."""
        written = squeezed(quote)
        return bool(written) and (written in self.text or all(self._has(word) for word in words(quote)))

    def anchored(self, quote: str, value: Any) -> str | None:
        """For a value holding numbers quoted in words of the model's own ("at most $350" for "no
        more than $350", "a minimum" from its question), the one part of the message that writes
        every one of them, whose words then say what the value is; None when there is no such one
        part (or the quote is the user's words)."""
        numbers = numbers_in(value)
        if not numbers or self.quotes(quote):
            return None
        holding = [part for part in self.parts if numbers <= written_numbers(part)]
        return holding[0] if len(holding) == 1 else None

    def keep(self, quote: str, value: Any, evidence: FieldEvidence | None = None) -> Any:
        """``value`` as far as these words bear it out (see the module's rules), or None when
        they do not bear it out at all."""
        written = squeezed(quote)
        quoted = words(quote)
        if not self.quotes(quote):
            # A small model often quotes the option it chose ("freeParking") instead of the words
            # that say it: an option whose words are declared is then looked for in the message.
            if evidence is None or not evidence.has_options(value):
                return None
            return evidence.keeps(value, self.sequence)
        numbers = numbers_in(value)
        if numbers and not numbers & written_numbers(written):
            return None
        if evidence is not None and evidence.parts is not None and isinstance(value, Mapping) and self.dates:
            value = self.dates.put_right(evidence.parts, value)
            if not self.dates.bear(evidence.parts, value):
                return None
        return value if evidence is None else evidence.keeps(value, quoted)

    def _has(self, word: str) -> bool:
        """Whether the user wrote ``word``, or wrote it with one slip of the keys: a small model
        quotes "august 10" for the "agust 10" it read."""
        return word in self.words or any(_same(word, written) for written in self.words)


@cache
def date_parts(model: type[BaseModel]) -> Mapping[DatePart, str]:
    """The fields of ``model`` that hold the numbers of a date written in digits, by part."""
    found: dict[DatePart, str] = {}
    for name, info in model.model_fields.items():
        markers: list[Said] = [item for item in info.metadata if isinstance(item, Said)]
        _walk(info.annotation, markers, set(), [])
        for marker in markers:
            if marker.date is None:
                continue
            if marker.date in found and found[marker.date] != name:
                raise FlowDefinitionError(
                    f"{model.__name__}: both {found[marker.date]} and {name} are said to be the {marker.date}"
                )
            found[marker.date] = name
    if found and not {"day", "month"} <= found.keys():
        raise FlowDefinitionError(
            f"{model.__name__}: a date written in digits needs its day and its month fields"
        )
    return MappingProxyType(found)


# A date written in digits, its numbers joined by one sign: "01/10/2026", "15/10", "21.10.2026",
# "2026-10-21". Only "/" joins two numbers alone ("1.5" is a decimal, "10-15" a span).
_WRITTEN_DATE = re.compile(r"(?<![\w.,/-])(\d{1,4})([/.-])(\d{1,2})(?:\2(\d{2,4}))?(?![\w/-]|[.,]\d)")

Written = Mapping[DatePart, int]


@dataclass(frozen=True, slots=True)
class WrittenDates:
    """The dates a message writes in digits, each read in the order the message writes them all."""

    read: tuple[tuple[Written, ...], ...] = ()
    """For each date, its readings in the message's order (two when every date could be both)."""
    other: tuple[tuple[Written, ...], ...] = ()
    """For each date, its readings in the other order, when that reading is a date."""
    outside: frozenset[float] = frozenset()
    """The numbers the message writes outside such dates."""

    @classmethod
    def of(cls, said: str) -> WrittenDates:
        found: list[
            tuple[Written | None, Written | None, Written | None]
        ] = []  # (iso, day first, month first)
        rest = said
        for match in _WRITTEN_DATE.finditer(said):
            first, sign, second, third = match.groups()
            if third is None and sign != "/":
                continue
            if len(first) == 4:
                iso = _date({"year": int(first), "month": int(second), "day": int(third or 0)})
                if iso is not None:
                    found.append((iso, None, None))
                    rest = _blanked(rest, match)
                continue
            year: dict[DatePart, int] = {"year": int(third)} if third else {}
            day_first = _date({"day": int(first), "month": int(second), **year})
            month_first = _date({"month": int(first), "day": int(second), **year})
            if day_first or month_first:
                found.append((None, day_first, month_first))
                rest = _blanked(rest, match)
        if not found:
            return cls(outside=frozenset(written_numbers(said)))
        orders = [
            {index for index, reading in enumerate(date[1:]) if reading} for date in found if not date[0]
        ]
        common = set.intersection(*orders) if orders else set()
        read: list[tuple[Written, ...]] = []
        other: list[tuple[Written, ...]] = []
        for iso, *ways in found:
            if iso is not None:
                read.append((iso,))
                other.append(())
                continue
            chosen = common or {index for index, reading in enumerate(ways) if reading}
            read.append(tuple(reading for index, reading in enumerate(ways) if reading and index in chosen))
            other.append(
                tuple(reading for index, reading in enumerate(ways) if reading and index not in chosen)
            )
        return cls(tuple(read), tuple(other), frozenset(written_numbers(rest)))

    def __bool__(self) -> bool:
        return bool(self.read)

    def bear(self, model: type[BaseModel], value: Any) -> bool:
        """Whether ``value`` (a mapping of ``model``'s fields) is borne out as a written date: it is
        one, in the message's order, or its day is a number written only inside such dates."""
        day = self._day(model, value)
        if day is None or not self.read or self._is_read(day):
            return True
        return float(day["day"]) in self.outside

    def reads(self, model: type[BaseModel], value: Any) -> bool:
        """Whether ``value`` (a mapping of ``model``'s fields) is one of the written dates, in the
        message's order."""
        day = self._day(model, value)
        return day is not None and self._is_read(day)

    def _is_read(self, day: Mapping[DatePart, int]) -> bool:
        """Whether ``day`` is one of the written dates, in the message's order."""
        return any(_matches(reading, day) for readings in self.read for reading in readings)

    def put_right(self, model: type[BaseModel], value: Any) -> Any:
        """``value`` as the one written date it is read the other way round, in the message's
        order; else ``value`` as it is."""
        day = self._day(model, value)
        if day is None or self._is_read(day):
            return value
        meant = {
            tuple(sorted(reading.items()))
            for readings, others in zip(self.read, self.other, strict=True)
            if any(_matches(reading, day) for reading in others)
            for reading in readings
        }
        if len(meant) != 1:
            return value
        fields = date_parts(model)
        update = {
            fields[part]: number for part, number in next(iter(meant)) if part in fields and part in day
        }
        if isinstance(value, BaseModel):
            return value.model_copy(update=update)
        return {**value, **update}

    @staticmethod
    def _day(model: type[BaseModel], value: Any) -> dict[DatePart, int] | None:
        """The date parts of ``value``, or None when it has no whole-number day and month."""
        fields = date_parts(model)
        if not fields:
            return None
        plain = value.model_dump() if isinstance(value, BaseModel) else value
        if not isinstance(plain, Mapping):
            return None
        day: dict[DatePart, int] = {}
        for part, name in fields.items():
            number = plain.get(name)
            if number is None:
                continue
            if not isinstance(number, int) or isinstance(number, bool):
                return None
            day[part] = number
        return day if {"day", "month"} <= day.keys() else None


def _blanked(text: str, match: re.Match[str]) -> str:
    """``text`` with the span of ``match`` blanked out (its length kept)."""
    start, end = match.span()
    return f"{text[:start]}{' ' * (end - start)}{text[end:]}"


def _date(parts: dict[DatePart, int]) -> Written | None:
    """``parts`` when they make a day of a month (a year of two digits stays as written)."""
    if not (1 <= parts["month"] <= 12 and 1 <= parts["day"] <= 31):
        return None
    return MappingProxyType(parts)


def _matches(reading: Written, day: Mapping[DatePart, int]) -> bool:
    """Whether the day ``day`` is the written date ``reading`` (a year written with two digits is
    its last two; a year not written matches any)."""
    for part in ("day", "month"):
        if reading[part] != day[part]:
            return False
    if "year" in reading and "year" in day:
        written = reading["year"]
        return day["year"] == written or (written < 100 and day["year"] % 100 == written)
    return True


def numbers_in(value: Any) -> set[float]:
    """The numbers inside a read value (booleans are not numbers here)."""
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, int | float):
        return {float(value)}
    if isinstance(value, str):  # "258" as text is still a number the user must have written
        text = value.strip().lstrip("+-")
        digits = text.replace(".", "", 1)
        return {float(text)} if digits.isdigit() and digits.isascii() else set()
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(numbers_in(item) for item in value)) if value else set()
    return set()


def written_numbers(text: str) -> set[float]:
    """Every number written with digits in ``text``: "$1,250.50" is 1250.5, "2,5,8" is 2, 5 and 8,
    "1.250.000" is 1250000, and a date written "20.10.2027" is 20, 10 and 2027."""
    found: set[float] = set()
    for token in "".join(c if c.isdigit() or c in ".," else " " for c in text).split():
        if token.strip(".").count(".") > 1 and "," not in token:
            groups = token.strip(".").split(".")
            thousands = 1 <= len(groups[0]) <= 3 and all(len(group) == 3 for group in groups[1:])
            pieces = ["".join(groups)] if thousands else groups  # "1.250.000" or a date
        elif _thousands(token):
            pieces = [token.replace(",", "")]
        else:
            pieces = token.split(",")
        for piece in pieces:
            try:
                found.add(float(piece.strip(".")))
            except ValueError:
                continue
    return found


def _thousands(token: str) -> bool:
    groups = token.split(".")[0].split(",")
    return len(groups) > 1 and 1 <= len(groups[0]) <= 3 and all(len(group) == 3 for group in groups[1:])


def squeezed(text: str) -> str:
    return " ".join(text.casefold().split())


def words(text: str) -> list[str]:
    """The words of ``text``, casefolded: letters and digits, whatever separates them."""
    return "".join(c if c.isalnum() else " " for c in text.casefold()).split()


def _phrase(text: str) -> Phrase:
    return tuple(words(text))


def _listed(words: Sequence[str], where: str) -> Sequence[str]:
    if isinstance(words, str):
        raise FlowDefinitionError(f"Said({where}): give the words as a tuple, not one string")
    return words


def _phrases(texts: Sequence[str]) -> tuple[Phrase, ...]:
    return tuple(dict.fromkeys(phrase for phrase in map(_phrase, texts) if phrase))


def _any(quote: Sequence[str], phrases: Sequence[Phrase], *, exact: bool = False) -> bool:
    return any(_contains(quote, phrase, exact) for phrase in phrases)


def _contains(quote: Sequence[str], phrase: Phrase, exact: bool = False) -> bool:
    size = len(phrase)
    same = str.__eq__ if exact else _same
    return any(
        all(same(phrase[at], quote[start + at]) for at in range(size))
        for start in range(len(quote) - size + 1)
    )


TYPO_LENGTH = 5
"""Declared words this long or longer also match the user's word with one slip of the keys ("serch"
is "search", "frist" is "first"); shorter ones only as written ("shoe" is not "show")."""


def _same(declared: str, written: str) -> bool:
    if declared == written:
        return True
    if min(len(declared), len(written)) < TYPO_LENGTH or abs(len(declared) - len(written)) > 1:
        return False
    if not (declared.isalpha() and written.isalpha()):
        return False
    return _one_slip(declared, written)


def _one_slip(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter left out, added, changed, or two neighbours swapped."""
    if len(a) > len(b):
        a, b = b, a
    start = 0
    while start < len(a) and a[start] == b[start]:
        start += 1
    if len(a) < len(b):
        return a[start:] == b[start + 1 :]
    if a[start + 1 :] == b[start + 1 :]:
        return True  # one letter changed
    return a[start : start + 2] == b[start : start + 2][::-1] and a[start + 2 :] == b[start + 2 :]
