"""Playing runs: pass rates over runs, failed turns that do not stop a run, environments, scripts, names."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from picoflow.evals import SCRIPTED, Check, ScenarioError, load_scenarios, run_eval
from picoflow.evals.scenario import Scenario
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel
from picoflow.sessions import MemoryStore
from picoflow.testing import lines

from .shop import ShopFlow

THREE_TURNS = """\
flow: shop
turns:
  - user: hello
    expect: {reply_contains: "^Hello"}
  - user: two apples please
    expect: {tool_called: {name: add, args: {item: apple}}, step: Shop}
  - user: thanks
    expect: {reply_contains: welcome}
"""


def scenarios(tmp_path: Path, text: str) -> list[Scenario]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return load_scenarios(path)


def last_user_words(request: ModelRequest) -> str:
    return next(m.content for m in reversed(request.messages) if m.role == "user")


class Moody:
    """A shop assistant that forgets the tool in runs 2 and 4 and is rude at the end of run 4."""

    def __init__(self) -> None:
        self.run = 0

    def __call__(self, request: ModelRequest) -> Any:
        said = last_user_words(request)
        if said == "hello":
            self.run += 1
            return "Hello there!"
        if said == "two apples please":
            return "Sorry, no apples today." if self.run in (2, 4) else ToolCall("add", {"item": "apple"})
        return "Bye." if self.run == 4 else "You're welcome."


async def test_pass_rates_per_turn_and_per_run(tmp_path: Path) -> None:
    result = await run_eval(
        scenarios(tmp_path, THREE_TURNS), [ShopFlow], model=FunctionModel(Moody()), runs=5
    )
    [shop] = result.scenarios
    assert [run.passed for run in shop.runs] == [True, False, True, False, True]
    assert (result.runs, result.runs_passed, result.pass_rate) == (5, 3, 0.6)
    assert [shop.turn_pass_rate(turn) for turn in (1, 2, 3)] == [1.0, 0.6, 0.8]
    assert [shop.most_failed(turn) for turn in (1, 2, 3)] == [
        None,
        ("tool_called: add", 2),
        ("reply_contains: welcome", 1),
    ]
    # A failed turn does not stop its run: turn 3 of run 2 was played, and passed.
    assert [len(run.turns) for run in shop.runs] == [3] * 5 and shop.runs[1].turns[2].passed
    failed = shop.runs[3].turns[1]
    assert (failed.reply, failed.step, failed.failures) == (
        "Sorry, no apples today.",
        "Shop",
        [Check("tool_called: add", "failed", {"name": "add", "args": {"item": "apple"}}, [])],
    )
    assert shop.usage().model_calls == 5 + 5 + 5 and shop.usage().tool_calls == 3
    assert len({run.session_id for run in shop.runs}) == 5  # a fresh session per run


async def test_a_failed_turn_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    text = """\
flow: shop
turns:
  - user: hi
    scripted: []
  - user: two apples please
    scripted: [{tool: add, args: {item: apple}}, "an answer nobody asked for"]
    expect: {reply_contains: Added}
  - user: pay
    scripted: [{tool: checkout}, "Bye"]
    expect: {completed: true}
"""
    result = await run_eval(scenarios(tmp_path, text), [ShopFlow], model=SCRIPTED)
    turns = result.scenarios[0].runs[0].turns
    # The failed first turn kept its session as it was before it (in its start step), and the
    # next turn goes on in it.
    assert [(turn.passed, turn.error, turn.step, turn.completed) for turn in turns] == [
        (
            False,
            "script_exhausted: turn 1 has 0 scripted response(s) and step Shop asked for one more",
            "Shop",
            False,
        ),
        (False, None, "Shop", False),
        (True, None, "Paid", True),
    ]
    assert turns[0].checks == (
        Check(
            "error",
            "failed",
            "no error",
            "script_exhausted: turn 1 has 0 scripted response(s) and step Shop asked for one more",
        ),
    )
    # The unused response is reported and dropped, so the next turn plays its own responses.
    assert turns[1].checks == (
        Check("reply_contains: Added", "passed", "Added", "Added 1 apple."),
        Check("scripted", "failed", 2, 1, "1 scripted response(s) of this turn were not asked for"),
    )


async def test_a_failed_turn_of_a_callers_stored_session_is_reported_with_its_detail(
    tmp_path: Path,
) -> None:
    text = """\
