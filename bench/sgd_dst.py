"""Dialogue-state tracking on public SGD dialogues: picoflow's reader beside plain structured output.

Replays the dialogues of a Schema-Guided Dialogue (SGD, DSTC8) folder turn by turn and, after every
user turn, asks each system for the dialogue state of the turn's service:

* ``plain``: what a user of another framework gets from the same model (PydanticAI's ``output_type``,
  LangChain's ``with_structured_output``): one request with the whole conversation so far, a short
  instruction, and the service's slots model as the output schema; the answer validated with
  Pydantic and nothing else (an invalid answer is an empty state, counted as a failure);
* ``picoflow``: ``picoflow.slots.read`` on the user's message, given the conversation before it, the
  form of the previous turn and the question the system turn asked (its REQUEST acts);
* ``nothing``: the empty state every turn, the floor every system is measured from.

The slots model of a service is built from ``schema.json`` (a categorical slot is a ``Literal`` of
its possible values, any other slot a ``str`` in the conversation's words; every field optional),
so any folder of the same shape works, the held-out test split included. Nothing is tuned to a
dialogue.

The predictions are written in SGD's own format, one folder per system (the same dialogues with each
user frame's ``state.slot_values`` replaced by the prediction), and scored per service with the
DSTC8 definitions (google-research's ``schema_guided_dst`` evaluation), for every frame of a user turn:

* a categorical slot is right when the prediction equals the gold's first value, case and all;
* a non-categorical one scores the best ``token_sort_ratio`` over the gold's acceptable values
  (lower-cased, punctuation to spaces, rounded to a whole percent, as fuzzywuzzy gives it), / 100;
* a slot empty in both is right; one the prediction fills while the gold is empty, or the reverse, is wrong;
* joint goal accuracy is the mean over frames of the product over the service's slots; average goal
  accuracy the mean over frames of the mean over the slots whose gold is not empty (frames with
  none are left out); the false-fill rate is the share of all gold-empty slots the prediction filled.

    python bench/sgd_dst.py [--data DIR] [--system picoflow|plain|both|nothing] [--limit N]
                            [--model local] [--out DIR]
    python bench/sgd_dst.py [--data DIR] --score PREDICTED_DIR [PREDICTED_DIR ...]

The data (CC BY-SA) stays where it is: it is read from ``--data``, never copied into the project.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# bench/ holds an http.py, which would shadow the standard library's once this folder is first on sys.path.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model  # noqa: E402
from rapidfuzz import fuzz, utils  # noqa: E402

from picoflow.exceptions import RunError  # noqa: E402
from picoflow.messages import Message, ModelRequest, OutputSchema  # noqa: E402
from picoflow.models import Model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "sgd-hotels" / "dev"
ALL = "all"
PLAIN_INSTRUCTION = (
    "{description}. Give the dialogue state after the user's latest message: for each slot, the value "
    "the user has asked for or agreed to so far in this conversation. Leave a slot null when the user "
    "has not given it."
)

Dialogue = dict[str, Any]
SgdState = dict[str, list[str]]
"""SGD's ``slot_values``: each slot given, with its acceptable values (a prediction gives one)."""


# --- the data ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Service:
    """One service of ``schema.json``: its slots, and the slots model built from them."""

    name: str
    description: str
    slots: tuple[Mapping[str, Any], ...]
    model: type[BaseModel]

    def is_categorical(self, slot: str) -> bool:
        return any(entry["name"] == slot and entry["is_categorical"] for entry in self.slots)

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(entry["name"] for entry in self.slots)


def slots_model(service: Mapping[str, Any]) -> type[BaseModel]:
    """The slots model of an SGD service: a categorical slot is a ``Literal`` of its possible values,
    any other a ``str`` holding the conversation's words; every field optional, described as in the schema."""
    fields: dict[str, Any] = {}
    for slot in service["slots"]:
        values = tuple(slot.get("possible_values") or ())
        kind: Any = Literal[values] if slot["is_categorical"] and values else str
        fields[slot["name"]] = (kind | None, Field(None, description=slot.get("description") or None))
    return create_model(
        service["service_name"],
        __config__=ConfigDict(protected_namespaces=()),  # a slot may be called model_...
        __doc__=service.get("description") or None,
        **fields,
    )


