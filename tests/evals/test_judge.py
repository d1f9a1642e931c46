"""``judge:`` criteria, scored by a model through picoflow's own Model seam with a structured answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from picoflow.evals import SCRIPTED, Check, load_scenarios, run_eval
from picoflow.evals.judge import SYSTEM, Judge
from picoflow.messages import Message, ModelRequest, OutputSchema
from picoflow.models import FunctionModel
from picoflow.usage import Usage

from .shop import ShopFlow

SCENARIO = """\
flow: shop
turns:
  - user: two apples please, or a unicorn
    scripted: [{tool: add, args: {item: unicorn}}, {tool: add, args: {item: apple, quantity: 2}}]
    expect:
      judge: [The reply confirms two apples., The reply mentions pears.]
"""
CONFIRMS = "judge: The reply confirms two apples."
PEARS = "judge: The reply mentions pears."
QUESTION = (
    "Conversation so far:\n"
    "User: two apples please, or a unicorn\n"
    'Assistant calls add({"item": "unicorn"})\n'
    "Tool add refused: We do not sell unicorns.\n"
    'Assistant calls add({"item": "apple", "quantity": 2})\n'
    "Tool add returned: Accepted.\n"
    "Assistant: Added 2 apple.\n\n"
    "The assistant's latest reply:\nAdded 2 apple.\n\n"
    "Criterion: "
)


async def judged(tmp_path: Path, judge: FunctionModel | None) -> tuple[Check, ...]:
    path = tmp_path / "judged.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    result = await run_eval(load_scenarios(path), [ShopFlow], model=SCRIPTED, judge=judge)
    return result.scenarios[0].runs[0].turns[0].checks


def verdicts(request: ModelRequest) -> str:
    if "pears" in request.messages[0].content:
        return '{"verdict": "fail", "reason": "No pear is mentioned."}'
    return '```json\n{"verdict": "pass", "reason": "It says 2 apples."}\n```'


async def test_the_judge_reads_the_transcript_and_answers_with_a_verdict(tmp_path: Path) -> None:
    judge = FunctionModel(verdicts, name="function:judge")
    assert await judged(tmp_path, judge) == (
        Check(CONFIRMS, "passed", "The reply confirms two apples.", "pass", "It says 2 apples."),
        Check(PEARS, "failed", "The reply mentions pears.", "fail", "No pear is mentioned."),
    )
    first = judge.requests[0]
    assert first == ModelRequest(
        system=SYSTEM,
        messages=[first.messages[0]],
        output=OutputSchema(
            "Verdict",
            {
                "additionalProperties": False,
                "description": "The judge's decision on one criterion.",
                "properties": {
                    "verdict": {"enum": ["pass", "fail"], "type": "string"},
                    "reason": {"type": "string"},
                },
                "required": ["verdict", "reason"],
                "type": "object",
            },
            "The judge's decision on one criterion.",
            strict=True,
        ),
    )
    assert [request.messages[0].content for request in judge.requests] == [
        QUESTION + "The reply confirms two apples.",
        QUESTION + "The reply mentions pears.",
    ]


async def test_a_wrong_answer_is_sent_back_once(tmp_path: Path) -> None:
    answers = iter(
        ["It passes, I think.", '{"verdict": "pass", "reason": "Two apples."}', "yes", "still yes"]
    )
    judge = FunctionModel(lambda request: next(answers))
    assert await judged(tmp_path, judge) == (
        Check(CONFIRMS, "passed", "The reply confirms two apples.", "pass", "Two apples."),
        Check(
            PEARS,
            "unscored",
            "The reply mentions pears.",
            None,
            "the judge gave no verdict (answer: Invalid JSON: expected value at line 1 column 1)",
        ),
    )
    retried = judge.requests[1].messages
    assert retried[1:] == [
        Message.assistant("It passes, I think."),
        Message.user(
            "That is not the required JSON object (answer: Invalid JSON: expected ident at line 1 column 2). "
            "Answer again."
        ),
    ]
    assert len(judge.requests) == 4


async def test_without_a_judge_or_with_a_broken_one_criteria_are_not_scored(tmp_path: Path) -> None:
    assert await judged(tmp_path, None) == (
        Check(CONFIRMS, "unscored", "The reply confirms two apples.", None, "no judge model (--judge)"),
        Check(PEARS, "unscored", "The reply mentions pears.", None, "no judge model (--judge)"),
    )

    def down(request: ModelRequest) -> Any:
        raise ConnectionError("judge offline")

    assert await judged(tmp_path, FunctionModel(down)) == (
        Check(CONFIRMS, "unscored", "The reply confirms two apples.", None,
              "the judge model failed: ConnectionError: judge offline"),
        Check(PEARS, "unscored", "The reply mentions pears.", None,
              "the judge model failed: ConnectionError: judge offline"),
    )  # fmt: skip


async def test_the_judge_adds_up_its_usage() -> None:
    judge = Judge(FunctionModel(lambda request: '{"verdict": "fail", "reason": "No."}'))
    verdict = await judge.score("Polite.", "User: hi", "Go away.")
    assert (verdict.passed, verdict.reason) == (False, "No.")
    assert judge.usage == Usage(input_tokens=142, output_tokens=9, model_calls=1)
