"""Hostile input on a real store: each case is refused with the right status and JSON error shape,
before the model is called and without touching what is stored.

Every test runs on SQLite and on PostgreSQL (127.0.0.1:5432, database ``test``, trust auth), each
PostgreSQL run in a schema of its own that is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn

from picoflow.engine import FlowEngine
from picoflow.exceptions import AttemptsExhausted, ContextWindowExceeded, InvalidInput
from picoflow.messages import ModelRequest
from picoflow.server import ServerSettings, create_app
from picoflow.server.protocol import HeaderDeadlineProtocol, uvicorn_options
from picoflow.session import Session
from picoflow.sessions import MemoryStore, open_store

from .support import DeskModel, client_for, desk_engine, events_of, serving

POSTGRES_URL = os.environ.get("PICOFLOW_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
SURROGATE = b'{"message": "hi \\ud800 there"}'
HALF_PAIR = b'{"message": "yes \\ud83d"}'
NUL = b'{"message": "hi \\u0000 there"}'
JSON = {"content-type": "application/json"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FlowEngine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.sqlite3'}"
        schema = None
    else:
        schema = f"pf_test_{uuid.uuid4().hex[:16]}"
        url = f"{POSTGRES_URL}?schema={schema}"
    model = DeskModel()
    built = desk_engine(store=open_store(url), model=model)
    MODELS[built] = model
    try:
        yield built
    finally:
        await built.store.close()
        del MODELS[built]
        if schema is not None:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


MODELS: dict[FlowEngine, DeskModel] = {}
"""The model of each engine under test, so a test can count the calls it received."""


def model_of(engine: FlowEngine) -> DeskModel:
    return MODELS[engine]


async def snapshot(client: httpx.AsyncClient, session: str) -> tuple[Any, Any]:
    """Everything a client can read of the stored data: the session with its transcript, and the list."""
    whole = await client.get(f"/v1/sessions/{session}")
    listing = await client.get("/v1/sessions")
    assert whole.status_code == listing.status_code == 200
    return whole.json(), listing.json()


def invalid_message(problem: str, session: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "kind": "invalid_input",
            "message": problem,
            "retryable": False,
            "retry_after": None,
            "fields": [{"field": "body.message", "problem": problem}],
            "session_id": session,
        }
    }


SURROGATE_PROBLEM = "message must be valid Unicode text (it holds a lone surrogate)"
NUL_PROBLEM = "message must not contain NUL characters"


@pytest.mark.parametrize(
    ("body", "problem"),
    [(SURROGATE, SURROGATE_PROBLEM), (HALF_PAIR, SURROGATE_PROBLEM), (NUL, NUL_PROBLEM)],
    ids=["surrogate", "half-pair", "nul"],
)
async def test_text_no_store_can_keep_is_422_before_the_model_on_every_route(
    engine: FlowEngine, body: bytes, problem: str
) -> None:
    model = model_of(engine)
    async with client_for(engine) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        before = await snapshot(client, session)
        calls = len(model.requests)

        new = await client.post("/v1/flows/desk/sessions", content=body, headers=JSON)
        assert (new.status_code, new.json()) == (422, invalid_message(problem))
        assert "retry-after" not in new.headers
        turn = await client.post(f"/v1/sessions/{session}/turns", content=body, headers=JSON)
        assert (turn.status_code, turn.json()) == (422, invalid_message(problem))
        streamed = await client.post(
            f"/v1/sessions/{session}/turns", content=body[:-1] + b', "stream": true}', headers=JSON
        )
        assert (streamed.status_code, streamed.json()) == (422, invalid_message(problem))
        ai = await client.post(
            "/ai/run",
            content=body[:-1] + b', "flowName": "desk"}',
            headers={**JSON, "CHAT_SESSION_ID": session},
        )
        assert ai.status_code == 422 and ai.json()["success"] is False

        assert len(model.requests) == calls
        assert await snapshot(client, session) == before
    assert await engine.store.errors(session) == []


async def test_the_library_gets_the_same_typed_refusal(engine: FlowEngine) -> None:
    model = model_of(engine)
    result = await engine.run("desk", "yes \ud83d")
    assert result.error is not None and not result.ok and result.error.is_a(InvalidInput)
    assert (result.error.status, result.error.retryable, result.error.message) == (
        422,
        False,
        SURROGATE_PROBLEM,
    )
    assert result.session_id is None and model.requests == []
    assert await engine.store.list_sessions() == []


async def test_an_offset_beyond_any_listing_is_422(engine: FlowEngine) -> None:
    async with client_for(engine) as client:
        huge = await client.get("/v1/sessions", params={"offset": "9223372036854775808"})
        assert huge.status_code == 422
        error = huge.json()["error"]
        assert (error["kind"], [f["field"] for f in error["fields"]]) == ("invalid_input", ["query.offset"])


async def test_a_model_raising_cancelled_error_is_a_502_json_error(engine: FlowEngine) -> None:
    model = model_of(engine)
    answer = model.answer

    async def cancelling(request: ModelRequest) -> Any:
        if "cancel" in request.messages[-1].content:
            raise asyncio.CancelledError
        return await answer(request)

    model.fn = cancelling  # type: ignore[assignment]
    async with client_for(engine) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        before = await snapshot(client, session)
        failed = await client.post(f"/v1/sessions/{session}/turns", json={"message": "cancel"})
        assert failed.status_code == 502 and "retry-after" not in failed.headers
        assert failed.json() == {
            "error": {
                "kind": "model_error",
                "message": "The language model gave an unusable answer. Please rephrase or try again.",
                "retryable": False,
                "retry_after": None,
                "fields": [],
                "session_id": session,
            }
        }
        streamed = await client.post(
            f"/v1/sessions/{session}/turns", json={"message": "cancel", "stream": True}
        )
        assert streamed.status_code == 200
        assert events_of(streamed.text)[-1] == ("error", {"status": 502, "error": failed.json()["error"]})
        assert await snapshot(client, session) == before


@pytest.mark.parametrize(
    "body",
    [b'{"message": "hi \xff there"}', b'{"message": ' + b"[" * 5000 + b"]" * 5000 + b"}"],
    ids=["invalid-utf8", "deep-nesting"],
)
async def test_a_body_no_parser_reads_is_422_like_any_malformed_body(engine: FlowEngine, body: bytes) -> None:
    model = model_of(engine)
    async with client_for(engine) as client:
        refused = await client.post("/v1/flows/desk/sessions", content=body, headers=JSON)
        problem = "is not valid JSON (UTF-8 text, nested at most a few hundred levels)"
        assert (refused.status_code, refused.json()) == (
            422,
            {
                "error": {
                    "kind": "invalid_input",
                    "message": f"invalid request: body {problem}",
                    "retryable": False,
                    "retry_after": None,
                    "fields": [{"field": "body", "problem": problem}],
                    "session_id": None,
                }
            },
        )
        assert (await client.get("/v1/sessions")).json() == []
    assert model.requests == []


async def test_a_key_without_the_bearer_scheme_is_refused(engine: FlowEngine) -> None:
    model = model_of(engine)
    settings = ServerSettings(api_keys={"key-a": "alice"})
    async with client_for(engine, settings) as client:
        for header in ("key-a", "Token key-a", "Basic key-a"):
            refused = await client.post(
                "/v1/flows/desk/sessions", json={"message": "hi"}, headers={"Authorization": header}
            )
            assert refused.status_code == 401 and "key-a" not in refused.text
            assert refused.json()["error"]["kind"] == "unauthorized"
        bearer = await client.get("/v1/sessions", headers={"Authorization": "Bearer key-a"})
        assert (bearer.status_code, bearer.json()) == (200, [])
    assert model.requests == []


UNUSABLE = {
    "huge": "x" * 100_001,
    "garbled": "here \ud800 it is",
    "nul": "here \x00 it is",
}


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
async def test_a_reply_that_cannot_be_kept_is_asked_again_then_502(engine: FlowEngine, kind: str) -> None:
    model = model_of(engine)
    answer = model.answer

    async def unusable(request: ModelRequest) -> Any:
        if kind in request.messages[-1].content or request.messages[-1].kind == "correction":
            return UNUSABLE[kind]
        return await answer(request)

    model.fn = unusable  # type: ignore[assignment]
    async with client_for(engine) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        before = await snapshot(client, session)
        calls = len(model.requests)
        failed = await client.post(f"/v1/sessions/{session}/turns", json={"message": kind})
        assert (failed.status_code, failed.json()) == (
            502,
            {
                "error": {
                    "kind": "attempts_exhausted",
                    "message": AttemptsExhausted.public_message,
                    "retryable": False,
                    "retry_after": None,
                    "fields": [],
                    "session_id": session,
                }
            },
        )
        assert "retry-after" not in failed.headers
        # Asked three times (the step's max_attempts); the correction never quotes the reply.
        assert len(model.requests) == calls + 3
        corrections = [m for m in model.requests[-1].messages if m.kind == "correction"]
        assert [m.content for m in corrections] == [
            "[response withheld]",
            corrections[1].content,
        ] * 2 and corrections[1].content.startswith("Your response ")
        assert await snapshot(client, session) == before


async def test_an_oversize_reply_corrected_on_the_next_attempt_is_kept(engine: FlowEngine) -> None:
    model = model_of(engine)
    answer = model.answer

    async def once_too_long(request: ModelRequest) -> Any:
        if request.messages[-1].kind == "correction":
            return "short"
        if "long" in request.messages[-1].content:
            return "y" * 100_001
        return await answer(request)

    model.fn = once_too_long  # type: ignore[assignment]
    async with client_for(engine) as client:
        done = await client.post("/v1/flows/desk/sessions", json={"message": "long"})
        assert (done.status_code, done.json()["message"]) == (201, "short")
        stored = (await client.get(f"/v1/sessions/{done.json()['session_id']}")).json()
        assert [m["content"] for m in stored["transcript"]] == ["long", "short"]


async def test_a_half_sent_body_is_408_once_its_time_is_up(engine: FlowEngine) -> None:
    model = model_of(engine)
    async with serving(engine, body_timeout=0.3) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/flows/desk/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
            b'{"message": '
        )
        await writer.drain()
        # The server answers by itself once the deadline passes; the client never sends the rest.
        response = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        head, _, body = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert json.loads(body)["error"] == {
            "kind": "request_timeout",
            "message": "the request body did not arrive within 0.3 seconds",
            "retryable": False,
            "retry_after": None,
            "fields": [],
            "session_id": None,
        }
        assert await engine.store.list_sessions() == []
    assert model.requests == []


class QuickHeaders(HeaderDeadlineProtocol):
    header_timeout = 0.3


async def test_half_sent_headers_are_cut_off_by_the_serving_protocol(engine: FlowEngine) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen(8)  # connections queue until uvicorn accepts them: no need to wait for its start
    options = {**uvicorn_options(), "http": QuickHeaders}
    config = uvicorn.Config(create_app(engine), log_level="warning", lifespan="off", **options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/flows/desk/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
        await writer.drain()
        # The server closes the connection without a response once the headers are late.
        assert await asyncio.wait_for(reader.read(), timeout=10) == b""
        writer.close()
        # A client that sends its request in time is served as before.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).status_code == 201
    finally:
        server.should_exit = True
        await task
    assert config.timeout_keep_alive == 75 and config.h11_max_incomplete_event_size == 16 * 1024


async def test_a_message_too_long_for_the_models_window_is_413_before_the_model(engine: FlowEngine) -> None:
    model = model_of(engine)
    async with client_for(engine) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        before = await snapshot(client, session)
        calls = len(model.requests)
        model.context_window = 600  # tokens; the message below alone is about 1,000
        refused = await client.post(f"/v1/sessions/{session}/turns", json={"message": "word " * 800})
        assert (refused.status_code, refused.json()) == (
            413,
            {
                "error": {
                    "kind": "context_window_exceeded",
                    "message": ContextWindowExceeded.public_message,
                    "retryable": False,
                    "retry_after": None,
                    "fields": [],
                    "session_id": session,
                }
            },
        )
        assert len(model.requests) == calls
        model.context_window = None
        assert await snapshot(client, session) == before


class UnencodableStore(MemoryStore):
    """Saves fail the way a driver fails on text it cannot encode."""

    async def save(self, session: Session, **options: Any) -> int:
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")


async def test_a_save_failing_on_encoding_is_a_500_not_a_retryable_outage() -> None:
    async with client_for(desk_engine(store=UnencodableStore())) as client:
        failed = await client.post("/v1/flows/desk/sessions", json={"message": "hi"})
        assert failed.status_code == 500 and "retry-after" not in failed.headers
        error = failed.json()["error"]
        assert (error["kind"], error["retryable"], error["retry_after"]) == ("internal", False, None)
        assert "surrogate" not in failed.text
