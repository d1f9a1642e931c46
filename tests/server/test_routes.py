"""The HTTP API in process: PicoFlow-compatible routes, the /v1 resources, and every error status."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from picoflow.attachments import AttachmentLimits
from picoflow.server import ServerSettings, create_app
from picoflow.session import SessionInfo, SessionStatus
from picoflow.sessions import MemoryStore

from .support import SECRET, TABLE, DeskModel, client_for, desk_engine

# --- PicoFlow-compatible routes ---------------------------------------------------------------------


async def test_healthcheck_and_flow_names() -> None:
    async with client_for(desk_engine()) as client:
        health = await client.get("/healthcheck")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert health.json()["timestamp"].startswith("20")
        assert (await client.get("/ai/flows")).json() == ["desk", "other"]


async def test_ai_run_keeps_the_session_in_the_chat_session_id_header() -> None:
    engine = desk_engine()
    async with client_for(engine) as client:
        first = await client.post("/ai/run", json={"flowName": "desk", "message": "hello"})
        assert first.status_code == 200
        session = first.headers["CHAT_SESSION_ID"]
        assert first.json() == {
            "success": True,
            "completed": False,
            "message": "echo: hello",
            "session": session,
            "contentType": "text/plain",
        }
        second = await client.post(
            "/ai/run", json={"flowName": "desk", "message": "again"}, headers={"CHAT_SESSION_ID": session}
        )
        assert second.headers["CHAT_SESSION_ID"] == session
        assert second.json()["message"] == "echo: again"
    stored = await engine.store.load(session)
    assert stored is not None and stored.turns == 2


async def test_ai_run_sends_a_non_plain_reply_as_the_raw_body() -> None:
    async with client_for(desk_engine()) as client:
        reply = await client.post("/ai/run", json={"flowName": "desk", "message": "json please"})
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("application/json")
        assert reply.json() == {"order": 7, "items": ["lamp", "desk"]}
        assert reply.headers["CHAT_SESSION_ID"]


async def test_ai_run_starts_a_new_session_after_the_old_one_completed() -> None:
    async with client_for(desk_engine()) as client:
        ended = await client.post("/ai/run", json={"flowName": "desk", "message": "bye"})
        assert ended.json()["completed"] is True and ended.json()["message"] == "Goodbye!"
        old = ended.headers["CHAT_SESSION_ID"]
        fresh = await client.post(
            "/ai/run", json={"flowName": "desk", "message": "hi again"}, headers={"CHAT_SESSION_ID": old}
        )
        assert fresh.status_code == 200 and fresh.json()["message"] == "echo: hi again"
        assert fresh.headers["CHAT_SESSION_ID"] != old
        # A client that switched flows but kept the header gets a session of the flow it asked for.
        other = await client.post(
            "/ai/run",
            json={"flowName": "other", "message": "hello"},
            headers={"CHAT_SESSION_ID": fresh.headers["CHAT_SESSION_ID"]},
        )
        assert other.status_code == 200
        assert other.headers["CHAT_SESSION_ID"] not in (old, fresh.headers["CHAT_SESSION_ID"])


async def test_ai_end_deletes_the_session() -> None:
    engine = desk_engine()
    async with client_for(engine) as client:
        session = (await client.post("/ai/run", json={"flowName": "desk", "message": "hi"})).headers[
            "CHAT_SESSION_ID"
        ]
        ended = await client.post("/ai/end", headers={"CHAT_SESSION_ID": session})
        assert ended.status_code == 200 and ended.json() == {"success": True, "session": session}
        assert await engine.store.load(session) is None
        again = await client.post("/ai/end", headers={"CHAT_SESSION_ID": session})
        assert again.status_code == 404 and again.json()["success"] is False
        missing = await client.post("/ai/end")
        assert missing.status_code == 422
        assert missing.json()["error"]["fields"] == [
            {"field": "header.CHAT_SESSION_ID", "problem": "required"}
        ]


async def test_ai_run_failures_use_the_picoflow_envelope() -> None:
    async with client_for(desk_engine()) as client:
        unknown = await client.post("/ai/run", json={"flowName": "nope", "message": "hi"})
        assert unknown.status_code == 404
        assert unknown.json()["success"] is False and unknown.json()["message"] == "No such flow."
        no_message = await client.post("/ai/run", json={"flowName": "desk"})
        assert no_message.status_code == 422 and no_message.json()["message"] == "message is empty"
        stale = await client.post(
            "/ai/run",
            json={"flowName": "desk", "message": "hi"},
            headers={"CHAT_SESSION_ID": "no-such-session"},
        )
        assert stale.status_code == 404 and stale.json()["error"]["kind"] == "session_not_found"


# --- /v1 ----------------------------------------------------------------------------------------------


async def test_flows_describe_steps_and_transitions() -> None:
    async with client_for(desk_engine()) as client:
        flows = (await client.get("/v1/flows")).json()
        desk = flows[0]
        assert desk["name"] == "desk" and desk["description"] == "A help desk used by the server tests."
        assert desk["start"] == "Desk" and desk["terminate"] == "Farewell"
        assert desk["steps"] == [
            {
                "name": "Desk",
                "description": "Answer questions and show comparisons.",
                "kind": "conversational",
                "start": True,
            },
            {"name": "Farewell", "description": "Say goodbye.", "kind": "terminal", "start": False},
        ]
        assert {"source": "Desk", "target": "Farewell", "via": "finish"} in desk["transitions"]
        assert (await client.get("/v1/flows/desk")).json() == desk
        assert (await client.get("/v1/flows/nope")).status_code == 404
        mermaid = await client.get("/v1/flows/desk/diagram.mmd")
        assert mermaid.text.startswith("flowchart TD") and "Desk -->|finish| Farewell" in mermaid.text


async def test_a_whole_conversation_through_the_resource_api() -> None:
    async with client_for(desk_engine()) as client:
        created = await client.post("/v1/flows/desk/sessions", json={"message": "hello"})
        assert created.status_code == 201
        session = created.json()["session_id"]
        assert created.headers["location"] == f"/v1/sessions/{session}"
        assert created.json()["message"] == "echo: hello" and created.json()["step"] == "Desk"
        assert created.json()["usage"]["model_calls"] == 1

        table = await client.post(f"/v1/sessions/{session}/turns?render=html", json={"message": "table"})
        assert table.status_code == 200 and table.json()["message"] == TABLE + "\n\nAnother comparison?"
        assert "<table>" in table.json()["html"] and "<td>$12</td>" in table.json()["html"]

        done = await client.post(f"/v1/sessions/{session}/turns", json={"message": "bye"})
        assert done.json()["completed"] is True and done.json()["step"] == "Farewell"

        state = (await client.get(f"/v1/sessions/{session}")).json()
        assert state["status"] == "completed" and state["step"] == "Farewell" and state["turns"] == 3
        assert state["sequence"] == ["Desk", "Farewell"]
        assert state["usage"]["model_calls"] == 4 and state["usage"]["tool_calls"] == 2
        said = [
            (m["role"], m["content"]) for m in state["transcript"] if m["role"] != "tool" and m["content"]
        ]
        assert said[:3] == [("user", "hello"), ("assistant", "echo: hello"), ("user", "table")]
        assert said[-1] == ("assistant", "Goodbye!")

        light = (await client.get(f"/v1/sessions/{session}?transcript=false")).json()
        assert light["transcript"] is None

        ended = await client.post(f"/v1/sessions/{session}/turns", json={"message": "more"})
        assert ended.status_code == 409 and ended.json()["error"]["kind"] == "session_completed"

        listed = (await client.get("/v1/sessions")).json()
        assert [item["id"] for item in listed] == [session]
        assert (await client.delete(f"/v1/sessions/{session}")).status_code == 204
        assert (await client.get(f"/v1/sessions/{session}")).status_code == 404
        assert (await client.delete(f"/v1/sessions/{session}")).status_code == 404


async def test_diagrams_highlight_the_current_step() -> None:
    async with client_for(desk_engine()) as client:
        flow_svg = await client.get("/v1/flows/desk/diagram.svg?step=Desk")
        assert flow_svg.headers["content-type"] == "image/svg+xml"
        assert 'class="step conversational current start" data-step="Desk"' in flow_svg.text
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "bye"})).json()["session_id"]
        svg = (await client.get(f"/v1/sessions/{session}/diagram.svg")).text
        assert 'class="step terminal current visited" data-step="Farewell"' in svg
        assert 'class="step conversational visited start" data-step="Desk"' in svg


# --- errors: nothing leaks, nothing is lost --------------------------------------------------------------


async def test_malformed_bodies_name_the_field_without_echoing_values() -> None:
    async with client_for(desk_engine()) as client:
        missing = await client.post("/v1/flows/desk/sessions", json={"text": "hi"})
        assert missing.status_code == 422
        assert missing.json()["error"]["kind"] == "invalid_input"
        assert {"field": "body.message", "problem": "Field required"} in missing.json()["error"]["fields"]
        wrong = await client.post("/v1/flows/desk/sessions", json={"message": {"secret-value": 1}})
        assert wrong.status_code == 422 and "secret-value" not in wrong.text
        broken = await client.post(
            "/v1/flows/desk/sessions", content=b'{"message": ', headers={"content-type": "application/json"}
        )
        assert broken.status_code == 422 and "not valid JSON" in broken.json()["error"]["message"]
        empty = await client.post("/v1/flows/desk/sessions", json={"message": "   "})
        assert empty.status_code == 422 and empty.json()["error"]["message"] == "message is empty"


async def test_unknown_flow_and_session_are_404() -> None:
    async with client_for(desk_engine()) as client:
        assert (await client.post("/v1/flows/nope/sessions", json={"message": "hi"})).status_code == 404
        for session in ("no-such-session", "bad id!", "x" * 300):
            reply = await client.post(f"/v1/sessions/{session}/turns", json={"message": "hi"})
            assert reply.status_code == 404 and reply.json()["error"]["kind"] == "session_not_found"
        assert (await client.get("/v1/nothing-here")).json()["error"]["kind"] == "not_found"


async def test_oversized_message_and_body_are_413() -> None:
    settings = ServerSettings(max_message_chars=50, max_body_bytes=2_000)
    engine = desk_engine()
    # Turn routes take files: their bodies may be as large as a turn's files in base64 plus a body
    # (600 * 4 / 3 + 2,000 = 2,800 bytes here); the padded bodies below are over that too.
    engine.attachment_limits = AttachmentLimits(max_turn_bytes=600)
    async with client_for(engine, settings) as client:
        long = await client.post("/v1/flows/desk/sessions", json={"message": "x" * 51})
        assert long.status_code == 413 and long.json()["error"]["kind"] == "message_too_long"
        compat = await client.post("/ai/run", json={"flowName": "desk", "message": "x" * 51})
        assert compat.status_code == 413 and compat.json()["success"] is False
        body = await client.post("/v1/flows/desk/sessions", json={"message": "hi", "pad": "y" * 5_000})
        assert body.status_code == 413 and body.json()["error"]["kind"] == "body_too_large"
        assert body.json()["error"]["message"] == "request body is larger than 2800 bytes"
        padded = await client.post("/ai/run", json={"flowName": "desk", "message": "hi", "pad": "y" * 2_500})
        assert padded.status_code == 413 and "larger than 2000 bytes" in padded.json()["error"]["message"]

        async def chunks() -> Any:
            yield b'{"message": "hi", "pad": "'
            for _ in range(10):
                yield b"z" * 500  # 5,000 bytes, never announced
            yield b'"}'

        streamed = await client.post(
            "/v1/flows/desk/sessions", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413 and streamed.json()["error"]["kind"] == "body_too_large"
        assert (await client.post("/v1/flows/desk/sessions", json={"message": "x" * 50})).status_code == 201


async def test_provider_down_is_503_with_a_retry_hint_and_the_session_unchanged() -> None:
    engine = desk_engine()
    async with client_for(engine) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        before = (await client.get(f"/v1/sessions/{session}")).json()
        down = await client.post(f"/v1/sessions/{session}/turns", json={"message": "down"})
        assert down.status_code == 503 and down.headers["retry-after"] == "7"
        assert down.json()["error"] == {
            "kind": "model_unavailable",
            "message": "The language model is unavailable right now. Please try again shortly.",
            "retryable": True,
            "retry_after": 7.0,
            "fields": [],
            "session_id": session,
        }
        flaky = await client.post(f"/v1/sessions/{session}/turns", json={"message": "flaky"})
        assert flaky.status_code == 503 and flaky.headers["retry-after"] == "5"
        assert "connection reset" not in flaky.text
        after = (await client.get(f"/v1/sessions/{session}")).json()
        assert after == before
        # A first turn that fails keeps its session as it was before the turn (to inspect, to retry).
        first = await client.post("/v1/flows/desk/sessions", json={"message": "down"})
        kept = first.json()["error"]["session_id"]
        assert first.status_code == 503 and kept
        assert (await client.get(f"/v1/sessions/{kept}")).json()["turns"] == 0


async def test_a_failing_tool_is_500_with_the_public_message_only() -> None:
    async with client_for(desk_engine()) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        crashed = await client.post(f"/v1/sessions/{session}/turns", json={"message": "crash"})
        assert crashed.status_code == 500
        assert crashed.json()["error"]["kind"] == "tool_failed"
        assert crashed.json()["error"]["message"] == "The assistant could not complete this turn."
        assert (
            SECRET not in crashed.text
            and "Traceback" not in crashed.text
            and "RuntimeError" not in crashed.text
        )
        assert (await client.get(f"/v1/sessions/{session}")).json()["turns"] == 1


class BrokenStore(MemoryStore):
    """A store whose disk fails (an outage) or, with ``bug``, whose code is broken."""

    def __init__(self, *, bug: bool = False) -> None:
        super().__init__()
        self.bug = bug

    async def list_sessions(
        self,
        *,
        flow: str | None = None,
        status: SessionStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[SessionInfo]:
        if self.bug:
            raise RuntimeError(f"bug near {SECRET}")
        raise OSError(f"disk on fire near {SECRET}")


async def test_a_failing_store_is_503_without_its_details() -> None:
    async with client_for(desk_engine(store=BrokenStore())) as client:
        reply = await client.get("/v1/sessions")
        assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
        assert reply.json()["error"]["kind"] == "store_error"
        assert SECRET not in reply.text


INTERNAL = {  # the whole shape of an error, as every other
    "kind": "internal",
    "message": "Internal server error.",
    "retryable": False,
    "retry_after": None,
    "fields": [],
    "session_id": None,
}


async def test_a_bug_in_the_store_is_a_500_not_an_outage_to_retry() -> None:
    async with client_for(desk_engine(store=BrokenStore(bug=True))) as client:
        reply = await client.get("/v1/sessions")
        assert reply.status_code == 500 and "retry-after" not in reply.headers
        assert reply.json()["error"] == INTERNAL
        assert SECRET not in reply.text


async def test_an_unexpected_exception_is_a_bare_500() -> None:
    app = create_app(desk_engine())

    async def broken() -> None:
        raise RuntimeError(f"bug near {SECRET}")

    app.add_api_route("/broken", broken)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        reply = await client.get("/broken")
    assert reply.status_code == 500
    assert reply.json() == {"error": INTERNAL}
    assert SECRET not in reply.text and "Traceback" not in reply.text


async def test_concurrent_turns_on_one_session_from_two_servers_give_409() -> None:
    """Two server processes share a store: the turn that commits second loses and changes nothing."""
    store = MemoryStore()
    slow_model, fast_model = DeskModel(), DeskModel()
    async with (
        client_for(desk_engine(store, slow_model)) as first,
        client_for(desk_engine(store, fast_model)) as second,
    ):
        session = (await first.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        slow = asyncio.create_task(first.post(f"/v1/sessions/{session}/turns", json={"message": "wait"}))
        await slow_model.waiting.wait()
        fast = await second.post(f"/v1/sessions/{session}/turns", json={"message": "quick"})
        assert fast.status_code == 200
        slow_model.gate.set()
        lost = await slow
        assert lost.status_code == 409
        assert (
            lost.json()["error"]["kind"] == "session_conflict" and lost.json()["error"]["retryable"] is True
        )
        state = (await second.get(f"/v1/sessions/{session}")).json()
        assert state["turns"] == 2
        assert [m["content"] for m in state["transcript"] if m["role"] == "user"] == ["hi", "quick"]


async def test_openapi_documents_both_apis() -> None:
    async with client_for(desk_engine()) as client:
        schema = (await client.get("/openapi.json")).json()
        assert {"/ai/run", "/ai/flows", "/ai/end", "/healthcheck", "/v1/flows/{flow}/sessions"} <= set(
            schema["paths"]
        )
        assert "text/event-stream" in json.dumps(schema["paths"]["/v1/sessions/{session_id}/turns"])
        assert (await client.get("/docs")).status_code == 200


async def test_transport_errors_do_not_break_the_client() -> None:
    # Guard: httpx itself must see well-formed responses for every route above.
    async with client_for(desk_engine()) as client:
        reply = await client.request("PATCH", "/v1/flows")
        assert reply.status_code == 405 and reply.json()["error"]["kind"] == "method_not_allowed"
        assert isinstance(reply, httpx.Response)
