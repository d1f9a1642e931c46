"""Small helpers the example flows share: a reproducible "today", US money, and grounding checks."""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping, Sequence
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from picoflow import Message

CENT = Decimal("0.01")
_DOLLARS = re.compile(r"\$\s?(\d{1,3}(?:,\d{3})+|\d+)(\.\d{1,2})?")
_NUMBERED = re.compile(r"^\s*(?:hotel|no\.?|number)?\s*#?\s*(\d{1,3})\s*\.?\s*$", re.IGNORECASE)


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


def list_number(text: str) -> int | None:
    """The list position a model or user wrote instead of a name ("2", "#2", "hotel 2"), if any."""
    match = _NUMBERED.match(text)
    return int(match.group(1)) if match else None


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
    asked = next(
        (m.seq for m in reversed(messages) if m.role == "user" and m.kind in (None, "forwarded")), -1
    )
    seen = state.get("lookups") or {}
    keys: list[str] = list(seen.get("keys", [])) if seen.get("asked") == asked else []
    if key in keys:
        return True
    state["lookups"] = {"asked": asked, "keys": [*keys, key]}
    return False
