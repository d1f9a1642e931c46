"""Tool arguments read by the same policy as readings: a value the user never gave does not reach a tool.

A flow written as getting-started teaches has no slots model and no ``Said``: a step's ``@tool``
takes the values as arguments, and the model fills them in. A small model fills in what it would
like to hear ("I'd like a pizza" read as a medium pizza with three toppings). Under a profile whose
``arguments`` rule is on (the small-model one), every argument that is an option, a text or a
number must be borne out by what the user said in the step:

* an option (a ``Literal`` or an ``Enum`` value) by its own name, or by a word that begins with it
  (an ending added: "lattes" says "latte"), or by the words ``Said`` declares for it;
* a text by one of its words written by the user (a tool's form of their words: "Paris" for the
  time zone "Europe/Paris", "Dunes" for the title "Dune");
* a number (or a date) by one of its numbers written in digits;
* a yes or no only by declared words (``Said(yes=..., no=...)``), else it is not judged.

An argument left at its default is not judged: the model did not choose it. What is not borne out
goes back to the model naming the field, never the value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, time
from decimal import Decimal
from enum import Enum
from typing import Any

from pydantic import BaseModel

from picoflow.locale import Locale
from picoflow.slots.said import FieldEvidence, evidence_of
from picoflow.slots.words import locale_numbers, numbers_in, phrase_of, same_word, words

__all__ = ["UNBORNE", "unborne"]

UNBORNE = (
    "{fields}: the user has not said {them} yet. Nothing was done. Reply to the user and ask for {them}; "
    "do not choose for them and do not end the conversation."
)
"""The correction the model gets; it names the fields, never a value."""

_STEM = 4
"""An option's name this long or longer is also said by a word that begins with it ("lattes")."""


class _Said:
    """The user's words, as arguments are compared with them."""

    def __init__(self, said: str, slips: bool, locales: Sequence[str]) -> None:
        # Accents aside: a model writes "Paris" for the "París" the user typed, and the other way round.
        self.sequence = tuple(Locale.fold(word) for word in words(said))
        self.words = frozenset(self.sequence)
        self.numbers = locale_numbers(said, locales)
        self.slips = slips

    def has(self, word: str) -> bool:
        word = Locale.fold(word)
        if word in self.words:
            return True
        return self.slips and any(same_word(word, written) for written in self.words)

    def names(self, option: str) -> bool:
        """Whether the words say ``option`` by its own name: its words in a row, the last one
        perhaps with an ending ("two lattes" says "latte")."""
        phrase = tuple(Locale.fold(word) for word in phrase_of(option))
        size = len(phrase)
        if not size:
            return False
        for start in range(len(self.sequence) - size + 1):
            here = self.sequence[start : start + size]
            if all(self._same(a, b) for a, b in zip(phrase[:-1], here[:-1], strict=True)) and (
                self._same(phrase[-1], here[-1]) or _inflected(phrase[-1], here[-1])
            ):
                return True
        return False

    def inflects(self, word: str) -> bool:
        """Whether the user wrote ``word`` with an ending ("Dunes" for the title "Dune")."""
        word = Locale.fold(word)
        return any(_inflected(word, written) for written in self.words)

    def _same(self, declared: str, written: str) -> bool:
        return declared == written or (self.slips and same_word(declared, written))


def _inflected(name: str, written: str) -> bool:
    return len(name) >= _STEM and written.startswith(name) and len(written) - len(name) <= 2


def unborne(
    arguments: BaseModel, said: str, *, slips: bool = False, locales: Sequence[str] = ()
) -> list[str]:
    """The fields of ``arguments`` (dotted for nested models) whose values the user's words ``said``
    do not bear out, in the order of the model's fields; numbers read as ``locales`` write them."""
    return _unborne(arguments, _Said(said, slips, locales), "")


def _unborne(arguments: BaseModel, said: _Said, prefix: str) -> list[str]:
    model = type(arguments)
    evidence = evidence_of(model)
    chosen = arguments.model_fields_set
    missing: list[str] = []
    for name, info in model.model_fields.items():
        if name not in chosen:
            continue
        value = getattr(arguments, name)
        if value is None or (not info.is_required() and value == info.default):
            continue
        path = f"{prefix}{name}"
        own = evidence.get(name, FieldEvidence())
        if isinstance(value, BaseModel):
            missing.extend(_unborne(value, said, f"{path}."))
        elif isinstance(value, list | tuple) and value and all(isinstance(v, BaseModel) for v in value):
            for index, item in enumerate(value):
                missing.extend(_unborne(item, said, f"{path}.{index}."))
        elif not _borne(own, value, said):
            missing.append(path)
    return missing


def _borne(evidence: FieldEvidence, value: Any, said: _Said) -> bool:
    if isinstance(value, list | tuple | set | frozenset):
        return all(_borne(evidence, item, said) for item in value)
    if isinstance(value, Mapping):
        return all(_borne(evidence, item, said) for item in value.values())
    if isinstance(value, bool):
        if not evidence.decides_yes_no:
            return True
        return evidence.answered(list(said.sequence), exact=not said.slips) == value
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str) and (evidence.options or _declared(evidence, value)):
        return _option_said(evidence, value, said)
    numbers = numbers_in(_plain(value))
    if numbers:
        return bool(numbers & said.numbers)
    if isinstance(value, str):
        # A text argument is often the user's words put in the tool's form ("Paris" as the time
        # zone "Europe/Paris", "Dunes" as the title "Dune"): one of its words said bears it out.
        written = words(value)
        return not written or any(said.has(word) or said.inflects(word) for word in written)
    return True


def _declared(evidence: FieldEvidence, value: str) -> bool:
    return any(marker.declares(value) for marker in evidence.said)


def _option_said(evidence: FieldEvidence, option: str, said: _Said) -> bool:
    if said.names(option):
        return True
    return any(marker.bears(option, said.sequence, exact=not said.slips) for marker in evidence.said)


def _plain(value: Any) -> Any:
    """A date, a time or a decimal as the JSON text or number it is sent as."""
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value
