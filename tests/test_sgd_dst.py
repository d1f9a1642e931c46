"""bench/sgd_dst.py on a made-up SGD-shaped folder: the slots model, the replay, the systems, the scoring.

No model runs here: the plain system answers through a ``FunctionModel`` and the picoflow system
through a stand-in for ``picoflow.slots.read``, so what is checked is what the bench hands each
system and what it does with the answers.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pytest
from pydantic import ValidationError

from picoflow.messages import Message, ModelRequest
from picoflow.models import FunctionModel
from picoflow.slots import Form, ask

BENCH = Path(__file__).resolve().parents[1] / "bench" / "sgd_dst.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("picoflow_bench_sgd_dst", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sgd = load_bench()

SCHEMA = [
    {
        "service_name": "Cabins_1",
        "description": "Rents cabins in the mountains",
        "slots": [
            {
                "name": "town",
                "description": "Town near the cabin",
                "is_categorical": False,
                "possible_values": [],
            },
            {
                "name": "guests",
                "description": "How many people stay",
                "is_categorical": True,
                "possible_values": ["1", "2", "3"],
            },
            {
                "name": "pets_ok",
                "description": "Whether pets may come",
                "is_categorical": True,
                "possible_values": ["True", "False"],
            },
            {
                "name": "arrival",
                "description": "Day of arrival",
                "is_categorical": False,
                "possible_values": [],
            },
        ],
    },
    {
        "service_name": "Cabins_2",
        "description": "Another cabin rental service",
        "slots": [
            {
                "name": "city",
                "description": "City to stay in",
                "is_categorical": False,
                "possible_values": [],
            },
            {
                "name": "rooms",
                "description": "Rooms to book",
                "is_categorical": True,
                "possible_values": ["1", "2"],
            },
        ],
    },
]

TAHOE = {"town": ["Lake Tahoe", "Tahoe"], "guests": ["2"]}
WITH_DOG = {**TAHOE, "pets_ok": ["True"]}


def user(text: str, service: str, slot_values: dict[str, list[str]]) -> dict[str, Any]:
    state = {"active_intent": "RentCabin", "requested_slots": [], "slot_values": slot_values}
    return {
        "speaker": "USER",
        "utterance": text,
        "frames": [{"service": service, "actions": [], "state": state}],
    }


def system(text: str, service: str, *acts: tuple[str, str]) -> dict[str, Any]:
    actions = [{"act": act, "slot": slot, "values": [], "canonical_values": []} for act, slot in acts]
    return {"speaker": "SYSTEM", "utterance": text, "frames": [{"service": service, "actions": actions}]}


CABIN = {
    "dialogue_id": "9_00001",
    "services": ["Cabins_1"],
    "turns": [
        user("Hi, I need a cabin for the weekend.", "Cabins_1", {}),
        system("Where would you like to stay?", "Cabins_1", ("REQUEST", "town")),
        user("Somewhere near Lake Tahoe, two of us.", "Cabins_1", TAHOE),
        system(
            "Pine Hollow has room. Will you bring a pet, and what day do you arrive?",
            "Cabins_1",
            ("OFFER", "town"),
            ("REQUEST", "pets_ok"),
            ("REQUEST", "arrival"),
        ),
        user("Yes, our dog comes along.", "Cabins_1", WITH_DOG),
        system("It is booked.", "Cabins_1", ("NOTIFY_SUCCESS", "")),
        user("Thanks, bye.", "Cabins_1", WITH_DOG),
    ],
}
RENO = {
    "dialogue_id": "9_00002",
    "services": ["Cabins_2"],
    "turns": [user("A room in Reno, please.", "Cabins_2", {"city": ["Reno"]})],
}


@pytest.fixture
def services() -> dict[str, Any]:
    return sgd.services_of(SCHEMA)


def data_folder(folder: Path, dialogues: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    (folder / "dialogues.json").write_text(json.dumps(dialogues), encoding="utf-8")
    return folder


def predicted(dialogue: dict[str, Any], states: list[dict[str, list[str]]]) -> dict[str, Any]:
    """``dialogue`` with its user turns' slot values replaced by ``states``, in order."""
    copied = copy.deepcopy(dialogue)
    users = [turn for turn in copied["turns"] if turn["speaker"] == "USER"]
    assert len(users) == len(states)
    for turn, state in zip(users, states, strict=True):
        turn["frames"][0]["state"]["slot_values"] = state
    return copied


# --- the slots model --------------------------------------------------------------------------


