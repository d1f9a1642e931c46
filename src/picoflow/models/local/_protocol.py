"""How picoflow talks to a small local model: one JSON object per turn, decoding constrained to a schema.

Small models are unreliable with native tool-call formats (they write the call as JSON in a fenced
block, invent wrapper keys, or half-answer in prose). So every answer is requested as one JSON object,
and llama.cpp constrains decoding to the union of

* ``{"tool": <name>, "arguments": <that tool's argument schema>}`` — one object per tool,
* ``{"tool_calls": [<call>, ...]}`` — parallel calls,
* ``{"reply": <text, or the structured-output schema>}`` — the answer to the user,

which makes every tool call schema-valid by construction. ``parse_answer`` still reads leniently, for
unconstrained servers and truncated output, with the parser every adapter shares
(``picoflow.models.text_calls``).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from picoflow.messages import Message, ModelRequest, OutputSchema, ToolCall, ToolDefinition
from picoflow.models._file_parts import text_with_files
from picoflow.models.text_calls import Arguments, as_call, first_json

MAX_PARALLEL_CALLS = 8

_REPLY_OPEN = re.compile(r'\s*\{\s*"reply"\s*:\s*"')
_REPLY_PREFIX = '{"reply":"'


def _rewrite_refs(node: Any, renames: Mapping[str, str]) -> Any:
    if isinstance(node, dict):
        result = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value in renames:
                result[key] = renames[value]
            else:
                result[key] = _rewrite_refs(value, renames)
        return result
    if isinstance(node, list):
        return [_rewrite_refs(item, renames) for item in node]
    return node


_CLASS_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_", "s": " \\t\\n\\r"}


def grammar_pattern(pattern: str) -> str:
    """``pattern`` without the ``\\d``/``\\w``/``\\s`` shorthands llama.cpp's grammar converter refuses.

    Without this, a pattern such as ``^LUM-[A-Z]{2}-\\d{3}$`` is dropped from the grammar ("not
    supported") and decoding is no longer constrained to it.
    """
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            nxt = pattern[index + 1]
            if nxt in _CLASS_ESCAPES:
                expansion = _CLASS_ESCAPES[nxt]
                out.append(expansion if in_class else f"[{expansion}]")
            else:
                out.append(char + nxt)
            index += 2
            continue
        if char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class:
            in_class = False
        out.append(char)
        index += 1
    return "".join(out)


def _grammar_patterns(node: Any) -> Any:
    if isinstance(node, list):
        return [_grammar_patterns(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: grammar_pattern(value)
        if key == "pattern" and isinstance(value, str)
        else _grammar_patterns(value)
        for key, value in node.items()
    }


def _hoist(
    prefix: str, schema: Mapping[str, Any], defs: dict[str, Any], *, is_object: bool
) -> dict[str, Any]:
    """``schema`` with its ``$defs`` moved into ``defs`` under ``prefix``: refs resolve from the root."""
    body = copy.deepcopy(dict(schema))
    local: dict[str, Any] = {**body.pop("definitions", {}), **body.pop("$defs", {})}
    renames = {}
    for name in local:
        renames[f"#/$defs/{name}"] = f"#/$defs/{prefix}__{name}"
        renames[f"#/definitions/{name}"] = f"#/$defs/{prefix}__{name}"
    for name, definition in local.items():
        defs[f"{prefix}__{name}"] = _grammar_patterns(_rewrite_refs(definition, renames))
    body = dict(_grammar_patterns(_rewrite_refs(body, renames)))
    if is_object:
        body.setdefault("type", "object")
    return body


def answer_schema(
    tools: Sequence[ToolDefinition], output: OutputSchema | None, *, parallel: bool = True
) -> dict[str, Any] | None:
    """The JSON schema of one answer; ``None`` when the model may answer in free text."""
    if not tools and output is None:
        return None
    defs: dict[str, Any] = {}
    calls = []
    for index, tool in enumerate(tools):
        key = f"call_{index}"
        defs[key] = {
            "type": "object",
            "properties": {
                "tool": {"const": tool.name},
                "arguments": _hoist(f"tool_{index}", tool.parameters, defs, is_object=True),
            },
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        calls.append({"$ref": f"#/$defs/{key}"})
    options: list[dict[str, Any]] = list(calls)
    if parallel and calls:
        items = calls[0] if len(calls) == 1 else {"anyOf": calls}
        options.append(
            {
                "type": "object",
                "properties": {
                    "tool_calls": {
                        "type": "array",
                        "items": items,
                        "minItems": 1,
                        "maxItems": MAX_PARALLEL_CALLS,
                    }
                },
                "required": ["tool_calls"],
                "additionalProperties": False,
            }
        )
    reply = {"type": "string"} if output is None else _hoist("output", output.schema, defs, is_object=False)
    options.append(
        {
            "type": "object",
            "properties": {"reply": reply},
            "required": ["reply"],
            "additionalProperties": False,
        }
    )
    schema: dict[str, Any] = {"anyOf": options}
    if defs:
        schema["$defs"] = defs
    return schema


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def system_prompt(
    system: str, tools: Sequence[ToolDefinition], output: OutputSchema | None, *, parallel: bool
) -> str:
    """The step's prompt followed by the tool list and the answer format the schema enforces."""
    if not tools and output is None:
        return system
    lines = [system.strip(), ""] if system.strip() else []
    if tools:
        lines.append("# Tools")
        for tool in tools:
            lines.append(f"- {tool.name}: {tool.description.strip() or 'no description'}")
            lines.append(f"  arguments schema: {_compact(tool.parameters)}")
        lines.append("")
    lines.append("# Answer format")
    lines.append("Answer with exactly one JSON object and nothing else:")
    if tools:
        lines.append('- to call a tool: {"tool": "<tool name>", "arguments": {<arguments>}}')
        if parallel:
            lines.append(
                '- to call several tools at once: {"tool_calls": [{"tool": ..., "arguments": ...}, ...]}'
            )
    if output is None:
        lines.append('- to answer the user: {"reply": "<your message>"}')
    else:
        described = f" ({output.description.strip()})" if output.description.strip() else ""
        lines.append(
            f'- to give your final answer{described}: {{"reply": <a JSON value matching this schema>}}'
        )
        lines.append(f"  final answer schema: {_compact(output.schema)}")
    if tools:
        lines.append(
            "Call a tool whenever it can provide information or perform an action you need. "
            "Answer only with facts from the conversation and tool results."
        )
    return "\n".join(lines)


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"tool": call.name, "arguments": call.args if isinstance(call.args, str) else dict(call.args)}


