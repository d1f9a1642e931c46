"""The cancel channel of a ``PostgresStore`` (``CancelChannel``): cancel requests and their answers
between the processes sharing one database, over PostgreSQL ``LISTEN``/``NOTIFY``.

Each process listens on a connection of its own, outside the pool, from the first job it runs (or
the first cancel it sends) until the store closes. A dropped connection is made again, at once and
then after a growing pause; whatever fails there is logged, never raised into a turn. A request
names the session, the stored revision its caller loaded and a request id; the process that
stopped the job answers with the request id and what it stopped. Only ids and a revision travel,
and a payload that is not exactly that shape is ignored (logged at debug level).

PostgreSQL keeps no notification for a listener that is not connected at the time, so the sender
publishes its request again every ``REPEAT`` seconds while it waits; a process answers a request
it honoured already from memory, without stopping anything again (a cancelled turn stores
nothing, so the next turn of its session starts on the same revision).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final

from picoflow.exceptions import StoreError
from picoflow.sessions.base import CancelRequest

logger = logging.getLogger("picoflow")

Answer = Callable[[CancelRequest], str | None]
Notify = Callable[[str, str], Awaitable[None]]
"""Sends one notification (channel, payload) through the store's pool."""

VERSION: Final = 1
"""The payloads' format; a payload of another version is ignored."""
REPEAT: Final = 0.5
"""Seconds between two publications of a request still unanswered."""
RECONNECT_PAUSES: Final = (0.0, 0.5, 1.0, 2.0, 5.0)
"""Pauses before each new connection of the listener after a failure (the last one repeats)."""
REMEMBERED: Final = 256
"""Requests a process remembers having honoured (to answer a repeat without acting on it)."""
MAX_PAYLOAD: Final = 1024
MAX_SESSION_ID: Final = 200
_REQUEST_ID: Final = re.compile(r"[0-9a-f]{32}")
JOBS: Final = frozenset({"turn", "decision"})


def channel_name(schema: str | None) -> str:
    """The channel of one schema's stores: stores of other schemas in the same database, or of
    other applications, never hear its requests. An identifier fits 63 bytes; a schema name may
    take them all, hence its digest."""
    if schema is None:
        return "picoflow_cancel"
    return "picoflow_cancel_" + hashlib.sha256(schema.encode()).hexdigest()[:20]


def request_payload(request: CancelRequest) -> str:
    return json.dumps(
        {
            "v": VERSION,
            "kind": "cancel",
            "id": request.request_id,
            "session": request.session_id,
            "revision": request.revision,
        }
    )


def answer_payload(request_id: str, job: str) -> str:
    return json.dumps({"v": VERSION, "kind": "cancelled", "id": request_id, "job": job})


def parse(payload: str) -> CancelRequest | tuple[str, str] | None:
    """A request, an answer (request id, what was stopped), or None for anything else."""
    if len(payload) > MAX_PAYLOAD:
        return None
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        return None
    request_id = data.get("id")
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        return None
    kind = data.get("kind")
    if kind == "cancel" and set(data) == {"v", "kind", "id", "session", "revision"}:
        session_id, revision = data["session"], data["revision"]
        if (
            isinstance(session_id, str)
            and 0 < len(session_id) <= MAX_SESSION_ID
            and type(revision) is int
            and revision >= 0
        ):
            return CancelRequest(session_id, revision, request_id)
    elif kind == "cancelled" and set(data) == {"v", "kind", "id", "job"}:
        job = data["job"]
        if isinstance(job, str) and job in JOBS:
            return request_id, job
    return None


