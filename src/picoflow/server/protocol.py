"""uvicorn settings for serving on an open network, and the header deadline uvicorn lacks.

uvicorn bounds the size of a request's headers (``h11_max_incomplete_event_size``) and the idle time
between requests (``timeout_keep_alive``), but not how long headers may take to arrive: any byte
cancels its keep-alive timer, so a client trickling half a request line holds the connection
forever. ``HeaderDeadlineProtocol`` closes a connection whose request headers are not complete
``HEADER_TIMEOUT`` seconds after the connection opened or the request's first byte arrived; an
idle kept-alive connection stays uvicorn's to close. The body has its own deadline in the
application (``ServerSettings.body_timeout``, 408).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADER_TIMEOUT", "HeaderDeadlineProtocol", "uvicorn_options"]

HEADER_TIMEOUT = 10.0
"""Seconds a client has to send a request's headers in full."""


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers."""

    header_timeout = HEADER_TIMEOUT
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a byte is held no longer than one that trickles

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_headers() and self._deadline is None:
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if not self._waiting_for_headers():
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._waiting_for_headers() and self.conn.trailing_data[0]:
            # Part of the next request came while this response was being produced (pipelining):
            # its headers are already arriving, so their deadline runs from now.
            self._arm()
        else:
            # Between requests the idle connection is uvicorn's keep-alive timer's business.
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _waiting_for_headers(self) -> bool:
        # ``cycle`` is set once a request's headers are parsed and stays until the next one.
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


def uvicorn_options() -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` that bound what a slow or hostile client can hold."""
    return {
        "http": HeaderDeadlineProtocol,
        # Idle connections outlive the clients' own expiry (httpx: 5 s), so a client never reuses
        # one the server is closing.
        "timeout_keep_alive": 75,
        "h11_max_incomplete_event_size": 16 * 1024,
    }
