"""The words of a message as grounding compares them: words and phrases (with or without one slip
of the keys), the numbers written in digits, and the parts a message is cut into.

Nothing here knows a word of any language: phrases to look for are always given by the caller
(declared with ``Said`` beside a slots model).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from picoflow.locale import Locale

_ANY = Locale.any()

Phrase = tuple[str, ...]
"""Words in a row, casefolded: ("san", "francisco")."""


def parts_of(said: str) -> list[str]:
    """``said`` cut at commas and semicolons followed by a space, sentence ends and line breaks; a
    part without a letter ("2027" of "September 6, 2027") stays with the one before it. A dot
    right after a digit ends no sentence: it marks an ordinal or closes a date in many languages
    ("vom 10. bis 13. August", "fra 10. til 13. august", "am 20.06. bitte")."""
    parts: list[str] = []
    current = ""
    for index, char in enumerate(said):
        following = said[index + 1] if index + 1 < len(said) else " "
        ordinal = char == "." and index > 0 and said[index - 1].isdigit()
        if char == "\n" or (char in ",;.!?" and following.isspace() and not ordinal):
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


def numbers_in(value: Any) -> set[float]:
    """The numbers inside a read value (booleans are not numbers here)."""
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, int | float):
        return {float(value)}
    if isinstance(value, str):  # "258" as text is still a number the user must have written
        if day := _ISO_DAY.match(value.strip()):  # so are the numbers of a date ("2027-12-26")
            return {float(number) for number in day.groups()}
        text = value.strip().lstrip("+-")
        digits = text.replace(".", "", 1)
        return {float(text)} if digits.isdigit() and digits.isascii() else set()
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(numbers_in(item) for item in value)) if value else set()
    return set()


_ISO_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?$")
"""A date (or date and time) written as JSON writes it: the value of a ``date`` field read as text."""


def written_numbers(text: str, locale: Locale | None = None, *, spelled: bool = True) -> set[float]:
    """Every number ``text`` writes, read as ``locale`` writes numbers (``picoflow.locale``): in
    digits with its separators, and spelled out in its words (``spelled``). With no locale, every
    plausible reading: "$1,250.50" is 1250.5, "2,5,8" is 2, 5 and 8, "1.250" is 1.25 and 1250, a
    date written "20.10.2027" is 20, 10 and 2027, "three hundred fifty" is 350."""
    return {float(number) for number in (locale or _ANY).numbers(text, spelled=spelled)}


def locale_numbers(text: str, locales: Sequence[str] = ()) -> set[float]:
    """The numbers ``text`` writes as any of ``locales`` writes them (every plausible way when none)."""
    if not locales:
        return written_numbers(text)
    found: set[float] = set()
    for tag in locales:
        found |= written_numbers(text, Locale.of(tag))
    return found


def squeezed(text: str) -> str:
    return " ".join(text.casefold().split())


def words(text: str) -> list[str]:
    """The words of ``text``, casefolded: letters and digits, whatever separates them; in a script
    written without spaces (Han, Kana, Thai, ...) each character is a word (``Locale.words``)."""
    return list(_ANY.words(text))


def phrase_of(text: str) -> Phrase:
    return tuple(words(text))


def phrases_of(texts: Sequence[str]) -> tuple[Phrase, ...]:
    return tuple(dict.fromkeys(phrase for phrase in map(phrase_of, texts) if phrase))


def holds_any(quote: Sequence[str], phrases: Sequence[Phrase], *, exact: bool = False) -> bool:
    return any(holds(quote, phrase, exact) for phrase in phrases)


def holds(quote: Sequence[str], phrase: Phrase, exact: bool = False) -> bool:
    size = len(phrase)
    if not size:
        return False
    same = str.__eq__ if exact else same_word
    initial = phrase[0][:1]
    for start in range(len(quote) - size + 1):
        # Neither a word as written nor one with a slip of the keys changes its first letter.
        if quote[start][:1] == initial and all(same(phrase[at], quote[start + at]) for at in range(size)):
            return True
    return False


TYPO_LENGTH = 5
"""Declared words this long or longer also match the user's word with one slip of the keys ("serch"
is "search", "frist" is "first"); shorter ones only as written ("shoe" is not "show")."""


def same_word(declared: str, written: str) -> bool:
    """Whether ``written`` is ``declared``, or ``declared`` with one slip of the keys inside it.

    A slip is never in the first letter (where a different word is likelier than a typo: "suite"
    and "quite") nor a letter added or left out at the end (where most languages put their endings:
    "nicht" and "nichts", "hotel" and "hotels")."""
    if declared == written:
        return True
    if not (may_slip(declared) and may_slip(written)) or abs(len(declared) - len(written)) > 1:
        return False
    if declared[0] != written[0]:
        return False
    if declared.startswith(written) or written.startswith(declared):
        return False
    return _one_slip(declared, written)


def may_slip(word: str) -> bool:
    """Whether ``same_word`` may find a slip of the keys in ``word``: letters only, and at least
    ``TYPO_LENGTH`` of them (a shorter word with a slip is too often another word)."""
    return len(word) >= TYPO_LENGTH and word.isalpha()


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
