"""``Said``: the words a slots model declares beside a field or an option, and what they bear out.

The words an option needs ("jazz" for music), the words that say one field rather than another
("under" for a maximum), a yes or a no, the part of a written date a field holds: all of them are
declared by the application in its slots model, per field; the framework knows no word of any
language. ``evidence_of`` reads them off a model once. The helpers below (``bears_out``,
``says_field``, ``says_option``, ``told``, ``left_out``, ``as_written``, ``written_days``) answer
questions about a message with them, for readings and for answers read without quotes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from types import MappingProxyType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from picoflow.exceptions import FlowDefinitionError
from picoflow.locale import Locale
from picoflow.slots.dates import DATE_PARTS, DatePart, WrittenDates
from picoflow.slots.words import (
    TYPO_LENGTH,
    Phrase,
    holds,
    holds_any,
    numbers_in,
    parts_of,
    phrase_of,
    phrases_of,
    words,
    written_numbers,
)

_ANY = Locale.any()


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
    locale: str | None = None
    _phrases: Mapping[str, tuple[Phrase, ...]] = field(init=False, repr=False, compare=False)
    _field: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)
    _yes: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)
    _no: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)
    _named: tuple[Phrase, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        options: dict[str, tuple[Phrase, ...]] = {}
        for option, listed_words in self.options.items():
            if isinstance(option, bool) or not isinstance(option, str | int) or not str(option).strip():
                raise FlowDefinitionError(f"Said(options=...): {option!r} is not an option's name")
            listed = _listed(listed_words, f"options={{{option!r}: ...}}")
            options[str(option).casefold()] = phrases_of((str(option), *listed))
        object.__setattr__(self, "_phrases", MappingProxyType(options))
        for name, slot in (("words", "_field"), ("yes", "_yes"), ("no", "_no"), ("named", "_named")):
            object.__setattr__(self, slot, phrases_of(_listed(getattr(self, name), f"{name}=...")))
        if self._named:
            object.__setattr__(self, "_yes", (*self._yes, *self._named))
        if bool(self._yes) != bool(self._no):
            raise FlowDefinitionError("Said(yes=..., no=...): give the words of both, or of neither")
        if self.locale is not None:
            object.__setattr__(self, "locale", Locale.of(self.locale).tag)
        if self.date is not None and self.date not in DATE_PARTS:
            raise FlowDefinitionError(f"Said(date={self.date!r}): a date part is one of day, month or year")

    def every_phrase(self) -> tuple[Phrase, ...]:
        """Every phrase the marker declares (options' words besides their names, a field's, yes and no)."""
        options = (phrase for listed in self.options.values() for phrase in phrases_of(listed))
        return tuple(dict.fromkeys((*options, *self._field, *self._yes, *self._no)))

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
        return holds_any(quote, phrases, exact=exact)

    def phrase_in(self, value: str | int, quote: Sequence[str], *, exact: bool = False) -> Phrase | None:
        """The words of ``quote`` that say option ``value``, as written there; None when none do."""
        size_phrases = self._phrases.get(str(value).casefold(), ())
        for phrase in size_phrases:
            size = len(phrase)
            for start in range(len(quote) - size + 1):
                if holds(quote[start : start + size], phrase, exact):
                    return tuple(quote[start : start + size])
        return None

    def names_field(self, quote: Sequence[str], *, exact: bool = False) -> bool:
        """Whether ``quote`` holds one of the words that say this field (``words``)."""
        return holds_any(quote, self._field, exact=exact)

    def answer(self, quote: Sequence[str], *, exact: bool = False) -> bool | None:
        """The yes or no ``quote`` says (a denial wins), or None when it says neither or the marker
        declares no such words."""
        if holds_any(quote, self._no, exact=exact):
            return False
        return True if holds_any(quote, self._yes, exact=exact) else None

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


_NO_DATE: Mapping[DatePart, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class FieldEvidence:
    """What a value of one field of the slots model must find in its quote."""

    said: tuple[Said, ...] = ()
    text: bool = False
    """The field holds free text (a plain ``str``): the value is made of the quote's words."""
    parts: type[BaseModel] | None = None
    """The model a value of the field is made of (a day of a month and day), checked field by field."""
    options: tuple[str, ...] = ()
    """The options of the field (of a ``Literal``, and those its markers declare)."""
    calendar: bool = False
    """The field holds a ``datetime.date`` (read as an ISO day, or as its parts ``month``, ``day``,
    ``year`` where its schema asks for them)."""

    def names_field(self, quote: Sequence[str], *, exact: bool = False) -> bool:
        return any(marker.names_field(quote, exact=exact) for marker in self.said)

    @property
    def date_fields(self) -> Mapping[DatePart, str]:
        """The fields of ``parts`` holding the numbers of a date written in digits, by part."""
        return date_parts(self.parts) if self.parts is not None else _NO_DATE

    @property
    def has_field_words(self) -> bool:
        return any(marker.words for marker in self.said)

    def has_options(self, value: Any) -> bool:
        """Whether the markers declare the words of ``value`` (of every option of a list): the
        options whose words a message holds or not, wherever the model found them."""
        if isinstance(value, list):
            return bool(value) and all(self.has_options(item) for item in value)
        return _option(value) and any(marker.declares(value) for marker in self.said)

    def keeps(self, value: Any, quote: Sequence[str], *, exact: bool = False) -> Any:
        """``value`` as far as ``quote`` bears it out (a list loses the items it does not), or None:
        a yes or no its words say, an option its declared words, a text the quote's words."""
        if isinstance(value, list):
            kept = [item for item in value if self.keeps(item, quote, exact=exact) is not None]
            return kept or None
        if isinstance(value, bool):
            if not self.decides_yes_no:
                return value
            return self.answered(quote, exact=exact)
        if not _option(value):
            return value
        verdicts = [v for marker in self.said if (v := marker.bears(value, quote, exact=exact)) is not None]
        if verdicts:
            return value if any(verdicts) else None
        if self.text and isinstance(value, str) and not set(words(value)) <= set(quote):
            return None
        return value

    @property
    def decides_yes_no(self) -> bool:
        return any(marker.decides_yes_no for marker in self.said)

    def answered(self, quote: Sequence[str], *, exact: bool = False) -> bool | None:
        """The yes or no ``quote``'s declared words say (a denial wins), or None when they say neither."""
        answers = [marker.answer(quote, exact=exact) for marker in self.said if marker.decides_yes_no]
        return next((answer for answer in answers if answer is not None), None)

    def options_kept(self, value: Any, quote: Sequence[str], *, exact: bool = False) -> Any:
        """``value`` without the options whose declared words ``quote`` does not hold (a list loses
        those items; a single option is None). Options declared by no marker are kept."""
        if isinstance(value, list):
            kept = [item for item in value if self.options_kept(item, quote, exact=exact) is not None]
            return kept or None
        if not _option(value):
            return value
        verdicts = [v for marker in self.said if (v := marker.bears(value, quote, exact=exact)) is not None]
        return value if not verdicts or any(verdicts) else None

    def options_said(self, quote: Sequence[str], *, exact: bool = False) -> list[str]:
        """The options whose declared words ``quote`` holds, in the order they are declared (marker
        by marker: an option comes where the first marker whose words ``quote`` holds names it)."""
        found: list[str] = []
        for marker in self.said:
            for option in marker.names():
                if option not in found and marker.bears(option, quote, exact=exact):
                    found.append(option)
        return found

    def option_words(self, value: Any, quote: Sequence[str], *, exact: bool = False) -> list[str]:
        """The declared words of ``value``'s options (each item of a list) that ``quote`` holds, as
        written there: the evidence an option was said."""
        found: list[str] = []
        for option in value if isinstance(value, list) else [value]:
            if not _option(option):
                continue
            for marker in self.said:
                phrase = marker.phrase_in(option, quote, exact=exact)
                if phrase is not None:
                    found.append(" ".join(phrase))
                    break
        return found

    def options_named(self, quote: Sequence[str]) -> int:
        """How many of the field's options ``quote`` names, by their declared words or their own name."""
        named = 0
        for option in self.options:
            verdicts = [
                v for marker in self.said if (v := marker.bears(option, quote, exact=True)) is not None
            ]
            if any(verdicts) if verdicts else holds(quote, phrase_of(option), exact=True):
                named += 1
        return named


