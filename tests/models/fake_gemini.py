"""A scripted HTTP server on 127.0.0.1 speaking the Gemini REST wire format (``generateContent`` and
``streamGenerateContent?alt=sse``), so the adapter tests drive the real google-genai SDK: its request
encoding, error mapping and SSE parsing — with no network beyond the loopback interface."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class GeminiReply:
    """One scripted answer."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[dict[str, Any]] | None = None
    """When set, the answer is an SSE stream of these ``GenerateContentResponse`` bodies."""
    hold: bool = False
    """Answer nothing until the server stops (the client's timeout fires first)."""


@dataclass
class GeminiRequest:
    path: str
    """Without the query, e.g. ``/v1beta/models/gemini-2.5-flash:generateContent``."""
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


class GeminiServer:
    """Answers each POST with the next scripted reply and records what it received."""

    def __init__(self, replies: list[GeminiReply]) -> None:
        self.replies = list(replies)
        self.received: list[GeminiRequest] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
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

    def start(self) -> GeminiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, received: GeminiRequest) -> GeminiReply:
        with self._lock:
            self.received.append(received)
            if not self.replies:
                return GeminiReply(500, gemini_error(500, "INTERNAL", "fake server script exhausted"))
            return self.replies.pop(0)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                headers = {key.lower(): value for key, value in self.headers.items()}
                reply = server._next(
                    GeminiRequest(
                        parts.path, parse_qs(parts.query), headers, json.loads(raw) if raw else None
                    )
                )
                if reply.hold:
                    server._released.wait()
                    return
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._answer(reply)

            def _answer(self, reply: GeminiReply) -> None:
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.chunks is not None:
                    payload = "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in reply.chunks).encode()
                    self.send_header("Content-Type", "text/event-stream")
                else:
                    payload = json.dumps(reply.body if reply.body is not None else {}).encode()
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

        return Handler


@contextmanager
def gemini_serving(replies: list[GeminiReply]) -> Iterator[GeminiServer]:
    server = GeminiServer(replies).start()
    try:
        yield server
    finally:
        server.stop()


# --- wire bodies --------------------------------------------------------------------------------


def signature_of(raw: bytes) -> str:
    """A thought signature as the API writes it (base64)."""
    return base64.b64encode(raw).decode("ascii")


def text_part(text: str, *, signature: bytes | None = None, thought: bool = False) -> dict[str, Any]:
    part: dict[str, Any] = {"text": text}
    if thought:
        part["thought"] = True
    if signature is not None:
        part["thoughtSignature"] = signature_of(signature)
    return part


def call_part(
    name: str, args: dict[str, Any], *, call_id: str | None = None, signature: bytes | None = None
) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        call["id"] = call_id
    part: dict[str, Any] = {"functionCall": call}
    if signature is not None:
        part["thoughtSignature"] = signature_of(signature)
    return part


def usage(prompt: int = 10, answer: int = 5, *, thoughts: int = 0, cached: int = 0) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": answer,
        "totalTokenCount": prompt + answer + thoughts,
    }
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    if cached:
        metadata["cachedContentTokenCount"] = cached
    return metadata


def gemini_response(
    parts: list[dict[str, Any]],
    *,
    finish_reason: str | None = "STOP",
    usage_metadata: dict[str, Any] | None = None,
    model_version: str = "gemini-2.5-flash",
) -> dict[str, Any]:
    """A ``GenerateContentResponse`` body with one candidate."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": model_version, "responseId": "resp-1"}
    if usage_metadata is not None:
        body["usageMetadata"] = usage_metadata
    return body


def gemini_error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
