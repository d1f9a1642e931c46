"""The reader: the user's latest message read into a form, item by item, each with a verdict.

``read(slots, history, message, form=..., asking=..., model=...)`` is the one reader of picoflow,
callable without a flow (a test, a benchmark, an application of its own): the model proposes items
of the slots model, each quoted (``picoflow.slots.reading``); the grounding policy keeps what the
conversation's words bear out and says why of every item (``picoflow.slots.grounding``); the form
validates and keeps the rest (``picoflow.slots.form``). A value the slots model refuses goes back to
the model once with the rule it broke (never the value); under the small-model profile, the parts
of a long message the reading left out go back once too, as a message of their own.

``Reader`` is that work as a value that takes one model answer at a time and says what comes next:
another look (``Again``) or the finished ``Reading``. ``read`` drives it with a model directly;
``SlotStep`` drives it through the runner, so a flow's budgets, usage and traces count every call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from picoflow.flow import output_schema
from picoflow.messages import Message, ModelRequest, OutputSchema
from picoflow.slots.form import Ask, Form, Merge
from picoflow.slots.grounding import Grounding, Heard, Verdict, given, range_ends
from picoflow.slots.reading import EXTRACT_RULES, FORMAT_HINT, Extraction, parse_reading, reading_of
from picoflow.slots.said import Said, detect_locale, evidence_of, left_out, says_option, told
from picoflow.usage import Usage

__all__ = ["Again", "Reader", "Reading", "read"]


@dataclass(frozen=True, slots=True)
class Reading:
    """A message read into a form: the new form, what it gave, what was refused, and a verdict for
    every item the model read (in the order read, every look at the message included)."""

    form: Form
    verdicts: tuple[Verdict, ...] = ()
    accepted: tuple[str, ...] = ()
    """Fields this message gave, in the order given."""
    problems: Mapping[str, str] = field(default_factory=dict)
    """Fields refused by the slots model's own rules, each with the rule it broke (never the value)."""
    farewell: bool = False
    """The message kept nothing but holds the words of the goodbye field (small-model profile)."""
    locale: str | None = None
    """Of several locales declared, the one whose declared words the message holds most (the
    language to answer in); None when it does not tell."""
    usage: Usage = field(default_factory=Usage)
    """Tokens ``read`` spent (a ``SlotStep``'s calls are counted by the runner instead)."""

    @property
    def dropped(self) -> tuple[Verdict, ...]:
        return tuple(verdict for verdict in self.verdicts if verdict.action == "dropped")


@dataclass(frozen=True, slots=True)
class Again:
    """The model looks at the message again: ``text`` is what it is told. ``fresh``: it reads
    ``text`` as a message of its own (its earlier answer forgotten), else as a correction."""

    text: str
    fresh: bool = False


