"""Turns streamed as Server-Sent Events, in process and through a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import httpx

from picoflow import Flow, FlowEngine, Step, tool
from picoflow.messages import Message, ModelRequest, ToolCall
from picoflow.models import FunctionModel
from picoflow.server import ServerSettings
from picoflow.session import Session
from picoflow.sessions import MemoryStore

from .support import DeskModel, client_for, desk_engine, events_of, serving


async def test_a_streamed_turn_reports_steps_tools_text_and_the_result() -> None:
    async with client_for(desk_engine()) as client:
        session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()["session_id"]
        reply = await client.post(f"/v1/sessions/{session}/turns", json={"message": "bye", "stream": True})
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.headers["cache-control"] == "no-cache"
        events = events_of(reply.text)
        assert [name for name, _ in events] == ["tool_call", "step", "tool_result", "text", "result"]
        assert events[0][1] == {"step": "Desk", "id": "call_1", "name": "finish", "args": {}}
        assert events[1][1] == {"step": "Farewell", "previous": "Desk"}
        assert events[2][1]["name"] == "finish" and events[2][1]["is_error"] is False
        assert events[3][1] == {"step": "Farewell", "text": "Goodbye!"}
        result = events[4][1]
        assert (
            result["session_id"] == session
            and result["completed"] is True
            and result["message"] == "Goodbye!"
        )


async def test_accept_header_selects_streaming_and_render_adds_html() -> None:
    async with client_for(desk_engine()) as client:
        reply = await client.post(
            "/v1/flows/desk/sessions?render=html",
            json={"message": "table"},
            headers={"Accept": "text/event-stream"},
        )
        events = events_of(reply.text)
        assert events[-1][0] == "result"
        assert "<table>" in events[-1][1]["html"]
        assert (await client.get(f"/v1/sessions/{events[-1][1]['session_id']}")).status_code == 200


async def test_failures_before_the_stream_are_statuses_and_during_it_an_error_event() -> None:
    async with client_for(desk_engine(), ServerSettings(max_message_chars=20)) as client:
        assert (
            await client.post("/v1/sessions/unknown/turns", json={"message": "hi", "stream": True})
        ).status_code == 404
        assert (
            await client.post("/v1/flows/nope/sessions", json={"message": "hi", "stream": True})
        ).status_code == 404
        too_long = await client.post("/v1/flows/desk/sessions", json={"message": "x" * 21, "stream": True})
        assert too_long.status_code == 413
        down = await client.post("/v1/flows/desk/sessions", json={"message": "down", "stream": True})
        assert down.status_code == 200
        (_name, data), *_ = [event for event in events_of(down.text) if event[0] == "error"]
        assert data["status"] == 503
        assert data["error"]["kind"] == "model_unavailable" and data["error"]["retry_after"] == 7.0


# --- a real server ------------------------------------------------------------------------------------


async def test_through_uvicorn_compat_api_and_incremental_events() -> None:
    model = DeskModel()
    engine = desk_engine(model=model)
    async with serving(engine) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        first = await client.post("/ai/run", json={"flowName": "desk", "message": "hello"})
        assert first.status_code == 200 and first.json()["message"] == "echo: hello"
        session = first.headers["CHAT_SESSION_ID"]
        assert (await client.post("/ai/run", json={"flowName": "nope", "message": "x"})).status_code == 404

        seen: list[str] = []
        async with client.stream(
            "POST", f"/v1/sessions/{session}/turns", json={"message": "please wait", "stream": True}
        ) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            # The stream is open and the turn is blocked inside the model: nothing final yet.
            assert (await anext(lines)).startswith(":")
            await asyncio.wait_for(model.waiting.wait(), 5)
            model.gate.set()
            async for line in lines:
                if line.startswith("event:"):
                    seen.append(line.removeprefix("event:").strip())
                if line.startswith("data:") and seen[-1] == "result":
                    assert json.loads(line[5:])["message"] == "done waiting"
        assert seen == ["text", "result"]


class SaveWatch(MemoryStore):
    """A store that tells when it has saved a session ``turns`` turns long."""

    def __init__(self, turns: int) -> None:
        super().__init__()
        self.turns = turns
        self.saved = asyncio.Event()

    async def save(
        self, session: Session, *, expected_revision: int | None, appended: Sequence[tuple[str, Message]] = ()
    ) -> int:
        revision = await super().save(session, expected_revision=expected_revision, appended=appended)
        if session.turns == self.turns:
            self.saved.set()
        return revision


async def test_a_client_that_disconnects_mid_turn_does_not_lose_the_turn() -> None:
    model = DeskModel()
    store = SaveWatch(turns=2)
    engine = desk_engine(store=store, model=model)
    async with serving(engine) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            session = (await client.post("/v1/flows/desk/sessions", json={"message": "hi"})).json()[
                "session_id"
            ]
            async with client.stream(
                "POST", f"/v1/sessions/{session}/turns", json={"message": "wait", "stream": True}
            ) as stream:
                await anext(stream.aiter_lines())
                await asyncio.wait_for(model.waiting.wait(), 5)
        # The client is gone; the turn finishes and commits anyway.
        model.gate.set()
        await asyncio.wait_for(store.saved.wait(), 30)  # an upper bound for a failure, not a pace
        stored = await engine.store.load(session)
        assert stored is not None and stored.turns == 2
        assert [m.content for m in await engine.store.transcript(session) if m.role == "assistant"][-1] == (
            "done waiting"
        )


class Scout(Step):
    """Look around and report in one line."""

    @tool
    def look(self) -> str:
        """Look around."""
        return "a quiet street"


class Lead(Step):
    """Send the scout."""

    @tool
    async def send_scout(self) -> str:
        """Send the scout and hear back."""
        return str(await self.run_step(Scout, "what do you see?"))


class ScoutFlow(Flow):
    name = "scouting"
    steps = [Lead, Scout]


def scouting_model() -> FunctionModel:
    def answer(request: ModelRequest) -> object:
        done = request.messages[-1].role == "tool"
        if request.step == "Scout":
            return "A quiet street." if done else ToolCall("look", {}, "look_1")
        return "The scout saw a quiet street." if done else ToolCall("send_scout", {}, "send_1")

    return FunctionModel(answer)


async def test_a_sub_steps_events_carry_their_parent_and_its_messages_their_run() -> None:
    engine = FlowEngine([ScoutFlow], store=MemoryStore(), model=scouting_model())
    async with client_for(engine) as client:
        reply = await client.post("/v1/flows/scouting/sessions", json={"message": "go", "stream": True})
        events = events_of(reply.text)
        assert [(name, data.get("step"), data.get("parent")) for name, data in events[:-1]] == [
            ("step", "Lead", None),
            ("tool_call", "Lead", None),
            ("step", "Scout", "send_1"),
            ("tool_call", "Scout", "send_1"),
            ("tool_result", "Scout", "send_1"),
            ("tool_result", "Lead", None),
            ("text", "Lead", None),
        ]
        assert "parent" not in events[0][1]  # a turn's own events are as they always were
        result = events[-1][1]
        assert result["message"] == "The scout saw a quiet street."
        session = (await client.get(f"/v1/sessions/{result['session_id']}")).json()
        shown = [(m["role"], m["step"], m["within"], m["content"]) for m in session["transcript"]]
        assert shown == [
            ("user", "Lead", None, "go"),
            ("assistant", "Lead", None, ""),
            ("user", "Scout", "Scout@2", "what do you see?"),
            ("assistant", "Scout", "Scout@2", ""),
            ("tool", "Scout", "Scout@2", "a quiet street"),
            ("assistant", "Scout", "Scout@2", "A quiet street."),
            ("tool", "Lead", None, "A quiet street."),
            ("assistant", "Lead", None, "The scout saw a quiet street."),
        ]
        assert session["step"] == "Lead" and session["sequence"] == ["Lead"]
        assert session["models"] == {"Lead": "function:test", "Scout": "function:test"}