flow: shop
caller: {principal: ann}
turns:
  - user: two apples please
    scripted: [{tool: add, args: {item: apple}}]
    expect: {tool_called: {name: add, args: {item: apple}}}
  - user: more
    scripted: []
"""
    result = await run_eval(scenarios(tmp_path, text), [ShopFlow], model=SCRIPTED)
    first, second = result.scenarios[0].runs[0].turns
    # The eval reads ann's session as an operator: its transcript shows the call, its records the failure.
    assert (first.passed, first.step) == (True, "Shop")
    assert (second.passed, second.step) == (False, "Shop")
    assert (
        second.error == "script_exhausted: turn 2 has 0 scripted response(s) and step Shop asked for one more"
    )


async def test_the_environment_is_set_per_run_and_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_NOTE", "before")
    monkeypatch.delenv("SHOP_EXTRA", raising=False)
    seen: list[tuple[str, str, bool]] = []

    def model(request: ModelRequest) -> Any:
        if last_user_words(request) == "pay" and request.step == "Shop":
            note = os.environ["SHOP_NOTE"]
            seen.append((note, os.environ["SHOP_EXTRA"], Path(note).parent.is_dir()))
            return ToolCall("checkout")
        return "Goodbye!"

    text = """\
flow: shop
env: {SHOP_NOTE: "{run_dir}/note.txt", SHOP_EXTRA: 7}
turns:
  - user: pay
    expect: {state: {Paid.note: {$regex: "/note.txt$"}}}
"""
    result = await run_eval(scenarios(tmp_path, text), [ShopFlow], model=FunctionModel(model), runs=2)
    assert result.pass_rate == 1.0
    [(first, extra, existed), (second, _, _)] = seen
    assert first != second and first.endswith("/note.txt") and extra == "7" and existed
    assert not Path(first).parent.exists() and not Path(second).parent.exists()
    assert os.environ["SHOP_NOTE"] == "before" and "SHOP_EXTRA" not in os.environ


async def test_the_flow_comes_from_the_file_or_the_default(tmp_path: Path) -> None:
    model = FunctionModel(lambda request: "Hello!")
    plain = scenarios(tmp_path, "turns: [{user: hi, expect: {step: Shop}}]\n")
    result = await run_eval(plain, [ShopFlow], model=model, default_flow="shop")
    assert result.scenarios[0].flow == "shop" and result.pass_rate == 1.0
    with pytest.raises(ScenarioError) as missing:
        await run_eval(plain, [ShopFlow], model=model)
    assert (
        str(missing.value)
        == f"{tmp_path / 'scenario.yaml'}: name the flow in the file (flow: ...) or with --flow"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flow: shoe\nturns: [{user: hi}]\n", "FILE: no flow named 'shoe'; known: shop"),
        (
            "flow: shop\nturns: [{user: hi}, {user: there, expect: {step: Basket}}]\n",
            "FILE: turn 2 ('there'), expect.step: no step 'Basket' in flow shop; steps: Shop, Paid",
        ),
        (
            "flow: shop\nturns: [{user: hi, expect: {state: {Till.total: 1}}}]\n",
            "FILE: turn 1 ('hi'), expect.state.Till.total: no step 'Till' in flow shop; steps: Shop, Paid",
        ),
        (
            "flow: shop\nturns: [{user: hi, expect: {tool_not_called: [pay]}}]\n",
            "FILE: turn 1 ('hi'), expect.tool_not_called: no tool 'pay' in flow shop; tools: add, checkout, "
            "terminate_session",
        ),
    ],
)
async def test_names_the_flow_does_not_have_are_refused_before_anything_runs(
    tmp_path: Path, text: str, message: str
) -> None:
    model = FunctionModel(lambda request: pytest.fail("nothing may run"))
    with pytest.raises(ScenarioError) as caught:
        await run_eval(scenarios(tmp_path, text), [ShopFlow], model=model)
    assert str(caught.value).replace(str(tmp_path / "scenario.yaml"), "FILE") == message


async def test_the_scripted_model_needs_scripted_responses(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as caught:
        await run_eval(scenarios(tmp_path, "flow: shop\nturns: [{user: hi}]\n"), [ShopFlow], model=SCRIPTED)
    assert str(caught.value) == (
        f"{tmp_path / 'scenario.yaml'}: no turn has scripted responses to play with the scripted model"
    )
    with pytest.raises(ValueError, match="runs must be at least 1"):
        await run_eval([], [ShopFlow], runs=0)


async def test_a_script_per_step_plays_each_steps_responses_and_names_the_step_that_lacks_one(
    tmp_path: Path,
) -> None:
    text = """\
