"""What every protocol's writer shares: a turn's items (its events, the models' load status, a
heartbeat, its end) handed one by one to the method of their kind. The dispatch is written here
once; a protocol overrides the kinds it shows, and an event added to ``picoflow.events`` is added
here, with a default that writes nothing."""

from __future__ import annotations

import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from picoflow.events import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    PatternFired,
    ReadingJudged,
    SessionMigrated,
    StepEntered,
    TextChunk,
    ToolCalled,
    ToolReturned,
    TurnEvent,
)
from picoflow.flow import FlowSpec
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnFinished, TurnResult
from picoflow.server.streams import Beat

__all__ = ["LOST", "PING", "EventWriter", "Run", "StreamWriter", "Streamed", "alone", "speaks"]

logger = logging.getLogger("picoflow.server")

Frame = TypeVar("Frame")
PING: Final = b": ping\n\n"
"""A comment: what a stream says when nothing happened for a while, so that proxies keep it open."""
LOST: Final = "The assistant could not complete this turn."
"""What every protocol says of a turn that ended without a result (cancelled, or a bug logged)."""


def speaks(flow: FlowSpec | None, step: str) -> bool:
    """Whether the text a model writes in ``step`` is its reply, to show as it comes: not a step
    that answers with a structured value (its code turns that into the reply)."""
    spec = None if flow is None else flow.steps.get(step)
    return spec is not None and spec.output is None and not spec.is_logic


class EventWriter(Generic[Frame]):
    """One protocol's frames for a turn's items: ``write(item)`` gives those of one item (bytes of
    a stream, or JSON values), from the method named for its kind.

    Nothing is written unless a method is overridden. Each turn event's method defaults to
    ``on_other``, so a protocol that treats most events alike says it once (and hears of an event
    added later); the items around the events (``on_loading``, ``on_beat``, ``on_finished``,
    ``on_lost``) have methods of their own."""

    __slots__ = ()

    def write(self, item: object) -> Iterable[Frame]:
        """The frames of one item of a turn's feed (``STARTED`` has none)."""
        on = _ON.get(type(item))
        return () if on is None else on(self, item)

    def on_step_entered(self, event: StepEntered) -> Iterable[Frame]:
        return self.on_other(event)

    def on_text(self, event: TextChunk) -> Iterable[Frame]:
        return self.on_other(event)

    def on_tool_called(self, event: ToolCalled) -> Iterable[Frame]:
        return self.on_other(event)

    def on_tool_returned(self, event: ToolReturned) -> Iterable[Frame]:
        return self.on_other(event)

    def on_approval_requested(self, event: ApprovalRequested) -> Iterable[Frame]:
        return self.on_other(event)

    def on_approval_decided(self, event: ApprovalDecided) -> Iterable[Frame]:
        return self.on_other(event)

    def on_reading_judged(self, event: ReadingJudged) -> Iterable[Frame]:
        return self.on_other(event)

    def on_pattern_fired(self, event: PatternFired) -> Iterable[Frame]:
        return self.on_other(event)

    def on_handed_off(self, event: HandedOff) -> Iterable[Frame]:
        return self.on_other(event)

    def on_other(self, event: TurnEvent) -> Iterable[Frame]:
        """A turn event its own method leaves here."""
        return ()

    def on_loading(self, status: LoadStatus) -> Iterable[Frame]:
        """The flow's models are still loading: the turn waits for them."""
        return ()

    def on_beat(self) -> Iterable[Frame]:
        """Nothing happened for ``ServerSettings.sse_heartbeat`` seconds."""
        return ()

    def on_finished(self, result: TurnResult) -> Iterable[Frame]:
        """The turn's end: its result (``result.error`` for one that failed)."""
        return ()

    def on_lost(self) -> Iterable[Frame]:
        """The run ended without a result (cancelled, or a bug logged where it happened)."""
        return ()


