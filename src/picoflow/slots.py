"""Slot filling: the model extracts what the user just said, code keeps it and decides what comes next.

A model, small ones above all, loses answers when it must remember six of them across six turns
and put them all into one call at the end. ``SlotStep`` splits the work the other way round:

* each turn the model's only job is to turn the user's latest message into a *partial* value of
  the step's ``slots`` model (structured output: every field optional, null when not said);
* code merges it into the step's state field by field: valid fields are kept at once, an invalid
  one goes back to the model with the rule it broke (never the value), and if it is still wrong
  the user is told why and asked again;
* code decides what to ask next, in the order of ``questions``, and when every question is
  answered it calls ``on_complete`` with the whole, validated value.

No answer is lost, whatever the order the user gives them in, and no reply depends on the model
remembering the conversation: it sees the question it is reading an answer to, and the answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, cast, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from picoflow._schema import redact_error_message
from picoflow.exceptions import FlowDefinitionError
from picoflow.outcomes import Outcome, direct, stay
from picoflow.step import Step

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
class Ask:
    """A question code asks until its fields are known (see ``ask``)."""

    question: str
    fields: tuple[str, ...]
    optional: bool = False
    """Asked once: whatever the reply, it is answered ("none", "no preference", or the user speaking
    of something else all leave its fields unknown, and it is not asked again)."""

    @property
    def key(self) -> str:
        return self.fields[0]


def ask(question: str, *fields: str, optional: bool = False) -> Ask:
    """The question that fills ``fields`` of the slots model, asked in code, word for word.

    A required question is answered when all its fields are known, and asked until they are. An
    ``optional`` one is asked once: any reply answers it, whether it gives its fields or not.
    """
    if not question.strip():
        raise FlowDefinitionError("ask() needs the question's text")
    if not fields:
        raise FlowDefinitionError(f"ask({question!r}) names no field of the slots model")
    return Ask(question.strip(), fields, optional)


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

    def grounded(self, said: str) -> Extraction:
        """Only the items the user's words ``said`` bear out: their quote is in those words (as
        written, or word for word), and a value holding numbers has one of them written in the
        quote. Anything else is the model's invention, however plausible ("search" read as a
        check-in, "2,5,8" read as a price of 25800)."""
        text = _squeezed(said)
        words = set(_words(said))
        kept: list[Reading] = []
        for item in self.items:
            quote = _squeezed(item.quote)
            if not quote or (quote not in text and not set(_words(quote)) <= words):
                continue
            numbers = _numbers(item.value)
            if numbers and not numbers & _written_numbers(quote):
                continue
            kept.append(item)
        return Extraction(tuple(kept))


def _numbers(value: Any) -> set[float]:
    """The numbers inside an extracted value (booleans are not numbers here)."""
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
        return set().union(*(_numbers(item) for item in value)) if value else set()
    return set()


def _written_numbers(text: str) -> set[float]:
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


@dataclass(frozen=True, slots=True)
class Merge:
    """The known values after merging an extraction, and what was refused and why."""

    values: dict[str, Any]
    """JSON values of every known field."""
    accepted: tuple[str, ...] = ()
    """Fields taken from the extraction."""
    problems: dict[str, str] = field(default_factory=dict)
    """Refused fields, each with the rule it broke (the value is never quoted)."""


def _squeezed(text: str) -> str:
    return " ".join(text.casefold().split())


def _words(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.casefold()).split()


def _known(model: BaseModel, names: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    dumped = model.model_dump(mode="json")
    return {name: dumped[name] for name in names}


def _reason(error: ValidationError, name: str) -> str:
    """The first rule ``name`` (or the value as a whole, with it) broke, in words for a person."""
    items = error.errors(include_url=False, include_context=False)
    mine = [item for item in items if not item["loc"] or item["loc"][0] == name] or items
    item = mine[0]
    text = redact_error_message(item)
    if item["type"] == "value_error":
        return text.removeprefix("Value error, ")
    where = ".".join(str(part) for part in item["loc"]) or name
    return f"{where}: {text[:1].lower()}{text[1:]}"


def merge_slots(model: type[BaseModel], known: Mapping[str, Any], given: Mapping[str, Any]) -> Merge:
    """Merge ``given`` into ``known`` through ``model``'s validation, keeping what can be kept.

    The fields of ``given`` are tried together (a new check-in and check-out may only be valid
    together); fields whose own rules fail are set aside and the rest tried together again. Only
    a rule about the value as a whole (end before start) sends the merge field by field, in order,
    each kept if the whole value is still valid with it. Known values are replaced, never lost to a
    refused one.
    """
    fields = model.model_fields
    offered = {name: value for name, value in given.items() if name in fields and value is not None}
    together = dict(offered)
    while together:
        candidate = {**known, **together}
        try:
            values = _known(model.model_validate(candidate), candidate)
        except ValidationError as error:
            wrong = {item["loc"][0] for item in error.errors() if item["loc"] and item["loc"][0] in together}
            if not wrong:
                break  # a rule of the whole value: find the field that breaks it, one at a time
            together = {name: value for name, value in together.items() if name not in wrong}
            continue
        problems = {}
        for name in offered.keys() - together.keys():
            try:
                model.model_validate({**values, name: offered[name]})
            except ValidationError as error:
                problems[name] = _reason(error, name)
        return Merge(values, tuple(together), problems)
    if not offered:
        return Merge(dict(known))
    values = dict(known)
    accepted: list[str] = []
    problems = {}
    for name, value in offered.items():
        candidate = {**values, name: value}
        try:
            values = _known(model.model_validate(candidate), candidate)
        except ValidationError as error:
            problems[name] = _reason(error, name)
            continue
        accepted.append(name)
    return Merge(values, tuple(accepted), problems)


def _value_type(info: FieldInfo) -> Any:
    """The field's type without its None (a reading always carries a value) and with its constraints."""
    annotation: Any = info.annotation
    if get_origin(annotation) in (Union, UnionType):
        kept = tuple(arg for arg in get_args(annotation) if arg is not type(None))
        annotation = kept[0] if len(kept) == 1 else Union[kept]  # noqa: UP007 - built from a tuple
    return Annotated[(annotation, *info.metadata)] if info.metadata else annotation


