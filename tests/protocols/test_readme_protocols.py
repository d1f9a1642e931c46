"""The README's protocol examples run as written against a live server and answer a hotel turn."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

from picoflow import FlowEngine
from picoflow.models import ScriptedModel
from picoflow.sessions import MemoryStore
from picoflow_demos.hotel import HotelFlow
from picoflow_demos.hotel.scripted import found

from .conftest import live

README = Path(__file__).resolve().parents[2] / "README.md"


def protocol_examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Protocols:", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, re.DOTALL)


async def test_the_readme_runs_a_hotel_turn_on_each_protocol() -> None:
    examples = protocol_examples()
    assert [block.splitlines()[0].split(":")[0] for block in examples] == [
        "# AG-UI",
        "# The AI SDK's UI message stream (x-vercel-ai-ui-message-stream",
        "# A2A",
        "# OpenAI Chat Completions",
    ]
    # What the hotel says to "Hi", run on the engine itself.
    alone = FlowEngine([HotelFlow], store=MemoryStore(), model=ScriptedModel([found()]))
    greeting = (await alone.run("hotel", "Hi")).message
    first_line = re.split(r"[\n’'\"]", greeting)[0]
    assert len(first_line) > 10

    store = MemoryStore()
    engine = FlowEngine([HotelFlow], store=store, model=ScriptedModel([found()] * len(examples)))
    markers = [
        ("RUN_STARTED", "RUN_FINISHED"),
        ('"type":"text-delta"', '"type":"finish"', "[DONE]"),
        ('"skills"', "TASK_STATE_COMPLETED"),
        ('"object":"list"', "x-picoflow-session"),
    ]
    async with live(engine) as url:
        for block, expected in zip(examples, markers, strict=True):
            script = block.replace("http://127.0.0.1:8000", url).replace("k-alice", "cust-key")
            done = await asyncio.to_thread(
                subprocess.run, ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True
            )
            assert done.returncode == 0, done.stderr
            compact = done.stdout.replace(": ", ":").replace(", ", ",")
            for marker in expected:
                assert marker.lower() in compact.lower(), (marker, done.stdout)
            assert first_line in done.stdout, done.stdout
    infos = await store.list_sessions(limit=10)
    assert len(infos) == 4 and {info.flow for info in infos} == {"hotel"}
    sessions = [await store.load(info.id) for info in infos]
    assert [(session.principal, session.turns) for session in sessions if session] == [("cust-1", 1)] * 4