class PostgresCancels:
    """One store's cancel channel: its listener, the requests this process waits to hear answered,
    and the requests it honoured lately."""

    def __init__(
        self, url: str, where: str, channel: str, notify: Notify, *, wait: float, connect_timeout: float
    ) -> None:
        self.channel = channel
        self.wait = wait
        """Seconds a request waits for an answer."""
        self._url = url
        self._where = where
        self._notify = notify
        self._connect_timeout = max(1, round(connect_timeout))  # libpq takes whole seconds
        self._answers: list[Answer] = []
        self._waiting: dict[str, asyncio.Future[str]] = {}
        self._honoured: OrderedDict[str, str] = OrderedDict()
        self._listener: asyncio.Task[None] | None = None
        self._listening: asyncio.Event | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def listening(self) -> bool:
        """Whether the listener is connected and subscribed now."""
        return self._listening is not None and self._listening.is_set()

    def listen(self, answer: Answer) -> Callable[[], None]:
        """Hand ``answer`` every request heard, until the function returned is called."""
        if self._closed:  # the job that asks will fail on the closed store: nothing to hear
            return _nothing
        self._answers.append(answer)
        self._start()

        def stop() -> None:
            if answer in self._answers:
                self._answers.remove(answer)

        return stop

    async def request(self, session_id: str, revision: int) -> str | None:
        """Publish a request to stop the job running against ``session_id``; what the process
        that stopped it answered, or None when none did within ``wait`` seconds."""
        if self._closed:
            raise StoreError(f"PostgresStore({self._where!r}) is closed")
        listening = self._start()
        request = CancelRequest(session_id, revision, secrets.token_hex(16))
        payload = request_payload(request)
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = answered
        try:
            async with asyncio.timeout(self.wait):
                await listening.wait()  # an answer published before this process listens is lost
                while not answered.done():
                    await self._notify(self.channel, payload)
                    await asyncio.wait((answered,), timeout=REPEAT)
                return answered.result()
        except TimeoutError:
            if not self.listening:
                logger.warning(
                    "picoflow: could not listen for answers to a cancel on %s within %gs",
                    self._where,
                    self.wait,
                )
            return None
        finally:
            del self._waiting[request.request_id]

    async def close(self) -> None:
        """Stop listening; requests waiting for an answer get none."""
        self._closed = True
        self._answers.clear()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    # --- the listener ----------------------------------------------------------------------------

    def _start(self) -> asyncio.Event:
        """The listener's connected-and-subscribed event, the listener started if it is not running."""
        if self._listener is None or self._listener.done() or self._listening is None:
            self._listening = asyncio.Event()
            self._listener = asyncio.create_task(
                self._listen(self._listening), name="picoflow-cancel-listener"
            )
        return self._listening

    async def _listen(self, listening: asyncio.Event) -> None:
        import psycopg
        from psycopg import sql

        failures = 0
        while not self._closed:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, connect_timeout=self._connect_timeout
                )
                try:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    listening.set()
                    failures = 0
                    async for notification in conn.notifies():
                        self._heard(notification.payload)
                finally:
                    listening.clear()
                    await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The turns go on; only cancels from other processes miss this one meanwhile.
                level = logging.WARNING if failures == 0 else logging.DEBUG
                logger.log(
                    level,
                    "picoflow: the cancel listener on %s lost its connection (%s); connecting again",
                    self._where,
                    type(exc).__name__,
                )
            await asyncio.sleep(RECONNECT_PAUSES[min(failures, len(RECONNECT_PAUSES) - 1)])
            failures += 1

    def _heard(self, payload: str) -> None:
        message = parse(payload)
        if message is None:
            logger.debug(
                "picoflow: ignored a malformed cancel notification on %s (%d characters)",
                self._where,
                len(payload),
            )
        elif isinstance(message, CancelRequest):
            self._answer(message)
        else:
            request_id, job = message
            waiting = self._waiting.get(request_id)
            if waiting is not None and not waiting.done():
                waiting.set_result(job)

    def _answer(self, request: CancelRequest) -> None:
        job = self._honoured.get(request.request_id)
        if job is None:
            job = self._stop(request)
            if job is None:  # no job of it runs here: another process may answer
                return
            self._honoured[request.request_id] = job
            if len(self._honoured) > REMEMBERED:
                self._honoured.popitem(last=False)
        task = asyncio.create_task(self._send(answer_payload(request.request_id, job)))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def _stop(self, request: CancelRequest) -> str | None:
        """What the first listener running the job stopped, or None."""
        for answer in list(self._answers):
            try:
                job = answer(request)
            except Exception:
                logger.exception(
                    "picoflow: answering a cancel request of session %s failed", request.session_id
                )
                continue
            if job is not None:
                return job
        return None

    async def _send(self, payload: str) -> None:
        try:
            await self._notify(self.channel, payload)
        except Exception as exc:  # the sender asks again while it waits
            logger.warning(
                "picoflow: could not answer a cancel request on %s (%s)", self._where, type(exc).__name__
            )


def _nothing() -> None:
    return None