class Reader:
    """One message being read: takes the model's answers one at a time (``take``)."""

    def __init__(
        self,
        slots: type[BaseModel],
        message: str,
        *,
        form: Form | None = None,
        questions: Sequence[Ask] = (),
        previous: str | None = None,
        grounding: Grounding | None = None,
        max_corrections: int = 1,
        second_look: bool = True,
        accept: Said | None = None,
        go_ahead: str | None = None,
        goodbye: str | None = None,
        locales: Sequence[str] = (),
        repairs: str | None = None,
        locale: str | None = None,
    ) -> None:
        self.slots = slots
        self.repairs = repairs
        """The field whose options are repair patterns (``SlotStep.repairs_from``): a message read as
        one (cancel, repeat, a digression) is about the conversation, not the form, and gets no
        second look."""
        self.locales = tuple(locales)
        self.message = message
        self.form = form or Form()
        self.questions = tuple(questions)
        self.grounding = grounding or Grounding.default()
        self.max_corrections = max_corrections
        self.second_look = second_look and self.grounding.second_look
        self.go_ahead = go_ahead
        self.goodbye = goodbye
        self.told = detect_locale(message, slots, locales)
        """Of several locales, the one this message's words tell; None when they tell none."""
        # That one, else the conversation's (``locale``), decides how its dates in digits are read.
        self.heard = Heard(
            message,
            previous,
            slips=self.grounding.slips,
            accept=accept,
            locales=locales,
            told=self.told or locale,
        )
        self.locales = self.heard.locales
        self.looks = 0
        """Answers sent back to the model for this message (corrections and the second look)."""
        self.rereading = False
        self._accepted: tuple[str, ...] = ()
        self._verdicts: list[Verdict] = []

    def take(self, extraction: Extraction) -> Again | Reading:
        """What the model's answer ``extraction`` gives: another look, or the finished reading."""
        question = self.form.asked(self.questions)
        asked = question.fields if question is not None else ()
        items, verdicts = self.grounding.judge(
            self.slots, extraction.items, self.heard, asked, self.form.known
        )
        if self.grounding.told:  # a small model takes one end of "vom 1. bis 3. September"
            ends, said = range_ends(self.slots, items, self.heard)
            items, verdicts = (*items, *ends), (*verdicts, *said)
        self._verdicts.extend(verdicts)
        merged = self.form.merge(self.slots, given(items), self.questions)
        if merged.problems and self.looks < self.max_corrections:
            self._settle(merged)
            return Again(_correction(merged.problems))
        if self.rereading and self.grounding.told:
            merged = self._told(merged)
        merged = replace(merged, accepted=tuple(dict.fromkeys((*self._accepted, *merged.accepted))))
        form = merged.form
        farewell = self.goodbye is not None and self.goodbye not in form.known and self._farewell(merged)
        if self.goodbye is not None and (self.goodbye in form.known or farewell):
            return self._finished(merged, farewell)
        if (
            self.second_look
            and self.looks == 0
            and not merged.problems
            and form.pending(self.questions) is not None  # else nothing is left to learn
            and not (self.repairs is not None and self.repairs in merged.accepted)
        ):
            kept = [(item.field, item.quote, item.value) for item in items]
            if left := left_out(self.message, kept, self.slots, self.locales):
                # What was read is kept; the model reads the parts it left out, once per message,
                # as a message of their own: shown its first answer, it gives the same again.
                self._settle(merged)
                self.rereading = True
                return Again("\n".join(left), fresh=True)
        return self._finished(merged, False)

    def _settle(self, merged: Merge) -> None:
        self.form = merged.form
        self._accepted = tuple(dict.fromkeys((*self._accepted, *merged.accepted)))
        self.looks += 1

    def _finished(self, merged: Merge, farewell: bool) -> Reading:
        offered = {v.field: v.value for v in self._verdicts if v.action != "dropped"}
        refused = tuple(
            Verdict(name, offered.get(name), "dropped", "validation", why=why)
            for name, why in merged.problems.items()
        )
        return Reading(
            merged.form,
            (*self._verdicts, *refused),
            merged.accepted,
            merged.problems,
            farewell,
            locale=self.told,
        )

    def _told(self, merged: Merge) -> Merge:
        """``merged`` with what the declared words alone tell of the fields two readings left out:
        a yes-or-no field ("a suite in Portland") and the go-ahead ("could you show me what you
        have?"). A small model reading a long message skips these more than any other."""
        form = merged.form
        evidence = evidence_of(self.slots, self.locales)
        yes_no = {name for name, own in evidence.items() if own.decides_yes_no}
        wanted = [*sorted(yes_no), *([self.go_ahead] if self.go_ahead else [])]
        given_now = {
            name: value
            for name in wanted
            if name not in form.known
            and name not in merged.problems
            and (value := told(self.message, self.slots, name, self.locales)) is not None
        }
        if not given_now:
            return merged
        self._verdicts.extend(
            Verdict(name, value, "kept", "told", why="the declared words say it on their own")
            for name, value in given_now.items()
        )
        more = form.merge(self.slots, given_now)  # no question is declined by it: they were asked before
        return replace(
            more, accepted=(*merged.accepted, *more.accepted), problems={**merged.problems, **more.problems}
        )

    def _farewell(self, merged: Merge) -> bool:
        """Whether a message the first reading kept nothing of holds the words of the goodbye."""
        assert self.goodbye is not None
        if not self.grounding.told:
            return False
        nothing = not merged.accepted and not merged.problems and self.looks == 0
        return nothing and says_option(self.slots, self.goodbye, self.message, self.locales)


