"""Token estimates of requests and messages, cheap and on the high side.

The runner fits every request to its model's context window (see ``Step.memory_budget``), so it
must know roughly how many tokens a request holds before sending it. A real tokenizer per provider
would be exact but slow, and most are not at hand; these estimates cost a few microseconds per
message and err towards too many tokens, so a request judged to fit does fit:

* three bytes of UTF-8 per token: English runs about four characters per token, and a character
  outside ASCII (two to four bytes) is often a token or more of its own;
* every digit a token: many tokenizers (Qwen, Llama 3, GPT-4o's for long numbers) split numbers
  into digits, and a table of prices is mostly digits;
* a few tokens per message, tool and request for the markers chat templates wrap around them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from picoflow.messages import Message, ModelRequest, OutputSchema, ToolDefinition

BYTES_PER_TOKEN = 3
MESSAGE_TOKENS = 4
"""Role and separator markers around one message (or one tool call)."""
REQUEST_TOKENS = 16
"""Start and end markers of a request."""
FORMAT_TOKENS = 160
"""Instructions an adapter adds when tools or an output schema are given (the local model is told
the answer format in words)."""
TOOL_TOKENS = 12
"""Framing of one tool definition."""

_DIGITS = b"0123456789"
_SCHEMA_TOKENS: dict[int, tuple[ToolDefinition | OutputSchema, int]] = {}
_SCHEMA_CACHE_SIZE = 2048


def text_tokens(text: str) -> int:
    """Estimated tokens of ``text`` (see the module's notes)."""
    if not text:
        return 0
    data = text.encode("utf-8", "surrogatepass")
    digits = len(data) - len(data.translate(None, _DIGITS))
    # A digit weighs a whole token: its byte counts once, plus two more.
    return (len(data) + 2 * digits + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


def message_tokens(message: Message) -> int:
    """Estimated tokens of one message as a model is shown it (the note of a remembered reply)."""
    content = message.content if message.remembered_as is None else message.remembered_as
    tokens = MESSAGE_TOKENS + text_tokens(content)
    for call in message.tool_calls:
        # repr() of decoded JSON arguments is as long as their JSON text, at a fraction of the cost
        # of json.dumps on every request.
        args = call.args if isinstance(call.args, str) else repr(call.args)
        tokens += MESSAGE_TOKENS + text_tokens(call.name + args)
    for block in message.reasoning:
        tokens += text_tokens(str(block.get("thinking") or block.get("data") or ""))
    return tokens


def messages_tokens(messages: Iterable[Message]) -> int:
    return sum(map(message_tokens, messages))


def request_tokens(request: ModelRequest) -> int:
    """Estimated tokens of the prompt ``request`` makes: system prompt, tools, output schema, messages."""
    return REQUEST_TOKENS + text_tokens(request.system) + messages_tokens(request.messages) + _format(request)


def request_ceiling(request: ModelRequest) -> int:
    """A bound ``request_tokens`` never exceeds, from text lengths only: no character weighs more than
    4/3 of a token there (a digit one, a four-byte character 4/3), and an ASCII one at most one.

    Most requests are far below their window; this settles them without reading their text.
    """
    total = REQUEST_TOKENS + _ceiling(request.system)
    for message in request.messages:
        text = message.content if message.remembered_as is None else message.remembered_as
        for call in message.tool_calls:
            text += call.name + (call.args if isinstance(call.args, str) else repr(call.args))
            total += MESSAGE_TOKENS + 1  # the estimate rounds each part up on its own
        total += MESSAGE_TOKENS + (len(text) if text.isascii() else (4 * len(text) + 2) // 3)
        if message.reasoning:
            total += message_tokens(message)
    return total + _format(request)


def _format(request: ModelRequest) -> int:
    """Tokens of the answer format: tool schemas, the output schema and the words around them."""
    if not request.tools and request.output is None:
        return 0
    total = FORMAT_TOKENS + sum(_schema_tokens(tool) for tool in request.tools)
    return total + (_schema_tokens(request.output) if request.output is not None else 0)


def _ceiling(text: str) -> int:
    return len(text) if text.isascii() else (4 * len(text) + 2) // 3


def _schema_tokens(value: ToolDefinition | OutputSchema) -> int:
    # A step's tool definitions and output schema are built once with the flow and sent on every
    # call: serialise each once, not once per request.
    cached = _SCHEMA_TOKENS.get(id(value))
    if cached is not None and cached[0] is value:
        return cached[1]
    if isinstance(value, ToolDefinition):
        text = value.name + value.description + json.dumps(value.parameters, ensure_ascii=False)
    else:
        text = value.name + value.description + json.dumps(value.schema, ensure_ascii=False)
    tokens = TOOL_TOKENS + text_tokens(text)
    if len(_SCHEMA_TOKENS) >= _SCHEMA_CACHE_SIZE:  # only definitions built per request could fill it
        _SCHEMA_TOKENS.clear()
    _SCHEMA_TOKENS[id(value)] = (value, tokens)
    return tokens
