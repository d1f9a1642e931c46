"""``GET /v1/sessions/{id}/timeline``: the inspector over HTTP. Answered to callers with the inspect
visibility and in the local open mode; anyone else, and another principal, gets the 404 of an
unknown session. A first turn that fails over HTTP names its session, whose timeline shows every
model call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jsonschema
from pydantic import TypeAdapter

from inspect_flow import ASK_ORDER, REFUNDED, TURNS, InspectFlow, LoopFlow, looping_model, play
from picoflow import Flow, FlowEngine, Step, tool
from picoflow.context import Caller
from picoflow.messages import ModelRequest, ModelResponse, ToolCall
from picoflow.models import Model, ScriptedModel
from picoflow.server import ServerSettings
from picoflow.server.auth import Identity
from picoflow.testing import HeldModel
from picoflow.timeline import TimelineEntry, TimelineSettings, timeline_schema

from .support import client_for, events_of, serving

KEYS = {
    "k-ada": Identity("ada"),
    "k-ada-inspect": Identity("ada", frozenset({"inspect"})),
    "k-bob-inspect": Identity("bob", frozenset({"inspect"})),
}
WITH_KEYS = ServerSettings(api_keys=KEYS, open_mode=False, prepare_models=False)


STORED_HEAD: dict[str, Any] = {
    "session_id": "s",
    "turn": 4,
    "flow": "inspect",
    "message": "m",
    "started_at": 0.0,
    "duration_ms": 0.0,
    "outcome": "replied",
}
"""A turn's head, for checking streamed entries against the schema."""


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def without_id(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    body["error"].pop("session_id")
    return body


async def test_only_an_inspecting_owner_reads_a_timeline() -> None:
    model = ScriptedModel([])
    engine = FlowEngine([InspectFlow], model=model, timeline=TimelineSettings())
    session_id = await play(engine, model)
    async with client_for(engine, WITH_KEYS) as client:
        path = f"/v1/sessions/{session_id}/timeline"
        unknown = await client.get("/v1/sessions/no-such-session/timeline", headers=bearer("k-ada-inspect"))
        assert unknown.status_code == 404
        assert unknown.json()["error"]["kind"] == "session_not_found"
        # Without the inspect visibility, and as another principal: exactly an unknown session.
        for key in ("k-ada", "k-bob-inspect"):
            refused = await client.get(path, headers=bearer(key))
            assert refused.status_code == 404, key
            assert without_id(refused) == without_id(unknown)
            assert refused.json()["error"]["session_id"] == session_id
        assert (await client.get(path)).status_code == 401

        allowed = await client.get(path, headers=bearer("k-ada-inspect"))
        assert allowed.status_code == 200
        body = allowed.json()
        jsonschema.validate(body, timeline_schema())
        assert [turn["turn"] for turn in body["turns"]] == [1, 2, 3, 4, 5, 6]
        kinds = [entry["kind"] for turn in body["turns"] for entry in turn["entries"]]
        for kind in (
            "field_dropped",
            "rejected",
            "tool",
            "approval_requested",
            "approval_decided",
            "entered",
        ):
            assert kind in kinds
        one = await client.get(f"{path}?turn=4", headers=bearer("k-ada-inspect"))
        assert [turn["turn"] for turn in one.json()["turns"]] == [4]
        assert (await client.get(f"{path}?turn=0", headers=bearer("k-ada-inspect"))).status_code == 422


async def test_a_failed_first_turn_over_http_is_inspected_in_the_open_mode() -> None:
    engine = FlowEngine([LoopFlow], model=looping_model(), timeline=TimelineSettings())
    async with client_for(engine, ServerSettings(prepare_models=False)) as client:
        failed = await client.post("/v1/flows/loop/sessions", json={"message": "find it"})
        assert failed.status_code == 422, failed.text
        error = failed.json()["error"]
        assert error["kind"] == "usage_limit"
        session_id = error["session_id"]
        assert session_id

        timeline = await client.get(f"/v1/sessions/{session_id}/timeline")
        assert timeline.status_code == 200
        [turn] = timeline.json()["turns"]
        assert turn["outcome"] == "failed" and turn["message"] == "find it"
        assert turn["error"] == {
            "kind": "usage_limit",
            "message": "turn exceeded its model_calls limit of 4",
            "step": "Searcher",
        }
        calls = [entry for entry in turn["entries"] if entry["kind"] == "model"]
        assert [call["tool_calls"][0]["name"] for call in calls] == ["look"] * 4
        assert turn["usage"]["model_calls"] == 4

        # The session itself is there, as before the turn, and the next message retries in it.
        shown = await client.get(f"/v1/sessions/{session_id}")
        assert shown.status_code == 200 and shown.json()["turns"] == 0

        # Streamed, the error event names the kept session too.
        streamed = await client.post("/v1/flows/loop/sessions", json={"message": "again", "stream": True})
        [data] = [data for name, data in events_of(streamed.text) if name == "error"]
        kept = data["error"]["session_id"]
        assert kept and kept != session_id
        again = (await client.get(f"/v1/sessions/{kept}/timeline")).json()
        assert [turn["outcome"] for turn in again["turns"]] == ["failed"]
    other = await engine.timeline(session_id, principal=Caller(principal="someone").principal)
    assert other is None


async def streamed(
    client: httpx.AsyncClient, path: str, key: str, body: dict[str, Any], inspect: bool = True
) -> list[tuple[str, Any]]:
    """A streamed turn's events, its timeline asked for (``?inspect=true``) unless told not to."""
    query = "?inspect=true" if inspect else ""
    response = await client.post(path + query, json={**body, "stream": True}, headers=bearer(key))
    assert response.status_code in (200, 201), response.text
    return events_of(response.text)


ENTRY: TypeAdapter[Any] = TypeAdapter(TimelineEntry)


def shape(entry: dict[str, Any]) -> Any:
    """An entry as the timeline route writes it (defaults filled in, None left out)."""
    return ENTRY.validate_python(entry).model_dump(mode="json", by_alias=True, exclude_none=True)


def live_turn(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The entries a stream's ``timeline`` events leave, each at its index (a later one replaces)."""
    entries: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "timeline":
            entries[data["index"]] = data["entry"]
    return [entries[index] for index in sorted(entries)]


async def test_an_inspecting_caller_sees_each_turn_live_in_its_stream() -> None:
    model = ScriptedModel([])
    engine = FlowEngine([InspectFlow], model=model, timeline=TimelineSettings())
    async with client_for(engine, WITH_KEYS) as client:
        model.extend(TURNS[0][1])
        first = await streamed(client, "/v1/flows/inspect/sessions", "k-ada-inspect", {"message": "Hi"})
        [result] = [data for name, data in first if name == "result"]
        session_id = result["session_id"]
        turns = f"/v1/sessions/{session_id}/turns"
        for text, answers in TURNS[1:3]:
            model.extend(answers)
            # Not asked for: an inspecting caller's stream is as everyone's.
            events = await streamed(client, turns, "k-ada-inspect", {"message": text}, inspect=False)
            assert "timeline" not in [name for name, _ in events]

        # The turn with a tool error and a rejected answer: its events interleave with the
        # chat's own, and each entry arrives before the turn's result.
        model.extend(TURNS[3][1])
        events = await streamed(client, turns, "k-ada-inspect", {"message": TURNS[3][0]})
        names = [name for name, _ in events]
        assert names.index("tool_call") < names.index("result")
        assert max(i for i, name in enumerate(names) if name == "timeline") < names.index("result")
        heads = {(data["session_id"], data["turn"]) for name, data in events if name == "timeline"}
        assert heads == {(session_id, 4)}
        live = live_turn(events)
        assert [entry["kind"] for entry in live] == ["model", "tool", "model", "rejected", "model"]
        assert live[1]["ok"] is False and live[1]["result"] == "order 7 belongs to another customer"
        assert live[3]["reason"] == "never promise an outcome"
        assert [entry["attempt"] for entry in live if entry["kind"] == "model"] == [1, 1, 2]
        assert live[4]["text"] == ASK_ORDER
        jsonschema.validate(
            {"session_id": session_id, "flow": "inspect", "turns": [{**STORED_HEAD, "entries": live}]},
            timeline_schema(),
        )
        # What was streamed is what was stored, state changes aside (added as the turn ends).
        stored = await client.get(
            f"/v1/sessions/{session_id}/timeline?turn=4", headers=bearer("k-ada-inspect")
        )
        [turn] = stored.json()["turns"]
        assert [shape(entry) for entry in turn["entries"] if entry["kind"] != "state"] == [
            shape(entry) for entry in live
        ]

        # The approval and its decision, streamed too.
        model.extend(TURNS[4][1])
        paused = await streamed(client, turns, "k-ada-inspect", {"message": TURNS[4][0]})
        assert [entry["kind"] for entry in live_turn(paused)] == ["model", "approval_requested"]
        [result] = [data for name, data in paused if name == "result"]
        model.extend([REFUNDED])
        approval = result["pending"][0]["id"]
        decided = await streamed(
            client,
            f"/v1/sessions/{session_id}/approvals/{approval}",
            "k-ada-inspect",
            {"decision": "approve"},
        )
        kinds = [entry["kind"] for entry in live_turn(decided)]
        assert kinds[:2] == ["approval_decided", "tool"] and "state" in kinds
        assert {data["turn"] for name, data in decided if name == "timeline"} == {6}


async def test_a_caller_without_inspect_gets_no_timeline_in_its_stream() -> None:
    model = ScriptedModel([])
    engine = FlowEngine([InspectFlow], model=model, timeline=TimelineSettings())
    async with client_for(engine, WITH_KEYS) as client:
        assert (await client.get("/v1/me", headers=bearer("k-ada"))).json() == {
            "principal": "ada",
            "inspect": False,
            "staff": False,
            "roles": [],
        }
        assert (await client.get("/v1/me", headers=bearer("k-ada-inspect"))).json()["inspect"] is True
        assert (await client.get("/v1/me")).status_code == 401
        model.extend(TURNS[0][1])
        events = await streamed(client, "/v1/flows/inspect/sessions", "k-ada", {"message": "Hi"})
        assert [name for name, _ in events] == ["step", "result"]  # asked, and ignored
        refused = await client.post(
            "/v1/flows/inspect/sessions?inspect=maybe", json={"message": "Hi"}, headers=bearer("k-ada")
        )
        assert refused.status_code == 422
        assert refused.json()["error"]["fields"][0]["field"] == "query.inspect"
    async with client_for(engine, ServerSettings(prepare_models=False)) as client:
        assert (await client.get("/v1/me")).json() == {
            "principal": "local",
            "inspect": True,
            "staff": False,
            "roles": [],
        }


class Routed(Model):
    """The inspect flow's script, and a searcher that never stops looking (its turns fail)."""

    name = "scripted:routed"

    def __init__(self) -> None:
        self.script = ScriptedModel([])

    async def request(self, request: ModelRequest) -> ModelResponse:
        if request.step == "Searcher":
            return ModelResponse(tool_calls=[ToolCall("look", {"query": "again"})])
        return await self.script.request(request)


async def test_sessions_are_listed_by_flow_status_and_errors() -> None:
    model = Routed()
    engine = FlowEngine([InspectFlow, LoopFlow], model=model, timeline=TimelineSettings())
    played = await play(engine, model.script)
    async with client_for(engine, WITH_KEYS) as client:
        failed = await client.post(
            "/v1/flows/loop/sessions", json={"message": "find"}, headers=bearer("k-ada")
        )
        looped = failed.json()["error"]["session_id"]
        assert failed.status_code == 422 and looped

        async def listed(query: str, key: str = "k-ada") -> list[str]:
            response = await client.get(f"/v1/sessions?{query}", headers=bearer(key))
            assert response.status_code == 200, response.text
            return [summary["id"] for summary in response.json()]

        assert await listed("") == [looped, played]
        assert await listed("errors=true") == [looped]
        assert await listed("errors=false") == [played]
        assert await listed("flow=loop") == [looped]
        assert await listed("status=awaiting_approval") == []
        assert await listed("status=running&flow=inspect&errors=false") == [played]
        assert await listed("errors=true", "k-bob-inspect") == []
        refused = await client.get("/v1/sessions?errors=maybe", headers=bearer("k-ada"))
        assert refused.status_code == 422
        document = (await client.get("/openapi.json")).json()
        parameters = {p["name"]: p for p in document["paths"]["/v1/sessions"]["get"]["parameters"]}
        assert "failed" in parameters["errors"]["description"]
        assert "awaiting_human" in parameters["status"]["description"]
        for path in ("/v1/sessions/{session_id}/turns", "/v1/sessions/{session_id}/approvals/{approval_id}"):
            asked = {p["name"]: p for p in document["paths"][path]["post"]["parameters"]}
            assert asked["inspect"]["schema"]["type"] == "boolean", path
            assert "timeline" in asked["inspect"]["description"], path


class Counter(Step):
    """Count what the user asks to count."""

    @tool
    def count(self, what: str) -> str:
        """Count something."""
        return f"3 {what}"


class CounterFlow(Flow):
    name = "counter"
    steps = [Counter]


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of an event stream as they arrive (comments skipped)."""
    name, data = "message", ""
    async for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
        elif not line and data:
            yield name, json.loads(data)
            name, data = "message", ""


async def test_an_inspector_follows_a_session_live_whoever_runs_its_turns() -> None:
    scripted = ScriptedModel(["Hello.", ToolCall("count", {"what": "apples"}), "Three apples."])
    held = HeldModel(scripted, at=3)  # the second turn's answer, after its tool ran
    engine = FlowEngine([CounterFlow], model=held, timeline=TimelineSettings())
    serve = serving(engine, api_keys=KEYS, open_mode=False, prepare_models=False)
    async with serve as url, httpx.AsyncClient(base_url=url) as client:
        created = await client.post(
            "/v1/flows/counter/sessions", json={"message": "hi"}, headers=bearer("k-ada")
        )
        session_id = created.json()["session_id"]
        live = f"/v1/sessions/{session_id}/timeline/live"
        # Without inspect, as another principal, or for no session: an unknown session's 404.
        unknown = await client.get(
            "/v1/sessions/00000000-0000-4000-8000-000000000000/timeline/live",
            headers=bearer("k-ada-inspect"),
        )
        assert unknown.status_code == 404
        for key in ("k-ada", "k-bob-inspect"):
            refused = await client.get(live, headers=bearer(key))
            assert refused.status_code == 404, key
            assert without_id(refused) == without_id(unknown)
        assert (await client.get(live)).status_code == 401

        async with client.stream("GET", live, headers=bearer("k-ada-inspect")) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = sse_events(stream.aiter_lines())
            assert await anext(events) == ("following", {"session_id": session_id, "turn": 1})

            # The customer's next turn, from another client that asks for no timeline.
            turn = asyncio.create_task(
                client.post(
                    f"/v1/sessions/{session_id}/turns",
                    json={"message": "count apples"},
                    headers=bearer("k-ada"),
                )
            )
            seen: list[tuple[int, str, bool]] = []
            while seen[-1:] != [(2, "model", False)]:  # until the held request shows
                name, data = await anext(events)
                assert name == "timeline" and (data["session_id"], data["turn"]) == (session_id, 2)
                entry = data["entry"]
                seen.append((data["index"], entry["kind"], "text" in entry or entry.get("ok") is not None))
            assert not turn.done()  # all of it while the turn runs
            assert seen == [
                (0, "model", False),
                (0, "model", True),
                (0, "model", True),
                (1, "tool", False),
                (1, "tool", True),
                (2, "model", False),
            ]
            held.release()
            rest = []
            while (event := await anext(events))[0] != "turn":
                rest.append(event[1]["entry"]["kind"])
            assert event == ("turn", {"session_id": session_id, "turn": 2, "outcome": "replied"})
            assert rest == ["model", "model"]  # the held request answered, then accepted
            answered = await turn
            assert answered.status_code == 200 and answered.json()["message"] == "Three apples."

        stored = await client.get(f"{live.removesuffix('/live')}?turn=2", headers=bearer("k-ada-inspect"))
        [recorded] = stored.json()["turns"]
        assert [entry["kind"] for entry in recorded["entries"]] == ["model", "tool", "model"]


async def test_a_live_timeline_with_no_turn_ends_once_idle() -> None:
    engine = FlowEngine([CounterFlow], model=ScriptedModel(["Hello."]), timeline=TimelineSettings())
    serve = serving(engine, prepare_models=False, follow_idle=0.01)  # the local open mode
    async with serve as url, httpx.AsyncClient(base_url=url) as client:
        created = await client.post("/v1/flows/counter/sessions", json={"message": "hi"})
        session_id = created.json()["session_id"]
        ended = await client.get(f"/v1/sessions/{session_id}/timeline/live")
        assert ended.status_code == 200
        assert events_of(ended.text) == [("following", {"session_id": session_id, "turn": 1})]
    # An engine that records nothing has nothing to follow: as an unknown session.
    quiet = FlowEngine([CounterFlow], model=ScriptedModel(["Hello."]))
    async with serving(quiet, prepare_models=False) as url, httpx.AsyncClient(base_url=url) as client:
        created = await client.post("/v1/flows/counter/sessions", json={"message": "hi"})
        session_id = created.json()["session_id"]
        assert (await client.get(f"/v1/sessions/{session_id}/timeline/live")).status_code == 404
