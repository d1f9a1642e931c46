"""``SlotStep``: the model reads what the user just said, a ``Form`` keeps it, code decides what comes next.

A model, small ones above all, loses answers when it must remember six of them across six turns
and put them all into one call at the end. ``SlotStep`` splits the work the other way round:

* each turn the model's only job is to read the user's latest message into items of the step's
  ``slots`` model (``picoflow.slots.reading``), each with the words that say it;
* code keeps what those words bear out (``picoflow.slots.grounding``) and merges it into the step's
  ``Form`` (``picoflow.slots.form``): valid fields are kept at once, an invalid one goes back to the
  model with the rule it broke (never the value), and if it is still wrong the user is told why
  and asked again;
* code decides what to ask next, in the order of ``questions``, and when every question is
  answered it calls ``on_complete`` with the whole, validated value.

No answer is lost, whatever the order the user gives them in, and no reply depends on the model
remembering the conversation: it sees the question it is reading an answer to, and the answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, TypeVar, cast

from pydantic import BaseModel

from picoflow._schema import literal_options
from picoflow.exceptions import FlowDefinitionError
from picoflow.outcomes import PATTERNS, Direct, Outcome, Repair, direct, go, repair, stay
from picoflow.repairs import counts, keep
from picoflow.slots.form import Ask, Form
from picoflow.slots.grounding import Grounding, asks
from picoflow.slots.reader import Again, Reader, Reading
from picoflow.slots.reading import EXTRACT_RULES, Extraction, ReadingFormat, parse_reading, reading_of
from picoflow.slots.said import Said, evidence_of, options_said
from picoflow.slots.words import words
from picoflow.step import Step

T = TypeVar("T")

FORM_KEY = "form"
"""The key of the step state a SlotStep keeps its ``Form`` under; every other key is the step's own."""

LOCALE_KEY = "locale"
"""The key of the step state a SlotStep keeps the locale the user's words told under (of several
declared ``locales``); absent until they tell one."""


_EARLIER_KEYS = ("slots", "declined", "asking", "introduced")
"""Where a SlotStep kept its form before ``Form`` existed, each under a key of its own."""


def _earlier_form(state: Mapping[str, Any]) -> Form:
    """The form of a session stored by an earlier SlotStep, so a conversation in progress keeps its
    answers; the old keys give way to ``"form"`` with the next change."""
    asking = state.get("asking")
    return Form(
        known=state["slots"],
        declined=tuple(key for key in state.get("declined") or () if isinstance(key, str)),
        asking=asking if isinstance(asking, str) else None,
        introduced=bool(state.get("introduced")),
    )


