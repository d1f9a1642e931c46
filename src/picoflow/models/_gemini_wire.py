"""picoflow's memory and schemas in the shape the Gemini API takes (no SDK import: plain data).

Contents alternate between ``user`` and ``model``; consecutive messages of one role are folded into
one content, and tool results open their user content ahead of any text, in the order of the calls
they answer. The values are dicts of the SDK's ``types`` fields, which the SDK validates and encodes.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from picoflow.messages import Message, ModelRequest, ToolCall
from picoflow.models._file_parts import Files, gemini_parts

#: ``Message.reasoning`` block type holding one thought signature (see models/google.py).
SIGNATURE = "gemini_thought_signature"
#: Prefix of the ids picoflow gives calls the API sent without one; they are never sent back.
GENERATED_ID = "gemini-call-"
#: Placeholder first turn when memory starts with the model (e.g. a greeting sent with ``direct()``).
CONVERSATION_START = "(conversation start)"
#: How deep a recursive ``$ref`` is unfolded before it is left as a plain object.
_MAX_REF_DEPTH = 8


def inline_refs(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with every local ``$ref`` replaced by its definition and ``$defs`` dropped.

    Gemini's schema dialect resolves no references; Pydantic puts every nested model in ``$defs``.
    """
    definitions: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        found = schema.get(key)
        if isinstance(found, Mapping):
            definitions.update({f"#/{key}/{name}": value for name, value in found.items()})
    inlined = _inline(schema, definitions, 0)
    assert isinstance(inlined, dict)
    return inlined


def _inline(node: Any, definitions: Mapping[str, Any], depth: int) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions, depth) for item in node]
    if not isinstance(node, Mapping):
        return node
    reference = node.get("$ref")
    if isinstance(reference, str) and reference in definitions:
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        if depth >= _MAX_REF_DEPTH:
            # A recursive model: deeper levels are accepted as any object rather than refused.
            return {"type": "object", **_inline(siblings, definitions, depth)}
        target = _inline(definitions[reference], definitions, depth + 1)
        return {**target, **_inline(siblings, definitions, depth)}
    return {
        key: _inline(value, definitions, depth)
        for key, value in node.items()
        if key not in ("$defs", "definitions")
    }


def to_gemini_contents(request: ModelRequest, model_name: str) -> tuple[str, list[dict[str, Any]]]:
    """The system instruction and the alternating ``user``/``model`` contents of ``request``.

    ``model_name`` (``google:...``) decides which thought signatures go back: a signature is only
    valid for the model that wrote it, so another model's answers are sent without theirs.
    """
    system = [request.system] if request.system else []
    contents: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            system.append(message.content)
            continue
        role = "model" if message.role == "assistant" else "user"
        parts = _parts(message, request.files, own=message.model in (None, model_name))
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    for content in contents:
        if content["role"] == "user":
            content["parts"].sort(key=lambda part: "function_response" not in part)
    if contents and contents[0]["role"] == "model":
        contents.insert(0, {"role": "user", "parts": [{"text": CONVERSATION_START}]})
    return "\n\n".join(part for part in system if part), contents


def _parts(message: Message, files: Files, *, own: bool) -> list[dict[str, Any]]:
    if message.role == "tool":
        key = "error" if message.is_error else "output"
        response: dict[str, Any] = {"name": message.name or "", "response": {key: message.content}}
        if message.tool_call_id and not message.tool_call_id.startswith(GENERATED_ID):
            response["id"] = message.tool_call_id
        return [{"function_response": response}]
    if message.role != "assistant":
        texts = [{"text": message.content}] if message.content else []
        return texts + gemini_parts(message, files) if message.attachments else texts
    signatures = _signatures(message) if own else {}
    parts: list[dict[str, Any]] = []
    text_signature = signatures.get(None)
    if message.content or text_signature is not None:
        # A signature may come on a part without text; it goes back on one all the same.
        parts.append(_signed({"text": message.content}, text_signature))
    for call in message.tool_calls:
        parts.append(_signed({"function_call": _function_call(call)}, signatures.get(call.id)))
    return parts


def _function_call(call: ToolCall) -> dict[str, Any]:
    # The API only takes objects; a malformed call was already answered with an error result.
    wire: dict[str, Any] = {
        "name": call.name,
        "args": dict(call.args) if not isinstance(call.args, str) else {},
    }
    if call.id and not call.id.startswith(GENERATED_ID):
        wire["id"] = call.id
    return wire


def _signatures(message: Message) -> dict[str | None, bytes]:
    """The thought signatures of an assistant message: by call id, and ``None`` for its text."""
    found: dict[str | None, bytes] = {}
    for block in message.reasoning:
        if block.get("type") != SIGNATURE or not isinstance(block.get("signature"), str):
            continue
        key = block.get("call_id")
        found.setdefault(key if isinstance(key, str) else None, base64.b64decode(block["signature"]))
    return found


def _signed(part: dict[str, Any], signature: bytes | None) -> dict[str, Any]:
    if signature is not None:
        part["thought_signature"] = signature
    return part
