"""Tool calls a model wrote as text, found and read back: one lenient parser for every adapter.

Small models often write a call as JSON in their answer instead of using the provider's native
tool-call format: bare, in a ```json fence, or between ``<tool_call>`` tags (Qwen's template).
Servers then return it as the answer, and the user would read JSON. ``recover_tool_calls`` turns
such an answer back into the calls it holds and notes a warning; the embedded model's protocol
(``models.local._protocol``) reads its answers with the same ``first_json`` and ``as_call``.

A call-looking object naming a tool the request did not offer is still taken as a call: the
runner then tells the model that no such tool exists, so it is corrected, never shown to the user.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from picoflow.messages import ModelRequest, ModelResponse, ResponseWarning, ToolCall

FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
NAME_KEYS = ("tool", "name", "function", "tool_name")
ARGS_KEYS = ("arguments", "args", "parameters", "input")
_WRAPPER_KEYS = frozenset({*NAME_KEYS, *ARGS_KEYS, "id", "type"})
_HELD_MARKERS = ("```", "<tool_call>")
_LIST_OF_OBJECTS = re.compile(r"\[\s*(?:\{|$)")
_CUT_CALL = re.compile(
    r'\s*(?:<tool_call>|```(?:json|JSON)?)?\s*\{\s*"(?:name|tool)"\s*:\s*"(?P<name>[^"]+)"\s*,\s*"(?:arguments|args)"'
)

Arguments = Mapping[str, Any] | str
"""A call's arguments: the decoded object, or the text when it is not a JSON object."""

RECOVERED = "tool_call_from_text"
"""Warning code of a response whose tool calls were read from its text."""


def first_json(text: str) -> tuple[bool, Any]:
    """The first JSON object or array in ``text``, tolerating fences, tags and surrounding prose."""
    candidates = [text]
    candidates += [match.group(1) for match in FENCE.finditer(text)]
    candidates += [match.group(1) for match in TOOL_CALL_TAG.finditer(text)]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        stripped = candidate.strip()
        try:
            return True, json.loads(stripped)
        except ValueError:
            pass
        for start, char in enumerate(stripped):
            if char in "{[":
                try:
                    return True, decoder.raw_decode(stripped, start)[0]
                except ValueError:
                    continue
    return False, None


def _arguments(args: Any) -> Arguments:
    if args is None:
        return {}
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        return ToolCall.parse_args(args)
    return json.dumps(args)


def as_call(value: Any) -> tuple[str, Arguments] | None:
    """``value`` read as a call (``{"tool"|"name"|"function": ..., "arguments"|"args"|...: ...}``),
    whatever else it holds; None when it names nothing."""
    if not isinstance(value, dict):
        return None
    name: Any = next((value[key] for key in NAME_KEYS if key in value), None)
    args: Any = next((value[key] for key in ARGS_KEYS if key in value), None)
    if isinstance(name, dict):  # {"function": {"name": ..., "arguments": ...}}
        name, args = name.get("name"), name.get("arguments", args)
    if not isinstance(name, str) or not name:
        return None
    return name, _arguments(args)


def _looks_like_call(value: Any, offered: Collection[str]) -> tuple[str, Arguments] | None:
    """``value`` as a call only if it has the shape of one: a name and arguments and nothing else,
    or an offered tool's name (``{"name": "Ada", "age": 36}`` is data, not a call)."""
    call = as_call(value)
    if call is None:
        return None
    inner = value.get("function")
    keys = set(value) | (set(inner) if isinstance(inner, dict) else set())
    has_args = any(key in keys for key in ARGS_KEYS)
    wrapper_only = keys <= _WRAPPER_KEYS
    if call[0] in offered:
        return call if has_args or wrapper_only else None
    return call if has_args and wrapper_only else None


def _json_values(text: str) -> Iterator[Any]:
    """Every top-level JSON object or array written in ``text``, in order."""
    decoder = json.JSONDecoder()
    index = 0
    while index < len(text):
        if text[index] in "{[":
            try:
                value, end = decoder.raw_decode(text, index)
            except ValueError:
                index += 1
                continue
            yield value
            index = end
        else:
            index += 1


