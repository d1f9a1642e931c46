"""The reading: what the model says the user's latest message holds, item by item, each quoted.

``{"found": [{"field": "max_price", "quote": "max 700", "value": 700}]}`` — one item per thing the
message says, an empty list when it says none. This module owns that answer format (its schema,
derived from a slots model), the standing rules that tell the model how to write it, and reading
the answer back into an ``Extraction``; ``picoflow.slots.grounding`` decides what of it the words
of the conversation bear out, ``picoflow.slots.form`` what of it is kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from types import UnionType
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

from picoflow.slots.grounding import Item, given

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
class Extraction:
    """What the model read from the user's message, item by item, not yet judged."""

    items: tuple[Item, ...] = ()

    @property
    def given(self) -> dict[str, Any]:
        """The value of every field read; a list field read twice ("wifi ... and parking") gets both."""
        return given(self.items)


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
    read: list[Item] = []
    for item in items:
        name = item.get("field") if isinstance(item, dict) else None
        if not isinstance(name, str) or name not in slots.model_fields:
            raise ValueError(FORMAT_HINT)
        if not _blank(item.get("value")):
            read.append(Item(name, str(item.get("quote") or ""), item["value"]))
    return Extraction(tuple(read))


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())
