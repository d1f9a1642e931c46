"""Simulated users (``goal:``): the conversation a model plays, done checked each turn, the guard
that keeps the simulator in its role, the goal check, the transcripts and the goal files' checks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from picoflow import cli
from picoflow.evals import SCRIPTED, ScenarioError, load_scenarios, run_eval
from picoflow.evals.scenario import Scenario
from picoflow.evals.simulator import START, echoes
from picoflow.messages import ModelRequest, ToolCall
from picoflow.models import FunctionModel
from picoflow.sessions import MemoryStore

from .shop import ShopFlow

GOAL = """\
name: apples
flow: shop
goal:
  persona: A hurried shopper who writes short messages.
  knows: {fruit: apple, quantity: 2}
  wants: Two apples, then to pay.
  done: {completed: true, state: {Paid.items: 1, Shop.basket: [{item: apple, quantity: 2}]}}
  max_turns: 4
"""


def scenarios(tmp_path: Path, text: str) -> list[Scenario]:
    path = tmp_path / "goal.yaml"
    path.write_text(text, encoding="utf-8")
    return load_scenarios(path)


def shop_assistant(request: ModelRequest) -> Any:
    """The flow's model: adds apples, checks out on "pay", else asks."""
    said = next(m.content for m in reversed(request.messages) if m.role == "user")
    if "apple" in said:
        return ToolCall("add", {"item": "apple", "quantity": 2})
    if "pay" in said:
        return ToolCall("checkout")
    return "What would you like?"


def answer(message: str, finished: bool = False) -> str:
    return json.dumps({"message": message, "finished": finished})


class Shopper:
    """The user's model: answers from the assistant's last reply (the last message it is shown)."""

    def __init__(self, replies: dict[str, list[str]]) -> None:
        self.replies = replies

    def __call__(self, request: ModelRequest) -> str:
        last = request.messages[-1].content
        for start, items in self.replies.items():
            if last.startswith(start) and items:
                return items.pop(0)
        raise AssertionError(f"no answer scripted for {last!r}")


async def test_a_goal_is_played_until_done_holds(tmp_path: Path) -> None:
    user = FunctionModel(
        Shopper({START: [answer("Two apples please")], "Added": [answer("Now I pay")]}), name="function:user"
    )
    store = MemoryStore()
    result = await run_eval(
        scenarios(tmp_path, GOAL),
        [ShopFlow],
        model=FunctionModel(shop_assistant, grounding="small"),
        user_model=user,
        store=store,
    )
    [apples] = result.scenarios
    [run] = apples.runs
    assert run.passed and result.user_model == "function:user" and result.user_usage.model_calls == 2
    assert [(t.index, t.user, t.reply, t.step, t.completed) for t in run.turns] == [
        (1, "Two apples please", "Added 2 apple.", "Shop", False),
        (2, "Now I pay", "What would you like?", "Paid", True),
    ]
    assert [check.name for check in run.turns[0].checks] == []
    [goal] = run.turns[1].checks
    assert (goal.name, goal.status, goal.note, goal.actual) == (
        "goal",
        "passed",
        "done held after turn 2",
        {"turns": 2},
    )
    assert run.transcript == (
        {"role": "user", "turn": 1, "text": "Two apples please"},
        {"role": "assistant", "turn": 1, "step": "Shop", "text": "Added 2 apple."},
        {"role": "user", "turn": 2, "text": "Now I pay"},
        {"role": "assistant", "turn": 2, "step": "Paid", "text": "What would you like?"},
    )
    report = result.as_json()
    assert report["user_model"] == "function:user"
    assert report["scenarios"][0]["runs"][0]["transcript"] == [dict(entry) for entry in run.transcript]
    assert report["scenarios"][0]["goal"]["max_turns"] == 4
    session = await store.load(run.session_id or "")
    assert session is not None and session.states["Paid"] == {"items": 1, "note": None}
    # The simulator sees the conversation with the roles swapped, told it is the customer.
    first, second = user.requests
    assert "You are the user: the customer. You are never the assistant." in first.system
    assert "- fruit: apple\n- quantity: 2" in first.system
    assert first.output is not None and first.output.name == "UserTurn"
    assert [(m.role, m.content) for m in second.messages] == [
        ("user", START),
        ("assistant", "Two apples please"),
        ("user", "Added 2 apple."),
    ]


