"""The checks every caller's input meets before the engine asks its store or its executor."""

from __future__ import annotations

import re

from picoflow._run.text import check_text as check_text  # the one input rule, public here
from picoflow.exceptions import InvalidInput

__all__ = ["MAX_OFFSET", "SESSION_ID", "check_session_id", "check_text", "optional_text"]

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
"""What a session id may be: 1-128 letters, digits, '-' or '_' (``check_session_id``)."""
MAX_OFFSET = 1_000_000_000
"""Largest listing offset accepted: far beyond any real listing, well inside a 64-bit integer."""


def check_session_id(session_id: str) -> None:
    """Refuse an id no store could hold, before any store is asked."""
    if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
        raise InvalidInput("session id must be 1-128 letters, digits, '-' or '_'", field="session_id")


def optional_text(value: object, name: str, max_chars: int) -> str | None:
    """An optional text a caller adds (a decision's reason, a handoff's note): None or text of at
    most ``max_chars`` characters once stripped, that a store can keep; None when it is blank.
    ``InvalidInput`` names ``name`` and the rule broken, never the value."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, not {type(value).__name__}", field=name)
    text = value.strip()
    if len(text) > max_chars:
        raise InvalidInput(f"{name} is longer than {max_chars} characters", field=name)
    check_text(text, name)
    return text or None
