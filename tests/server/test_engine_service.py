"""The server as an edge over the engine: one session load per turn, the engine's input rule and
readiness hook, refusals before a stream opens, and typed failures of the engine's other services."""

from __future__ import annotations

import asyncio

from picoflow.exceptions import StoreUnavailable
from picoflow.flow import FlowSpec
from picoflow.server import ServerSettings, create_app
from picoflow.server.readiness import ReadinessGate
from picoflow.session import Session, SessionInfo, SessionStatus
from picoflow.sessions import MemoryStore

from .support import LoadingDesk, client_for, desk_engine, events_of


class CountingStore(MemoryStore):
    """Counts the sessions it loads."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load(self, session_id: str) -> Session | None:
        self.loads += 1
        return await super().load(session_id)


async def test_a_turn_loads_its_session_once_streamed_or_not() -> None:
    store = CountingStore()
    async with client_for(desk_engine(store=store)) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        before = store.loads
        reply = await client.post(f"/v1/sessions/{session}/turns", json={"message": "again"})
        assert reply.status_code == 200 and reply.json()["flow"] == "desk"
        assert store.loads == before + 1
        streamed = await client.post(
            f"/v1/sessions/{session}/turns", json={"message": "more", "stream": True}
        )
        assert events_of(streamed.text)[-1][1]["flow"] == "desk"
        assert store.loads == before + 2


async def test_the_servers_message_limit_is_the_engines() -> None:
    engine = desk_engine()
    async with client_for(engine, ServerSettings(max_message_chars=20)) as client:
        refused = await client.post("/v1/flows/desk/sessions", json={"message": "x" * 21})
        assert refused.status_code == 413
        assert refused.json()["error"]["fields"] == [
            {"field": "body.message", "problem": "message is longer than 20 characters"}
        ]
    # The library meets the same rule: there is one.
    result = await engine.run("desk", "x" * 21)
    assert result.error is not None and result.error.status == 413


async def test_the_readiness_gate_keeps_the_engines_hook_and_is_installed_once() -> None:
    seen: list[str] = []

    async def hook(spec: FlowSpec) -> None:
        seen.append(spec.name)

    engine = desk_engine()
    engine.before_turn = hook
    create_app(engine)
    async with client_for(engine) as client:
        gate = engine.before_turn
        assert isinstance(gate, ReadinessGate) and gate.then is hook
        assert (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).status_code == 201
    assert seen == ["desk"]


async def test_turns_the_server_did_not_start_do_not_wait_for_its_models() -> None:
    model = LoadingDesk()
    engine = desk_engine(model=model)
    async with client_for(engine) as client:
        waiting = asyncio.create_task(client.post("/v1/flows/desk/sessions", json={"message": "hi"}))
        assert await asyncio.to_thread(model.tracker.watched.wait, 10)
        # The library's turn on the same engine is not held by the server's load.
        result = await asyncio.wait_for(engine.run("desk", "hello"), 10)
        assert result.ok and result.message == "echo: hello"
        assert not waiting.done()
        waiting.cancel()


async def test_refusals_before_the_stream_opens_are_statuses() -> None:
    async with client_for(desk_engine()) as client:
        ended = (await client.post("/v1/flows/desk/sessions", json={"message": "bye"})).json()["session_id"]
        again = await client.post(f"/v1/sessions/{ended}/turns", json={"message": "hi", "stream": True})
        assert again.status_code == 409 and again.json()["error"]["kind"] == "session_completed"
        bad_id = await client.post("/v1/sessions/bad id!/turns", json={"message": "hi", "stream": True})
        assert bad_id.status_code == 404 and bad_id.json()["error"]["session_id"] == "bad id!"
        render = await client.post("/v1/flows/desk/sessions?render=xml", json={"message": "hi"})
        assert render.status_code == 422
        assert render.json()["error"]["fields"] == [
            {"field": "query.render", "problem": "Input should be 'html'"}
        ]


async def test_a_stream_whose_turn_is_cancelled_ends_with_an_error_event() -> None:
    cancel = asyncio.Event()

    async def hook(spec: FlowSpec) -> None:
        if cancel.is_set():
            raise asyncio.CancelledError  # as if the turn's task were cancelled

    engine = desk_engine()
    engine.before_turn = hook
    async with client_for(engine) as client:
        cancel.set()
        reply = await client.post("/v1/flows/desk/sessions", json={"message": "hi", "stream": True})
        assert reply.status_code == 200
        assert events_of(reply.text) == [
            (
                "error",
                {
                    "status": 500,
                    "error": {
                        "kind": "internal",
                        "message": "The assistant could not complete this turn.",
                        "retryable": False,
                        "retry_after": None,
                        "fields": [],
                        "session_id": None,
                    },
                },
            )
        ]


async def test_credentials_are_checked_before_the_body_is_read() -> None:
    settings = ServerSettings(api_keys={"key-a": "alice"})
    async with client_for(desk_engine(), settings) as client:
        for body in (b'{"message": ', b"{}"):
            reply = await client.post(
                "/v1/flows/desk/sessions", content=body, headers={"content-type": "application/json"}
            )
            assert reply.status_code == 401 and reply.json()["error"]["kind"] == "unauthorized"


class DownStore(MemoryStore):
    async def list_sessions(
        self,
        *,
        flow: str | None = None,
        status: SessionStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[SessionInfo]:
        raise StoreUnavailable("database is down", retry_after=2.5)


async def test_a_typed_store_failure_keeps_its_kind_and_retry_hint() -> None:
    async with client_for(desk_engine(store=DownStore())) as client:
        reply = await client.get("/v1/sessions")
        assert reply.status_code == 503 and reply.headers["retry-after"] == "3"
        error = reply.json()["error"]
        assert (error["kind"], error["retryable"], error["retry_after"]) == ("store_unavailable", True, 2.5)
        assert "database is down" not in reply.text


async def test_the_turn_routes_document_their_parameters() -> None:
    async with client_for(desk_engine()) as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
    for path, name in (
        ("/v1/sessions/{session_id}/turns", "session_id"),
        ("/v1/flows/{flow}/sessions", "flow"),
    ):
        parameters = {p["name"]: p for p in paths[path]["post"]["parameters"]}
        assert parameters[name]["in"] == "path" and parameters[name]["required"] is True
        assert parameters["render"]["in"] == "query"
        assert parameters["render"]["schema"]["anyOf"] == [
            {"const": "html", "type": "string"},
            {"type": "null"},
        ]