flow: shop
turns:
  - user: two apples please
    scripted: [{tool: add, args: {item: apple}}]
  - user: and a pear
    scripted: {Shop: [{tool: add, args: {item: pear}}], Paid: ["unused"]}
    expect: {reply_contains: Added 1 pear}
  - user: more
    scripted: {Paid: ["Bye"]}
  - user: pay
    scripted: {Shop: [{tool: checkout}], Paid: ["Bye", "Bye again"]}
    expect: {completed: true, reply_contains: ^Bye$}
"""
    store = MemoryStore()
    result = await run_eval(scenarios(tmp_path, text), [ShopFlow], model=SCRIPTED, store=store)
    turns = result.scenarios[0].runs[0].turns
    assert [(turn.passed, turn.error, turn.step) for turn in turns] == [
        (True, None, "Shop"),
        (False, None, "Shop"),
        (False, "script_exhausted: turn 3 has no scripted responses for step Shop (scripted: Paid)", "Shop"),
        (False, None, "Paid"),
    ]
    # What a step left unused is reported by step, and dropped before the next turn.
    assert turns[1].checks[-1] == Check(
        "scripted", "failed", 2, 1, "1 scripted response(s) of this turn were not asked for (Paid: 1)"
    )
    assert turns[3].checks[-1] == Check(
        "scripted", "failed", 3, 2, "1 scripted response(s) of this turn were not asked for (Paid: 1)"
    )
    # Turns of either kind keep call ids unique within the session.
    session = result.scenarios[0].runs[0].session_id
    assert session is not None
    assert [line for line in lines(await store.transcript(session)) if "#" in line] == [
        'Shop | assistant: -> add({"item": "apple"}) #call_1',
        "Shop | tool add #call_1: Accepted.",
        'Shop | assistant: -> add({"item": "pear"}) #call_Shop_1',
        "Shop | tool add #call_Shop_1: Accepted.",
        "Shop | assistant: -> checkout({}) #call_Shop_2",
        "Shop | tool checkout #call_Shop_2: Accepted.",
    ]


async def test_a_step_that_asks_more_than_its_script_holds_is_named(tmp_path: Path) -> None:
    text = """\
flow: shop
turns:
  - user: unicorn
    scripted: {Shop: [{tool: add, args: {item: unicorn}}]}
"""
    result = await run_eval(scenarios(tmp_path, text), [ShopFlow], model=SCRIPTED)
    [turn] = result.scenarios[0].runs[0].turns
    assert turn.error == (
        "script_exhausted: turn 1 has 1 scripted response(s) for step Shop and it asked for one more"
    )


async def test_a_script_for_a_step_the_flow_does_not_have_is_refused(tmp_path: Path) -> None:
    text = "flow: shop\nturns: [{user: hi, scripted: {Shopp: [hi]}}]\n"
    with pytest.raises(ScenarioError) as caught:
        await run_eval(scenarios(tmp_path, text), [ShopFlow], model=SCRIPTED)
    assert str(caught.value) == (
        f"{tmp_path / 'scenario.yaml'}: turn 1 ('hi'), scripted.Shopp: no step 'Shopp' in flow shop; "
        "steps: Shop, Paid"
    )
