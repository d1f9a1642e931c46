"""Whether the session store answers, for readiness probes: a cheap ping with a short timeout,
cached briefly.

A readiness probe may come every second from each of several load balancers; without the cache each
probe would be a database round trip, and while the database is down each would wait out its
timeout. Concurrent probes share one ping. Stores without a ``ping()`` (memory, SQLite: in-process)
are not checked.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Literal

from picoflow.sessions.base import SessionStore

__all__ = ["StoreCheck", "store_check"]

logger = logging.getLogger("picoflow")

StoreHealth = Literal["ok", "unavailable"]


class StoreCheck:
    """The last ping's outcome, kept ``ttl`` seconds; a ping longer than ``timeout`` is a failure."""

    def __init__(
        self, ping: Callable[[], Awaitable[None]], *, timeout: float = 1.0, ttl: float = 2.0
    ) -> None:
        self._ping = ping
        self.timeout = timeout
        self.ttl = ttl
        self._result: StoreHealth | None = None
        self._checked_at = 0.0
        self._running: asyncio.Task[StoreHealth] | None = None

    async def health(self) -> StoreHealth:
        if self._result is not None and time.monotonic() - self._checked_at < self.ttl:
            return self._result
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._check(), name="picoflow-store-ping")
        # Shielded: one probe giving up (its client hung up) must not cancel the others' ping.
        return await asyncio.shield(self._running)

    async def _check(self) -> StoreHealth:
        result: StoreHealth = "ok"
        try:
            async with asyncio.timeout(self.timeout):
                await self._ping()
        except Exception as exc:  # any failure means "not ready"; the reason goes to the log only
            logger.warning("picoflow: the session store did not answer its ping: %s", exc)
            result = "unavailable"
        self._result, self._checked_at = result, time.monotonic()
        return result


_checks: weakref.WeakKeyDictionary[object, StoreCheck] = weakref.WeakKeyDictionary()


def store_check(store: SessionStore) -> StoreCheck | None:
    """The shared check of ``store``, or None when the store has no ``ping()`` to check it with."""
    ping: Callable[[], Awaitable[None]] | None = getattr(store, "ping", None)
    if ping is None:
        return None
    check = _checks.get(store)
    if check is None:
        check = _checks[store] = StoreCheck(ping)
    return check
