"""``Form``: where a slot-filling conversation stands, as one immutable value.

What is known (the JSON value of each field given so far), which optional questions the user
replied to without their fields, which question their next message answers, and whether the
intro was said. How one message is being read (corrections, a second look) is the reader's own
business and never stored here (``picoflow.slots.reader``). Every operation is
pure and returns a new ``Form``; the slots model and the questions are passed in, so a form is
plain data that round-trips through JSON (``model_dump(mode="json")`` / ``model_validate``).

``SlotStep`` keeps its form under one key of its step state; nothing here needs an engine or a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from picoflow._schema import redact_error_message
from picoflow.exceptions import FlowDefinitionError

Slots = TypeVar("Slots", bound=BaseModel)

_TRANSIENT = frozenset({"corrections", "heard", "rereading"})


@dataclass(frozen=True, slots=True)
class Ask:
    """A question code asks until its fields are known (see ``ask``)."""

    question: str
    fields: tuple[str, ...]
    optional: bool = False
    """Asked once: whatever the reply, it is answered ("none", "no preference", or the user speaking
    of something else all leave its fields unknown, and it is not asked again)."""
    example: str | None = None
    """An answer that would do ("August 3 to August 6"): offered when the question made no
    progress (the ``no_progress`` repair pattern)."""

    @property
    def key(self) -> str:
        return self.fields[0]


def ask(question: str, *fields: str, optional: bool = False, example: str | None = None) -> Ask:
    """The question that fills ``fields`` of the slots model, asked in code, word for word.

    A required question is answered when all its fields are known, and asked until they are. An
    ``optional`` one is asked once: any reply answers it, whether it gives its fields or not.
    """
    if not question.strip():
        raise FlowDefinitionError("ask() needs the question's text")
    if not fields:
        raise FlowDefinitionError(f"ask({question!r}) names no field of the slots model")
    return Ask(question.strip(), fields, optional, example.strip() if example and example.strip() else None)


@dataclass(frozen=True, slots=True)
class Merge:
    """A reading merged into a form: the new form, what was taken and what was refused and why."""

    form: Form
    accepted: tuple[str, ...] = ()
    """Fields taken from the reading, in the order it gave them."""
    problems: Mapping[str, str] = field(default_factory=dict)
    """Refused fields, in the order the reading gave them, each with the rule it broke (the value
    is never quoted)."""


class Form(BaseModel):
    """Where a slot-filling conversation stands; immutable, every operation returns a new form."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    known: Mapping[str, JsonValue] = Field(default_factory=dict, validate_default=True)
    """The JSON value of every field known so far."""
    declined: tuple[str, ...] = ()
    """Keys of the optional questions the user replied to without giving their fields."""
    asking: str | None = None
    """Key of the question the user's next message answers; None before the first and once done."""
    introduced: bool = False
    """The intro was said (it goes out once, with the first question)."""

    @model_validator(mode="before")
    @classmethod
    def _earlier(cls, data: Any) -> Any:
        # Forms stored before the reader kept its own bookkeeping held how many corrections went to
        # the model and what a second look had heard: transient, so dropped when loaded.
        if isinstance(data, Mapping) and _TRANSIENT & data.keys():
            return {key: value for key, value in data.items() if key not in _TRANSIENT}
        return data

    @field_validator("known", mode="after")
    @classmethod
    def _read_only(cls, known: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
        return MappingProxyType(dict(known))

    @field_serializer("known")
    def _plain(self, known: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        return dict(known)

    def _with(self, **changes: Any) -> Form:
        # Through the constructor, so every new form is validated like a stored one.
        return Form(**{**dict(self), **changes})

    # --- reading it ---------------------------------------------------------------------------

    def values(self, slots: type[Slots]) -> Slots:
        """The known values as the ``slots`` model (unknown fields None)."""
        return slots.model_validate(dict(self.known))

    def pending(self, questions: Sequence[Ask]) -> Ask | None:
        """The first of ``questions`` not answered yet, or None when every one is."""
        for question in questions:
            have = [name for name in question.fields if name in self.known]
            if question.optional and (have or question.key in self.declined):
                continue
            if not question.optional and len(have) == len(question.fields):
                continue
            return question
        return None

    def asked(self, questions: Sequence[Ask]) -> Ask | None:
        """The question the user's next message answers, among ``questions``."""
        return next((question for question in questions if question.key == self.asking), None)

    # --- changing it --------------------------------------------------------------------------

    def merge(self, slots: type[BaseModel], given: Mapping[str, Any], questions: Sequence[Ask] = ()) -> Merge:
        """``given`` merged through ``slots``' validation, keeping what can be kept.

        The fields given are tried together (a new check-in and check-out may only be valid
        together); fields whose own rules fail are set aside and the rest tried together again.
        Only a rule about the value as a whole (end before start) sends the merge field by field,
        in order, each kept if the whole value is still valid with it — and the fields one of
        ``questions`` asks for together stand or fall together there: of a check-in and check-out
        that contradict each other, neither is known to be the right one. Known values are
        replaced, never lost to a refused one. An optional question being asked whose fields
        ``given`` does not name is declined: it is not asked again.
        """
        values, accepted, problems = _merged(slots, self.known, given, questions)
        declined = self.declined
        asked = self.asked(questions)
        if asked is not None and asked.optional and not set(asked.fields) & set(given):
            declined = tuple(dict.fromkeys((*declined, asked.key)))
        return Merge(self._with(known=values, declined=declined), accepted, problems)

    def revalidated(self, slots: type[BaseModel], questions: Sequence[Ask] = ()) -> Merge:
        """The form as another ``slots`` model reads it (a new version of the flow changed it): the
        known fields that still validate are kept, as the new model writes them; the others become
        unknown, each in ``problems`` with the rule it broke (or because the model no longer has
        it), so their questions are asked again. With ``questions``, declined and asked questions
        it no longer has are forgotten too."""
        values, accepted, problems = _merged(slots, {}, self.known, questions)
        fields = slots.model_fields
        gone = {name: "no longer a field of the form" for name in self.known if name not in fields}
        declined, asking = self.declined, self.asking
        if questions:
            keys = {question.key for question in questions}
            declined = tuple(key for key in declined if key in keys)
            asking = asking if asking in keys else None
        form = self._with(known=values, declined=declined, asking=asking)
        return Merge(form, accepted, {**problems, **gone})

    def forget(self, *names: str) -> Form:
        """The form with fields ``names`` unknown again (their questions are asked again)."""
        known = {name: value for name, value in self.known.items() if name not in names}
        declined = tuple(key for key in self.declined if key not in names)
        return self._with(known=known, declined=declined)

    def waiving(self, questions: Sequence[Ask]) -> Form:
        """The form once the user asked to go ahead with what is known: every optional question of
        ``questions`` not answered yet counts as declined (the required ones are still asked)."""
        open_ = [q.key for q in questions if q.optional and self.pending([q]) is not None]
        return self._with(declined=tuple(dict.fromkeys((*self.declined, *open_))))

    def asking_now(self, question: Ask | None) -> Form:
        """The form once code asked ``question`` (None: there is nothing left to ask): the user's
        next message answers it; the intro has been said with it."""
        return self._with(
            asking=question.key if question is not None else None,
            introduced=self.introduced or question is not None,
        )


def _merged(
    slots: type[BaseModel], known: Mapping[str, Any], given: Mapping[str, Any], questions: Sequence[Ask]
) -> tuple[dict[str, Any], tuple[str, ...], dict[str, str]]:
    fields = slots.model_fields
    offered = {name: value for name, value in given.items() if name in fields and value is not None}
    together = dict(offered)
    while together:
        candidate = {**known, **together}
        try:
            values = _known(slots.model_validate(candidate), candidate)
        except ValidationError as error:
            wrong = {item["loc"][0] for item in error.errors() if item["loc"] and item["loc"][0] in together}
            if not wrong:
                break  # a rule of the whole value: find the field that breaks it, one at a time
            together = {name: value for name, value in together.items() if name not in wrong}
            continue
        problems: dict[str, str] = {}
        for name in offered:
            if name in together:
                continue
            try:
                slots.model_validate({**values, name: offered[name]})
            except ValidationError as error:
                problems[name] = _reason(error, name)
        return values, tuple(together), problems
    if not offered:
        return dict(known), (), {}
    values = dict(known)
    accepted: list[str] = []
    problems = {}
    for unit in _units(offered, questions):
        candidate = {**values, **unit}
        try:
            values = _known(slots.model_validate(candidate), candidate)
        except ValidationError as error:
            problems.update({name: _reason(error, name) for name in unit})
            continue
        accepted.extend(unit)
    return values, tuple(accepted), {name: problems[name] for name in offered if name in problems}


def _units(offered: Mapping[str, Any], questions: Sequence[Ask]) -> list[dict[str, Any]]:
    """``offered`` in the groups that are merged as one: the fields of one question, or a field alone."""
    units: dict[str, dict[str, Any]] = {}
    for name, value in offered.items():
        asked = next((question for question in questions if name in question.fields), None)
        units.setdefault(asked.key if asked is not None else f"field {name}", {})[name] = value
    return list(units.values())


def _known(model: BaseModel, names: Mapping[str, Any]) -> dict[str, Any]:
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
