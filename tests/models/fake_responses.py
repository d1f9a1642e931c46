"""Bodies and server-sent events of the OpenAI Responses API, for the scripted server in fake_servers.

The shapes follow the API reference: a ``response`` object whose ``output`` is a list of typed items
(``message``, ``function_call``, ``reasoning``), and a stream of ``response.*`` events, each with a
``sequence_number``, ending with ``response.completed`` that carries the whole response.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from picoflow.messages import Message, ModelRequest, ToolDefinition
from picoflow.models._retry import RetryPolicy
from picoflow.models.catalog import ModelSelection, resolve
from picoflow.models.openai_responses import OpenAIResponsesModel

from .fake_servers import RecordingSleep, fixed_random

MODEL = "gpt-4.1-mini-2025-04-14"


def usage(
    input_tokens: int = 10, output_tokens: int = 5, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def message(text: str, *, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}] if text else [],
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def reasoning(item_id: str, encrypted: str | None, summary: Sequence[str] = ()) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": text} for text in summary],
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def response(
    output: Sequence[dict[str, Any]],
    *,
    usage_body: dict[str, Any] | None = None,
    status: str = "completed",
    incomplete_reason: str | None = None,
    error: dict[str, Any] | None = None,
    model: str = MODEL,
) -> dict[str, Any]:
    """A ``response`` object as ``POST /responses`` returns it."""
    return {
        "id": "resp_test",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "model": model,
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": error,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "usage": usage_body if usage_body is not None else usage(),
    }


def sse(events: Sequence[dict[str, Any]]) -> list[str]:
    """Events formatted as the API streams them (``event:`` line, then the JSON ``data:``)."""
    lines = []
    for number, event in enumerate(events):
        data = {**event, "sequence_number": number}
        lines.append(f"event: {event['type']}\ndata: {json.dumps(data)}\n\n")
    return lines


def created(model: str = MODEL) -> dict[str, Any]:
    body = response([], status="in_progress", model=model)
    body["usage"] = None
    return {"type": "response.created", "response": body}


def item_added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def item_done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def text_delta(index: int, delta: str, *, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": index,
        "content_index": 0,
        "delta": delta,
        "logprobs": [],
    }


def arguments_delta(index: int, delta: str, *, item_id: str) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "item_id": item_id,
        "output_index": index,
        "delta": delta,
    }


def completed(body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.completed", "response": body}


def error_event(message_text: str, code: str = "server_error") -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message_text, "param": None}


# --- the adapter under test ----------------------------------------------------------------------

API_KEY = "sk-test-0123456789abcdefghij"

SEARCH = ToolDefinition(
    "search_books",
    "Search the catalog.",
    {
        "type": "object",
        "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
        "required": ["query", "max_results"],
        "additionalProperties": False,
    },
    strict=True,
)
WEATHER = ToolDefinition(
    "weather", "Weather for a city.", {"type": "object", "properties": {"city": {"type": "string"}}}
)
THOUGHT = reasoning("rs_1", "gAAAAB-opaque-ciphertext==", ["Looking up whales."])


def make_model(
    url: str, name: str = "gpt-4.1-mini", **params: Any
) -> tuple[OpenAIResponsesModel, RecordingSleep]:
    sleep = RecordingSleep()
    policy = RetryPolicy(max_retries=params.pop("retries", 3), sleep=sleep, random=fixed_random())
    spec, checked = resolve(ModelSelection("openai", name, params))
    model = OpenAIResponsesModel(name, base_url=url, api_key=API_KEY, params=checked, retry=policy, spec=spec)
    return model, sleep


def ask(text: str = "hello", **fields: Any) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[Message.user(text)], **fields)