async def test_a_user_who_leaves_its_role_is_reminded_once_then_the_run_fails(tmp_path: Path) -> None:
    # Run 1: repeats the assistant, is reminded, then answers as a user; run 2 keeps repeating it.
    replies = {
        START: [answer("Two apples please")] * 2,
        "Added": [answer("Added 2 apple!"), answer("added 2 apple.")],
        "[Your message repeated": [answer("Now I pay"), answer("Added 2 apple")],
    }
    user = FunctionModel(Shopper(replies))
    result = await run_eval(
        scenarios(tmp_path, GOAL), [ShopFlow], model=FunctionModel(shop_assistant), user_model=user, runs=2
    )
    first, second = result.scenarios[0].runs
    assert first.passed and len(first.turns) == 2
    reminded = user.requests[2]
    assert reminded.messages[-1].content.startswith(
        "[Your message repeated the assistant's reply. You are the customer, not the assistant"
    )
    assert not second.passed and len(second.turns) == 1
    [goal] = second.turns[0].checks
    assert (goal.status, goal.note) == (
        "failed",
        "the simulated user left its role (message repeated the assistant's reply)",
    )


async def test_the_turn_limit_and_a_user_who_finishes_early_fail_the_run(tmp_path: Path) -> None:
    chatty = FunctionModel(lambda request: answer("hello?"))
    limited = await run_eval(
        scenarios(tmp_path, GOAL.replace("max_turns: 4", "max_turns: 3")),
        [ShopFlow],
        model=FunctionModel(shop_assistant),
        user_model=chatty,
    )
    [run] = limited.scenarios[0].runs
    assert [t.user for t in run.turns] == ["hello?"] * 3
    assert run.turns[-1].checks[-1].note == "the turn limit (3) was reached before done held"
    # finished: true with words: they are sent, then the conversation is over.
    leaving = FunctionModel(
        Shopper(
            {
                START: [answer("Two apples please")],
                "Added": [answer("No, bye.", finished=True)],
                # asked something after a last message, a user with nothing more to say leaves
                "What would you like?": [answer("", finished=True)],
            }
        )
    )
    early = await run_eval(
        scenarios(tmp_path, GOAL), [ShopFlow], model=FunctionModel(shop_assistant), user_model=leaving
    )
    [run] = early.scenarios[0].runs
    assert [t.user for t in run.turns] == ["Two apples please", "No, bye."]
    assert run.transcript[-2] == {"role": "user", "turn": 2, "text": "No, bye.", "last": True}
    assert run.turns[-1].checks[-1].note == (
        "the simulated user finished after turn 2, but done did not hold: completed is false "
        "(done: true); state Paid.items is absent (done: 1)"
    )


async def test_a_user_who_says_finished_while_asked_a_question_goes_on(tmp_path: Path) -> None:
    """A small model calls its message the last too soon: while the flow still asks something
    ("What would you like?"), the simulated user is not taken at its word."""
    hasty = FunctionModel(
        Shopper(
            {
                START: [answer("Hi there", finished=True)],
                "What would you like?": [answer("Two apples please")],
                "Added": [answer("I want to pay now", finished=True)],
            }
        )
    )
    played = await run_eval(
        scenarios(tmp_path, GOAL), [ShopFlow], model=FunctionModel(shop_assistant), user_model=hasty
    )
    [run] = played.scenarios[0].runs
    assert [t.user for t in run.turns] == ["Hi there", "Two apples please", "I want to pay now"]
    assert run.passed and run.turns[-1].checks[-1].note == "done held after turn 3"