def _assistant_text(message: Message, constrained: bool) -> str:
    if message.tool_calls:
        calls = [_call_json(call) for call in message.tool_calls]
        return _compact(calls[0] if len(calls) == 1 else {"tool_calls": calls})
    return _compact({"reply": message.content}) if constrained else message.content


def _tool_result_text(message: Message) -> str:
    label = "Error from" if message.is_error else "Result of"
    return f"{label} {message.name or 'the tool'}: {message.content}"


def chat_messages(request: ModelRequest, *, parallel: bool = True) -> list[dict[str, str]]:
    """The request as plain chat messages: tool traffic rendered in the same JSON the model answers in."""
    constrained = bool(request.tools) or request.output is not None
    notes = [m.content for m in request.messages if m.role == "system" and m.content.strip()]
    system = system_prompt(
        "\n\n".join([request.system, *notes]), request.tools, request.output, parallel=parallel
    )
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system.strip() else []
    previous_role: str | None = None
    for message in request.messages:
        if message.role == "system":
            continue
        if message.role == "tool" and previous_role == "tool":
            # The results of one batch of parallel calls read best as one message.
            messages[-1]["content"] += "\n\n" + _tool_result_text(message)
        elif message.role == "tool":
            messages.append({"role": "user", "content": _tool_result_text(message)})
        elif message.role == "assistant":
            messages.append({"role": "assistant", "content": _assistant_text(message, constrained)})
        elif message.attachments:
            # No vision here: PDFs and text files are read as text, and an image is refused.
            messages.append({"role": "user", "content": text_with_files(message, request.files)})
        else:
            messages.append({"role": "user", "content": message.content})
        previous_role = message.role
    return messages


def parse_answer(
    text: str, *, tool_names: Collection[str] = (), structured: bool = False
) -> tuple[str, list[tuple[str, Arguments]]]:
    """Read one model answer as ``(reply_text, [(tool_name, args), ...])``, as leniently as is safe.

    With structured output, a bare object naming no known tool is the answer itself, not a call.
    """
    found, value = first_json(text)
    if not found:
        partial = ReplyStream().feed(text)
        return (partial or text.strip()), []
    if isinstance(value, dict) and "reply" in value:
        reply = value["reply"]
        return (reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)), []
    items = value.get("tool_calls") if isinstance(value, dict) else value
    if isinstance(items, list):
        calls = [as_call(item) for item in items]
        if calls and all(call is not None for call in calls):
            return "", [call for call in calls if call is not None]
    single = as_call(value)
    if single is not None and not (structured and single[0] not in tool_names):
        return "", [single]
    if structured:
        return json.dumps(value, ensure_ascii=False), []
    return text.strip(), []


class ReplyStream:
    """Extracts the text of ``{"reply": "..."}`` while it is being generated, for streaming."""

    def __init__(self) -> None:
        self.buffer = ""
        self.state = "undecided"
        self.start = 0
        self.emitted = ""

    def feed(self, delta: str) -> str:
        """Append generated text; return the newly readable part of the reply (may be empty)."""
        self.buffer += delta
        if self.state == "undecided":
            match = _REPLY_OPEN.match(self.buffer)
            if match:
                self.state, self.start = "reply", match.end()
            elif not _REPLY_PREFIX.startswith(re.sub(r"\s+", "", self.buffer)):
                self.state = "other"
        if self.state != "reply":
            return ""
        decoded = self._decoded()
        if not decoded.startswith(self.emitted):
            return ""
        new, self.emitted = decoded[len(self.emitted) :], decoded
        return new

    def _decoded(self) -> str:
        body = self.buffer[self.start :]
        index = 0
        while index < len(body):
            if body[index] == "\\":
                index += 2
                continue
            if body[index] == '"':
                return str(json.loads(f'"{body[:index]}"'))
            index += 1
        # Unfinished: drop a trailing partial escape sequence until the fragment decodes.
        for cut in range(7):
            fragment = body[: len(body) - cut]
            try:
                text = str(json.loads(f'"{fragment}"'))
            except ValueError:
                continue
            if text and 0xD800 <= ord(text[-1]) <= 0xDBFF:
                text = text[:-1]
            return text
        return self.emitted
