"""A past session is inspected after a restart, on SQLite and PostgreSQL: the engine that recorded
it is gone, a new one (not recording) reads the same timelines, a failed first turn's included."""

from __future__ import annotations

from store_helpers import Backend

from inspect_flow import ADA, InspectFlow, LoopFlow, looping_model, play
from picoflow import FlowEngine
from picoflow.models import ScriptedModel
from picoflow.timeline import TimelineSettings


async def test_timelines_outlive_the_engine_that_recorded_them(sql_backend: Backend) -> None:
    model = ScriptedModel([])
    recording = FlowEngine([InspectFlow, LoopFlow], model=model, store=sql_backend.open(),
                           timeline=TimelineSettings())  # fmt: skip
    session_id = await play(recording, model)
    before = await recording.timeline(session_id, principal="ada")
    failed = await FlowEngine([LoopFlow], model=looping_model(), store=sql_backend.open(),
                              timeline=TimelineSettings()).run("loop", "find it", caller=ADA)  # fmt: skip
    assert failed.error is not None and failed.session_id is not None

    later = FlowEngine([InspectFlow, LoopFlow], store=sql_backend.open())
    after = await later.timeline(session_id, principal="ada")
    assert before is not None and after is not None
    assert after.model_dump() == before.model_dump()
    assert [(turn.turn, turn.outcome) for turn in after.turns] == [
        (1, "replied"), (2, "replied"), (3, "replied"), (4, "replied"), (5, "paused"), (6, "replied"),
    ]  # fmt: skip
    lost = await later.timeline(failed.session_id, principal="ada")
    assert lost is not None
    [turn] = lost.turns
    assert turn.outcome == "failed" and turn.error is not None and turn.error.kind == "usage_limit"
    assert [entry.kind for entry in turn.entries].count("model") == 4
    assert await later.timeline(session_id, principal="bob") is None