def test_the_slots_model_is_built_from_the_schema() -> None:
    model = sgd.slots_model(SCHEMA[0])
    fields = {
        name: (info.annotation, info.default, info.description) for name, info in model.model_fields.items()
    }
    assert fields == {
        "town": (str | None, None, "Town near the cabin"),
        "guests": (Literal["1", "2", "3"] | None, None, "How many people stay"),
        "pets_ok": (Literal["True", "False"] | None, None, "Whether pets may come"),
        "arrival": (str | None, None, "Day of arrival"),
    }
    assert model.__name__ == "Cabins_1"
    assert model.__doc__ == "Rents cabins in the mountains"
    assert model.model_validate_json('{"guests": "2", "town": "Tahoe"}').model_dump() == {
        "town": "Tahoe",
        "guests": "2",
        "pets_ok": None,
        "arrival": None,
    }
    with pytest.raises(ValidationError):
        model.model_validate_json('{"guests": "4"}')


def test_the_services_and_dialogues_are_read_from_a_folder(tmp_path: Path) -> None:
    folder = data_folder(tmp_path / "data", [CABIN, RENO])
    services = sgd.load_services(folder)
    assert {name: service.slot_names for name, service in services.items()} == {
        "Cabins_1": ("town", "guests", "pets_ok", "arrival"),
        "Cabins_2": ("city", "rooms"),
    }
    assert [dialogue["dialogue_id"] for dialogue in sgd.load_dialogues(folder)] == ["9_00001", "9_00002"]
    assert sgd.user_turn_count([CABIN, RENO]) == 5


# --- the replay -------------------------------------------------------------------------------


def test_each_user_turn_gets_the_conversation_before_it_and_the_open_question(
    services: dict[str, Any],
) -> None:
    turns = [
        (
            turn.dialogue_id,
            turn.index,
            turn.service.name,
            turn.history,
            turn.message,
            turn.question,
            turn.requested,
        )
        for turn in sgd.user_turns(CABIN, services)
    ]
    said = [Message.user if t["speaker"] == "USER" else Message.assistant for t in CABIN["turns"]]
    history = [make(turn["utterance"]) for make, turn in zip(said, CABIN["turns"], strict=True)]
    pets_question = "Pine Hollow has room. Will you bring a pet, and what day do you arrive?"
    assert turns == [
        ("9_00001", 0, "Cabins_1", (), "Hi, I need a cabin for the weekend.", None, ()),
        (
            "9_00001",
            2,
            "Cabins_1",
            tuple(history[:2]),
            "Somewhere near Lake Tahoe, two of us.",
            "Where would you like to stay?",
            ("town",),
        ),
        (
            "9_00001",
            4,
            "Cabins_1",
            tuple(history[:4]),
            "Yes, our dog comes along.",
            pets_question,
            ("pets_ok", "arrival"),
        ),
        ("9_00001", 6, "Cabins_1", tuple(history[:6]), "Thanks, bye.", None, ()),
    ]
    assert [message.role for message in turns[3][3]] == ["user", "assistant"] * 3


def test_a_states_values_are_written_as_sgd_strings(services: dict[str, Any]) -> None:
    state = sgd.sgd_state(
        {"town": "Reno", "guests": "2", "pets_ok": True, "arrival": "  ", "unknown": "x", "rooms": None},
        services["Cabins_1"],
    )
    assert state == {"town": ["Reno"], "guests": ["2"], "pets_ok": ["True"]}


# --- the plain system -------------------------------------------------------------------------


ANSWERS = {
    "Hi, I need a cabin for the weekend.": "{}",
    "Somewhere near Lake Tahoe, two of us.": '{"town": "Lake Tahoe", "guests": "2", "arrival": null}',
    "Yes, our dog comes along.": '{"town": "Lake Tahoe", "guests": "two"}',  # not one of the options
    "Thanks, bye.": '{"town": "Tahoe", "guests": "2", "pets_ok": "True"}',
}


