"""Tool arguments the user never gave, and calls made again: what the runner refuses before a handler runs.

A small model fills in the arguments it would like ("I'd like a pizza" as a medium pizza with three
toppings) and, told a result, makes the same call again until the turn's budget runs out. Both go
back to the model as a correction instead: the first names the fields (never the values), the
second says the result is already there; and the tool is not offered again in the turn, so the
model answers the user (asks for what is missing) rather than trying once more.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from picoflow._run.workspace import Workspace
from picoflow.messages import ToolCall
from picoflow.slots.arguments import UNBORNE, unborne
from picoflow.slots.grounding import Grounding
from picoflow.step import Step
from picoflow.tools import ToolSpec

AGAIN = (
    "{tool} was already called with these arguments in this turn; its result is above. Do not call it "
    "again: answer the user, or do something else."
)


def unborne_fields(
    ws: Workspace, step: Step, tool: ToolSpec, args: BaseModel, profile: Grounding | None = None
) -> list[str]:
    """The fields of a call's arguments the user never gave (none when neither the tool nor the
    grounding profile of the step's model asks for the check). Changes nothing."""
    check = tool.grounded
    if profile is None:
        profile = Grounding.for_model(ws.model_of(step.name))
    if check is None:
        check = profile.arguments
    if not check:
        return []
    said = [message.content for message in step.messages if message.is_from_user]
    if step.input is not None:
        said.append(step.input)
    return unborne(args, "\n".join(said), slips=profile.slips, locales=step.locales)


def refusal(ws: Workspace, step: Step, tool: ToolSpec, call: ToolCall, args: BaseModel) -> str | None:
    """The correction for a model's call refused before its handler runs (arguments the user never
    gave, or a call made again), or None. Neither check applies unless the tool or the grounding
    profile of the step's model asks for it: then nothing else is looked at."""
    profile = Grounding.for_model(ws.model_of(step.name))
    if not profile.arguments and not tool.grounded:
        return None
    return unborne_refusal(ws, step, tool, args, profile) or repeated(ws, step, call, profile)


def unborne_refusal(
    ws: Workspace, step: Step, tool: ToolSpec, args: BaseModel, profile: Grounding | None = None
) -> str | None:
    """The correction for a call whose arguments the user never gave, or None when they did. The
    refusal counts against the tool budget, and the tool is not offered again this turn."""
    fields = unborne_fields(ws, step, tool, args, profile)
    if not fields:
        return None
    _charge(ws)
    ws.warn("arguments_unborne", f"{tool.name}: {', '.join(fields)} not said by the user", step.name)
    ws.withheld.add(tool.name)
    them = "it" if len(fields) == 1 else "them"
    return UNBORNE.format(fields=", ".join(fields), them=them)


def repeated(ws: Workspace, step: Step, call: ToolCall, profile: Grounding | None = None) -> str | None:
    """The correction for a call made with the same arguments as one that already ran this turn,
    under a grounding profile that checks tool calls (a small model's loop; a strong model calling
    a tool again means it: a clock, a status); None for a new one (which is then noted)."""
    if profile is None:
        profile = Grounding.for_model(ws.model_of(step.name))
    if not profile.arguments:
        return None
    args = call.args if isinstance(call.args, str) else json.dumps(call.args, sort_keys=True, default=str)
    key = f"{call.name}:{args}"
    if key in ws.ran:
        _charge(ws)
        ws.warn("tool_called_again", f"{call.name} called again with the same arguments", None)
        ws.withheld.add(call.name)
        return AGAIN.format(tool=call.name)
    ws.ran.add(key)
    return None


def _charge(ws: Workspace) -> None:
    """A call refused here still counts against the turn's tool budget: a model that keeps making
    it meets the limit instead of looping (a turn may run without a model-call limit)."""
    ws.config.limits.check_before_tool_call(ws.usage)
    ws.usage.tool_calls += 1