def load_services(folder: Path) -> dict[str, Service]:
    return services_of(json.loads((folder / "schema.json").read_text(encoding="utf-8")))


def services_of(schema: Sequence[Mapping[str, Any]]) -> dict[str, Service]:
    """The services of an SGD ``schema.json``, by name."""
    return {
        entry["service_name"]: Service(
            entry["service_name"], entry.get("description", ""), tuple(entry["slots"]), slots_model(entry)
        )
        for entry in schema
    }


def load_dialogues(folder: Path) -> list[Dialogue]:
    """The dialogues of ``folder``: ``dialogues.json``, or SGD's own ``dialogues_001.json``, ... in order."""
    files = sorted(folder.glob("dialogues*.json"))
    if not files:
        raise SystemExit(f"{folder}: no dialogues*.json")
    dialogues: list[Dialogue] = []
    for path in files:
        dialogues.extend(json.loads(path.read_text(encoding="utf-8")))
    return dialogues


def user_turn_count(dialogues: Sequence[Dialogue]) -> int:
    return sum(turn["speaker"] == "USER" for dialogue in dialogues for turn in dialogue["turns"])


# --- the replay -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserTurn:
    """What a system is given to track one service's state after one user utterance."""

    dialogue_id: str
    index: int
    """Position of the user utterance in the dialogue's turns."""
    service: Service
    history: tuple[Message, ...]
    """The conversation before ``message``: system utterances as assistant messages, user ones as user."""
    message: str
    question: str | None
    """The system utterance just before ``message`` when it asked for slots of ``service``."""
    requested: tuple[str, ...]
    """The slots that utterance asked for (its REQUEST acts)."""


@dataclass(frozen=True)
class TurnState:
    """A system's answer for one user turn and service."""

    state: SgdState
    failed: bool = False
    """The model's answer did not validate; ``state`` is what the system falls back to."""
    error: str | None = None
    """The model call itself failed (picoflow's ``RunError``)."""


Tracker = Callable[[UserTurn], Awaitable[TurnState]]
"""A system: the state after a user turn, from that turn. A system that needs its earlier answers
(picoflow's form) keeps them itself, keyed by dialogue and service."""


def user_turns(dialogue: Dialogue, services: Mapping[str, Service]) -> Iterator[UserTurn]:
    """Every user utterance of ``dialogue``, once per service frame it has, in order."""
    history: list[Message] = []
    question: str | None = None
    requested: dict[str, tuple[str, ...]] = {}
    for index, turn in enumerate(dialogue["turns"]):
        if turn["speaker"] == "SYSTEM":
            question = turn["utterance"]
            requested = {
                frame["service"]: tuple(
                    action["slot"] for action in frame.get("actions", []) if action["act"] == "REQUEST"
                )
                for frame in turn["frames"]
            }
            history.append(Message.assistant(turn["utterance"]))
            continue
        for frame in turn["frames"]:
            service = services[frame["service"]]
            asked = tuple(slot for slot in requested.get(service.name, ()) if slot in service.slot_names)
            yield UserTurn(
                dialogue["dialogue_id"],
                index,
                service,
                tuple(history),
                turn["utterance"],
                question if asked else None,
                asked,
            )
        history.append(Message.user(turn["utterance"]))
        question, requested = None, {}


def sgd_state(values: Mapping[str, Any], service: Service) -> SgdState:
    """``values`` (field -> value) in SGD's format: the service's slots given, each value as a string;
    a blank string is not a value."""
    state: SgdState = {}
    for slot in service.slot_names:
        value = values.get(slot)
        if value is None or isinstance(value, list | dict):
            continue
        text = value if isinstance(value, str) else str(value)  # True -> "True", as SGD writes it
        if text.strip():
            state[slot] = [text]
    return state


@dataclass
class SystemRun:
    """One system over the dialogues: its predictions and what they cost."""

    name: str
    dialogues: list[Dialogue] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    """Seconds per user turn (every service frame of the turn)."""
    failures: int = 0
    errors: int = 0


