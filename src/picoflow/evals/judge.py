"""A model that scores a reply against a criterion written in words (``judge:`` expectations).

The judge is asked through picoflow's own ``Model`` seam with a structured output, so any model a
flow can use can judge: it must answer ``{"verdict": "pass" | "fail", "reason": "..."}``. An answer
that does not match is sent back once with the problem; a judge that still cannot answer, or
whose provider fails, leaves the criterion unscored rather than failing the flow for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from picoflow._schema import json_schema, strict_variant
from picoflow.messages import Message, ModelRequest, OutputSchema
from picoflow.models.base import Model
from picoflow.usage import Usage

__all__ = ["Judge", "JudgeVerdict", "Verdict", "render_transcript"]

SYSTEM = """You check one reply of a conversational assistant against one criterion.

You get the conversation so far: what the user said, what the assistant answered, and the tools \
the assistant's code called with what they returned (tool results are the only source of facts). \
Decide whether the assistant's latest reply meets the criterion. Judge only that criterion, \
strictly and literally.

Answer with one JSON object: {"verdict": "pass" or "fail", "reason": "<one short sentence>"}."""

#: Tool results longer than this are cut in the transcript the judge reads.
TOOL_RESULT_CHARS = 1500


class Verdict(BaseModel):
    """The judge's decision on one criterion."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["pass", "fail"]
    reason: str


def _output_schema() -> OutputSchema:
    schema = json_schema(Verdict)
    strict = strict_variant(schema)
    return OutputSchema(
        "Verdict", strict or schema, (Verdict.__doc__ or "").strip(), strict=strict is not None
    )


@dataclass(frozen=True, slots=True)
class JudgeVerdict:
    """What came of asking the judge: a verdict, or why there is none."""

    passed: bool | None
    """None when the judge gave no usable answer (the criterion stays unscored)."""
    reason: str


class Judge:
    """Scores replies with ``model``; ``usage`` adds up what the judging cost."""

    def __init__(self, model: Model, *, attempts: int = 2) -> None:
        self.model = model
        self.attempts = attempts
        self.usage = Usage()
        self._output = _output_schema()

    async def score(self, criterion: str, transcript: str, reply: str) -> JudgeVerdict:
        question = (
            f"Conversation so far:\n{transcript or '(nothing stored)'}\n\n"
            f"The assistant's latest reply:\n{reply}\n\n"
            f"Criterion: {criterion}"
        )
        messages: list[Message] = [Message.user(question)]
        problem = ""
        for _ in range(self.attempts):
            request = ModelRequest(system=SYSTEM, messages=list(messages), output=self._output)
            try:
                response = await self.model.request(request)
            except Exception as exc:
                return JudgeVerdict(None, f"the judge model failed: {type(exc).__name__}: {exc}")
            self.usage.add(response.usage)
            try:
                verdict = Verdict.model_validate_json(_without_fences(response.text))
            except ValidationError as error:
                problem = "; ".join(
                    f"{'.'.join(map(str, item['loc'])) or 'answer'}: {item['msg']}" for item in error.errors()
                )
                messages += [
                    Message.assistant(response.text),
                    Message.user(f"That is not the required JSON object ({problem}). Answer again."),
                ]
                continue
            return JudgeVerdict(verdict.verdict == "pass", verdict.reason.strip())
        return JudgeVerdict(None, f"the judge gave no verdict ({problem})")


def render_transcript(messages: Sequence[Message]) -> str:
    """The conversation as the judge reads it: user, assistant, tool calls and results, in order.

    Messages the runtime added for the model (corrections, nudges) and the model's structured
    answers (``output``) are left out: the user never saw them, and they are not facts.
    """
    lines = []
    for message in messages:
        if message.role == "user" and message.kind is None:
            lines.append(f"User: {message.content}")
        elif message.role == "assistant" and message.kind in (None, "direct"):
            if message.content:
                lines.append(f"Assistant: {message.content}")
            lines.extend(f"Assistant calls {call.name}({call.args_json()})" for call in message.tool_calls)
        elif message.role == "tool":
            content = message.content
            if len(content) > TOOL_RESULT_CHARS:
                content = content[:TOOL_RESULT_CHARS] + " …"
            label = "refused" if message.is_error else "returned"
            lines.append(f"Tool {message.name} {label}: {content}")
    return "\n".join(lines)


def _without_fences(text: str) -> str:
    # Some providers wrap JSON in a Markdown code block even when asked for JSON.
    match = re.fullmatch(r"\s*```(?:json)?\s*(.*?)\s*```\s*", text, re.DOTALL)
    return match.group(1) if match else text.strip()
