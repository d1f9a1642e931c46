"""Schemathesis hooks of the HTTP contract test (``SCHEMATHESIS_HOOKS=server.contract_hooks``):
what the fuzzer cannot tell by itself, each with its reason. Nothing else is relaxed.
"""

from __future__ import annotations

from typing import Any

import schemathesis

TEXT_PARTS = ("message",)
"""The text parts of a turn sent as ``multipart/form-data``."""


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    """Leave out a multipart turn whose text part the fuzzer made anything but text.

    A part of ``multipart/form-data`` is text: the boolean ``true`` is sent as the four letters
    ``true``, a message the server rightly takes, which schemathesis 4.32 counts as invalid data
    accepted (it leaves such values out of form-urlencoded and XML bodies, not yet out of multipart
    ones). Invalid text (too long, only spaces, a NUL) is still sent."""
    body = case.body
    if case.media_type != "multipart/form-data" or not isinstance(body, dict):
        return True
    return all(isinstance(body[name], str) for name in TEXT_PARTS if name in body)