async def replay(
    name: str, track: Tracker, dialogues: Sequence[Dialogue], services: Mapping[str, Service]
) -> SystemRun:
    """Each dialogue turn by turn through ``track``; the predicted dialogues replace each user
    frame's ``slot_values`` with the system's state."""
    run = SystemRun(name)
    for number, dialogue in enumerate(dialogues, 1):
        predicted = copy.deepcopy(dialogue)
        started = time.perf_counter()
        spent: dict[int, float] = {}
        for turn in user_turns(dialogue, services):
            began = time.perf_counter()
            answer = await track(turn)
            spent[turn.index] = spent.get(turn.index, 0.0) + time.perf_counter() - began
            run.failures += answer.failed
            if answer.error is not None:
                if not run.errors:
                    print(f"{name}: the model failed: {answer.error}", file=sys.stderr)
                run.errors += 1
            for frame in predicted["turns"][turn.index]["frames"]:
                if frame["service"] == turn.service.name:
                    frame.setdefault("state", {})["slot_values"] = answer.state
        run.seconds.extend(spent.values())
        run.dialogues.append(predicted)
        print(
            f"{name} {number}/{len(dialogues)} {dialogue['dialogue_id']}: {len(spent)} user turns "
            f"in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return run


# --- the systems ------------------------------------------------------------------------------


def plain_tracker(model: Model) -> Tracker:
    """Plain structured output: the conversation so far, the slots model as the output schema."""

    async def track(turn: UserTurn) -> TurnState:
        slots = turn.service.model
        request = ModelRequest(
            PLAIN_INSTRUCTION.format(description=turn.service.description.rstrip(".")),
            [*turn.history, Message.user(turn.message)],
            output=OutputSchema(slots.__name__, slots.model_json_schema(), slots.__doc__ or ""),
        )
        try:
            response = await model.request(request)
        except RunError as error:
            return TurnState({}, error=str(error))
        try:
            answer = slots.model_validate_json(response.text)
        except ValidationError:
            return TurnState({}, failed=True)
        return TurnState(sgd_state(answer.model_dump(exclude_none=True), turn.service))

    return track


Read = Callable[..., Awaitable[Any]]


def picoflow_read() -> Read:
    """``picoflow.slots.read``, imported only when the picoflow system runs."""
    try:
        from picoflow.slots import read  # type: ignore[attr-defined,unused-ignore]
    except ImportError as error:
        raise SystemExit(
            f"the picoflow system needs picoflow.slots.read ({error}); try --system plain"
        ) from None
    return read  # type: ignore[no-any-return,unused-ignore]


def picoflow_tracker(model: Model, read: Read | None = None) -> Tracker:
    """picoflow's reader: each user message read with the previous turn's form and the open question.

    ``read`` stands in for ``picoflow.slots.read`` (tests); the reader is imported only here so the
    rest of the bench runs where it does not exist yet.
    """
    from picoflow.slots import Said, ask

    # The application's words for taking or turning down what the system offered ("Shall I book
    # it?" "Sure."), in English as the dialogues are: plain yes and no words, declared here, not in
    # picoflow; none is taken from a dialogue.
    accept = Said(
        yes=(
            "yes",
            "yeah",
            "yep",
            "sure",
            "ok",
            "okay",
            "sounds good",
            "great",
            "perfect",
            "that works",
            "correct",
        ),
        no=("no", "nope", "not", "don't", "rather not"),
        locale="en",
    )
    reader = read if read is not None else picoflow_read()
    forms: dict[tuple[str, str], Any] = {}

    async def track(turn: UserTurn) -> TurnState:
        key = (turn.dialogue_id, turn.service.name)
        form = forms.get(key)
        asking = ask(turn.question, *turn.requested) if turn.question and turn.requested else None
        try:
            reading = await reader(
                turn.service.model,
                turn.history,
                turn.message,
                form=form,
                asking=asking,
                model=model,
                locale="en",
                accept=accept,
            )
        except RunError as error:  # the form stays where it was, as a slot step's would
            known = form.known if form is not None else {}
            return TurnState(sgd_state(known, turn.service), error=str(error))
        forms[key] = reading.form
        return TurnState(sgd_state(reading.form.known, turn.service))

    return track


def nothing_tracker(model: Model | None) -> Tracker:
    """The empty state every turn."""

    async def track(turn: UserTurn) -> TurnState:
        return TurnState({})

    return track


SYSTEMS: dict[str, Callable[[Any], Tracker]] = {
    "picoflow": picoflow_tracker,
    "plain": plain_tracker,
    "nothing": nothing_tracker,
}
NEEDS_NO_MODEL = {"nothing"}


# --- the scoring ------------------------------------------------------------------------------


def fuzzy_match(gold: str, predicted: str) -> float:
    """DSTC8's non-categorical match: fuzzywuzzy's ``token_sort_ratio`` (which lower-cases, turns
    punctuation to spaces and rounds to a whole percent) / 100."""
    return round(fuzz.token_sort_ratio(gold, predicted, processor=utils.default_process)) / 100


def slot_accuracy(service: Service, slot: str, gold: Sequence[str], predicted: Sequence[str]) -> float:
    """How right one slot is: 1.0 when both are empty, 0.0 when only one is, else the match."""
    if not gold or not predicted:
        return float(not gold and not predicted)
    if service.is_categorical(slot):
        return float(gold[0] == predicted[0])
    return max(fuzzy_match(value, predicted[0]) for value in gold)


@dataclass(frozen=True)
class FrameScore:
    joint: float
    average: float | None
    """None when the gold state is empty (DSTC8 leaves the frame out of the average)."""
    gold_empty: int
    false_fills: int


def score_frame(service: Service, gold: Mapping[str, Sequence[str]], predicted: SgdState) -> FrameScore:
    joint = 1.0
    active: list[float] = []
    gold_empty = false_fills = 0
    for slot in service.slot_names:
        accuracy = slot_accuracy(service, slot, gold.get(slot) or (), predicted.get(slot) or ())
        joint *= accuracy
        if gold.get(slot):
            active.append(accuracy)
        else:
            gold_empty += 1
            false_fills += bool(predicted.get(slot))
    return FrameScore(joint, statistics.fmean(active) if active else None, gold_empty, false_fills)


@dataclass
class Scores:
    """The scores of a set of frames."""

    frames: int = 0
    joint: float = 0.0
    average: float = 0.0
    averaged: int = 0
    gold_empty: int = 0
    false_fills: int = 0

    def add(self, frame: FrameScore) -> None:
        self.frames += 1
        self.joint += frame.joint
        if frame.average is not None:
            self.average += frame.average
            self.averaged += 1
        self.gold_empty += frame.gold_empty
        self.false_fills += frame.false_fills

    @property
    def joint_goal_accuracy(self) -> float:
        return self.joint / self.frames if self.frames else float("nan")

    @property
    def average_goal_accuracy(self) -> float:
        return self.average / self.averaged if self.averaged else float("nan")

    @property
    def false_fill_rate(self) -> float:
        return self.false_fills / self.gold_empty if self.gold_empty else float("nan")


def score(
    gold: Sequence[Dialogue], predicted: Sequence[Dialogue], services: Mapping[str, Service]
) -> dict[str, Scores]:
    """Scores of every user frame of ``predicted`` against the same dialogue of ``gold``, per service
    and for all (``"all"``); the dialogues must match speaker for speaker, utterance for utterance."""
    by_id = {dialogue["dialogue_id"]: dialogue for dialogue in gold}
    scores: dict[str, Scores] = {ALL: Scores()}
    for dialogue in predicted:
        reference = by_id.get(dialogue["dialogue_id"])
        if reference is None:
            raise ValueError(f"dialogue {dialogue['dialogue_id']} is not in the gold dialogues")
        if len(reference["turns"]) != len(dialogue["turns"]):
            raise ValueError(f"dialogue {dialogue['dialogue_id']}: the turns differ from the gold")
        for gold_turn, turn in zip(reference["turns"], dialogue["turns"], strict=True):
            if (gold_turn["speaker"], gold_turn["utterance"]) != (turn["speaker"], turn["utterance"]):
                raise ValueError(f"dialogue {dialogue['dialogue_id']}: the turns differ from the gold")
            if turn["speaker"] != "USER":
                continue
            frames = {frame["service"]: frame for frame in turn["frames"]}
            for gold_frame in gold_turn["frames"]:
                name = gold_frame["service"]
                if name not in frames:
                    raise ValueError(f"dialogue {dialogue['dialogue_id']}: no {name} frame predicted")
                frame = score_frame(
                    services[name],
                    gold_frame["state"]["slot_values"],
                    frames[name].get("state", {}).get("slot_values", {}),
                )
                scores.setdefault(name, Scores()).add(frame)
                scores[ALL].add(frame)
    return scores


# --- the report -------------------------------------------------------------------------------


def write_predictions(folder: Path, dialogues: Sequence[Dialogue]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "dialogues.json"
    path.write_text(json.dumps(list(dialogues), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def table(rows: Sequence[tuple[str, dict[str, Scores], SystemRun | None]]) -> str:
    header = (
        f"{'system':<10} {'service':<12} {'frames':>6} {'JGA':>6} {'avg GA':>7} {'false-fill':>10} "
        f"{'s/turn':>7} {'failures':>8} {'errors':>6}"
    )
    lines = [header, "-" * len(header)]
    for name, scores, run in rows:
        for service in sorted(scores, key=lambda key: (key == ALL, key)):
            figures = scores[service]
            cost = ("", "", "")
            if run is not None and service == ALL:
                median = f"{statistics.median(run.seconds):.2f}" if run.seconds else "-"
                cost = (median, str(run.failures), str(run.errors))
            line = (
                f"{name:<10} {service:<12} {figures.frames:>6} {figures.joint_goal_accuracy:>6.3f} "
                f"{figures.average_goal_accuracy:>7.3f} {figures.false_fill_rate:>10.3f} "
                f"{cost[0]:>7} {cost[1]:>8} {cost[2]:>6}"
            )
            lines.append(line.rstrip())
    return "\n".join(lines)


def new_model(spec: str) -> Model:
    from picoflow.models.catalog import ModelSelection, create_model

    return create_model(ModelSelection.parse(spec))


async def run(data: Path, systems: Sequence[str], limit: int | None, spec: str, out: Path) -> None:
    services = load_services(data)
    dialogues = load_dialogues(data)[:limit]
    # Every tracker is built before the first turn: a system that cannot run fails now, not an hour in.
    model = new_model(spec) if set(systems) - NEEDS_NO_MODEL else None
    trackers = {name: SYSTEMS[name](model) for name in systems}
    rows: list[tuple[str, dict[str, Scores], SystemRun | None]] = []
    for name, track in trackers.items():
        result = await replay(name, track, dialogues, services)
        print(f"{name}: predictions in {write_predictions(out / name, result.dialogues)}", file=sys.stderr)
        rows.append((name, score(dialogues, result.dialogues, services), result))
    if model is not None:
        await model.aclose()
    print(
        f"\nSGD {data} ({len(dialogues)} dialogues, {user_turn_count(dialogues)} user turns), model {spec}\n"
    )
    print(table(rows))
    print(
        "\nJGA = joint goal accuracy, avg GA = average goal accuracy (DSTC8); false-fill = share of the "
        "slots empty in the gold that the prediction filled;\ns/turn = median seconds per user turn; "
        "failures = answers that did not validate (an empty state); errors = failed model calls."
    )


def rescore(data: Path, folders: Sequence[Path]) -> None:
    services = load_services(data)
    gold = load_dialogues(data)
    rows: list[tuple[str, dict[str, Scores], SystemRun | None]] = []
    for folder in folders:
        predicted = load_dialogues(folder)
        rows.append((folder.name, score(gold, predicted, services), None))
        print(f"{folder}: {len(predicted)} dialogues, {user_turn_count(predicted)} user turns")
    print()
    print(table(rows))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help=f"SGD folder (default {DEFAULT_DATA})"
    )
    parser.add_argument(
        "--system", choices=["both", *SYSTEMS], default="both", help="what to run (both: picoflow and plain)"
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N dialogues")
    parser.add_argument("--model", default="local", help="model selection (default: local, the embedded one)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "picoflow-sgd-dst",
        help="where each system's predictions go, one folder per system",
    )
    parser.add_argument(
        "--score",
        type=Path,
        nargs="+",
        metavar="PREDICTED_DIR",
        help="score these folders of predictions against --data, run nothing",
    )
    args = parser.parse_args(argv)
    if args.score:
        rescore(args.data, args.score)
        return
    systems = ["picoflow", "plain"] if args.system == "both" else [args.system]
    asyncio.run(run(args.data, systems, args.limit, args.model, args.out))


if __name__ == "__main__":
    main()