def _calls_of(value: Any, offered: Collection[str]) -> list[tuple[str, Arguments]]:
    items = value.get("tool_calls") if isinstance(value, dict) else value
    if isinstance(items, list):
        calls = [_looks_like_call(item, offered) for item in items]
        if calls and all(call is not None for call in calls):
            return [call for call in calls if call is not None]
    single = _looks_like_call(value, offered)
    return [single] if single is not None else []


def calls_in_text(
    text: str, offered: Collection[str], *, structured: bool = False
) -> list[tuple[str, Arguments]]:
    """The tool calls written in ``text`` (bare, fenced, tagged, one or several), or none.

    With a structured answer expected (``structured``), an object naming a tool that was not
    offered may be that answer, so it is left alone.
    """
    calls = [call for value in _json_values(text) for call in _calls_of(value, offered)]
    if not calls and (cut := _CUT_CALL.match(text)) is not None:
        # A call cut short (or not JSON): the runner tells the model its arguments are unreadable.
        calls = [(cut["name"], text.strip())]
    if structured and any(name not in offered for name, _ in calls):
        return []
    return calls


def new_call_id() -> str:
    # Recovered calls, and those of servers that omit ids, still need ids to match their results.
    return f"call_{uuid.uuid4().hex[:24]}"


def recover_tool_calls(response: ModelResponse, request: ModelRequest, *, model: str) -> bool:
    """Turn the tool calls ``response`` wrote as text into real ones, with a warning; False when
    there are none (no tools offered, native calls already, or a plain answer)."""
    if not request.tools or response.tool_calls or not response.text.strip():
        return False
    offered = {tool.name for tool in request.tools}
    calls = calls_in_text(response.text, offered, structured=request.output is not None)
    if not calls:
        return False
    response.tool_calls = [ToolCall(name, args, new_call_id()) for name, args in calls]
    response.text = ""
    response.finish_reason = "tool_calls"
    names = ", ".join(dict.fromkeys(name for name, _ in calls))
    response.warnings.append(
        ResponseWarning(RECOVERED, f"{model} wrote its tool call ({names}) as text; it was read as a call")
    )
    return True


class HeldText:
    """Streams an answer's text but holds back what may be a tool call written as text.

    Text is passed on up to the first ``{``, ```` ``` ````, ``<tool_call>`` or ``[{``; from there on
    it is held until the answer ends, then dropped if it held calls, else released.
    """

    def __init__(self) -> None:
        self.text = ""
        self.shown = 0
        self.holding = False

    def feed(self, delta: str) -> str:
        """Add generated text; return the part that may be shown now (may be empty)."""
        self.text += delta
        if self.holding:
            return ""
        start = self._hold_from(self.shown)
        if start is not None:
            self.holding = True
        end = len(self.text) if start is None else start
        end -= self._partial_marker(end)
        visible, self.shown = self.text[self.shown : end], max(self.shown, end)
        return visible

    def release(self) -> str:
        """The text still held back, once the answer turned out to hold no call."""
        rest, self.shown = self.text[self.shown :], len(self.text)
        return rest

    def _hold_from(self, start: int) -> int | None:
        found = [self.text.find(marker, start) for marker in ("{", *_HELD_MARKERS)]
        bracket = _LIST_OF_OBJECTS.search(self.text, start)
        if bracket is not None and bracket.group().endswith("{"):
            found.append(bracket.start())
        hits = [index for index in found if index >= 0]
        return min(hits) if hits else None

    def _partial_marker(self, end: int) -> int:
        """How many characters before ``end`` may begin a marker whose rest has not come yet."""
        if end < len(self.text):
            return 0
        tail = self.text[self.shown : end]
        sizes = [
            size
            for marker in _HELD_MARKERS
            for size in range(1, min(len(marker) - 1, len(tail)) + 1)
            if tail.endswith(marker[:size])
        ]
        bracket = _LIST_OF_OBJECTS.search(tail)
        if bracket is not None and bracket.end() == len(tail) and not bracket.group().endswith("{"):
            sizes.append(len(tail) - bracket.start())
        return max(sizes, default=0)
