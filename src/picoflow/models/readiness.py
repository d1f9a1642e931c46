"""How far a model that must be loaded before it answers (the embedded one) has got, observable from anywhere.

Loading the embedded model can take minutes (a 1.1 GB download, a hash, llama.cpp reading the
file, the start step's prompt read into its cache). Whoever waits — the HTTP server's readiness
endpoint, a turn that arrived early, the terminal chat — reads one ``LoadTracker``: a thread-safe
holder of the current ``LoadStatus`` that can be polled, subscribed to, or awaited.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["LoadStatus", "LoadTracker", "Phase", "Preparable", "Warm", "overall", "preparable_models"]

logger = logging.getLogger("picoflow.models")


class Phase(enum.StrEnum):
    """Where a model load stands, in the order a first start goes through them."""

    IDLE = "idle"
    DOWNLOADING = "downloading"
    CHECKING = "checking"
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadStatus:
    """One moment of a model load."""

    phase: Phase = Phase.IDLE
    """The current phase."""
    done: int | None = None
    """Bytes downloaded (``downloading``) or hashed (``checking``) so far, or tokens of the first
    prompt read (``warming``)."""
    total: int | None = None
    """Bytes there are to download or hash, or tokens of the first prompt to read."""
    part: int | None = None
    """The part being downloaded, counted from 1."""
    parts: int | None = None
    """How many parts the download has."""
    reason: str | None = None
    """Why the load failed (``failed`` only), in words for the person running the server."""

    @property
    def settled(self) -> bool:
        """Nothing more will happen: the model is ready, or the load failed."""
        return self.phase in (Phase.READY, Phase.FAILED)

    @property
    def message(self) -> str:
        """The status in one line, as the chat page and the terminal show it."""
        if self.phase is Phase.DOWNLOADING:
            amount = f": {_mb(self.done or 0)} of {_mb(self.total)} MB" if self.total else "…"
            part = f" (part {self.part} of {self.parts})" if self.part and self.parts else ""
            return f"Downloading the offline model{amount}{part}"
        if self.phase is Phase.FAILED:
            return f"The offline model could not be loaded: {self.reason or 'unknown error'}"
        if self.phase is Phase.WARMING and self.total:
            return f"Getting ready… {min(self.done or 0, self.total) * 100 // self.total}%"
        return _MESSAGES[self.phase]

    @property
    def measured(self) -> bool:
        """Whether the phase tells how far it is (``done`` of ``total``), for a progress bar."""
        return bool(self.total) and self.phase in (Phase.DOWNLOADING, Phase.CHECKING, Phase.WARMING)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape the server sends (readiness endpoint and ``status`` stream events)."""
        state = (
            "ready" if self.phase is Phase.READY else "failed" if self.phase is Phase.FAILED else "loading"
        )
        body: dict[str, Any] = {"status": state, "phase": self.phase.value}
        for name in ("done", "total", "part", "parts", "reason"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        body["message"] = self.message
        return body


_MESSAGES = {
    Phase.IDLE: "The offline model is not loaded yet; it loads with the first message.",
    Phase.CHECKING: "Checking the model file…",
    Phase.LOADING: "Loading the model…",
    Phase.WARMING: "Getting ready…",
    Phase.READY: "Ready.",
}


def _mb(size: int | None) -> str:
    return f"{(size or 0) / 1e6:,.0f}"


def overall(statuses: Iterable[LoadStatus]) -> LoadStatus:
    """The status of several loads together: a failure first, else the first not ready, else ready."""
    pending = [status for status in statuses if status.phase is not Phase.READY]
    failed = [status for status in pending if status.phase is Phase.FAILED]
    return (failed or pending or [LoadStatus(phase=Phase.READY)])[0]


Listener = Callable[[LoadStatus], None]


class LoadTracker:
    """The current ``LoadStatus`` of one load. Any thread may update it; any may read, wait or subscribe."""

    def __init__(self, status: LoadStatus | None = None) -> None:
        self._changed = threading.Condition()
        self._status = status or LoadStatus()
        self._listeners: list[Listener] = []

    def __repr__(self) -> str:
        return f"LoadTracker({self._status.phase.value})"

    @property
    def status(self) -> LoadStatus:
        with self._changed:
            return self._status

    def update(self, status: LoadStatus) -> None:
        """Make ``status`` the current one and tell every listener (in the calling thread)."""
        with self._changed:
            if status == self._status:
                return
            self._status = status
            self._changed.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(status)
            except Exception:  # an observer must never break the load it watches
                logger.exception("picoflow: a load status listener failed")

    def report(self, phase: Phase, **fields: Any) -> None:
        self.update(LoadStatus(phase=phase, **fields))

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every new status (from the updating thread); returns the unsubscribe."""
        with self._changed:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._changed:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def wait(self, timeout: float | None = None) -> LoadStatus:
        """Block until the load is settled (or ``timeout`` seconds passed); the status then."""
        with self._changed:
            self._changed.wait_for(lambda: self._status.settled, timeout)
            return self._status

    async def settled(self, on_change: Listener | None = None) -> LoadStatus:
        """Wait until the load is ready or failed; ``on_change`` sees each status on the way (the
        current one first), in the event loop's thread."""
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake(_: LoadStatus) -> None:
            # The loop may be gone by the time a late update arrives from the loading thread.
            if not loop.is_closed():
                loop.call_soon_threadsafe(changed.set)

        unsubscribe = self.subscribe(wake)
        try:
            shown: LoadStatus | None = None
            while True:
                changed.clear()
                # Read the status itself, not the one handed to ``wake``: updates from another
                # thread may reach the listeners out of order, the current value never is.
                current = self.status
                if on_change is not None and current != shown:
                    on_change(current)
                    shown = current
                if current.settled:
                    return current
                await changed.wait()
        finally:
            unsubscribe()


Warm = Callable[[], Awaitable[object]]
"""Sends a flow's first request once, so the model has read the start step's prompt."""


@runtime_checkable
class Preparable(Protocol):
    """A model that must be loaded before it can answer; several instances may share one load."""

    @property
    def load_status(self) -> LoadTracker: ...

    async def prepare(self, warm: Warm | None = None, *, cache_name: str | None = None) -> LoadStatus:
        """Load the model (reporting into ``load_status``), then run ``warm``; the final status.

        ``cache_name`` names what ``warm`` reads (a flow), for models that keep it across restarts.
        """
        ...


def preparable_models(models: Iterable[object]) -> list[Preparable]:
    """The models that need preparing, one per load (the steps of a flow share one embedded model)."""
    chosen: dict[int, Preparable] = {}
    for model in models:
        if isinstance(model, Preparable):
            chosen.setdefault(id(model.load_status), model)
    return list(chosen.values())