@cache
def evidence_of(slots: type[BaseModel], locales: tuple[str, ...] = ()) -> Mapping[str, FieldEvidence]:
    """The evidence every field of ``slots`` needs, read off its annotations once: with ``locales``,
    only the words of markers declared for one of their languages (or for none)."""
    found: dict[str, FieldEvidence] = {}
    languages = {Locale.of(tag).language for tag in locales}
    for name, info in slots.model_fields.items():
        markers: list[Said] = [item for item in info.metadata if isinstance(item, Said)]
        options: set[str] = set()
        models: list[type[BaseModel]] = []
        text = _walk(info.annotation, markers, options, models)
        if languages:
            markers = [m for m in markers if m.locale is None or Locale.of(m.locale).language in languages]
        for marker in markers:
            unknown = [option for option in marker.names() if options and option not in options]
            if unknown:
                raise FlowDefinitionError(
                    f"{slots.__name__}.{name}: Said names {', '.join(unknown)}, not an option of the field "
                    f"({', '.join(sorted(options))})"
                )
        parts = models[0] if len(models) == 1 else None
        declared = [option for marker in markers for option in marker.names()]
        found[name] = FieldEvidence(
            tuple({id(marker): marker for marker in markers}.values()),
            text,
            parts,
            tuple(dict.fromkeys((*sorted(options), *declared))),
            _holds_date(info.annotation),
        )
    return MappingProxyType(found)


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


