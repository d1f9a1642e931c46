"""The server while its model loads: ``/readyz``, turns that wait for the model, status events, and a
load that failed. The model's load is a fake the test moves through its phases."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from picoflow.models.local import LocalModel
from picoflow.models.readiness import LoadStatus, Phase
from picoflow.server import ServerSettings

from .support import LoadingDesk, client_for, desk_engine, events_of, serving

DOWNLOADING_BODY = {
    "status": "loading",
    "phase": "downloading",
    "done": 312_400_000,
    "total": 1_117_320_768,
    "part": 7,
    "parts": 22,
    "message": "Downloading the offline model: 312 of 1,117 MB (part 7 of 22)",
}
UNAVAILABLE = {
    "kind": "local_model_unavailable",
    "message": "The offline model is not available on this machine.",
    "retryable": False,
    "retry_after": 5.0,
    "fields": [],
    "session_id": None,
}


async def test_readyz_is_ready_at_once_when_no_model_needs_loading() -> None:
    async with client_for(desk_engine()) as client:
        ready = await client.get("/readyz")
        assert (ready.status_code, ready.json()) == (
            200,
            {"status": "ready", "phase": "ready", "message": "Ready."},
        )
        assert ready.headers["cache-control"] == "no-store"


async def test_readyz_follows_the_load_through_its_phases() -> None:
    model = LoadingDesk()
    async with client_for(desk_engine(model=model)) as client:
        loading = await client.get("/readyz")
        assert (loading.status_code, loading.json()) == (503, DOWNLOADING_BODY)
        model.tracker.report(Phase.WARMING)
        warming = await client.get("/readyz")
        assert (warming.status_code, warming.json()) == (
            503,
            {"status": "loading", "phase": "warming", "message": "Getting ready…"},
        )
        model.tracker.report(Phase.FAILED, reason="no network")
        failed = await client.get("/readyz")
        assert (failed.status_code, failed.json()) == (
            503,
            {
                "status": "failed",
                "phase": "failed",
                "reason": "no network",
                "message": "The offline model could not be loaded: no network",
            },
        )
        model.tracker.report(Phase.READY)
        assert (await client.get("/readyz")).status_code == 200
        # The liveness check never waited for any of it.
        assert (await client.get("/healthcheck")).status_code == 200


async def test_the_embedded_model_is_found_in_the_served_flows(tmp_path: Path) -> None:
    engine = desk_engine(model=LocalModel(model_dir=tmp_path))
    async with client_for(engine, ServerSettings(prepare_models=False)) as client:
        idle = await client.get("/readyz")
        assert (idle.status_code, idle.json()) == (
            503,
            {
                "status": "loading",
                "phase": "idle",
                "message": "The offline model is not loaded yet; it loads with the first message.",
            },
        )


async def test_a_turn_waits_for_the_model_then_runs() -> None:
    model = LoadingDesk()
    async with client_for(desk_engine(model=model)) as client:
        turn = asyncio.create_task(client.post("/ai/run", json={"flowName": "desk", "message": "hello"}))
        assert await asyncio.to_thread(model.tracker.watched.wait, 10)
        assert not turn.done() and model.requests == []
        model.tracker.report(Phase.LOADING)
        model.tracker.report(Phase.READY)
        reply = await asyncio.wait_for(turn, 10)
        assert reply.status_code == 200
        assert reply.json()["message"] == "echo: hello"
        # Started on demand, since this application runs without its lifespan; no flow warmed.
        assert model.prepared == [(True, "desk")]


async def test_a_failed_load_fails_the_turn_clearly() -> None:
    model = LoadingDesk()
    async with client_for(desk_engine(model=model)) as client:
        turn = asyncio.create_task(client.post("/ai/run", json={"flowName": "desk", "message": "hello"}))
        assert await asyncio.to_thread(model.tracker.watched.wait, 10)
        model.tracker.report(Phase.FAILED, reason="disk full")
        reply = await asyncio.wait_for(turn, 10)
        assert reply.status_code == 503
        assert reply.json() == {
            "success": False,
            "completed": False,
            "message": "The offline model is not available on this machine.",
            "session": None,
            "contentType": "text/plain",
            "error": UNAVAILABLE,
        }
        # Later turns fail at once, streamed or not; nothing reached the model.
        v1 = await client.post("/v1/flows/desk/sessions", json={"message": "hi"})
        assert (v1.status_code, v1.json()) == (503, {"error": UNAVAILABLE})
        streamed = await client.post("/v1/flows/desk/sessions", json={"message": "hi", "stream": True})
        assert events_of(streamed.text) == [("error", {"status": 503, "error": UNAVAILABLE})]
        assert model.requests == []


async def test_a_streamed_turn_shows_the_load_then_the_turn() -> None:
    model = LoadingDesk()
    engine = desk_engine(model=model)
    async with serving(engine) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        # The server started the load itself, warming the default flow's first prompt.
        assert model.prepared == [(True, "desk")]
        assert (await client.get("/healthcheck")).status_code == 200
        events: list[tuple[str, dict[str, object]]] = []
        async with client.stream(
            "POST", "/v1/flows/desk/sessions", json={"message": "hello", "stream": True}
        ) as stream:
            lines = stream.aiter_lines()

            async def next_event() -> tuple[str, dict[str, object]]:
                name = ""
                async for line in lines:
                    if line.startswith("event:"):
                        name = line.removeprefix("event:").strip()
                    elif line.startswith("data:"):
                        return name, json.loads(line.removeprefix("data:"))
                raise AssertionError("the stream ended early")

            events.append(await next_event())
            model.tracker.report(Phase.LOADING)
            events.append(await next_event())
            model.tracker.report(Phase.WARMING)
            events.append(await next_event())
            model.tracker.report(Phase.READY)
            async for line in lines:
                if line.startswith("event:"):
                    events.append((line.removeprefix("event:").strip(), {}))
        assert events[:3] == [
            ("status", DOWNLOADING_BODY),
            ("status", {"status": "loading", "phase": "loading", "message": "Loading the model…"}),
            ("status", {"status": "loading", "phase": "warming", "message": "Getting ready…"}),
        ]
        assert [name for name, _ in events[3:]] == ["step", "text", "result"]
        assert (await client.get("/readyz")).status_code == 200


async def test_readyz_is_in_the_openapi_document() -> None:
    async with client_for(desk_engine()) as client:
        document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/readyz"]["get"]
    assert set(operation["responses"]) == {"200", "503"}
    assert operation["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ReadyResponse"
    }
    assert set(document["components"]["schemas"]["ReadyResponse"]["properties"]) == {
        "status", "phase", "done", "total", "part", "parts", "reason", "store", "message",
    }  # fmt: skip


def test_status_values_round_trip_through_the_response_model() -> None:
    from picoflow.server.readiness import ReadyResponse

    for status in (LoadStatus(), LoadStatus(phase=Phase.FAILED, reason="x")):
        body = ReadyResponse.model_validate(status.as_dict()).model_dump(mode="json", exclude_none=True)
        assert body == status.as_dict()
