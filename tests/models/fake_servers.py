"""Scripted HTTP servers on 127.0.0.1 speaking the OpenAI and Anthropic wire formats.

Adapter tests drive the official SDKs against these, so the real request serialisation, error
mapping and SSE parsing of each SDK is exercised — no network beyond the loopback interface.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[str] | None = None
    """Server-sent events, already formatted; when set the reply is a ``text/event-stream``."""
    delay: float = 0.0
    """Seconds to wait before answering (to provoke client timeouts)."""


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeServer:
    """Answers each POST with the next scripted ``Reply`` and records what it received."""

    def __init__(self, replies: list[Reply] | None = None) -> None:
        self.replies: list[Reply] = list(replies or [])
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def bodies(self) -> list[Any]:
        return [item.body for item in self.received]

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.received.append(received)
            if not self.replies:
                return Reply(500, {"error": {"message": "fake server script exhausted"}})
            return self.replies.pop(0)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                reply = server._next(
                    Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                if reply.delay:
                    time.sleep(reply.delay)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._answer(reply)

            def _answer(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.events is not None:
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for event in reply.events:
                        self.wfile.write(event.encode())
                        self.wfile.flush()
                    return
                payload = json.dumps(reply.body if reply.body is not None else {}).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


@contextmanager
def serving(replies: list[Reply]) -> Iterator[FakeServer]:
    server = FakeServer(replies).start()
    try:
        yield server
    finally:
        server.stop()


class RecordingSleep:
    """A ``sleep`` for ``RetryPolicy`` that records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def fixed_random(value: float = 0.5) -> Callable[[], float]:
    """A jitter source with no jitter at 0.5 (the middle of the spread)."""
    return lambda: value


# --- OpenAI Chat Completions -------------------------------------------------------------------


def openai_completion(
    text: str | None = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    *,
    usage: dict[str, Any] | None = None,
    finish_reason: str = "stop",
    model: str = "gpt-4.1-mini-2025-04-14",
) -> dict[str, Any]:
    """A chat.completion body; ``tool_calls`` holds ``(id, name, arguments_json_text)``."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in tool_calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def openai_chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        **extra,
    }


def openai_sse(chunks: list[dict[str, Any]]) -> list[str]:
    return [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]


# --- Anthropic Messages ------------------------------------------------------------------------


def anthropic_message(
    content: list[dict[str, Any]],
    *,
    usage: dict[str, Any] | None = None,
    stop_reason: str = "end_turn",
    model: str = "claude-sonnet-4-5-20250929",
) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_sse(events: list[dict[str, Any]]) -> list[str]:
    return [f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events]


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
