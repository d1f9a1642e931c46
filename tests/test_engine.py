"""Engine-level behaviour: restoring sessions, registration and listing."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from picoflow import Flow, FlowDefinitionError, FlowEngine, Step, TurnResult
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ScriptedModel
from picoflow.session import Session


class Chat(Step):
    """Chat."""


class IdleFlow(Flow):
    name = "idle"
    steps = [Chat]

    def on_restore_session(self, session: Session) -> Session | None:
        idle = time.time() - session.updated_at
        return None if idle > 60 or session.metadata.get("expired") else session


async def test_on_restore_session_can_reset_an_idle_session() -> None:
    model = ScriptedModel(["first", "second", "fresh"])
    engine = FlowEngine([IdleFlow], model=model)
    first = await engine.run("idle", "one")
    sid = first.session_id or ""
    await engine.run("idle", "two", sid)
    stored = await engine.store.load(sid)
    assert stored is not None
    stored.metadata["expired"] = True
    await engine.store.save(stored, expected_revision=stored.revision)

    reset = await engine.run("idle", "three", sid)
    assert reset.ok and reset.session_id == sid
    session = await engine.store.load(sid)
    assert session is not None
    assert session.turns == 1 and session.metadata == {} and session.revision == 4
    assert [m.content for m in session.memory["Chat"].messages] == ["three", "fresh"]
    # History is never rewritten: the transcript still holds the old turns, with increasing seq.
    transcript = await engine.store.transcript(sid)
    assert [m.content for m in transcript] == ["one", "first", "two", "second", "three", "fresh"]
    assert [m.seq for m in transcript] == sorted(m.seq for m in transcript)


async def test_flows_are_listed_and_sessions_recorded_with_their_model() -> None:
    engine = FlowEngine([IdleFlow], model=ScriptedModel(["hi"]))
    assert [spec.name for spec in engine.flows] == ["idle"]
    result = await engine.run("idle", "hello")
    session = await engine.store.load(result.session_id or "")
    assert session is not None and session.models == {"Chat": "scripted:test"}
    listed = await engine.store.list_sessions(flow="idle")
    assert [info.id for info in listed] == [result.session_id]


def test_a_bad_default_model_from_the_environment_fails_at_registration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setenv("PICOFLOW_MODEL", "nosuchprovider:model")
    with pytest.raises(FlowDefinitionError, match="nosuchprovider"):
        FlowEngine([IdleFlow])
    FlowEngine([IdleFlow], model=ScriptedModel([]))  # an explicit model needs no default


async def test_warm_sends_the_first_request_of_a_new_session_and_stores_nothing() -> None:
    model = ScriptedModel(["ignored"])
    engine = FlowEngine([IdleFlow], model=model)
    assert await engine.warm("idle", message="Hi") is True
    [request] = model.requests
    assert request.system == "Chat." and [m.content for m in request.messages] == ["Hi"]
    assert request.settings == {"max_tokens": 1}
    assert await engine.store.list_sessions() == []
    # A failing model is reported, not raised.
    assert await FlowEngine([IdleFlow], model=ScriptedModel([])).warm("idle") is False


class Plain(Flow):
    name = "plain"
    steps = [Chat]


def test_run_sync_keeps_one_event_loop_per_thread() -> None:
    loops: list[int] = []

    def answer(request: object) -> str:
        loops.append(id(asyncio.get_running_loop()))
        return "ok"

    engine = FlowEngine([Plain], model=FunctionModel(answer))
    first = engine.run_sync("plain", "one")
    second = engine.run_sync("plain", "two", first.session_id)
    assert first.ok and second.ok and loops[0] == loops[1]

    other: list[TurnResult] = []
    worker = threading.Thread(target=lambda: other.append(engine.run_sync("plain", "three")))
    worker.start()
    worker.join()
    assert other[0].ok and loops[2] != loops[0]


async def test_run_sync_refuses_to_run_inside_an_event_loop() -> None:
    engine = FlowEngine([Plain], model=ScriptedModel([]))
    with pytest.raises(RuntimeError, match=r"await engine\.run"):
        engine.run_sync("plain", "hi")


def test_an_interrupted_sync_turn_is_cancelled_not_resumed_later() -> None:
    calls: list[str] = []

    async def answer(request: ModelRequest) -> str:
        calls.append(request.messages[-1].content)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return "answered"

    engine = FlowEngine([Plain], model=FunctionModel(answer))
    with pytest.raises(KeyboardInterrupt):
        engine.run_sync("plain", "first")
    result = engine.run_sync("plain", "second")
    assert result.message == "answered" and calls == ["first", "second"]
    stored = asyncio.run(engine.list_sessions(principal=None))
    assert [info.id for info in stored] == [result.session_id]