async def test_a_judge_question_is_asked_once_at_the_end(tmp_path: Path) -> None:
    text = GOAL.replace(
        "done: {completed: true, state: {Paid.items: 1, Shop.basket: [{item: apple, quantity: 2}]}}",
        "done: {judge: 'Did the shopper get two apples?'}",
    )
    user = FunctionModel(
        Shopper({START: [answer("Two apples please")], "Added": [answer("", finished=True)]})
    )
    unjudged = await run_eval(
        scenarios(tmp_path, text), [ShopFlow], model=FunctionModel(shop_assistant), user_model=user
    )
    [run] = unjudged.scenarios[0].runs
    [goal] = run.turns[-1].checks
    assert (goal.status, goal.note) == (
        "unscored",
        "the simulated user finished after turn 1; the judge's question was not asked: no judge model "
        "(--judge)",
    )
    assert run.passed and unjudged.unscored == 1
    judge = FunctionModel(lambda request: '{"verdict": "fail", "reason": "No apples."}')
    user = FunctionModel(
        Shopper({START: [answer("Two apples please")], "Added": [answer("", finished=True)]})
    )
    judged = await run_eval(
        scenarios(tmp_path, text),
        [ShopFlow],
        model=FunctionModel(shop_assistant),
        user_model=user,
        judge=judge,
    )
    [run] = judged.scenarios[0].runs
    assert run.turns[-1].checks[-1].status == "failed" and len(judge.requests) == 1
    assert "Did the shopper get two apples?" in judge.requests[0].messages[0].content


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "goal: {persona: p, wants: w, done: {step: Shop}}\nturns: [{user: hi}]\n",
            "FILE: scenario: give turns: (the conversation) or goal: (a simulated user), not both",
        ),
        (
            "goal: {persona: p, wants: w, done: {}}\n",
            "FILE: goal.done: say what counts as done: step, completed, state and/or judge",
        ),
        (
            "goal: {persona: p, wants: w, done: {state: {Shop.: 1}}}\n",
            "FILE: goal.done.state: 'Shop.': a state path is <Step>.<key>[.<key>|.<index>...]",
        ),
        (
            "goal: {persona: p, wants: w, done: {step: Shop}, max_turn: 3}\n",
            "FILE: goal.max_turn: unknown field",
        ),
    ],
)
def test_a_goal_mistake_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("flow: shop\n" + text, encoding="utf-8")
    with pytest.raises(ScenarioError) as error:
        load_scenarios(path)
    assert str(error.value).replace(str(path), "FILE").startswith(message)


async def test_a_goal_needs_a_model_for_its_user_and_names_real_steps(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="a goal's user is played by a model"):
        await run_eval(scenarios(tmp_path, GOAL), [ShopFlow], model=SCRIPTED)
    wrong = GOAL.replace("Paid.items", "Payed.items")
    with pytest.raises(ScenarioError, match=r"goal.done.state.Payed.items: no step 'Payed' in flow shop"):
        await run_eval(scenarios(tmp_path, wrong), [ShopFlow], model=FunctionModel(shop_assistant))


