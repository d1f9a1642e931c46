"""Scenario files: what a good one becomes, and the error each kind of mistake gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from picoflow import Caller
from picoflow.evals import ScenarioError, load_scenarios
from picoflow.evals.scenario import (
    CallerSpec,
    CountRange,
    Expectations,
    Scenario,
    ScriptedCall,
    ToolExpectation,
    Turn,
)
from picoflow.messages import ToolCall

GOOD = """\
name: basket
flow: shop
description: Buy apples.
env: {SHOP_DATE: 2027-07-15, SHOP_LIMIT: 3, SHOP_DIR: "{run_dir}/db"}
caller: {principal: ann, visibilities: [partner], config: {tier: gold}}
turns:
  - user: two apples please
    scripted:
      - "Which apples?"
      - {tool: add, args: {item: apple, quantity: 2, on: 2026-10-01}}
      - [{tool: add, args: {item: pear}}, {tool: checkout}]
    expect:
      step: Shop
      completed: false
      state: {Shop.basket.0.item: apple, Shop.total: {$absent: true}, Shop.note: {$regex: "^ok"}}
      reply_contains: "(?i)added"
      reply_not_contains: ["unicorn", "sorry"]
      tool_called: {name: add, args: {item: apple}, ok: true}
      tool_not_called: [checkout]
      model_calls: 2
      judge: The reply confirms the apples.
  - user: yes
    expect:
      model_calls: {max: 3}
      state: {Shop.done: {$exact: {on: true}}}
"""


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problem(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenarios(path)
    return str(caught.value).replace(str(path), "FILE")


def test_a_good_file_becomes_a_scenario(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    [scenario] = load_scenarios(path)
    assert scenario == Scenario(
        name="basket",
        flow="shop",
        description="Buy apples.",
        # Dates and numbers are the text of the variable; {run_dir} is filled in per run.
        env={"SHOP_DATE": "2027-07-15", "SHOP_LIMIT": "3", "SHOP_DIR": "{run_dir}/db"},
        caller=CallerSpec(principal="ann", visibilities=["partner"], config={"tier": "gold"}),
        turns=[
            Turn(
                user="two apples please",
                scripted=[
                    "Which apples?",
                    # "on" stays a key and the date stays the text a model would send (YAML 1.2 rules).
                    ScriptedCall(tool="add", args={"item": "apple", "quantity": 2, "on": "2026-10-01"}),
                    [ScriptedCall(tool="add", args={"item": "pear"}), ScriptedCall(tool="checkout")],
                ],
                expect=Expectations(
                    step="Shop",
                    completed=False,
                    state={
                        "Shop.basket.0.item": "apple",
                        "Shop.total": {"$absent": True},
                        "Shop.note": {"$regex": "^ok"},
                    },
                    reply_contains=["(?i)added"],
                    reply_not_contains=["unicorn", "sorry"],
                    tool_called=[ToolExpectation(name="add", args={"item": "apple"}, ok=True)],
                    tool_not_called=[ToolExpectation(name="checkout")],
                    model_calls=CountRange(min=2, max=2),
                    judge=["The reply confirms the apples."],
                ),
            ),
            # `user: yes` is what the user typed, not a boolean.
            Turn(
                user="yes",
                expect=Expectations(
                    model_calls=CountRange(max=3), state={"Shop.done": {"$exact": {"on": True}}}
                ),
            ),
        ],
    ).with_source(str(path))
    assert scenario.source == str(path) and scenario.scripted
    assert scenario.where(2) == f"{path}: turn 2 ('yes')"
    assert scenario.turns[0].script() == [
        "Which apples?",
        ToolCall("add", {"item": "apple", "quantity": 2, "on": "2026-10-01"}),
        [ToolCall("add", {"item": "pear"}), ToolCall("checkout", {})],
    ]
    assert scenario.caller.caller() == Caller(
        principal="ann", visibilities=frozenset({"partner"}), config={"tier": "gold"}
    )


def test_a_script_per_step(tmp_path: Path) -> None:
    text = """\
turns:
  - user: a trip to Lisbon
    scripted:
      Planner: [{tool: plan, args: {city: Lisbon}}, "Enjoy!"]
      Hotels: ['{"picks": []}']
      Events: []
      Weather: [[{tool: a}, {tool: b, args: {x: 1}}]]
  - user: thanks
    scripted: ["You're welcome."]
