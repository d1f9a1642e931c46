"""Which models the served flows must have loaded before they answer, loading them, and waiting for them.

The embedded model takes from seconds to minutes to be ready (download, hash, load, reading the
default flow's first prompt). The server starts that in the background when it starts, so
``/healthcheck`` answers at once; ``/readyz`` reports the progress, the chat page shows it, and a
turn that arrives early waits for the models of its flow instead of failing.

The wait happens inside the engine's turn, in its ``before_turn`` hook (``ReadinessGate``), once the
engine knows the turn's session and so its flow: the server never loads a session to find out. A
turn the server starts carries a ``TurnWatch`` in its context, which tells the gate which server's
models to wait for and tells the server what it learns on the way (the flow, the load's progress).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from picoflow.engine import FlowEngine
from picoflow.exceptions import PicoflowError
from picoflow.flow import FlowSpec
from picoflow.models.base import Model
from picoflow.models.local import LocalModelUnavailable
from picoflow.models.readiness import LoadStatus, Phase, Preparable, Warm, overall, preparable_models

__all__ = ["READY", "Readiness", "ReadinessGate", "ReadyResponse", "TurnWatch", "flow_models"]

logger = logging.getLogger("picoflow.server")

READY = LoadStatus(phase=Phase.READY)


class ReadyResponse(BaseModel):
    """``GET /readyz``: whether every model the served flows need is loaded, and if not, how far it is."""

    status: Literal["ready", "loading", "failed"]
    phase: Phase = Field(description="idle, downloading, checking, loading, warming, ready or failed")
    done: int | None = Field(
        None, description="Bytes downloaded or checked so far, or tokens of the first prompt read (warming)."
    )
    total: int | None = Field(
        None, description="Bytes to download or check, or tokens of the first prompt to read (warming)."
    )
    part: int | None = Field(None, description="Part being downloaded, from 1.")
    parts: int | None = Field(None, description="Parts of the download.")
    reason: str | None = Field(None, description="Why loading failed.")
    store: Literal["ok", "unavailable"] | None = Field(
        None, description="Whether the session store answers a ping (absent for in-process stores)."
    )
    message: str = Field(description="The status in words, as the chat page shows it.")


def flow_models(engine: FlowEngine, spec: FlowSpec) -> list[Model]:
    """The models the steps of ``spec`` call (a model that cannot be built is the turn's business)."""
    models: list[Model] = []
    for step in spec.steps.values():
        if step.is_logic:
            continue
        try:
            models.append(engine.model_for(spec, step))
        except PicoflowError:
            continue
    return models


def _warmer(engine: FlowEngine, flow: str) -> Warm:
    async def warm() -> bool:
        return await engine.warm(flow)

    return warm


@dataclass(slots=True)
class _Load:
    model: Preparable
    warm: Warm | None
    cache_name: str | None
    task: asyncio.Task[LoadStatus] | None = None


class Readiness:
    """The loads the served flows need: started once, observed by ``/readyz``, awaited by turns."""

    def __init__(self, loads: list[_Load], needs: dict[str, list[_Load]]) -> None:
        self._loads = loads
        self._needs = needs

    @classmethod
    def of(cls, engine: FlowEngine, warm_flow: str | None = None) -> Readiness:
        """The loads of ``engine``'s flows; ``warm_flow``'s first prompt is read as part of its load.

        Only one flow is warmed: llama.cpp keeps one processed prompt per slot, so warming a
        second flow would push out the first.
        """
        loads: dict[int, _Load] = {}
        needs: dict[str, list[_Load]] = {}
        specs = {spec.name: spec for spec in engine.flows}
        warm_spec = specs.get(warm_flow or "")
        if warm_spec is not None and not warm_spec.steps[warm_spec.start].is_logic:
            try:
                # The very instance the warm-up calls, so its timings tell what it read.
                start_model: list[Model] = [engine.model_for(warm_spec, warm_spec.steps[warm_spec.start])]
            except PicoflowError:
                start_model = []
            for model in preparable_models(start_model):
                loads[id(model.load_status)] = _Load(model, _warmer(engine, warm_spec.name), warm_spec.name)
        for spec in specs.values():
            for model in preparable_models(flow_models(engine, spec)):
                load = loads.setdefault(id(model.load_status), _Load(model, None, None))
                needs.setdefault(spec.name, []).append(load)
        return cls(list(loads.values()), needs)

    @property
    def needed(self) -> bool:
        """Whether any served flow needs a model loaded at all."""
        return bool(self._loads)

    def status(self, flow: str | None = None) -> LoadStatus:
        """All served flows' models together, or those of ``flow``."""
        loads = self._loads if flow is None else self._needs.get(flow, [])
        return overall(load.model.load_status.status for load in loads)

    def subscribe(self, listener: Callable[[LoadStatus], None]) -> Callable[[], None]:
        """Call ``listener`` with the overall status whenever one of the loads changes."""
        removers = [
            load.model.load_status.subscribe(lambda _: listener(self.status())) for load in self._loads
        ]

        def unsubscribe() -> None:
            for remove in removers:
                remove()

        return unsubscribe

    def start(self) -> None:
        """Start every load not started yet, in the background (call it from the event loop)."""
        for load in self._loads:
            if load.task is None:
                load.task = asyncio.create_task(self._prepare(load), name="picoflow-prepare-model")

    async def _prepare(self, load: _Load) -> LoadStatus:
        try:
            return await load.model.prepare(load.warm, cache_name=load.cache_name)
        except Exception as exc:
            logger.exception("picoflow.server: preparing %r failed", load.model)
            tracker = load.model.load_status
            if not tracker.status.settled:
                tracker.report(Phase.FAILED, reason=f"{type(exc).__name__} while preparing the model")
            return tracker.status

    async def wait(self, flow: str, on_change: Callable[[LoadStatus], None] | None = None) -> LoadStatus:
        """Wait until every model of ``flow`` is ready or one failed; ``on_change`` sees the way there."""
        loads = self._needs.get(flow)
        if not loads:
            return READY
        self.start()  # an application run without its lifespan loads on first use
        for load in loads:
            status = await load.model.load_status.settled(on_change)
            if status.phase is Phase.FAILED:
                return status
        return self.status(flow)

    async def stop(self) -> None:
        """Stop waiting for the loads (a load running in a thread ends with the process)."""
        tasks = [load.task for load in self._loads if load.task is not None and not load.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


BeforeTurn = Callable[[FlowSpec], Awaitable[None]]


_WATCH: ContextVar[TurnWatch | None] = ContextVar("picoflow_server_turn", default=None)
"""The ``TurnWatch`` of the turn running in this context, if a server started it."""


@dataclass(slots=True)
class TurnWatch:
    """One turn the server started, as the engine's ``before_turn`` sees it through the context.

    Turns started inside ``with watch:`` (and in tasks created there) run under ``watch``.
    """

    readiness: Readiness
    """The models of this server's flows."""
    on_start: Callable[[], None] | None = None
    """Called once the engine accepted the turn (its input, session and flow), before any wait:
    an event stream opens here, so refusals before it are plain HTTP statuses."""
    on_status: Callable[[LoadStatus], None] | None = None
    """Sees each load status while the turn waits for its models (not the final one)."""
    _token: Token[TurnWatch | None] | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> TurnWatch:
        self._token = _WATCH.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _WATCH.reset(self._token)
            self._token = None

    async def started(self, spec: FlowSpec) -> None:
        if self.on_start is not None:
            self.on_start()
        status = await self.readiness.wait(spec.name, on_change=self._progress)
        if status.phase is Phase.FAILED:
            # The error a turn on a missing model file gets, so a client sees one failure either way.
            raise LocalModelUnavailable(f"the models of flow {spec.name} did not load: {status.reason}")

    def _progress(self, status: LoadStatus) -> None:
        if self.on_status is not None and not status.settled:
            self.on_status(status)


class ReadinessGate:
    """The engine's ``before_turn`` once a server serves it: a turn a server started waits for its
    flow's models; then the hook the engine had before, if any, runs as it did.

    Turns started elsewhere (the library, the CLI) carry no ``TurnWatch`` and pass straight on.
    """

    def __init__(self, then: BeforeTurn | None = None) -> None:
        self.then = then

    @classmethod
    def install(cls, engine: FlowEngine) -> None:
        """Put a gate in front of ``engine.before_turn`` (once, however many apps serve it)."""
        if not isinstance(engine.before_turn, cls):
            engine.before_turn = cls(engine.before_turn)

    async def __call__(self, spec: FlowSpec) -> None:
        watch = _WATCH.get()
        if watch is not None:
            await watch.started(spec)
        if self.then is not None:
            await self.then(spec)