class StreamWriter(EventWriter[bytes]):
    """An ``EventWriter`` whose frames are a Server-Sent Events stream, and what such a stream
    does whatever its protocol: a heartbeat is a comment, and ``stream`` writes the stream whole.

    A request may run several feeds (a decision each, the last resuming the turn): the stream
    is ``opening()``, then the frames of each feed's items, those of one item in one write, until
    the writer ``ended``. A stream whose feeds run out first, or that fails while it is written
    (a bug, logged), still ends as its protocol says: ``broken()``."""

    name: ClassVar[str] = "an event"
    """What the stream is, for the log of one that failed."""
    ended = False
    """The stream's end is written: nothing follows it."""
    last = True
    """The feed written is the request's last: its turn's end is the stream's (else a decision of
    the same request follows it)."""

    def on_beat(self) -> Iterator[bytes]:
        yield PING

    def opening(self) -> bytes:
        return b""

    def broken(self) -> bytes:
        return b""

    def respond(self, feeds: AsyncIterable[Run], media_type: str, headers: Mapping[str, str]) -> Streamed:
        """The response writing ``stream(feeds)``."""
        return Streamed(self.stream(feeds), media_type=media_type, headers=headers)

    async def stream(self, feeds: AsyncIterable[Run]) -> AsyncIterator[bytes]:
        """The stream whole. A client that goes away before its end (its abort: the connection
        closed) cancels the run it was reading (``Run.abandon``): the protocols' own cancel."""
        runs = aiter(feeds)
        run: Run | None = None
        told = False  # the stream reached an end of its own (not the client's leaving)
        try:
            run = await anext(runs, None)  # known before the first write, which a client may not wait for
            yield self.opening()
            while run is not None:
                async for item in run:
                    frames = b"".join(self.write(item))
                    if frames:
                        yield frames
                    if self.ended:
                        told = True
                        return
                run = await anext(runs, None)
            told = True
            yield self.broken()
        except Exception:
            # A frame that cannot be written (or a bug) must not drop the connection silently.
            told = True
            logger.exception("picoflow.server: %s stream failed", self.name)
            if not self.ended:
                yield self.broken()
        finally:
            if not told and not self.ended and run is not None:
                run.abandon()


class Streamed(StreamingResponse):
    """A protocol's event stream whose writer is closed the moment the response ends, however it
    ends: a client gone away is known at once, and its run cancelled (``StreamWriter.stream``),
    not whenever the garbage collector would have finished the stream."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            stream = self.body_iterator
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()


class Run(Protocol):
    """What a stream writes the items of: a turn (or a decision) running for its request, which
    stops when its client goes away (a ``Feed``)."""

    def __aiter__(self) -> AsyncIterator[object]: ...

    def abandon(self) -> None:
        """The client went away before the run's end: cancel it."""
        ...


async def alone(feed: Run) -> AsyncIterator[Run]:
    """``feed`` as the one feed of a stream."""
    yield feed


_ON: Final[dict[type, Callable[[EventWriter[Any], Any], Iterable[Any]]]] = {
    StepEntered: lambda writer, event: writer.on_step_entered(event),
    TextChunk: lambda writer, event: writer.on_text(event),
    ToolCalled: lambda writer, event: writer.on_tool_called(event),
    ToolReturned: lambda writer, event: writer.on_tool_returned(event),
    ApprovalRequested: lambda writer, event: writer.on_approval_requested(event),
    ApprovalDecided: lambda writer, event: writer.on_approval_decided(event),
    ReadingJudged: lambda writer, event: writer.on_reading_judged(event),
    PatternFired: lambda writer, event: writer.on_pattern_fired(event),
    HandedOff: lambda writer, event: writer.on_handed_off(event),
    SessionMigrated: lambda writer, event: writer.on_other(event),
    LoadStatus: lambda writer, status: writer.on_loading(status),
    Beat: lambda writer, _: writer.on_beat(),
    TurnFinished: lambda writer, end: writer.on_finished(end.result),
    type(None): lambda writer, _: writer.on_lost(),
}
"""Each item's method, by the item's type (the events are final dataclasses)."""
