"""``GET /v1/sessions/{id}/timeline``: the inspector over HTTP. Answered to callers with the inspect
visibility and in the local open mode; anyone else, and another principal, gets the 404 of an
unknown session. A first turn that fails over HTTP names its session, whose timeline shows every
model call."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema

from inspect_flow import InspectFlow, LoopFlow, looping_model, play
from picoflow import FlowEngine
from picoflow.context import Caller
from picoflow.models import ScriptedModel
from picoflow.server import ServerSettings
from picoflow.server.auth import Identity
from picoflow.timeline import TimelineSettings, timeline_schema

from .support import client_for, events_of

KEYS = {
    "k-ada": Identity("ada"),
    "k-ada-inspect": Identity("ada", frozenset({"inspect"})),
    "k-bob-inspect": Identity("bob", frozenset({"inspect"})),
}
WITH_KEYS = ServerSettings(api_keys=KEYS, open_mode=False, prepare_models=False)


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
