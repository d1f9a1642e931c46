"""The checks every caller's input meets before the engine asks its store or its executor."""

from __future__ import annotations

import re

from picoflow._run.text import check_text as check_text  # the one input rule, public here
from picoflow.exceptions import InvalidInput

__all__ = ["MAX_OFFSET", "SESSION_ID", "check_session_id", "check_text"]

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
"""What a session id may be: 1-128 letters, digits, '-' or '_' (``check_session_id``)."""
MAX_OFFSET = 1_000_000_000
"""Largest listing offset accepted: far beyond any real listing, well inside a 64-bit integer."""


def check_session_id(session_id: str) -> None:
    """Refuse an id no store could hold, before any store is asked."""
    if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
        raise InvalidInput("session id must be 1-128 letters, digits, '-' or '_'", field="session_id")
