"""Stored sessions against this version of their flows: the pre-deploy check.

``check`` walks every live session of a flow in the store, in pages of ids (``LiveSessions``),
loads each without its messages, and runs on it the migration a turn would run
(``picoflow.versions``), on a copy nothing saves. What it reports is grouped, so a million
sessions cost a page of memory at a time and a report of the same size as for ten.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from picoflow._run.session_turn import store_call
from picoflow.flow import FlowSpec
from picoflow.sessions.base import LiveSessions, SessionStore
from picoflow.versions import FlowCheck, check_session


class VersionsHost(Protocol):
    """What the check reads from its engine."""

    store: SessionStore
    clock: Callable[[], float]


class SessionsCheck:
    """The pre-deploy check of an engine's flows against its store."""

    def __init__(self, host: VersionsHost) -> None:
        self.host = host

    async def check(self, spec: FlowSpec, page: int) -> FlowCheck:
        """What loading each live session of ``spec``'s flow under this version would do. Changes
        nothing. Raises ``ValueError`` for a store that cannot read its sessions in pages."""
        if not 1 <= page <= 100_000:
            raise ValueError(f"page must be between 1 and 100000 sessions, not {page}")
        store = self.host.store
        if not isinstance(store, LiveSessions):
            raise ValueError(f"{store!r} cannot read its live sessions in pages (it is no LiveSessions)")
        started = time.perf_counter()
        report = FlowCheck(spec.name, spec.version)
        async with store_call("counting live sessions"):
            counted = await store.live_versions()
        report.stored = {
            version: count for (flow, version), count in sorted(counted.items()) if flow == spec.name
        }
        now = self.host.clock()
        after = ""
        while True:
            async with store_call("reading live sessions"):
                rows = await store.live_sessions(spec.name, after=after, limit=page)
            for row in rows:
                if row.session is None:
                    report.unreadable(row.id, row.problem or "the stored session is not readable")
                else:
                    report.add(check_session(row.session, spec, now))
            if len(rows) < page:
                break
            after = rows[-1].id
        report.seconds = time.perf_counter() - started
        return report

    async def live_versions(self) -> dict[tuple[str, str], int]:
        """The live sessions of each flow by the version they last ran on."""
        async with store_call("counting live sessions"):
            return await self._store().live_versions()

    def _store(self) -> LiveSessions:
        store = self.host.store
        if not isinstance(store, LiveSessions):
            raise ValueError(f"{store!r} cannot read its live sessions in pages (it is no LiveSessions)")
        return store