async def test_the_plain_system_asks_with_the_slots_model_as_output_schema(
    services: dict[str, Any], tmp_path: Path
) -> None:
    model = FunctionModel(lambda request: ANSWERS[request.messages[-1].content])
    run = await sgd.replay("plain", sgd.plain_tracker(model), [CABIN], services)

    expected = predicted(
        CABIN,
        [
            {},
            {"town": ["Lake Tahoe"], "guests": ["2"]},
            {},
            {"town": ["Tahoe"], "guests": ["2"], "pets_ok": ["True"]},
        ],
    )
    assert run.dialogues == [expected]
    assert (run.failures, run.errors, len(run.seconds)) == (1, 0, 4)
    requests: list[ModelRequest] = model.requests
    slots = services["Cabins_1"].model
    assert {
        (request.output.name, json.dumps(request.output.schema)) for request in requests if request.output
    } == {("Cabins_1", json.dumps(slots.model_json_schema()))}
    assert requests[0].system == (
        "Rents cabins in the mountains. Give the dialogue state after the user's latest message: for each "
        "slot, the value the user has asked for or agreed to so far in this conversation. Leave a slot null "
        "when the user has not given it."
    )
    everything = [Message(m.role, m.content) for m in requests[-1].messages]
    assert everything == [
        Message("user" if t["speaker"] == "USER" else "assistant", t["utterance"]) for t in CABIN["turns"]
    ]
    assert [len(request.messages) for request in requests] == [1, 3, 5, 7]

    path = sgd.write_predictions(tmp_path / "out" / "plain", run.dialogues)
    assert path == tmp_path / "out" / "plain" / "dialogues.json"
    assert json.loads(path.read_text(encoding="utf-8")) == [expected]


# --- the picoflow system ----------------------------------------------------------------------


@dataclass
class FakeReading:
    form: Form
    verdicts: tuple[Any, ...] = ()


HEARD = {
    "Hi, I need a cabin for the weekend.": {},
    "Somewhere near Lake Tahoe, two of us.": {"town": "Lake Tahoe", "guests": "2"},
    "Yes, our dog comes along.": {"pets_ok": True},
    "Thanks, bye.": {},
    "A room in Reno, please.": {"city": "Reno"},
}


async def test_the_picoflow_system_reads_each_message_with_the_last_form_and_question(
    services: dict[str, Any],
) -> None:
    calls: list[dict[str, Any]] = []
    forms: list[Form] = []
    model = FunctionModel(lambda request: "unused")

    async def read(slots: Any, history: Any, message: str, **options: Any) -> FakeReading:
        calls.append({"slots": slots, "history": history, "message": message, **options})
        before = options["form"] or Form()
        forms.append(Form(known={**before.known, **HEARD[message]}))
        return FakeReading(forms[-1])

    track = sgd.picoflow_tracker(model, read)
    run = await sgd.replay("picoflow", track, [CABIN, RENO], services)

    cabin = services["Cabins_1"]
    turns = list(sgd.user_turns(CABIN, services))
    # The bench declares its own English words for taking or turning down an offer.
    accepts = [call.pop("accept") for call in calls]
    assert all(accept.locale == "en" and accept.decides_yes_no for accept in accepts)
    assert calls[:4] == [
        {
            "slots": cabin.model,
            "history": turn.history,
            "message": turn.message,
            "form": form,
            "asking": asking,
            "model": model,
            "locale": "en",
        }
        for turn, form, asking in zip(
            turns,
            [None, *forms[:3]],
            [
                None,
                ask("Where would you like to stay?", "town"),
                ask(
                    "Pine Hollow has room. Will you bring a pet, and what day do you arrive?",
                    "pets_ok",
                    "arrival",
                ),
                None,
            ],
            strict=True,
        )
    ]
    # A new dialogue starts from no form.
    assert (calls[4]["slots"], calls[4]["history"], calls[4]["form"]) == (
        services["Cabins_2"].model,
        (),
        None,
    )
    both = {"town": ["Lake Tahoe"], "guests": ["2"]}
    assert run.dialogues == [
        predicted(CABIN, [{}, both, {**both, "pets_ok": ["True"]}, {**both, "pets_ok": ["True"]}]),
        predicted(RENO, [{"city": ["Reno"]}]),
    ]
    assert (run.failures, run.errors) == (0, 0)


# --- the scoring ------------------------------------------------------------------------------


def test_fuzzy_match_sorts_words_ignores_case_and_punctuation_and_rounds_to_a_percent() -> None:
    assert sgd.fuzzy_match("Lake Tahoe", "tahoe, lake") == 1.0
    # "lake tahoe" against "lake taho": one edit over 19 characters, 94.7 %.
    assert sgd.fuzzy_match("Lake Tahoe", "Lake Taho") == 0.95
    assert sgd.fuzzy_match("Reno", "Boston") == 0.2


