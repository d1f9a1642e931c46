"""ASGI middleware of the application: the request body's size and time limits, and the last guard
that turns any unexpected exception into a JSON 500 whose details only go to the log."""

from __future__ import annotations

import asyncio
import logging
import re

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from picoflow.server.errors import ApiError, error_response

__all__ = ["BodyLimit", "Guard"]

logger = logging.getLogger("picoflow.server")

INTERNAL = ApiError(500, "internal", "Internal server error.")


class _BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


async def _send_error(scope: Scope, receive: Receive, send: Send, error: ApiError) -> None:
    """``error`` answered before the app saw the request, in the shape of its path's surface."""
    response = error_response(Request(scope), error)
    await response(scope, receive, send)


class _BodyTimeout(HTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"the request body did not arrive within {seconds:g} seconds")


class BodyLimit:
    """413 for bodies over the limit, whether announced by Content-Length or streamed in chunks;
    408 for a body still incomplete ``timeout`` seconds after the request began. uvicorn has no
    body-read timeout of its own, so a client sending half a body would hold a worker forever."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        timeout: float | None = None,
        *,
        upload_bytes: int | None = None,
        upload_paths: str | None = None,
    ) -> None:
        """``upload_bytes``: the larger limit of requests to the paths ``upload_paths`` (a regular
        expression) matches: the routes that take files."""
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.upload_bytes = upload_bytes if upload_bytes is not None else max_bytes
        self.upload_paths = re.compile(upload_paths) if upload_paths else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        if self.upload_paths is not None and self.upload_paths.match(scope["path"]):
            limit = self.upload_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                error = ApiError(413, "body_too_large", f"request body is larger than {limit} bytes")
                await _send_error(scope, receive, send, error)
                return
        received = 0
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        body_done = False

        async def limited() -> Message:
            nonlocal received, body_done
            if body_done or deadline is None:
                # After the body, receive() only waits for a disconnect (streams): no deadline.
                message = await receive()
            else:
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    # An HTTPException, so FastAPI's body parsing re-raises it to our handler.
                    raise _BodyTimeout(self.timeout or 0) from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > limit:
                    # An HTTPException, so FastAPI's body parsing re-raises it to our handler.
                    raise _BodyTooLarge(limit)
            return message

        await self.app(scope, limited, send)


class Guard:
    """Last line of defence: an unexpected exception becomes a plain 500, its details only logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the request itself is being cancelled (shutdown, client gone)
            # Raised by code, not by a cancellation: still a JSON error, never uvicorn's text 500.
            logger.exception(
                "picoflow.server: stray CancelledError on %s %s", scope.get("method"), scope.get("path")
            )
            if not started:
                await _send_error(scope, receive, send, INTERNAL)
        except Exception:
            logger.exception(
                "picoflow.server: unhandled error on %s %s", scope.get("method"), scope.get("path")
            )
            if not started:
                await _send_error(scope, receive, send, INTERNAL)
