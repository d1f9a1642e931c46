"""A small flow and a model for the server tests, plus helpers to build apps and clients.

The model answers from the user's words, so a test reads like the conversation it checks:
"who am I" makes the model call ``whoami`` (which reports the identity the tool was given),
"table" returns a Markdown table through ``direct()``, "json" a JSON reply, "bye" ends the
conversation, "down" makes the provider fail, "crash" makes a tool raise, and "wait" blocks
until the test releases it. ``LoadingDesk`` is the same model behind a load the test steps through.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn

from picoflow import Flow, FlowEngine, RunContext, Step, TerminateStep, direct, go, tool
from picoflow.exceptions import ModelError, ModelHTTPError
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ToolCall
from picoflow.models.readiness import LoadStatus, LoadTracker, Phase, Warm
from picoflow.server import ServerSettings, create_app
from picoflow.sessions import MemoryStore
from picoflow.sessions.base import SessionStore

SECRET = "db-password-hunter2"
TABLE = "| Feature | Alpha | Beta |\n|---|---|---|\n| price | $10 | $12 |\n| wifi | ✅ | ❌ |"
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"> [click](javascript:alert(1))'


class Desk(Step):
    """Answer questions and show comparisons."""

    @tool
    def whoami(self, ctx: RunContext) -> str:
        """Tell who is asking."""
        return json.dumps({"principal": ctx.principal, "config": dict(ctx.config)}, sort_keys=True)

    @tool
    def compare(self) -> Any:
        """Compare the products."""
        return direct(TABLE + "\n\nAnother comparison?")

    @tool
    def export(self) -> Any:
        """Export the order as JSON."""
        return direct({"order": 7, "items": ["lamp", "desk"]})

    @tool
    def crash(self) -> str:
        """A tool with a bug."""
        raise RuntimeError(f"could not connect with {SECRET}")

    @tool
    def finish(self) -> Any:
        """The user is done."""
        return go(Farewell)


class Farewell(TerminateStep):
    """Say goodbye."""


class DeskFlow(Flow):
    """A help desk used by the server tests."""

    name = "desk"
    steps = [Desk, Farewell]


class OtherFlow(Flow):
    name = "other"
    steps = [Desk, Farewell]


class DeskModel(FunctionModel):
    """Answers by keyword; ``gate`` lets a test hold a turn ("wait") until it sets the event."""

    def __init__(self) -> None:
        super().__init__(self.answer, name="function:desk")
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def answer(self, request: ModelRequest) -> Any:
        if request.step == "Farewell":
            return "Goodbye!"
        last = request.messages[-1]
        if last.role == "tool":
            return f"tool said: {last.content}"
        text = last.content.lower()
        if "who" in text:
            return ToolCall("whoami", {})
        if "table" in text:
            return ToolCall("compare", {})
        if "json" in text:
            return ToolCall("export", {})
        if "crash" in text:
            return ToolCall("crash", {})
        if "bye" in text:
            return ToolCall("finish", {})
        if "xss" in text:
            return XSS
        if "down" in text:
            raise ModelHTTPError("provider answered 503", status_code=503, retry_after=7, provider="test")
        if "flaky" in text:
            raise ModelError("connection reset by peer")
        if "wait" in text:
            self.waiting.set()
            await self.gate.wait()
            return "done waiting"
        return f"echo: {last.content}"


DOWNLOADING = LoadStatus(phase=Phase.DOWNLOADING, done=312_400_000, total=1_117_320_768, part=7, parts=22)


class WatchedTracker(LoadTracker):
    """A load status that tells the test when someone starts waiting for it."""

    def __init__(self, status: LoadStatus) -> None:
        super().__init__(status)
        self.watched = threading.Event()

    def subscribe(self, listener: Any) -> Any:
        unsubscribe = super().subscribe(listener)
        self.watched.set()
        return unsubscribe


class LoadingDesk(DeskModel):
    """The desk model behind a load that the test moves through its phases (from any thread)."""

    def __init__(self, status: LoadStatus = DOWNLOADING) -> None:
        super().__init__()
        self.tracker = WatchedTracker(status)
        self.prepared: list[tuple[bool, str | None]] = []

    @property
    def load_status(self) -> LoadTracker:
        return self.tracker

    async def prepare(self, warm: Warm | None = None, *, cache_name: str | None = None) -> LoadStatus:
        # Started by the server; the test, not this method, decides when the load is done.
        self.prepared.append((warm is not None, cache_name))
        return self.tracker.status


def desk_engine(store: SessionStore | None = None, model: Any = None) -> FlowEngine:
    return FlowEngine([DeskFlow, OtherFlow], store=store or MemoryStore(), model=model or DeskModel())


@asynccontextmanager
async def client_for(
    engine: FlowEngine, settings: ServerSettings | None = None, **headers: str
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(engine, settings=settings or ServerSettings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=headers) as client:
        yield client


def events_of(body: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a Server-Sent Events body (comments skipped)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


class _SignallingServer(uvicorn.Server):
    """A uvicorn server that sets ``ready`` once it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.ready.set()


@asynccontextmanager
async def serving(engine: FlowEngine, **settings: object) -> AsyncIterator[str]:
    """The engine's application under uvicorn on a free 127.0.0.1 port, in this event loop."""
    app = create_app(engine, settings=ServerSettings(**settings))  # type: ignore[arg-type]
    async with serving_asgi(app) as url:
        yield url


@asynccontextmanager
async def serving_asgi(app: Any) -> AsyncIterator[str]:
    """uvicorn serving ``app`` on a free 127.0.0.1 port, in this event loop, with its lifespan."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = _SignallingServer(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        # Wait for the server to listen, or to fail starting: an event, not a time budget.
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if task.done():
            task.result()  # startup failed: its error, not a later connection refusal
            raise RuntimeError("uvicorn stopped before it started serving")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
