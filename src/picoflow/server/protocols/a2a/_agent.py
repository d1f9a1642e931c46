"""The methods: picoflow's answers to A2A's methods, by name, for the principal of the request's API
key: a message sent (a turn or a decision, answered whole or streamed), and a task got, listed,
cancelled or followed; the push notifications and the extended card this agent does not offer."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final

from a2a.server.routes.common import serialize_list_tasks_response
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import (
    ListTasksCursor,
    decode_list_tasks_cursor,
    decode_page_token,
    encode_list_tasks_cursor,
    validate_history_length,
    validate_page_size,
)
from fastapi.responses import Response, StreamingResponse
from google.protobuf.json_format import ParseDict

from picoflow.events import ApprovalDecided, TurnEvent
from picoflow.exceptions import RunError, SessionNotFound
from picoflow.models.readiness import LoadStatus
from picoflow.results import TurnError, TurnResult
from picoflow.server.errors import ApiError
from picoflow.server.protocols._threads import Thread, check_thread_id, thread_session_id
from picoflow.server.protocols._writer import LOST, PING
from picoflow.server.protocols.a2a._jsonrpc import Method, _answer, _error_frame, _frame
from picoflow.server.protocols.a2a._refusals import _api_refusal, _run_refusal, _turn_refusal
from picoflow.server.protocols.a2a._requests import (
    SKILL_KEY,
    _invalid,
    _MessageIn,
    _proto,
    _read,
    _Said,
    _send_params,
    _SendIn,
    _skill,
)
from picoflow.server.protocols.a2a._runs import Outbox, _Pulse, _Ran, _Run, _Turn
from picoflow.server.protocols.a2a._tasks import _conclude, _now, _status, _Task, _Tasks
from picoflow.server.protocols.a2a._wire import _TERMINAL, CANCELED, WORKING, Wire, _dump
from picoflow.server.readiness import TurnWatch
from picoflow.server.state import Access, ServerState
from picoflow.server.streams import SSE_HEADERS, Beat, cancel_run

logger = logging.getLogger("picoflow.server")

SURFACE: Final = "a2a"


@dataclass(frozen=True, slots=True)
class _Start:
    """A message checked: what it says, the skill and context it runs in, the task it makes or goes on."""

    message: _MessageIn
    said: _Said
    skill: str
    context_id: str
    generated: bool
    """The context is new: the server chose its id."""
    task_id: str
    previous: _Task | None
    owner: str


def _owner(access: Access) -> str:
    return access.caller.principal or ""


def _sort_key(task: _Task) -> tuple[bool, int, str]:
    """``ListTasks``' order (descending): by the status's time, then id."""
    return (True, task.stamp, task.id)


class _Agent:
    """picoflow's answers to A2A's methods, each for the principal of the request's API key."""

    def __init__(self, state: ServerState, default_flow: str) -> None:
        self._state = state
        self._tasks = _Tasks()
        self._default = default_flow
        self._heartbeat = state.settings.sse_heartbeat
        self._running: dict[str, _Turn | None] = {}
        """Tasks whose turn runs (None while one starts), by id; ids are random, owners checked."""

    def methods(self) -> dict[str, Method]:
        """A2A's methods by their JSON-RPC name, each answered by this agent."""
        return {
            "SendMessage": self.send,
            "SendStreamingMessage": self.send_stream,
            "GetTask": self.get_task,
            "ListTasks": self.list_tasks,
            "CancelTask": self.cancel_task,
            "SubscribeToTask": self.subscribe,
            "CreateTaskPushNotificationConfig": self.no_push,
            "GetTaskPushNotificationConfig": self.no_push,
            "ListTaskPushNotificationConfigs": self.no_push,
            "DeleteTaskPushNotificationConfig": self.no_push,
            "GetExtendedAgentCard": self.no_extended_card,
        }

    # --- sending --------------------------------------------------------------------------------------------

    async def send(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        request, message = _send_params(params)
        start = self._prepare(request, message, access)
        history = request.history_length
        if start.previous is None and not request.immediately:
            # The usual send: no one knows the task's id before the answer, so the turn runs in this
            # request and the task is written once, whole, when the turn is over.
            ran = await self._open(start, access, held=False, streamed=False)
            assert isinstance(ran, _Ran)
            task = self._new_task(start)
            _conclude(task, ran.result)
            self._tasks.save(task)
            return _answer(request_id, {"task": task.wire(history)})
        # A task others may know of (it goes on, or its id is answered at once): kept while it runs.
        run = await self._launch(start, access, streamed=False)
        turn = self._register(start, run)
        if not request.immediately:
            await asyncio.wait({run.task})  # if this request is cancelled, the run goes on
            self._end(turn)
        return _answer(request_id, {"task": turn.task.wire(history)})

    async def send_stream(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        request, message = _send_params(params)
        start = self._prepare(request, message, access)
        run = await self._launch(start, access, streamed=True)
        turn = self._register(start, run)
        outbox = run.outbox
        assert outbox is not None
        first = _frame(request_id, {"task": turn.task.wire(request.history_length)})

        async def events() -> AsyncGenerator[Wire | Beat, None]:
            # The client may go away at any point: the turn goes on, and ends its task itself.
            while (event := await outbox.get()) is not None:
                yield event
            for event in self._end(turn):
                yield event

        return self._stream(request_id, first, events(), outbox)

    def _prepare(self, request: _SendIn, message: _MessageIn, access: Access) -> _Start:
        said = _read(message)
        named = _skill(request, message)
        owner = _owner(access)
        previous: _Task | None = None
        if message.task_id:
            previous = self._tasks.get(owner, message.task_id)
            if previous is None:
                raise TaskNotFoundError
            if message.context_id and message.context_id != previous.context_id:
                problem = "is not the context of the task"
                raise _invalid(f"message.contextId {problem}", "message.contextId", problem)
            if previous.state in _TERMINAL:
                raise UnsupportedOperationError(
                    f"the task is {previous.state}: send a new message in its context"
                )
            if previous.id in self._running:
                raise UnsupportedOperationError("the task is still working: wait for it, or cancel it")
            context_id, generated, task_id = previous.context_id, False, previous.id
            skill = named or previous.metadata.get(SKILL_KEY) or self._default
        else:
            if said.decision is not None and not message.context_id:
                problem = "required with a decision"
                raise _invalid("a decision names the context of its approval", "message.contextId", problem)
            context_id, generated = message.context_id or str(uuid.uuid4()), not message.context_id
            skill, task_id = named or self._default, str(uuid.uuid4())
        try:
            check_thread_id(context_id, "message.contextId")
        except ApiError as error:
            raise _api_refusal(error) from None
        if previous is not None:
            self._running[previous.id] = None  # claimed: one message at a time goes on a task
        return _Start(message, said, skill, context_id, generated, task_id, previous, owner)

    def _release(self, start: _Start) -> None:
        if start.previous is not None and self._running.get(start.previous.id, None) is None:
            self._running.pop(start.previous.id, None)

    async def _launch(self, start: _Start, access: Access, streamed: bool) -> _Run:
        """Start the message's run in a task the server holds, once accepted."""
        run = await self._open(start, access, held=True, streamed=streamed)
        assert isinstance(run, _Run)
        return run

    async def _open(self, start: _Start, access: Access, held: bool, streamed: bool) -> _Run | _Ran:
        """The message's run once the engine accepted it (``held``: in a task of its own, else taken
        in this request, to its end); raise the JSON-RPC error of a refusal."""
        try:
            said, thread = start.said, Thread(access, SURFACE, start.context_id)
            if said.decision is None and start.generated:
                # A new context has no session to look for: it is created for the turn, once the
                # engine's own checks of the flow and the message pass (a refusal stores nothing).
                try:
                    access.engine.flow(start.skill)
                    access.engine.check_message(said.text)
                except RunError as error:
                    raise _run_refusal(error, start.skill) from None
                await self._create(thread, start.skill)
            run, refused = await self._attempt(start, thread, held, streamed)
            if refused is not None and refused.is_a(SessionNotFound) and said.decision is None:
                # The first turn of a context the client named: its session is created with it.
                await self._create(thread, start.skill)
                run, refused = await self._attempt(start, thread, held, streamed)
            if refused is not None:
                raise _turn_refusal(refused, said, start.skill)
            return run
        except BaseException:
            self._release(start)
            raise

    async def _attempt(
        self, start: _Start, thread: Thread, held: bool, streamed: bool
    ) -> tuple[_Run | _Ran, TurnError | None]:
        """Run the message once: the run, and the engine's refusal if it refused it."""
        if held:
            run = _Run(start.task_id, start.context_id, streamed)
            run.begin(self._call(start, thread, run.accept, run.seen))
            if await run.accepted:
                return run, None
            result = await run.outcome()
        else:
            accepted = False

            def accept() -> None:
                nonlocal accepted
                accepted = True

            try:
                result = await self._call(start, thread, accept, None)
            except Exception:
                logger.exception("picoflow.server: an A2A turn failed")
                result = None
            if accepted:
                return _Ran(result), None
        if result is None or result.error is None:
            raise InternalError(LOST)
        return _Ran(result), result.error

    def _call(
        self,
        start: _Start,
        thread: Thread,
        accept: Callable[[], None],
        seen: Callable[[TurnEvent | LoadStatus], None] | None,
    ) -> Coroutine[Any, Any, TurnResult]:
        """The engine's call for the message: a turn (accepted as it begins) or a decision
        (accepted with its first event, the decision taken)."""
        state, decision, session_id = self._state, start.said.decision, thread.session_id
        if decision is None:

            async def turn() -> TurnResult:
                # The watch holds the turn until its flow's models are loaded, and tells when it began.
                with TurnWatch(state.readiness, on_start=accept, on_status=seen):
                    return await state.engine.run(
                        start.skill, start.said.text, session_id, caller=thread.caller, on_event=seen
                    )

            return turn()

        def decided(event: TurnEvent) -> None:
            if isinstance(event, ApprovalDecided):
                accept()  # the engine's first event of a decision it took
            if seen is not None:
                seen(event)

        async def decide() -> TurnResult:
            with TurnWatch(state.readiness, on_status=seen):
                return await decision.take(state.engine, session_id, thread.caller, on_event=decided)

        return decide()

    @staticmethod
    async def _create(thread: Thread, skill: str) -> None:
        try:
            await thread.create(skill)
        except ApiError as error:
            raise _api_refusal(error) from None

    @staticmethod
    def _new_task(start: _Start) -> _Task:
        """The task of a message the engine accepted (a task that goes on moves to ``working``)."""
        task = start.previous
        if task is not None:
            _status(task, WORKING)
        else:
            stamp, written = _now()
            status = {"state": WORKING, "timestamp": written}
            task = _Task(
                start.task_id, start.context_id, start.owner, status, stamp, metadata={SKILL_KEY: start.skill}
            )
        task.history.append(start.message.wire(task.id, task.context_id))
        return task

    def _register(self, start: _Start, run: _Run) -> _Turn:
        """Keep a running task where ``GetTask``, ``CancelTask`` and ``SubscribeToTask`` find it;
        it ends when its run does, whoever follows it."""
        turn = _Turn(self._new_task(start), run)
        self._running[turn.task.id] = turn
        self._tasks.save(turn.task)
        run.task.add_done_callback(lambda _: self._end(turn))
        return turn

    def _end(self, turn: _Turn) -> list[Wire]:
        """End the task of a run that ended, once (its run's end, its stream and a cancel may all
        come here): store it, tell its listeners; the events that ended it."""
        if turn.final is not None:
            return turn.final
        task, run = turn.task, turn.run.task
        if run.cancelled():
            final = [_status(task, CANCELED)]
        else:
            final = _conclude(task, None if run.exception() is not None else run.result())
        turn.final = final
        self._running.pop(task.id, None)
        self._tasks.save(task)
        for listener in turn.run.listeners:
            for event in final:
                listener.put_nowait(event)
            listener.put_nowait(None)
        return final

    def _stream(
        self, request_id: Any, first: bytes, events: AsyncGenerator[Wire | Beat, None], outbox: Outbox
    ) -> StreamingResponse:
        async def frames() -> AsyncIterator[bytes]:
            pulse = _Pulse(outbox, self._heartbeat)
            try:
                yield first
                async with aclosing(events):
                    async for event in events:
                        yield PING if isinstance(event, Beat) else _frame(request_id, event)
            except Exception:
                # An event that cannot be written (or a bug) must not end the stream silently.
                logger.exception("picoflow.server: an A2A event stream failed")
                yield _error_frame(request_id, InternalError(LOST))
            finally:
                pulse.stop()

        return StreamingResponse(frames(), media_type="text/event-stream", headers=SSE_HEADERS)

    # --- tasks ----------------------------------------------------------------------------------------------

    async def get_task(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, GetTaskRequest)
        validate_history_length(query)
        task = self._tasks.get(_owner(access), query.id)
        if task is None:
            raise TaskNotFoundError
        history = query.history_length if query.HasField("history_length") else None
        return _answer(request_id, task.wire(history))

    async def list_tasks(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, ListTasksRequest)
        validate_history_length(query)
        if query.HasField("page_size"):
            validate_page_size(query.page_size)
        tasks = self._tasks.of(_owner(access))
        if query.context_id:
            tasks = [task for task in tasks if task.context_id == query.context_id]
        if query.status:
            state = TaskState.Name(query.status)
            tasks = [task for task in tasks if task.state == state]
        if query.HasField("status_timestamp_after"):
            after = query.status_timestamp_after.ToNanoseconds()
            tasks = [task for task in tasks if task.stamp >= after]
        tasks.sort(key=_sort_key, reverse=True)
        total, begin = len(tasks), 0
        if query.page_token:
            cursor = decode_list_tasks_cursor(query.page_token)
            if cursor is None:  # an older token: the id of the page's first task
                first = decode_page_token(query.page_token)
                begin = next((i for i, task in enumerate(tasks) if task.id == first), -1)
                if begin < 0:
                    raise InvalidParamsError(f"Invalid page token: {query.page_token}")
            else:
                after_key = cursor.sort_key()
                begin = next((i for i, task in enumerate(tasks) if _sort_key(task) < after_key), total)
        size = query.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        end = begin + size
        next_token = None
        if end < total:
            last = tasks[end - 1]
            next_token = encode_list_tasks_cursor(ListTasksCursor(timestamp_ns=last.stamp, task_id=last.id))
        history = query.history_length if query.HasField("history_length") else None
        page = ListTasksResponse(next_page_token=next_token, page_size=size, total_size=total)
        for task in tasks[begin:end]:
            listed = task.wire(history)
            if not query.include_artifacts:
                listed.pop("artifacts", None)
            # Rare, and written as the SDK writes a listing (every field, empty ones too).
            page.tasks.append(ParseDict(json.loads(_dump(listed)), Task()))
        return _answer(request_id, serialize_list_tasks_response(page, query.include_artifacts))

    async def cancel_task(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, CancelTaskRequest)
        stored = self._tasks.get(_owner(access), query.id)
        if stored is None:
            raise TaskNotFoundError
        if stored.state in _TERMINAL:
            raise TaskNotCancelableError
        turn = self._running.get(query.id)
        if turn is None:
            if query.id in self._running:  # a message is starting its turn right now
                raise TaskNotCancelableError("a message is starting this task's turn: try again")
            _status(stored, CANCELED)  # waiting for input: nothing runs
            self._tasks.save(stored)
            return _answer(request_id, stored.wire())
        session_id = thread_session_id(access.caller.principal, SURFACE, stored.context_id)
        if not await cancel_run(self._state, turn.run.task, session_id, access.caller):
            raise TaskNotCancelableError("the task's turn has ended")
        await asyncio.wait({turn.run.task})
        self._end(turn)
        if turn.task.state != CANCELED:  # it ended on its own meanwhile
            raise TaskNotCancelableError("the task's turn has ended")
        return _answer(request_id, turn.task.wire())

    async def subscribe(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        query = _proto(params, SubscribeToTaskRequest)
        stored = self._tasks.get(_owner(access), query.id)
        if stored is None:
            raise TaskNotFoundError
        if stored.state in _TERMINAL:
            raise UnsupportedOperationError(f"the task is {stored.state}: nothing more will happen to it")
        outbox: Outbox = asyncio.Queue()
        turn = self._running.get(query.id)
        if turn is None or turn.final is not None:
            outbox.put_nowait(None)  # waiting for input: its state is all there is
            return self._stream(
                request_id, _frame(request_id, {"task": stored.wire()}), _read_out(outbox), outbox
            )
        listeners = turn.run.listeners
        listeners.append(outbox)

        async def events() -> AsyncGenerator[Wire | Beat, None]:
            try:
                async for event in _read_out(outbox):
                    yield event
            finally:
                listeners.remove(outbox)

        return self._stream(request_id, _frame(request_id, {"task": turn.task.wire()}), events(), outbox)

    # --- what this agent does not offer ---------------------------------------------------------------------

    async def no_push(self, access: Access, request_id: Any, params: dict[str, Any] | None) -> Response:
        raise PushNotificationNotSupportedError

    async def no_extended_card(
        self, access: Access, request_id: Any, params: dict[str, Any] | None
    ) -> Response:
        raise UnsupportedOperationError("the agent does not offer an extended card")

    async def aclose(self) -> None:
        """Stop what still runs when the application stops."""
        running = [turn.run.task for turn in self._running.values() if turn is not None]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def _read_out(outbox: Outbox) -> AsyncGenerator[Wire | Beat, None]:
    while (event := await outbox.get()) is not None:
        yield event
