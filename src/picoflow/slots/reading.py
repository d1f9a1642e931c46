"""The reading: what the model says the user's latest message holds, item by item, each quoted.

``{"found": [{"field": "max_price", "quote": "max 700", "value": 700}]}`` — one item per thing the
message says, an empty list when it says none. This module owns that answer format (its schema,
derived from a slots model), the standing rules that tell the model how to write it, and reading
the answer back into an ``Extraction``; ``picoflow.slots.grounding`` decides what of it the user's words
bear out, ``picoflow.slots.form`` what of it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from types import UnionType
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

from picoflow.slots.grounding import FieldEvidence, UserWords, evidence_of
from picoflow.slots.grounding import words as words_of

FORMAT_HINT = (
    'Answer with one JSON object {"found": [...]}: one item per thing the message says, each with the '
    "field, the user's exact words and the value; an empty list when it says none of them."
)
EXTRACT_RULES = (
    "Read only the user's latest message. For each thing it says that fits a field, add one item to "
    '"found" with the field, the exact words of the message that say it (copied, not changed), and the '
    'value. A message that gives none of them, such as a greeting, gives "found": []. Never guess a '
    "value, and never take one from these instructions or from your own question."
)


@dataclass(frozen=True, slots=True)
class Reading:
    """One thing the model read from the user's message: a field, the words quoted, the value."""

    field: str
    quote: str
    value: Any


@dataclass(frozen=True, slots=True)
class Extraction:
    """What the model read from the user's message, item by item, not yet validated."""

    items: tuple[Reading, ...] = ()

    @property
    def given(self) -> dict[str, Any]:
        """The value of every field read; a list field read twice ("wifi ... and parking") gets both."""
        values: dict[str, Any] = {}
        for item in self.items:
            previous = values.get(item.field)
            if isinstance(previous, list) and isinstance(item.value, list):
                values[item.field] = [*previous, *item.value]
            else:
                values[item.field] = item.value
        return values

    def grounded(self, said: str, slots: type[BaseModel] | None = None) -> Extraction:
        """Only what the user's words ``said`` bear out (``picoflow.slots.grounding``): an item whose quote
        is not theirs or whose numbers are not written in it is dropped; with ``slots``, so is an
        option none of whose words (declared with ``Said``) is in the quote. A number quoted in
        other words than the user's is judged by the one part of the message that writes it."""
        words = UserWords.of(said)
        evidence = evidence_of(slots) if slots is not None else {}
        kept: list[Reading] = []
        for item in self.items:
            item = _anchored(item, words, evidence)
            said_as = _field_said(item, evidence, self.items)
            if said_as is None:
                continue
            item = said_as
            value = words.keep(item.quote, item.value, evidence.get(item.field))
            if value is not None:
                kept.append(item if value is item.value else replace(item, value=value))
        return Extraction(tuple(kept))


def _anchored(item: Reading, words: UserWords, evidence: Mapping[str, FieldEvidence]) -> Reading:
    """``item`` quoting the part of the message that writes its numbers when its own quote is not
    the user's words, provided that part says which field it is where fields have words for it
    (a bare "400 a night" is no bound). Else ``item`` as read (its quote is judged as it is)."""
    part = words.anchored(item.quote, item.value)
    if part is None:
        return item
    own = evidence.get(item.field)
    if own is not None and own.has_field_words:
        quote = words_of(part)
        if not any(other.names_field(quote) for other in evidence.values()):
            return item
    return replace(item, quote=part)


def _field_said(
    item: Reading, evidence: Mapping[str, FieldEvidence], items: Sequence[Reading]
) -> Reading | None:
    """``item`` under the field its quote's words say, when they say another one than it was read
    as: "under $400" read as a minimum is a maximum (``Said(words=...)``). When the reading gives
    that other field too, a range quoted whole for both bounds ("from 100 to 300") keeps both, and
    the same value read for both ("within 5 miles of downtown" as the distance to the airport and
    to the center) is kept only in the field its words say (None: the item is dropped)."""
    own = evidence.get(item.field)
    if own is None or not own.has_field_words:
        return item
    quote = words_of(item.quote)
    if own.names_field(quote):
        return item
    others = [
        name
        for name, other in evidence.items()
        if name != item.field and other.has_field_words and other.names_field(quote)
    ]
    if len(others) != 1:
        return item
    twins = [other for other in items if other.field == others[0]]
    if not twins:
        return replace(item, field=others[0])
    return None if any(twin.value == item.value for twin in twins) else item


class ReadingFormat(BaseModel):
    """The base of every answer format ``reading_of`` derives (so a SlotStep can tell its own)."""


@cache
def reading_of(slots: type[BaseModel]) -> type[ReadingFormat]:
    """The answer format of a reading of ``slots``: a list of what the message says, each quoted.

    A model writes an item only when it decides to, and "Hi" reads naturally as an empty list;
    asked for an object with every field, a 1.5B model answered "Hi" with a whole invented stay.
    The quote comes before the value so the value is read from the words. Validators are left
    out: values are checked when merged, through ``slots`` itself. The same ``slots`` gives the
    same class.
    """
    items: list[Any] = []
    for name, info in slots.model_fields.items():
        about = f"{name}: {info.description}" if info.description else name
        items.append(
            create_model(
                f"{slots.__name__}_{name}",
                __doc__=about,
                field=(cast(Any, Literal[name]), Field(description="The field the words give")),
                quote=(str, Field(description="The user's exact words that give it")),
                value=(_value_type(info), Field(description=info.description)),
            )
        )
    item: Any = Union[tuple(items)] if len(items) > 1 else items[0]  # noqa: UP007 - built from a tuple
    found: Any = list[item]
    return create_model(
        f"{slots.__name__}Reading",
        __base__=ReadingFormat,
        __doc__=f"What the user's latest message says ({slots.__doc__ or slots.__name__})",
        found=(found, Field(description="One item per thing the message says; empty when it says none")),
    )


def _value_type(info: FieldInfo) -> Any:
    """The field's type without its None (a reading always carries a value) and with its constraints."""
    annotation: Any = info.annotation
    if get_origin(annotation) in (Union, UnionType):
        kept = tuple(arg for arg in get_args(annotation) if arg is not type(None))
        annotation = kept[0] if len(kept) == 1 else Union[kept]  # noqa: UP007 - built from a tuple
    return Annotated[(annotation, *info.metadata)] if info.metadata else annotation


def parse_reading(slots: type[BaseModel], text: str) -> Extraction:
    """The model's answer read as items of ``slots``' fields; blank values are no answer.

    Anything that is not the format raises ``ValueError`` with ``FORMAT_HINT`` (never quoting the
    answer), so the runner asks again. Values are not validated here: a value of the wrong type is
    refused when merged, with its field's rule.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(FORMAT_HINT) from None
    items = data.get("found") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError(FORMAT_HINT)
    read: list[Reading] = []
    for item in items:
        name = item.get("field") if isinstance(item, dict) else None
        if not isinstance(name, str) or name not in slots.model_fields:
            raise ValueError(FORMAT_HINT)
        if not _blank(item.get("value")):
            read.append(Reading(name, str(item.get("quote") or ""), item["value"]))
    return Extraction(tuple(read))


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())
