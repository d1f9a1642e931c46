"""The header deadline of ``picoflow serve`` on a kept-alive connection, over raw sockets.

``HeaderDeadlineProtocol`` closes, without a response, a connection whose request headers are not
complete in time (README, "Slow or hostile clients"). The first request of a connection is covered
in ``test_hostile_input``; here the connection has already served a request in full and stays open
for the next, whose headers then stall half-way: the deadline applies to it too, while the idle
keep-alive timeout (75 s) is far beyond the bound the test waits.

The deadline is short for the test. The test waits on socket reads only; the read timeout is a
generous upper bound so that a server that never closes fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import uvicorn

from picoflow.server import create_app
from picoflow.server.protocol import HeaderDeadlineProtocol, uvicorn_options

from .support import desk_engine

HEADER_TIMEOUT = 2.5
"""The deadline the tests serve with, in seconds: short enough to wait for, long enough that a busy
machine never takes it to get a request that was sent at once from the socket to the parser (the
server shares the test's event loop; at 0.3 s a loaded run cut a connection before its first request)."""
UPPER_BOUND = 15.0
"""How long a read may wait before the test fails: far above the deadline on a busy machine, far
below the keep-alive timeout, so a close seen within it is the deadline's doing."""
TURN = b'{"message": "hi"}'


@dataclass
class Served:
    port: int
    cuts: int = 0
    """Connections the header deadline closed."""

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # connections queue until uvicorn accepts them: no need to wait for its start
    served = Served(sock.getsockname()[1])

    class QuickHeaders(HeaderDeadlineProtocol):
        header_timeout = HEADER_TIMEOUT

        def _headers_late(self) -> None:
            was_open = not self.transport.is_closing()
            super()._headers_late()
            if was_open and self.transport.is_closing():
                served.cuts += 1

    # What `picoflow serve` runs, with the short deadline.
    assert uvicorn_options()["http"] is HeaderDeadlineProtocol
    options = {**uvicorn_options(), "http": QuickHeaders}
    config = uvicorn.Config(create_app(desk_engine()), log_level="warning", lifespan="off", **options)
    assert config.timeout_keep_alive > 2 * UPPER_BOUND
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield served
    finally:
        server.should_exit = True
        await task
        sock.close()


def post_turn(*, keep_alive: bool) -> bytes:
    connection = b"keep-alive" if keep_alive else b"close"
    return (
        b"POST /v1/flows/desk/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n%s"
        % (len(TURN), connection, TURN)
    )


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One whole response (status, headers, body) read off the connection, nothing beyond it."""
    async with asyncio.timeout(UPPER_BOUND):
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        assert "transfer-encoding" not in headers
        body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), headers, body


async def rest_until_closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sends until it closes the connection (a reset counts as a close)."""
    received = bytearray()
    try:
        async with asyncio.timeout(UPPER_BOUND):
            while chunk := await reader.read(4096):
                received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the connection is still open after {UPPER_BOUND:g} s, {received=}") from None
    return bytes(received)


async def a_turn_is_served(served: Served) -> None:
    reader, writer = await served.connect()
    try:
        writer.write(post_turn(keep_alive=False))
        await writer.drain()
        status, _, body = await read_response(reader)
        assert status == 201, body
        assert json.loads(body)["message"] == "echo: hi"
    finally:
        writer.close()


@pytest.mark.parametrize(
    "stalled",
    [
        pytest.param(b"GET /heal", id="in-the-request-line"),
        pytest.param(b"GET /healthcheck HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: appl", id="in-a-header"),
        pytest.param(b"GET /healthcheck HTTP/1.1\r\nHost: 127.0.0.1\r\n", id="before-the-blank-line"),
    ],
)
async def test_a_second_request_whose_headers_stall_is_cut_off(served: Served, stalled: bytes) -> None:
    loop = asyncio.get_running_loop()
    reader, writer = await served.connect()
    try:
        # A first request served in full; the connection stays open for the next.
        writer.write(post_turn(keep_alive=True))
        await writer.drain()
        status, headers, body = await read_response(reader)
        assert status == 201, body
        assert json.loads(body)["message"] == "echo: hi"
        assert headers.get("connection", "keep-alive").lower() != "close"

        # The second request's headers stop half-way, and the client sends nothing more.
        sent = loop.time()
        writer.write(stalled)
        await writer.drain()
        # Documented: the connection is closed, without a response (no 408: none can be framed
        # for a request whose head never arrived).
        assert await rest_until_closed(reader) == b""
        waited = loop.time() - sent
        # Not before the deadline (a timer may fire up to the clock's resolution early), and by the
        # deadline's timer, not the keep-alive timeout or any other close.
        assert waited >= HEADER_TIMEOUT - 0.05, waited
        assert served.cuts == 1
    finally:
        writer.close()

    # Nothing else is held up: a new connection is served as before, and is not cut off.
    await a_turn_is_served(served)
    assert served.cuts == 1


async def test_a_connection_that_never_sends_a_byte_is_closed(served: Served) -> None:
    # A new connection's deadline runs from its opening, before any byte.
    reader, writer = await served.connect()
    try:
        assert await rest_until_closed(reader) == b""
        assert served.cuts == 1
    finally:
        writer.close()
    await a_turn_is_served(served)


async def test_an_idle_kept_alive_connection_is_not_cut_by_the_header_deadline(served: Served) -> None:
    reader, writer = await served.connect()
    try:
        writer.write(post_turn(keep_alive=True))
        await writer.drain()
        assert (await read_response(reader))[0] == 201
        # A connection opened after the first one went idle, and cut by its deadline: once it is
        # closed, the idle one has been idle for longer than the deadline, no clock needed.
        other_reader, other_writer = await served.connect()
        try:
            assert await rest_until_closed(other_reader) == b""
        finally:
            other_writer.close()
        assert served.cuts == 1
        # Between requests the connection is the keep-alive timeout's, so it still serves the next.
        writer.write(post_turn(keep_alive=False))
        await writer.drain()
        status, _, body = await read_response(reader)
        assert status == 201, body
        assert served.cuts == 1
    finally:
        writer.close()


async def test_a_pipelined_second_request_whose_headers_stall_is_cut_off(served: Served) -> None:
    reader, writer = await served.connect()
    try:
        # The start of the second request goes out with the first, before its response.
        writer.write(post_turn(keep_alive=True) + b"GET /healthcheck HTTP/1.1\r\nHost: 127.")
        await writer.drain()
        status, _, body = await read_response(reader)
        assert status == 201, body
        assert await rest_until_closed(reader) == b""
        assert served.cuts == 1
    finally:
        writer.close()
    await a_turn_is_served(served)
