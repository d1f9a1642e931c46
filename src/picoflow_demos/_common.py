"""Small helpers the example flows share: a reproducible "today", US money, and checks on model responses."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, MutableMapping, Sequence
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from picoflow import Message, Reject, Step
from picoflow.messages import ModelResponse

CENT = Decimal("0.01")
_DOLLARS = re.compile(r"\$\s?(\d{1,3}(?:,\d{3})+|\d+)(\.\d{1,2})?")
# Words that end a conversation. Kept strict: "that's all" or "I'm done" often answer a question
# ("free wifi, that's all"), and ending a session cannot be undone.
_LEAVING = re.compile(
    r"\b(bye|goodbye|good-bye|farewell|quit|exit|not interested|forget it"
    r"|(end|close|stop) (the|this|our) (chat|conversation|session))\b|^\W*stop\W*$",
    re.IGNORECASE,
)


def today_from(variable: str) -> date:
    """Today's date, or the ISO date in environment ``variable`` when set (for reproducible runs)."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return date.today()
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{variable} must be an ISO date such as 2027-07-15") from None


def cents(value: Decimal) -> Decimal:
    """``value`` rounded to cents, half up (the way a price list is rounded, not banker's rounding)."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def usd(value: Decimal | int | float) -> str:
    """US currency: ``$1,234.56``."""
    amount = cents(Decimal(str(value)))
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.2f}"


def usd_cents(total_cents: int) -> str:
    """US currency from an integer number of cents."""
    return usd(Decimal(total_cents) / 100)


def dollar_amounts(text: str) -> list[Decimal]:
    """Every ``$1,234.56``-style amount written in ``text``."""
    return [Decimal(whole.replace(",", "") + (cents or "")) for whole, cents in _DOLLARS.findall(text)]


def unanswered_question(messages: Sequence[Message], *, forwarded: bool = True) -> str | None:
    """The user's latest words if no tool has answered anything since; None once a tool has run.

    A step that must ground its answers uses it in ``check_response``: a text reply to a question
    about data, with no lookup after the question, is a guess. With ``forwarded=False``, words
    forwarded from another step (which that step already acted on) do not count as a question.
    """
    for message in reversed(messages):
        if message.role == "tool":
            return None
        if message.role == "user" and message.kind is None:
            return message.content
        if message.role == "user" and message.kind == "forwarded":
            return message.content if forwarded else None
    return None


def repeated_lookup(state: MutableMapping[str, Any], messages: Sequence[Message], key: str) -> bool:
    """Whether the lookup ``key`` already ran since the user's latest message (and note that it ran).

    Small models sometimes call the same tool with the same arguments again and again instead of
    answering; a step can then answer from the result in code (``direct``) instead of looping until
    the turn's budget runs out.
    """
    asked = next((m.seq for m in reversed(messages) if m.is_from_user), -1)
    seen = state.get("lookups") or {}
    keys: list[str] = list(seen.get("keys", [])) if seen.get("asked") == asked else []
    if key in keys:
        return True
    state["lookups"] = {"asked": asked, "keys": [*keys, key]}
    return False


def wants_to_leave(text: str | None) -> bool:
    """Whether the user's words ask to stop or leave ("bye", "stop", "end the chat")."""
    return bool(text and _LEAVING.search(text))


class LeavesOnRequest(Step):
    """A step that offers ``terminate_session`` only once the user's latest message asks to leave.

    A small model calls it on a plain "Hi" or on "change the search" now and then, and ending a
    session cannot be undone. A tool the model is not offered it cannot call (a local model's
    constrained decoding cannot even write it), which costs no retry; ``goodbye_check`` refuses a
    call that comes anyway.
    """

    def active_tools(self) -> Collection[str] | None:
        if wants_to_leave(self.last_user_message):
            return None
        definitions = self.flow.spec().steps[self.name].definitions
        return [definition.name for definition in definitions if definition.name != "terminate_session"]


def goodbye_check(step: Step, response: ModelResponse) -> Reject | None:
    """``terminate_session`` exactly when the user's latest message asks to stop or leave.

    Ending a session cannot be undone, and a small model calls it on a plain "Hi" now and then: it
    is refused unless the user asked. The other way round (a reply to "thanks, bye" that leaves
    the session open) is only steered, once.
    """
    leaving = wants_to_leave(step.last_user_message)
    if "terminate_session" in response.tool_names() and not leaving:
        return Reject(
            "the user has not asked to end the conversation. Do not call terminate_session; answer "
            "their latest message."
        )
    if leaving and not response.tool_calls:
        return correct_once(
            step, "the user is saying goodbye: call terminate_session to end the conversation."
        )
    return None


def correct_once(step: Step, reason: str | None) -> Reject | None:
    """``Reject(reason)`` on the first attempt at answering the user's message; None after that.

    For corrections that steer rather than protect: another one for the same message could use up
    the step's attempts and fail the turn, which is worse for the user than an imperfect reply.
    """
    return Reject(reason) if reason is not None and step.attempt == 1 else None
