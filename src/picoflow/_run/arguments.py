"""Tool arguments the user never gave, and calls made again: what the runner refuses before a handler runs.

A small model fills in the arguments it would like ("I'd like a pizza" as a medium pizza with three
toppings) and, told a result, makes the same call again until the turn's budget runs out. Both go
back to the model as a correction instead: the first names the fields (never the values), the
second says the result is already there.
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


def unborne_refusal(ws: Workspace, step: Step, tool: ToolSpec, args: BaseModel) -> str | None:
    """The correction for a call whose arguments the user never gave, or None when they did (or
    when neither the tool nor the step's model's grounding profile asks for the check)."""
    check = tool.grounded
    if check is None:
        check = Grounding.for_model(ws.model_of(step.name)).arguments
    if not check:
        return None
    said = [message.content for message in step.messages if message.is_from_user]
    if step.input is not None:
        said.append(step.input)
    slips = Grounding.for_model(ws.model_of(step.name)).slips
    fields = unborne(args, "\n".join(said), slips=slips, locales=step.locales)
    if not fields:
        return None
    ws.warn("arguments_unborne", f"{tool.name}: {', '.join(fields)} not said by the user", step.name)
    them = "it" if len(fields) == 1 else "them"
    return UNBORNE.format(fields=", ".join(fields), them=them)


def repeated(ws: Workspace, call: ToolCall) -> str | None:
    """The correction for a call made with the same arguments as one that already ran this turn;
    None for a new one (which is then noted)."""
    args = call.args if isinstance(call.args, str) else json.dumps(call.args, sort_keys=True, default=str)
    key = f"{call.name}:{args}"
    if key in ws.ran:
        ws.warn("tool_called_again", f"{call.name} called again with the same arguments", None)
        return AGAIN.format(tool=call.name)
    ws.ran.add(key)
    return None