def test_the_command_writes_a_transcript_per_simulated_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli.console, "width", 200)
    path = tmp_path / "goal.yaml"
    path.write_text(GOAL, encoding="utf-8")
    folder, report = tmp_path / "transcripts", tmp_path / "report.json"
    result = CliRunner().invoke(
        cli.app,
        ["eval", str(path), "--flows", "tests.evals.test_simulator:FLOWS", "--model",
         "python:tests.evals.test_simulator:assistant_model", "--user-model",
         "python:tests.evals.test_simulator:shopper_model", "--transcripts", str(folder),
         "--report", str(report)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # Each turn's seconds are the machine's (0.0s idle, more on a busy one): read as "Ns".
    lines = [re.sub(r" +\d+\.\ds\b", " Ns", line) for line in result.output.splitlines()]
    assert lines[:3] == [
        "✓ apples run 1/1 turn 1/≤4 Ns Shop",
        "✓ apples run 1/1 turn 2/≤4 Ns Paid",
        "    goal: done held after turn 2",
    ]
    assert "simulated users function:shopper: 2 calls," in result.output
    assert lines[-3:] == [
        "PASS 1/1 runs passed (100%); minimum 100%",
        f"transcripts written to {folder}",
        f"report written to {report}",
    ]
    assert (folder / "apples-run1.md").read_text(encoding="utf-8") == (
        "# apples, run 1\n\n"
        "- flow: shop\n"
        "- persona: A hurried shopper who writes short messages.\n"
        "- wants: Two apples, then to pay.\n"
        "- done: {'completed': True, 'state': {'Paid.items': 1, 'Shop.basket': [{'item': 'apple', "
        "'quantity': 2}]}}\n"
        "- result: **passed** after 2 turn(s): done held after turn 2\n\n"
        "**User** (turn 1):\n\n> Two apples please\n\n"
        "**Assistant** (turn 1, Shop):\n\n> Added 2 apple.\n\n"
        "**User** (turn 2):\n\n> Now I pay\n\n"
        "**Assistant** (turn 2, Paid):\n\n> What would you like?\n"
    )
    written = json.loads(report.read_text(encoding="utf-8"))
    assert [entry["text"] for entry in written["scenarios"][0]["runs"][0]["transcript"]] == [
        "Two apples please",
        "Added 2 apple.",
        "Now I pay",
        "What would you like?",
    ]


def test_the_scripted_model_sets_goals_aside_when_others_can_play(tmp_path: Path) -> None:
    (tmp_path / "goal.yaml").write_text(GOAL, encoding="utf-8")
    (tmp_path / "basket.yaml").write_text(
        "name: basket\nflow: shop\nturns:\n  - user: two apples\n"
        "    scripted: [{tool: add, args: {item: apple, quantity: 2}}]\n    expect: {step: Shop}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(
        cli.app, ["eval", str(tmp_path), "--flows", "tests.evals.shop:ShopFlow", "--model", "scripted"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "1 goal scenario(s) set aside: the scripted model has no words for a simulated user (--model MODEL, "
        "or --replay FILE)"
    )
    only_goals = CliRunner().invoke(
        cli.app,
        ["eval", str(tmp_path / "goal.yaml"), "--flows", "tests.evals.shop:ShopFlow", "--model", "scripted"],
    )
    assert only_goals.exit_code == 2 and "a goal's user is played by a model" in only_goals.output


FLOWS = [ShopFlow]


def assistant_model() -> FunctionModel:
    return FunctionModel(shop_assistant, name="function:assistant")


def shopper_model() -> FunctionModel:
    return FunctionModel(
        Shopper({START: [answer("Two apples please")], "Added": [answer("Now I pay")]}),
        name="function:shopper",
    )


async def test_one_model_plays_both_sides_and_an_empty_message_is_asked_again(tmp_path: Path) -> None:
    """Without ``user_model`` the eval's model plays the user too (its requests ask for ``UserTurn``)."""
    user = Shopper(
        {
            START: [answer("")],
            "[Your message was empty": [answer("Two apples please")],
            "Added": [answer("Now I pay")],
        }
    )

    def both(request: ModelRequest) -> Any:
        if request.output is not None and request.output.name == "UserTurn":
            return user(request)
        return shop_assistant(request)

    model = FunctionModel(both, name="function:both")
    result = await run_eval(scenarios(tmp_path, GOAL), [ShopFlow], model=model)
    [run] = result.scenarios[0].runs
    assert run.passed and result.user_model == "function:both"
    assert [t.user for t in run.turns] == ["Two apples please", "Now I pay"]
    reminded = model.requests[1]
    assert [(m.role, m.content) for m in reminded.messages] == [
        ("user", START),
        ("assistant", answer("")),
        (
            "user",
            "[Your message was empty. You are the customer, not the assistant: write what you, the customer, "
            "type next to the assistant, in your own words.]",
        ),
    ]


def test_a_sentence_of_the_reply_said_back_is_an_echo_in_any_language() -> None:
    listed = (
        "**Aug 1 to Aug 4**\n\n1. **The Porter** (one bed): $680.40\n\n"
        "Which hotel would you like to book? Give its number or name."
    )
    assert echoes("Which hotel would you like to book? Give its number or name.", listed)
    assert echoes("Which hotel would you like to book?", listed)
    asked = "Perfecto. ¿Cuáles son sus fechas de llegada y de salida?"
    assert echoes("¿Cuáles son sus fechas de llegada y de salida?", asked)
    # Answers, however close to the question's words, are the user's own.
    assert not echoes("The Porter, please", listed)
    assert not echoes("One bed", "Which room type would you like: one bed, two beds or suite?")
    assert not echoes("Del 1 al 4 de agosto", asked)