def bears_out(model: type[BaseModel], name: str, value: Any, said: str, locales: Sequence[str] = ()) -> bool:
    """Whether the user's words ``said`` hold what the ``Said`` markers of field ``name`` of
    ``model`` ask of ``value`` (the words of its option, its yes or no), and whether a value holding
    numbers has one of them written in ``said`` (each item of a list). For an answer read as a
    whole, with no quote (a step's ``output``): "book the cheapest" may pick the cheapest hotel,
    "book it" may not; "order 40006" may show order 40006, "my last order" may not. A value
    neither rule says anything about is borne out.

    ``locales`` as a reading has them (``SlotStep.locales``): only the words of markers declared
    for their languages (or for none) count, and one locale reads numbers and dates in digits as it
    writes them; with none or several, every declared word counts and numbers are read every
    plausible way."""
    tags = _tags(locales)
    evidence = _evidence(model, name, tags)
    plain = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    one = Locale.of(tags[0]) if len(tags) == 1 else None
    # The dates written in digits are read only for a field whose value is a day of a date.
    dated = evidence.parts is not None and bool(date_parts(evidence.parts))
    return _borne(
        evidence,
        plain,
        words(said),
        written_numbers(said, one),
        WrittenDates.of(said, one.date_order() if one else None) if dated else WrittenDates(),
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
        return [dates.put_right(evidence.date_fields, item) for item in value]
    return dates.put_right(evidence.date_fields, value)


def says_option(model: type[BaseModel], name: str, said: str, locales: tuple[str, ...] = ()) -> bool:
    """Whether ``said`` holds the words of an option declared for field ``name`` of ``model``
    (anywhere in it, with no reading to go by)."""
    quote = words(said)
    return any(
        marker.bears(option, quote)
        for marker in _evidence(model, name, locales).said
        for option in marker.names()
    )


def options_said(model: type[BaseModel], name: str, said: str, locales: Sequence[str] = ()) -> list[Any]:
    """The options of field ``name`` of ``model`` whose declared words ``said`` holds (anywhere in
    it, with no reading to go by), in the order they are declared. With ``locales``, only the
    words declared for their languages (or for none) count."""
    return _evidence(model, name, _tags(locales)).options_said(words(said))


def says_field(model: type[BaseModel], name: str, said: str, locales: Sequence[str] = ()) -> bool:
    """Whether ``said`` holds the words that say field ``name`` of ``model`` (``Said(words=...)``):
    for an answer read without quotes, "until September 30" says the end of a range, not its start.
    With ``locales``, only the words declared for their languages (or for none) count."""
    return _evidence(model, name, _tags(locales)).names_field(words(said))


def told(said: str, slots: type[BaseModel], name: str, locales: tuple[str, ...] = ()) -> Any:
    """What the words declared for field ``name`` of ``slots`` say in ``said`` on their own, with
    no reading, each as written: for a yes-or-no field, yes when a part of the message holds one of
    its telling words and none of its no words ("Looking for a suite in Portland"; a denial is left
    to a reading); for a field of one option of a ``Literal``, the option whose words a part holds,
    when only one does. None when they say nothing, or for a field of another kind (a list, a number, text).

    ``SlotStep`` asks it only of what a second look still left out: words alone are weaker
    evidence than a reading whose quote they bear out."""
    evidence = _evidence(slots, name, locales)
    literal = _literal(slots.model_fields[name].annotation)
    for part in parts_of(said):
        here = words(part)
        for marker in evidence.said:
            if marker.decides_yes_no:
                if holds_any(here, marker.telling(), exact=True) and marker.answer(here) is True:
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


def left_out(
    said: str, kept: Sequence[tuple[str, str, Any]], slots: type[BaseModel], locales: tuple[str, ...] = ()
) -> list[str]:
    """The parts of a message (split at commas, sentence ends and line breaks) that say something
    the reading ``kept`` (its field, quote and value items) did not take: a number
    written that no kept value holds, or the words of an option of a field none of whose kept items
    quotes them ("Portland, August 10 to August 13, one bed" read as one bed only). A small model
    reading a long message often stops after a few items; these parts are worth a second look."""
    parts = parts_of(said)
    # The numbers a kept value holds; for a value that holds none as numbers (a date as text), the
    # numbers of its quote.
    held: set[float] = set()
    for _, quote, value in kept:
        held |= numbers_in(value) or written_numbers(quote, spelled=False)
    quoted: dict[str, list[list[str]]] = {}
    for name, quote, _ in kept:
        quoted.setdefault(name, []).append(words(quote))
    left = []
    for part in parts:
        # A number is taken when a kept value holds one of its readings ("1,200" as 1200).
        if any(not {float(reading) for reading in readings} & held for readings in _ANY.written(part)):
            left.append(part)
            continue
        here = words(part)
        for name, evidence in evidence_of(slots, locales).items():
            phrases = [phrase for marker in evidence.said for phrase in marker.telling()]
            # As written, without the slip of the keys a reading may have ("night" is not "right").
            if holds_any(here, phrases, exact=True) and not any(
                holds_any(quote, phrases) for quote in quoted.get(name, [])
            ):
                left.append(part)
                break
    return left


def detect_locale(said: str, slots: type[BaseModel], locales: Sequence[str]) -> str | None:
    """The one of ``locales`` whose declared words (``Said(locale=...)``) ``said`` holds the most of,
    as written; None when it holds none, or as many of two locales' words."""
    if len(locales) < 2:
        return None
    here = words(said)
    scores: dict[str, int] = {}
    for tag in locales:
        phrases = {
            phrase
            for evidence in evidence_of(slots, (tag,)).values()
            for marker in evidence.said
            if marker.locale is not None
            for phrase in marker.every_phrase()
        }
        scores[tag] = sum(holds(here, phrase, exact=True) for phrase in phrases)
    ranked = sorted(scores.items(), key=lambda item: -item[1])
    best, score = ranked[0]
    return best if score and score > ranked[1][1] else None


def _tags(locales: Sequence[str]) -> tuple[str, ...]:
    """``locales`` in their canonical spelling, once each (``evidence_of`` is cached on them)."""
    return tuple(dict.fromkeys(Locale.of(tag).tag for tag in locales))


def _evidence(model: type[BaseModel], name: str, locales: tuple[str, ...] = ()) -> FieldEvidence:
    evidence = evidence_of(model, locales).get(name)
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
        if not dates.bear(evidence.date_fields, value):
            return False
        # The parts of a date written in digits are borne out together (the 2026 of "21/10/26").
        whole = set(evidence.date_fields.values()) if dates.reads(evidence.date_fields, value) else set()
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


def _holds_date(annotation: Any) -> bool:
    """Whether ``annotation`` is a ``datetime.date`` (optional, annotated or not), never a datetime."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _holds_date(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return any(_holds_date(arg) for arg in get_args(annotation) if arg is not type(None))
    return annotation is date


def _option(value: Any) -> bool:
    """Whether ``value`` may be an option a marker names: a text or a whole number."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _listed(words: Sequence[str], where: str) -> Sequence[str]:
    if isinstance(words, str):
        raise FlowDefinitionError(f"Said({where}): give the words as a tuple, not one string")
    return words