"""
    [scenario] = load_scenarios(write(tmp_path, text))
    first, second = scenario.turns
    assert first.scripted == {
        "Planner": [ScriptedCall(tool="plan", args={"city": "Lisbon"}), "Enjoy!"],
        "Hotels": ['{"picks": []}'],
        "Events": [],
        "Weather": [[ScriptedCall(tool="a"), ScriptedCall(tool="b", args={"x": 1})]],
    }
    assert first.script() == {
        "Planner": [ToolCall("plan", {"city": "Lisbon"}), "Enjoy!"],
        "Hotels": ['{"picks": []}'],
        "Events": [],
        "Weather": [[ToolCall("a", {}), ToolCall("b", {"x": 1})]],
    }
    assert (first.responses, second.responses, scenario.scripted) == (4, 1, True)
    assert second.script() == ["You're welcome."]
    empty = load_scenarios(write(tmp_path, "turns: [{user: hi, scripted: {Planner: []}}]\n", "empty.yaml"))
    assert not empty[0].scripted


def test_a_folder_and_several_documents(tmp_path: Path) -> None:
    write(tmp_path, "turns: [{user: hi}]\n", "b.yml")
    (tmp_path / "nested").mkdir()
    write(tmp_path, "turns: [{user: one}]\n---\nname: second\nturns: [{user: two}]\n", "nested/a.yaml")
    write(tmp_path, "not a scenario", "notes.txt")
    loaded = load_scenarios(tmp_path)
    assert [(s.name, s.source, s.flow, s.turns[0].user) for s in loaded] == [
        ("b", str(tmp_path / "b.yml"), None, "hi"),
        ("a-1", f"{tmp_path / 'nested/a.yaml'} (document 1)", None, "one"),
        ("second", f"{tmp_path / 'nested/a.yaml'} (document 2)", None, "two"),
    ]
    assert not loaded[0].scripted


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "turns: [\n  - user: hi\n",
            "FILE: not valid YAML (line 2, column 3): expected the node content, but found '-'",
        ),
        ("- user: hi\n", "FILE: a scenario is a mapping with name, flow and turns"),
        (
            "turns: [{user: hi, expect: {state: {A.x: 1, A.x: 2}}}]\n",
            "FILE: not valid YAML (line 1, column 45): 'A.x' is written twice in one mapping",
        ),
        ("# nothing\n", "FILE: the file holds no scenario"),
        ("name: x\n", "FILE: scenario: give turns: (the conversation) or goal: (a simulated user)"),
        ("turns: []\n", "FILE: turns: List should have at least 1 item after validation, not 0"),
        (
            "flows: shop\nturns: [{user: hi}]\n",
            "FILE: flows: unknown field; expected one of: name, flow, description, category, env, caller, "
            "turns, goal, runs, pass",
        ),
        (
            "turns: [{user: hi}]\nenv: {A: [1]}\n",
            "FILE: env: A: an environment value is text, a number or a date",
        ),
        (
            "turns: [{user: hi}]\ncaller: {id: x}\n",
            "FILE: caller.id: unknown field; expected one of: principal, visibilities, config",
        ),
        (
            "turns: [{user: hi}, {user: ''}]\n",
            "FILE: turn 2 (''), user: String should have at least 1 character",
        ),
        (
            "turns: [{user: hi}, {expect: {}}]\n",
            "FILE: turn 2, scenario: a turn is a message (user: ...) or a decision "
            "(decide: {decision: approve})",
        ),
        (
            "turns: [{user: hi, expect: {tool_caled: add}}]\n",
            "FILE: turn 1 ('hi'), expect.tool_caled: unknown field; expected one of: step, completed, "
            "state, reply_contains, reply_not_contains, tool_called, tool_not_called, model_calls, "
            "field_set, field_dropped, field_not_set, pending, pending_count, refused, judge, events, "
            "events_any_order, no_events",
        ),
        (
            "turns: [{user: hi, expect: {completed: maybe}}]\n",
            "FILE: turn 1 ('hi'), expect.completed: Input "
            "should be a valid boolean, unable to interpret input",
        ),
        (
            "turns: [{user: hi, expect: {reply_contains: ['(oops']}}]\n",
            "FILE: turn 1 ('hi'), expect.reply_contains: '(oops' is not a regular expression: "
            "missing ), unterminated subpattern at position 0",
        ),
        (
            "turns: [{user: hi, expect: {state: {Shop..x: 1}}}]\n",
            "FILE: turn 1 ('hi'), expect.state: 'Shop..x': a state path is <Step>.<key>[.<key>|.<index>...]",
        ),
        (
            "turns: [{user: hi, expect: {state: {Shop.x: {$absent: 1}}}}]\n",
            "FILE: turn 1 ('hi'), expect.state: "
            "Shop.x: $absent takes true (the key is missing) or false (present, any value)",
        ),
        (
            "turns: [{user: hi, expect: {state: {Shop.x: {$regex: '['}}}}]\n",
            "FILE: turn 1 ('hi'), expect.state: "
            "Shop.x: '[' is not a regular expression: unterminated character set at position 0",
        ),
        (
            "turns: [{user: hi, expect: {tool_called: {name: add, args: {a: {$in: [1]}}}}}]\n",
            "FILE: turn 1 ('hi'), expect.tool_called[0].args: a matcher is one of "
            "{$absent: true|false}, {$regex: pattern}, {$exact: value}; got keys ['$in']",
        ),
        (
            "turns: [{user: hi, expect: {tool_called: {args: {}}}}]\n",
            "FILE: turn 1 ('hi'), expect.tool_called[0].name: missing (required)",
        ),
        (
            "turns: [{user: hi, expect: {model_calls: {min: 3, max: 1}}}]\n",
            "FILE: turn 1 ('hi'), expect.model_calls: min must not be above max",
        ),
        (
            "turns: [{user: hi, expect: {model_calls: {}}}]\n",
            "FILE: turn 1 ('hi'), expect.model_calls: give min, max or both",
        ),
        (
            "turns: [{user: hi, expect: {judge: ' '}}]\n",
            "FILE: turn 1 ('hi'), expect.judge: a judge criterion cannot be empty",
        ),
        (
            "turns: [{user: hi, scripted: {tool: add}}]\n",
            "FILE: turn 1 ('hi'), scripted: scripted is a list of model responses: write one tool call as "
            "[{tool: ...}]",
        ),
        (
            "turns: [{user: hi, scripted: hello}]\n",
            "FILE: turn 1 ('hi'), scripted: scripted is a list of model responses, or a mapping from step "
            "name to such a list",
        ),
        (
            "turns: [{user: hi, scripted: {Hotels: ['ok'], '': ['x']}}]\n",
            "FILE: turn 1 ('hi'), scripted: '': a step's script is keyed by the step's name",
        ),
        (
            "turns: [{user: hi, scripted: {3: ['x']}}]\n",
            "FILE: turn 1 ('hi'), scripted: 3: a step's script is keyed by the step's name",
        ),
        (
            "turns: [{user: hi, scripted: {Hotels: 'ok'}}]\n",
            "FILE: turn 1 ('hi'), scripted: Hotels: a step's script is a list of model responses",
        ),
        (
            "turns: [{user: hi, scripted: {Hotels: ['ok', {tool: pick, arguments: {}}]}}]\n",
            "FILE: turn 1 ('hi'), scripted: Hotels: response 2: unknown key(s) arguments; write a text "
            "reply, {tool: name, args: {...}}, or a list of such tool calls",
        ),
        (
            "turns: [{user: hi, scripted: {Events: [7]}}]\n",
            "FILE: turn 1 ('hi'), scripted: Events: response 1: write a text reply, {tool: name, args: "
            "{...}}, or a list of such tool calls",
        ),
        (
            "turns: [{user: hi, scripted: ['ok', {tool: add, arguments: {}}]}]\n",
            "FILE: turn 1 ('hi'), scripted: response 2: unknown key(s) arguments; write a text reply, "
            "{tool: name, args: {...}}, or a list of such tool calls",
        ),
        (
            "turns: [{user: hi, scripted: [[]]}]\n",
            "FILE: turn 1 ('hi'), scripted: response 1: write a text "
            "reply, {tool: name, args: {...}}, or a list of such tool calls",
        ),
    ],
)
def test_each_mistake_names_the_file_the_turn_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    assert problem(tmp_path, text) == message


def test_several_mistakes_are_listed_together(tmp_path: Path) -> None:
    text = "turns:\n  - user: hi\n    expect: {step: 3}\n  - user: there\n    expect: {completed: sure}\n"
    assert problem(tmp_path, text) == (
        "FILE: 2 problems\n"
        "  turn 1 ('hi'), expect.step: Input should be a valid string\n"
        "  turn 2 ('there'), expect.completed: Input should be a valid boolean, unable to interpret input"
    )


def test_missing_paths_empty_folders_and_twin_names(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file or folder"):
        load_scenarios(tmp_path / "absent.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScenarioError, match=r"empty: no scenario files \(\*\.yaml, \*\.yml\) in this folder"):
        load_scenarios(tmp_path / "empty")
    path = write(tmp_path, "name: a\nturns: [{user: x}]\n---\nname: a\nturns: [{user: y}]\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenarios(path)
    assert str(caught.value) == f"{path}: two scenarios are named 'a'"