def _correction(problems: Mapping[str, str]) -> str:
    # Fields refused together (a check-in and check-out that contradict each other) share one line.
    fields_of: dict[str, list[str]] = {}
    for name, why in problems.items():
        fields_of.setdefault(why, []).append(name)
    rules = "\n".join(
        f"- {why}" if why.startswith(f"{names[0]}:") else f"- {', '.join(names)}: {why}"
        for why, names in fields_of.items()
    )
    return (
        f"These fields were not accepted:\n{rules}\nAnswer again with those items corrected, or without "
        "them where the message does not give them."
    )


READ_PROMPT = "You read what a user says into the fields of a form: {about}."


async def read(
    slots: type[BaseModel],
    history: Sequence[Message],
    message: str,
    *,
    model: Any,
    form: Form | None = None,
    asking: Ask | None = None,
    questions: Sequence[Ask] = (),
    grounding: Grounding | None = None,
    accept: Said | None = None,
    locale: str | None = None,
    locales: Sequence[str] = (),
    max_corrections: int = 1,
    max_calls: int = 4,
    prompt: str | None = None,
) -> Reading:
    """Read the user's ``message`` into ``form`` (a new one by default) with ``model``.

    ``history`` is the conversation before it (assistant and user messages): the assistant's last
    message is the question the message answers and the offer it may accept. ``asking`` is the
    question open now (an optional question the message ignores is declined), ``questions`` all of
    them (fields asked together are merged together). ``grounding`` defaults to the profile the
    model asks for (``Grounding.for_model``). ``locales`` are the languages the conversation may be
    in (BCP 47 tags; ``locale`` is one more): only their declared words count, and one locale
    reads numbers as it writes them; with none, every language's words count and numbers are read
    every plausible way. At most ``max_calls`` model calls are made; an answer that never fits the
    format reads nothing.
    """
    grounding = grounding or Grounding.for_model(model)
    locales = tuple(dict.fromkeys((*([locale] if locale else []), *locales)))
    previous = next((m.content for m in reversed(history) if m.role == "assistant" and m.content), None)
    asked = tuple(questions) or ((asking,) if asking is not None else ())
    start = form or Form()
    if asking is not None:
        start = start.asking_now(asking)
    reader = Reader(
        slots,
        message,
        form=start,
        questions=asked,
        previous=previous,
        grounding=grounding,
        max_corrections=max_corrections,
        accept=accept,
        locales=locales,
        locale=locale,
    )
    about = slots.__doc__.strip() if slots.__doc__ else slots.__name__
    system = f"{prompt or READ_PROMPT.format(about=about)}\n\n{EXTRACT_RULES}"
    opening = [Message.assistant(previous)] if previous else []
    messages: list[Message] = [*opening, Message.user(message)]
    output = _output(slots)
    usage = Usage()
    for _ in range(max_calls):
        response = await model.request(ModelRequest(system, list(messages), (), output, step="read"))
        usage = usage + response.usage
        try:
            extraction = parse_reading(slots, _unfenced(response.text))
        except ValueError:
            messages += [Message.assistant(response.text), Message.user(FORMAT_HINT, kind="correction")]
            continue
        result = reader.take(extraction)
        if isinstance(result, Reading):
            return replace(result, usage=usage)
        if result.fresh:
            messages = [Message.user(result.text, kind="correction")]
        else:
            messages += [Message.assistant(response.text), Message.user(result.text, kind="correction")]
    return Reading(reader.form, tuple(reader._verdicts), reader._accepted, usage=usage)


def _output(slots: type[BaseModel]) -> OutputSchema | None:
    return output_schema(reading_of(slots))


def _unfenced(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return stripped.strip()
