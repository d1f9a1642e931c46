"""A2A 1.0's JSON as every module of the adapter writes it: the type of a wire value and its bytes,
and the names of the task states and roles this agent writes."""

from __future__ import annotations

from functools import partial
from typing import Any, Final

from pydantic_core import to_json

Wire = dict[str, Any]
"""A protocol value as its JSON object (A2A 1.0's field names)."""

_dump: Final = partial(to_json, fallback=str, inf_nan_mode="null")
"""JSON bytes of a wire value: what JSON has no type for (a date in a tool's arguments) as text."""

# A2A 1.0's JSON names of the enum values this agent writes (``TaskState.Name``, ``Role.Name``).
WORKING: Final = "TASK_STATE_WORKING"
COMPLETED: Final = "TASK_STATE_COMPLETED"
FAILED: Final = "TASK_STATE_FAILED"
CANCELED: Final = "TASK_STATE_CANCELED"
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
_TERMINAL: Final = frozenset({COMPLETED, CANCELED, FAILED, "TASK_STATE_REJECTED"})
_USER: Final = "ROLE_USER"
_AGENT: Final = "ROLE_AGENT"
_USER_NUMBER: Final = 1
"""``ROLE_USER``'s number: protobuf's JSON mapping takes an enum by name or by number."""