class SlotStep(Step):
    """A step that fills the fields of ``slots`` from what the user says, asking ``questions`` in code.

    Subclass it with ``slots`` (a Pydantic model whose fields all default to None: the partial
    value the model reads each turn), ``questions`` (``ask(...)`` in the order to ask them) and
    ``on_complete(values)``, which gets the whole validated value and returns where to go next.

    A session stored under another version of the flow keeps the fields of its form that still
    validate under the new ``slots``; the others are asked again (``revalidated_state``, after the
    step's own ``migrate``, which may convert a value first).

    What the form owns: its ``Form`` under the state key ``"form"``; ``output``, derived from
    ``slots`` (``reading_of(slots)``: setting it is a ``FlowDefinitionError``); the standing
    ``instructions`` that tell the model how to read (added after whatever ``prompt()`` returns);
    and the hooks ``parse_output`` and ``on_response``. Every other hook of ``Step`` is yours:
    ``prompt``, ``history``, ``check_response``, ``on_enter``, ``on_exit``, ``on_crossing``,
    ``active_tools``, ``on_model_error``.
    """

    #: The model the user's words are read into; every field must default to None.
    slots: ClassVar[type[BaseModel]]
    #: The questions, in the order they are asked.
    questions: ClassVar[Sequence[Ask]] = ()
    #: Said once, before the first question (a greeting).
    intro: ClassVar[str] = ""
    #: A field of ``slots`` whose reading means "go ahead with what you know" (a search asked for
    #: now, whatever question is pending). It is not kept: the optional questions still open are
    #: not asked, and once the required ones are answered ``on_complete`` runs.
    go_ahead: ClassVar[str | None] = None
    #: A field of ``slots`` whose reading means the user ends the conversation ("bye", "that's
    #: all"), whatever question is pending: the session goes to the flow's ``TerminateStep``. Give
    #: its option the words that say it with ``Said``, so a "hello" read as a goodbye ends nothing.
    #: Those words also end it when the reading keeps nothing of the message: a small model often
    #: reads nothing at all in "thanks, that's all".
    goodbye: ClassVar[str | None] = None
    #: A field of ``slots`` whose options name repair patterns (``picoflow.repairs``): ``"cancel"``,
    #: ``"repeat"``, ``"skip"``, ``"out_of_scope"``, ``"handoff"``. Give each option the words that
    #: say it, per locale, with ``Said``. A message that gives an answer is an answer: the pattern
    #: fires only when the message gives nothing else.
    repairs_from: ClassVar[str | None] = None
    takes_corrections = True
    #: Times per turn the model may correct a refused field before the user is asked instead. A
    #: step whose rules refuse what the user said (a date in the past), not how it was read, sets 0.
    max_corrections: ClassVar[int] = 1
    #: Whether parts of a long message the reading left out (a number no value holds, the words
    #: of an option not read: ``said.left_out``) go back to the model once, with what was read
    #: kept, while a question is still open, when the grounding profile allows it (the small-model
    #: one does). It costs a model call when it happens; a small model reading "Portland, August
    #: 10 to August 13 2027, one bed, search" often stops after a few items.
    second_look: ClassVar[bool] = True
    #: The grounding policy readings pass through (``picoflow.slots.Grounding``); None: the profile
    #: the step's model asks for (the embedded model asks for ``Grounding.for_small_models()``).
    grounding: ClassVar[Grounding | None] = None
    #: The words that accept or decline what the assistant put forward (``Said(yes=..., no=...)``):
    #: with them, a value offered in the question ("Shall I book the Hotel Monaco?") and accepted
    #: ("sounds great") is kept, a declined one never; the small-model profile needs them to keep one.
    accept: ClassVar[Said | None] = None
    # ``locales`` (``Step.locales``): only the words declared for them count (``Said(locale=...)``),
    # one locale reads numbers and dates as it writes them, and of several, the one whose words the
    # user wrote is kept as the step's ``locale`` (the language to answer in). None declared: every
    # declared word counts.
    instructions = EXTRACT_RULES
    # Ending a session cannot be undone; a reading step does not offer it unless asked to.
    terminate_tool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        where = f"SlotStep {cls.__name__}"
        inherited = getattr(cls, "output", None)
        if "output" in cls.__dict__ or not (inherited is None or issubclass(inherited, ReadingFormat)):
            raise FlowDefinitionError(
                f"{where}: do not set `output`; a SlotStep answers with the reading of its `slots` "
                "(reading_of(slots)), and on_complete(values) gets them as your `slots` model"
            )
        slots = getattr(cls, "slots", None)
        if slots is None:
            return
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
        if cls.repairs_from is not None:
            field = slots.model_fields.get(cls.repairs_from)
            unknown = [str(option) for option in literal_options(field) if option not in PATTERNS]
            if field is None or unknown or not literal_options(field):
                raise FlowDefinitionError(
                    f"{where}: repairs_from names {cls.repairs_from!r}, which must be a field of "
                    f"{slots.__name__} whose options are repair patterns ({', '.join(PATTERNS)})"
                    + (f"; {', '.join(unknown)} is not one" if unknown else "")
                )
        for role in ("go_ahead", "goodbye", "repairs_from"):
            name = getattr(cls, role)
            if name is not None and name not in slots.model_fields:
                raise FlowDefinitionError(f"{where}: {role} names {name!r}, not a field of {slots.__name__}")
            if any(name in question.fields for question in cls.questions):
                raise FlowDefinitionError(
                    f"{where}: {role} {name!r} is a request, not a field a question asks"
                )
        evidence_of(slots)  # a Said naming an option the field does not have fails here, not mid-turn
        cls.output = reading_of(slots)

    # --- the form ---------------------------------------------------------------------------------

    @property
    def form(self) -> Form:
        """Where the conversation stands (kept in the step state under ``"form"``)."""
        state = self.state
        if FORM_KEY not in state and isinstance(state.get("slots"), dict):
            return _earlier_form(state)
        return state.get_as(FORM_KEY, Form) or Form()

    @form.setter
    def form(self, form: Form) -> None:
        state = self.state
        for key in _EARLIER_KEYS if FORM_KEY not in state else ():
            state.pop(key, None)
        state[FORM_KEY] = form

    def forget(self, *names: str) -> None:
        """Make fields unknown again (their questions are asked again)."""
        self.form = self.form.forget(*names)

    @classmethod
    def revalidated_state(cls, state: Mapping[str, Any]) -> tuple[dict[str, Any], Mapping[str, str]]:
        """A stored state with its form as this step's ``slots`` reads it (``Form.revalidated``):
        what a session stored under another version of the flow gets when it is loaded, after the
        step's ``migrate``. Returns the state and the fields dropped, each with the rule it broke
        (never its value); their questions are asked again."""
        slots = getattr(cls, "slots", None)
        if FORM_KEY in state:
            form = Form.model_validate(state[FORM_KEY])
        elif isinstance(state.get("slots"), dict):
            form = _earlier_form(state)
        else:
            return dict(state), {}
        if slots is None:
            return dict(state), {}
        merged = form.revalidated(slots, cls.questions)
        if merged.form == form and FORM_KEY in state:
            return dict(state), {}
        kept = {key: value for key, value in state.items() if key not in _EARLIER_KEYS or FORM_KEY in state}
        kept[FORM_KEY] = merged.form.model_dump(mode="json")
        return kept, merged.problems

    # --- what code says and does: yours to override -------------------------------------------------

    def on_complete(self, values: Any) -> Outcome | Awaitable[Outcome]:
        """Every question is answered: ``values`` is the whole validated ``slots`` value. Return
        an outcome (it may be ``async``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_complete(values)")

    def on_reading(self, values: Any, accepted: Sequence[str]) -> Outcome | Awaitable[Outcome | None] | None:
        """Act on what the user just said, whatever question is pending: return an outcome (a
        goodbye, a search asked for now) or None (the default) to go on with the questions.
        ``accepted`` names the fields this message gave; it may be ``async``."""
        return None

    def acknowledge(self, values: Any, accepted: Sequence[str]) -> str:
        """Words said before the next question about the fields just accepted (none by default)."""
        return ""

    def phrase(self, question: Ask, values: Any) -> str:
        """The question as the user reads it (by default exactly its text)."""
        return question.question

    # --- the form's hooks --------------------------------------------------------------------------

    @classmethod
    def parse_output(cls, text: str) -> Extraction:
        return parse_reading(cls.slots, text)

    async def on_response(self, response: Any) -> Outcome:
        if not isinstance(response, Extraction):  # pragma: no cover - parse_output makes one
            raise TypeError("a SlotStep's model answer must be parsed by SlotStep.parse_output")
        reader = self._reader or self._start_reading()
        taken = reader.take(response)
        if isinstance(taken, Again):
            self.form = reader.form  # what was accepted so far is kept whatever comes next
            if taken.fresh:
                self.erase_memory()
            return stay(taken.text)
        self._reader = None
        self._runtime.judged(self.name, taken.verdicts)
        if taken.locale is not None:
            self.state[LOCALE_KEY] = taken.locale
        fired = self._repair_in(taken, reader.message)
        if fired is not None:
            self.erase_memory()
            return fired
        form = self.form
        if self.goodbye is not None and (self.goodbye in form.known or taken.farewell):
            self.erase_memory()
            self.form = form.forget(self.goodbye).asking_now(None)
            target = self._runtime.terminate_target()
            assert target is not None, "Flow checks that a SlotStep with a goodbye has a TerminateStep"
            return go(target)
        # The reading is final: from here on code answers the user, and the next message is read
        # afresh, whatever the step does with it.
        if self.go_ahead is not None and self.go_ahead in form.known:
            form = form.forget(self.go_ahead).waiving(self.questions)
        values = form.values(self.slots)
        self.erase_memory()
        self.form = form.asking_now(form.asked(self.questions))
        changed = self._changed(form, taken.accepted)
        if changed:  # the correction pattern fires, and the step goes on with the new values
            self._going_on = (form, values, taken, changed)
            return repair("correction", detail=", ".join(changed))
        return await self._go_on(form, values, taken)

    async def _go_on(self, form: Form, values: Any, taken: Reading, changed: Sequence[str] = ()) -> Outcome:
        acted = await _settled(self.on_reading(values, taken.accepted))
        if acted is not None:
            return acted
        return await self._ask_next(form, values, taken, changed)

    def _changed(self, form: Form, accepted: Sequence[str]) -> list[str]:
        """The fields this message gave a new value that held another one before it (a
        correction), when the policy lets the pattern fire."""
        before = self._before.known if self._before is not None else {}
        roles = (self.go_ahead, self.goodbye, self.repairs_from)
        taken = set(accepted)
        changed = [  # in the order of the slots model, whatever order the reading gave them in
            name
            for name in self.slots.model_fields
            if name in taken
            and name not in roles
            and before.get(name) is not None
            and before.get(name) != form.known.get(name)
        ]
        return changed if changed and self.repair_policy.allows("correction") else []

    _reader: Reader | None = None
    _before: Form | None = None
    _going_on: tuple[Form, Any, Reading, Sequence[str]] | None = None

    # --- repair patterns (picoflow.repairs) ---------------------------------------------------------

    def _repair_in(self, taken: Reading, message: str) -> Outcome | None:
        """The repair pattern the message asks for, if any: a cancel being confirmed (or not), or
        the option of ``repairs_from`` read (or, to a small model's profile, said in bare words)
        in a message that gives nothing else. The form keeps the reading without that field."""
        kept = counts(self.state)
        confirming = kept.pop("confirming", None)
        keep(self.state, kept)
        form, pattern = taken.form, None
        name = self.repairs_from
        if name is not None:
            pattern = form.known.get(name)
            form = form.forget(name)
            answered = [field for field in taken.accepted if field != name]
            if pattern is None and not answered and not taken.problems and self._grounding().told:
                said = options_said(self.slots, name, message, self.locales)
                pattern = said[0] if len(said) == 1 else None
                if pattern is None and self._left_the_path(name, message):
                    pattern = "out_of_scope"
        else:
            answered = list(taken.accepted)
        self.form = form
        if confirming == "cancel":
            yes = self.accept.answer(words(message)) if self.accept is not None else None
            if yes or pattern == "cancel":
                kept["confirming"] = "cancel"  # confirmed: the cancel goes ahead
                keep(self.state, kept)
                return repair("cancel", detail="confirmed")
            if yes is False and not answered:
                texts = self.repair_policy.words(self.locale)
                return direct(texts.kept_going.format(question=self.question()).strip())
        named = next((known for known in PATTERNS if known == pattern), None)
        if named is None or answered or taken.problems:
            return None
        asked = form.asked(self.questions)
        return repair(named, detail=asked.key if asked is not None and named == "skip" else None)

    def _left_the_path(self, name: str, message: str) -> bool:
        """Whether a message the reading took nothing from asks for something else: while a
        question of this step was waiting for its answer, the user asked one of their own (a
        sentence with a question mark, in any script), and the repairs field offers
        ``out_of_scope``. A small model reads the values of a form, but rarely sees that a
        question about a flight, the weather or a restaurant is none of its business; a hosted
        model reads the option itself."""
        if "out_of_scope" not in literal_options(self.slots.model_fields.get(name)):
            return False
        before = self._before
        return before is not None and before.asked(self.questions) is not None and asks(message)

    async def on_repair(self, fired: Repair) -> Outcome | Any:
        going_on, self._going_on = self._going_on, None
        if fired.pattern == "correction" and going_on is not None:  # a value of this form changed
            return await self._go_on(*going_on)
        policy = self.repair_policy
        texts = policy.words(self.locale)
        asked = self.form.asked(self.questions)
        if fired.pattern == "skip" and asked is not None:
            if asked.optional:  # declined already by the reading: on to the next question
                return await self._ask_next(self.form, self._values(), Reading(self.form))
            if self._in_a_row(f"skip_{asked.key}") < 2 or policy.on_required_skip == "ask_again":
                return direct(texts.skip_required.format(question=self.phrase(asked, self._values())).strip())
            return repair("handoff" if policy.on_required_skip == "handoff" else "cancel", detail=asked.key)
        if fired.pattern == "no_progress" and asked is not None:
            if policy.on_no_progress == "handoff":
                return repair("handoff", detail=f"no answer to {asked.key}")
            shown = self.example(asked)
            example = texts.example.format(example=shown) if shown else ""
            said = texts.no_progress.format(
                why=fired.detail or "", question=self.phrase(asked, self._values()), example=example
            )
            return direct(" ".join(said.split()))
        if fired.pattern == "no_progress":  # what on_complete said, a third time: said otherwise
            if policy.on_no_progress == "handoff":
                return repair("handoff", detail="no progress")
            again = texts.no_progress.format(why=fired.detail or "", question=fired.options[0], example="")
            return direct(" ".join(again.split()))
        return super().on_repair(fired)

    def question(self) -> str:
        asked = self.form.asked(self.questions) or self.form.pending(self.questions)
        return self.phrase(asked, self._values()) if asked is not None else super().question()

    def opening(self) -> str:
        # The conversation is under way: no intro, the first question open.
        first = self.form.pending(self.questions)
        self.form = self.form.asking_now(first)
        return self.phrase(first, self._values()) if first is not None else ""

    def restart(self) -> None:
        # The language the user writes in is theirs, not the activity's: it stays.
        locale = self.state.get(LOCALE_KEY)
        super().restart()
        if locale is not None:
            self.state[LOCALE_KEY] = locale

    def given(self) -> Sequence[str]:
        name = self.repairs_from
        return [field for field in self.form.known if field not in (name, self.goodbye, self.go_ahead)]

    @property
    def answer_locale(self) -> str | None:
        return self.locale

    def _stalled(self, form: Form, question: Ask | None, merged: Reading) -> Repair | None:
        """The ``no_progress`` pattern, when ``question`` is about to be asked again after
        ``no_progress_after`` replies that moved nothing forward; else None (and the count of a
        question answered or changed starts over)."""
        kept = counts(self.state)
        unanswered = {k: v for k, v in kept.items() if k.startswith("unanswered_")}
        for key in unanswered:
            kept.pop(key)
        policy = self.repair_policy
        answered = any(name in merged.accepted for name in question.fields) if question else False
        if question is None or question.key != form.asking or answered:
            keep(self.state, kept)
            return None
        times = int(unanswered.get(_no_progress_key(question), 0)) + 1
        if times < policy.no_progress_after or not policy.allows("no_progress"):
            kept[_no_progress_key(question)] = times
            keep(self.state, kept)
            return None
        keep(self.state, kept)  # counted afresh after the change of course
        refused = next((name for name in question.fields if name in merged.problems), None)
        why = self.refusal(refused, merged.problems[refused]) if refused is not None else ""
        return repair("no_progress", detail=why or None)

    def _unless_repeated(self, outcome: Outcome, merged: Reading) -> Outcome:
        """``outcome``, unless it is the reply the user was sent the last ``no_progress_after`` times
        with nothing new given since ("No hotel matches... shall I relax one of them?"): then the
        ``no_progress`` pattern, so the same words are not sent a third time."""
        kept = counts(self.state)
        repeated = int(kept.pop("same_reply", 0))
        policy = self.repair_policy
        same = (
            isinstance(outcome, Direct)
            and outcome.target is None
            and not merged.accepted
            and outcome.content == self._runtime.last_shown()
        )
        if not same:
            keep(self.state, kept)
            return outcome
        assert isinstance(outcome, Direct)
        if repeated + 1 < policy.no_progress_after or not policy.allows("no_progress"):
            kept["same_reply"] = repeated + 1
            keep(self.state, kept)
            return outcome
        keep(self.state, kept)  # counted afresh after the change of course
        return repair("no_progress", options=(outcome.content,))

    def _values(self) -> Any:
        return self.form.values(self.slots)

    def _grounding(self) -> Grounding:
        return self.grounding or Grounding.for_model(self._runtime.model_of(self.name))

    def _start_reading(self) -> Reader:
        """The reader of the user's latest message, held by this step for the turn: corrections and
        a second look are bookkeeping of one message, never stored."""
        messages = self.messages
        latest = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].is_from_user), None)
        message = messages[latest].content if latest is not None else ""
        before = messages[:latest] if latest is not None else ()
        previous = next((m.content for m in reversed(before) if m.role == "assistant" and m.content), None)
        self._before = self.form
        self._reader = Reader(
            self.slots,
            message,
            form=self.form,
            questions=self.questions,
            previous=previous,
            grounding=self._grounding(),
            max_corrections=self.max_corrections,
            second_look=self.second_look,
            accept=self.accept,
            go_ahead=self.go_ahead,
            goodbye=self.goodbye,
            locales=self.locales,
            repairs=self.repairs_from,
            locale=self._told_locale(),
        )
        return self._reader

    def _told_locale(self) -> str | None:
        """The locale the user's words told earlier (of several declared); None before they tell one."""
        told = self.state.get(LOCALE_KEY)
        return told if isinstance(told, str) and told in self.locales else None

    @property
    def locale(self) -> str | None:
        """The locale to answer in: the one the user's words told (of several declared), else the
        first declared; None when the step declares none."""
        told = self._told_locale()
        if told is not None:
            return told
        return self.locales[0] if self.locales else None

    def example(self, question: Ask) -> str | None:
        """An answer to ``question`` that would do, offered when it made no progress (by default its
        ``example``). Override it to give one in the user's language."""
        return question.example

    def refusal(self, name: str, why: str) -> str:
        """The words telling the user a field they gave was refused, with the rule it broke
        (``why``, as the slots model's validator words it). Override to say it in their language."""
        return f"Sorry, {why.rstrip('.')}."

    def corrected(self, values: Any, changed: Sequence[str]) -> str:
        """What is said of a correction before what ``on_complete`` answers with the new values
        (by default ``acknowledge`` of the fields changed)."""
        return self.acknowledge(values, changed)

    async def _ask_next(
        self, form: Form, values: Any, merged: Reading, changed: Sequence[str] = ()
    ) -> Outcome:
        """The question of the field just refused, else the first one open; or, none left,
        on_complete (after saying what a correction ``changed``)."""
        refused = next(iter(merged.problems), None)
        question = next((q for q in self.questions if refused in q.fields), None) or form.pending(
            self.questions
        )
        stalled = self._stalled(form, question, merged)
        self.form = form.asking_now(question)
        if stalled is not None:
            return stalled
        if question is None:
            outcome = self._unless_repeated(await _settled(self.on_complete(values)), merged)
            told = self.corrected(values, changed).strip() if changed else ""
            if told and isinstance(outcome, Direct) and isinstance(outcome.content, str):
                outcome = replace(outcome, content=f"{told}\n\n{outcome.content}")
            return outcome
        words = [self.acknowledge(values, merged.accepted)]
        if refused is not None:  # the rule as its validator words it, after the user's answers
            words.append(self.refusal(refused, merged.problems[refused]))
        answer = " ".join(word.strip() for word in words if word.strip())
        reply = " ".join(part for part in (answer, self.phrase(question, values).strip()) if part)
        intro = "" if form.introduced else self.intro.strip()
        if not intro:
            return direct(reply)
        if not answer:
            return direct(f"{intro} {reply}")
        # What answers the user's first words is a paragraph of its own, not the greeting's next
        # sentence ("Hello! I can help you find a hotel. Great. Check-in..."). The step's memory
        # keeps the reply on one line, as its model has always read it.
        return direct(f"{intro}\n\n{reply}").remember_as(f"{intro} {reply}")


def _no_progress_key(question: Ask) -> str:
    return f"unanswered_{question.key}"


async def _settled(result: T | Awaitable[T]) -> T:
    """A hook's answer, awaited when the hook is ``async``."""
    if inspect.isawaitable(result):
        return cast(T, await result)
    return result
