"""Grounding: a reading is kept only as far as the user's words bear it out.

A model reading a message proposes a value and quotes the words that say it. A small model also
fills in what it would like to hear (a whole stay for "Hi", "2,5,8" read as a price of 258, the
interests of an example it was shown), so code keeps an item only when

* its quote is the user's words (as written, or word for word),
* a value holding numbers has one of them written in the quote,
* a text value (a plain ``str`` field) is made of the quote's words, and
* an option of an enumeration has one of the words that say it in the quote.

The words an option needs are declared beside the option in the slots model with ``Said``; the
framework knows no word of any language. The marker stays out of the JSON schema the model sees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from picoflow.exceptions import FlowDefinitionError

Phrase = tuple[str, ...]
"""Words in a row, casefolded: ("san", "francisco")."""


@dataclass(frozen=True, slots=True, eq=False)
class Said:
    """What the user's words must hold for a reading of this type to be kept.

    Put it in ``Annotated`` beside the type it is about, in the slots model::

        Interest = Annotated[
            Literal["music", "food", "art"],
            Said(options={"music": ("jazz", "concert"), "food": ("restaurant", "dining")}),
        ]

    ``options`` gives, for each option, the words that say it besides its own name; a phrase of
    several words must be written in that order ("san francisco"). An option read from a quote
    holding none of its words is dropped (for a list, only that option). Options the marker does
    not name are not checked by it, and on a ``str`` field it may name a few well-known values of
    an open set (a city and its nicknames). Pydantic ignores the marker: it is not in the schema.
    """

    # One field per kind of evidence: a bound's direction and yes-or-no words fit beside this one.
    options: Mapping[str, Sequence[str]] = field(default_factory=dict)
    _phrases: Mapping[str, tuple[Phrase, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        options: dict[str, tuple[Phrase, ...]] = {}
        for option, words in self.options.items():
            if not isinstance(option, str) or not option.strip():
                raise FlowDefinitionError(f"Said(options=...): {option!r} is not an option's name")
            if isinstance(words, str):
                raise FlowDefinitionError(f"Said(options=...): give the words of {option!r} as a tuple")
            phrases = [_phrase(option), *(_phrase(word) for word in words)]
            options[option.casefold()] = tuple(dict.fromkeys(phrase for phrase in phrases if phrase))
        object.__setattr__(self, "_phrases", MappingProxyType(options))

    def names(self) -> list[str]:
        """The options the marker speaks for, as declared."""
        return list(self.options)

    def bears(self, value: str, quote: Sequence[str]) -> bool | None:
        """Whether the words of ``quote`` say option ``value``; None when the marker does not name it."""
        phrases = self._phrases.get(value.casefold())
        if phrases is None:
            return None
        return any(_contains(quote, phrase) for phrase in phrases)


@dataclass(frozen=True, slots=True)
class FieldEvidence:
    """What a value of one field of the slots model must find in its quote."""

    said: tuple[Said, ...] = ()
    text: bool = False
    """The field holds free text (a plain ``str``): the value is made of the quote's words."""

    def keeps(self, value: Any, quote: Sequence[str]) -> Any:
        """``value`` as far as ``quote`` bears it out (a list loses the items it does not), or None."""
        if isinstance(value, list):
            kept = [item for item in value if self.keeps(item, quote) is not None]
            return kept or None
        if not isinstance(value, str):
            return value
        verdicts = [verdict for marker in self.said if (verdict := marker.bears(value, quote)) is not None]
        if verdicts:
            return value if any(verdicts) else None
        if self.text and not set(words(value)) <= set(quote):
            return None
        return value


@cache
def evidence_of(slots: type[BaseModel]) -> Mapping[str, FieldEvidence]:
    """The evidence every field of ``slots`` needs, read off its annotations once."""
    found: dict[str, FieldEvidence] = {}
    for name, info in slots.model_fields.items():
        markers: list[Said] = [item for item in info.metadata if isinstance(item, Said)]
        options: set[str] = set()
        text = _walk(info.annotation, markers, options)
        for marker in markers:
            unknown = [option for option in marker.names() if options and option not in options]
            if unknown:
                raise FlowDefinitionError(
                    f"{slots.__name__}.{name}: Said names {', '.join(unknown)}, not an option of the field "
                    f"({', '.join(sorted(options))})"
                )
        found[name] = FieldEvidence(tuple({id(marker): marker for marker in markers}.values()), text)
    return MappingProxyType(found)


def _walk(annotation: Any, markers: list[Said], options: set[str]) -> bool:
    """Collect the ``Said`` markers and literal options inside ``annotation``; True when it holds
    a plain ``str`` (free text)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extras = get_args(annotation)
        markers.extend(extra for extra in extras if isinstance(extra, Said))
        return _walk(inner, markers, options)
    if origin is Literal:
        options.update(str(value) for value in get_args(annotation))
        return False
    if origin in (Union, UnionType) or origin in (list, tuple, set, frozenset) or origin is Sequence:
        found = [_walk(arg, markers, options) for arg in get_args(annotation) if arg is not Ellipsis]
        return any(found)
    return annotation is str


@dataclass(frozen=True, slots=True)
class UserWords:
    """The user's message as quotes are compared with it."""

    text: str
    """Casefolded, with its spacing squeezed."""
    words: frozenset[str]

    @classmethod
    def of(cls, said: str) -> UserWords:
        return cls(squeezed(said), frozenset(words(said)))

    def keep(self, quote: str, value: Any, evidence: FieldEvidence | None = None) -> Any:
        """``value`` as far as these words bear it out (see the module's rules), or None when
        they do not bear it out at all."""
        written = squeezed(quote)
        quoted = words(quote)
        if not written or (written not in self.text and not set(quoted) <= self.words):
            return None
        numbers = numbers_in(value)
        if numbers and not numbers & written_numbers(written):
            return None
        return value if evidence is None else evidence.keeps(value, quoted)


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
    """Every number written with digits in ``text``: "$1,250.50" is 1250.5, "2,5,8" is 2, 5 and 8."""
    found: set[float] = set()
    for token in "".join(c if c.isdigit() or c in ".," else " " for c in text).split():
        pieces = [token.replace(",", "")] if _thousands(token) else token.split(",")
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


def _contains(quote: Sequence[str], phrase: Phrase) -> bool:
    size = len(phrase)
    return any(tuple(quote[start : start + size]) == phrase for start in range(len(quote) - size + 1))