def reading_of(slots: type[BaseModel]) -> type[BaseModel]:
    """The model's answer format: a list of what the message says, one item per field, each quoted.

    ``{"found": [{"field": "max_price", "quote": "max 700", "value": 700}]}``. A model writes an item
    only when it decides to, and "Hi" reads naturally as an empty list; asked for an object with
    every field, a 1.5B model answered "Hi" with a whole invented stay. The quote comes before the
    value so the value is read from the words, and code checks the words are the user's.
    Validators are left out: values are checked when merged, through ``slots`` itself.
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
        __doc__=f"What the user's latest message says ({slots.__doc__ or slots.__name__})",
        found=(found, Field(description="One item per thing the message says; empty when it says none")),
    )


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class SlotStep(Step):
    """A step that fills the fields of ``slots`` from what the user says, asking ``questions`` in code.

    Subclass it with ``slots`` (a Pydantic model whose fields all default to None: the partial
    value the model extracts each turn), ``questions`` (``ask(...)`` in the order to ask them) and
    ``on_complete(values)``, which gets the whole validated value and returns where to go next.
    State: ``slots`` (known values), ``declined`` (optional questions replied to without their fields) and
    ``asking`` (the question the user's next message answers).
    """

    #: The model the user's words are extracted into; every field must default to None.
    slots: ClassVar[type[BaseModel]]
    #: The questions, in the order they are asked.
    questions: ClassVar[Sequence[Ask]] = ()
    #: Said once, before the first question (a greeting).
    intro: ClassVar[str] = ""
    #: Times per turn the model may correct a refused field before the user is asked instead.
    max_corrections: ClassVar[int] = 1
    # Ending a session cannot be undone; an extraction step does not offer it unless asked to.
    terminate_tool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        slots = getattr(cls, "slots", None)
        if slots is None:
            return
        where = f"SlotStep {cls.__name__}"
        if not (isinstance(slots, type) and issubclass(slots, BaseModel)):
            raise FlowDefinitionError(f"{where}: `slots` must be a Pydantic model class")
        required = [
            name
            for name, info in slots.model_fields.items()
            if info.is_required() or info.default is not None
        ]
        if required:
            raise FlowDefinitionError(
                f"{where}: every field of {slots.__name__} must default to None (the model fills only what "
                f"the user said); {', '.join(required)} does not"
            )
        for question in cls.questions:
            unknown = [name for name in question.fields if name not in slots.model_fields]
            if unknown:
                raise FlowDefinitionError(
                    f"{where}: ask({question.question!r}) names {', '.join(unknown)}, not a field of "
                    f"{slots.__name__}"
                )
        cls.output = reading_of(slots)

    # --- what code knows ------------------------------------------------------------------------

    @property
    def known(self) -> dict[str, Any]:
        """The JSON values of every field known so far."""
        return dict(self.state.get("slots") or {})

    def values(self) -> Any:
        """The known values as the ``slots`` model (unknown fields None)."""
        return self.slots.model_validate(self.known)

    def pending(self) -> Ask | None:
        """The first question not answered yet, or None when every one is."""
        known = self.known
        declined = set(self.state.get("declined") or ())
        for question in self.questions:
            have = [name for name in question.fields if name in known]
            if question.optional and (have or question.key in declined):
                continue
            if not question.optional and len(have) == len(question.fields):
                continue
            return question
        return None

    def forget(self, *names: str) -> None:
        """Make fields unknown again (their questions are asked again)."""
        known = self.known
        for name in names:
            known.pop(name, None)
        self.state["slots"] = known
        declined = [key for key in self.state.get("declined") or () if key not in names]
        self.state["declined"] = declined

    # --- what the model is told ------------------------------------------------------------------

    def prompt(self) -> str:
        return f"{(type(self).__doc__ or '').strip()}\n\n{EXTRACT_RULES}".strip()

    @classmethod
    def parse_output(cls, text: str) -> Extraction:
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
            if not isinstance(name, str) or name not in cls.slots.model_fields:
                raise ValueError(FORMAT_HINT)
            if not _blank(item.get("value")):
                read.append(Reading(item["field"], str(item.get("quote") or ""), item["value"]))
        return Extraction(tuple(read))

    # --- what code says and does --------------------------------------------------------------------

    def on_complete(self, values: Any) -> Outcome:
        """Every question is answered: ``values`` is the whole validated ``slots`` value."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_complete(values)")

    def acknowledge(self, values: Any, accepted: Sequence[str]) -> str:
        """Words said before the next question about the fields just accepted (none by default)."""
        return ""

    def phrase(self, question: Ask, values: Any) -> str:
        """The question as the user reads it (by default exactly its text)."""
        return question.question

    def on_response(self, response: Any) -> Any:
        if not isinstance(response, Extraction):  # pragma: no cover - parse_output makes one
            raise TypeError("a SlotStep's model answer must be parsed by SlotStep.parse_output")
        response = response.grounded(self.last_user_message or "")
        merged = merge_slots(self.slots, self.known, response.given)
        self.state["slots"] = merged.values
        asking = next((q for q in self.questions if q.key == self.state.get("asking")), None)
        if asking is not None and asking.optional and not set(asking.fields) & set(response.given):
            self.state["declined"] = [*(self.state.get("declined") or ()), asking.key]
        if merged.problems and self._corrections() < self.max_corrections:
            rules = "\n".join(
                f"- {why}" if why.startswith(f"{name}:") else f"- {name}: {why}"
                for name, why in merged.problems.items()
            )
            return stay(
                "These fields were not accepted:\n"
                f"{rules}\nAnswer again with those items corrected, or without them where the message "
                "does not give them."
            )
        values = self.values()
        refused = next(iter(merged.problems), None)
        question = next((q for q in self.questions if refused in q.fields), None) or self.pending()
        self.erase_memory()
        if question is None:
            self.state["asking"] = None
            return self.on_complete(values)
        self.state["asking"] = question.key
        words = [self.acknowledge(values, merged.accepted)]
        if not self.state.get("introduced"):
            self.state["introduced"] = True
            words.insert(0, self.intro)
        if refused is not None:
            why = merged.problems[refused]
            words.append(f"Sorry, {why[:1].lower()}{why[1:].rstrip('.')}.")
        words.append(self.phrase(question, values))
        return direct(" ".join(word.strip() for word in words if word.strip()))

    def _corrections(self) -> int:
        """Corrections sent to the model since the user's latest message."""
        count = 0
        for message in reversed(self.messages):
            if message.is_from_user:
                break
            count += message.role == "user" and message.kind == "correction"
        return count