def test_a_frame_scores_per_dstc8(services: dict[str, Any]) -> None:
    cabin = services["Cabins_1"]
    frame = sgd.score_frame(cabin, TAHOE, {"town": ["tahoe"], "guests": ["2"], "pets_ok": ["False"]})
    assert frame == sgd.FrameScore(joint=0.0, average=1.0, gold_empty=2, false_fills=1)
    # Categorical values match exactly, case and all; non-categorical ones take the best gold value.
    frame = sgd.score_frame(cabin, WITH_DOG, {"town": ["Lake Taho"], "guests": ["2"], "pets_ok": ["true"]})
    assert frame == sgd.FrameScore(
        joint=0.0, average=pytest.approx((0.95 + 1 + 0) / 3), gold_empty=1, false_fills=0
    )
    assert sgd.score_frame(cabin, {}, {}) == sgd.FrameScore(
        joint=1.0, average=None, gold_empty=4, false_fills=0
    )
    assert sgd.score_frame(cabin, TAHOE, {"town": ["Lake Taho"], "guests": ["2"]}) == sgd.FrameScore(
        joint=0.95, average=0.975, gold_empty=2, false_fills=0
    )


PREDICTED = [
    predicted(
        CABIN,
        [
            {},  # joint 1, no average, 4 empty, 0 filled
            {"town": ["Lake Taho"], "guests": ["2"]},  # joint .95, average .975, 2 empty
            {
                "town": ["Tahoe"],
                "guests": ["3"],
                "arrival": ["Friday"],
            },  # joint 0, average 1/3, 1 empty 1 filled
            {"town": ["tahoe"], "guests": ["2"], "pets_ok": ["True"]},  # joint 1, average 1, 1 empty
        ],
    ),
    predicted(RENO, [{"city": ["Reno"]}]),  # joint 1, average 1, 1 empty
]


def test_the_scores_are_per_service_and_for_all(services: dict[str, Any]) -> None:
    scores = sgd.score([CABIN, RENO], PREDICTED, services)
    figures = {
        name: (s.frames, s.joint_goal_accuracy, s.average_goal_accuracy, s.false_fill_rate)
        for name, s in scores.items()
    }
    assert figures == {
        "Cabins_1": (4, pytest.approx(2.95 / 4), pytest.approx((0.975 + 1 / 3 + 1) / 3), 1 / 8),
        "Cabins_2": (1, 1.0, 1.0, 0.0),
        "all": (5, pytest.approx(3.95 / 5), pytest.approx((0.975 + 1 / 3 + 2) / 4), 1 / 9),
    }


async def test_predicting_nothing_scores_the_share_of_empty_gold_states(services: dict[str, Any]) -> None:
    run = await sgd.replay("nothing", sgd.nothing_tracker(None), [CABIN, RENO], services)
    scores = sgd.score([CABIN, RENO], run.dialogues, services)
    assert (scores["all"].joint_goal_accuracy, scores["all"].false_fill_rate) == (1 / 5, 0.0)
    assert scores["Cabins_1"].average_goal_accuracy == 0.0


def test_predictions_must_be_of_the_gold_dialogues(services: dict[str, Any]) -> None:
    changed = copy.deepcopy(PREDICTED[1])
    changed["turns"][0]["utterance"] = "A room in Sparks."
    with pytest.raises(ValueError, match="9_00002: the turns differ"):
        sgd.score([CABIN, RENO], [changed], services)


# --- the command ------------------------------------------------------------------------------


def test_a_run_writes_predictions_and_a_folder_of_them_can_be_scored_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = data_folder(tmp_path / "data", [CABIN, RENO])
    sgd.main(["--data", str(data), "--system", "nothing", "--limit", "1", "--out", str(tmp_path / "out")])
    report = capsys.readouterr().out
    assert "(1 dialogues, 4 user turns)" in report
    assert "nothing    Cabins_1          4  0.250   0.000      0.000\n" in report
    assert "nothing    all               4  0.250   0.000      0.000    0.00        0      0\n" in report
    written = json.loads((tmp_path / "out" / "nothing" / "dialogues.json").read_text(encoding="utf-8"))
    assert written == [predicted(CABIN, [{}, {}, {}, {}])]

    mine = data_folder(tmp_path / "mine", PREDICTED)
    sgd.main(["--data", str(data), "--score", str(mine)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{mine}: 2 dialogues, 5 user turns"
    assert lines[-3:] == [
        "mine       Cabins_1          4  0.738   0.769      0.125",
        "mine       Cabins_2          1  1.000   1.000      0.000",
        "mine       all               5  0.790   0.827      0.111",
    ]
