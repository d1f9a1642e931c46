"""A2A over JSON-RPC, played by ``a2a-sdk``'s own client (card resolver, client factory, JSON-RPC
transport) against a live server: the card lists the flows as skills behind the API keys, a message
is a turn and a task, ``contextId`` is the session, an approval waits as ``input-required`` and is
decided by a structured data part only, cancelling a running turn leaves the session untouched;
who calls comes from the key alone, and a refused request stores nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    ContentTypeNotSupportedError,
    GetTaskRequest,
    InvalidParamsError,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.struct_pb2 import Value
from tests.cancel_support import Started, hold_at, note
from tests.server.support import DeskFlow, DeskModel
from tests.server.support import desk_engine as desk_engine_with_other

from picoflow import FlowEngine
from picoflow.server.protocols._threads import thread_session_id
from picoflow.sessions import MemoryStore
from picoflow.testing import transcript_lines

from .conftest import (
    CONVERSATION,
    CUSTOMER,
    OTHER,
    SMALL_REFUND,
    Refunds,
    desk_engine,
    hotel_engine,
    live,
    refund_engine,
)

HELLO = "Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in the Portland area?"
DATES = "Great. What are your check-in and check-out dates?"
VERSION = {"A2A-Version": "1.0"}


# --- the client and what it reads -------------------------------------------------------------------------


@asynccontextmanager
async def a2a(
    url: str, headers: dict[str, str] = CUSTOMER, *, streaming: bool = False
) -> AsyncIterator[Client]:
    """The SDK's client for the agent at ``url``, found through its card, sending ``headers``.

    Everything the agent answered it is held to A2A 1.0 when the client is done (``conforms``)."""
    recorder = Recorder()
    async with httpx.AsyncClient(headers=headers, timeout=30, transport=recorder) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        yield ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
    recorder.check()


# --- what the agent writes, held to the SDK's own types ---------------------------------------------------

RESULTS: dict[str, type[ProtoMessage]] = {
    "SendMessage": SendMessageResponse,
    "SendStreamingMessage": StreamResponse,
    "SubscribeToTask": StreamResponse,
    "GetTask": Task,
    "CancelTask": Task,
    "ListTasks": ListTasksResponse,
}
"""The protobuf type of each method's result (of each event, for a stream)."""


def conforms(request: dict[str, Any], answer: dict[str, Any]) -> None:
    """One JSON-RPC answer of the agent (or one event of its stream), held to A2A 1.0: a result
    parses into the SDK's protobuf type with no unknown field and reads back exactly as written (the
    agent writes protobuf's JSON mapping: field names, enum names, timestamps); an error has A2A's
    code, message and ``ErrorInfo`` detail."""
    asked = request.get("id")
    valid = isinstance(asked, str | int) and not isinstance(asked, bool)
    assert answer["jsonrpc"] == "2.0" and answer["id"] == (asked if valid else None), answer
    if "error" in answer:
        assert set(answer) == {"jsonrpc", "id", "error"}, answer
        error = answer["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str), error
        assert error.get("data") is None or error["data"][0]["@type"].endswith("google.rpc.ErrorInfo"), error
        return
    assert set(answer) == {"jsonrpc", "id", "result"}, answer
    result = answer["result"]
    parsed = ParseDict(result, RESULTS[request["method"]]())  # unknown fields are an error
    if request["method"] != "ListTasks":  # a listing prints empty fields too, as the SDK's server did
        assert MessageToDict(parsed) == result


class Recorder(httpx.AsyncBaseTransport):
    """The HTTP transport under a client, keeping each request to ``/a2a`` and the bytes answered."""

    def __init__(self) -> None:
        self._http = httpx.AsyncHTTPTransport()
        self.exchanges: list[tuple[dict[str, Any], str, bytearray]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._http.handle_async_request(request)
        if request.url.path != "/a2a" or response.status_code != 200:
            return response
        body = bytearray()
        self.exchanges.append((json.loads(request.content), response.headers["content-type"], body))
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, body),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def check(self) -> None:
        """Every answer and every event recorded conforms; a stream is ``data:`` events (an
        ``event: error`` for a failure) and ``: ping`` comments."""
        for request, content_type, body in self.exchanges:
            if not content_type.startswith("text/event-stream"):
                conforms(request, json.loads(body))
                continue
            for block in bytes(body).decode().split("\n\n")[:-1]:  # a stream cut short ends mid-event
                if block == ": ping":
                    continue
                lines = block.split("\n")
                if lines[0] == "event: error":
                    lines = lines[1:]
                assert len(lines) == 1 and lines[0].startswith("data: "), block
                conforms(request, json.loads(lines[0].removeprefix("data: ")))


class _Tee(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, into: bytearray) -> None:
        self._stream = stream
        self._into = into

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._into.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def said(
    text: str | None = None,
    *,
    context_id: str = "",
    task_id: str = "",
    data: Any = None,
    metadata: dict[str, Any] | None = None,
    number: int = 1,
) -> SendMessageRequest:
    parts = [] if text is None else [Part(text=text)]
    if data is not None:
        parts.append(Part(data=ParseDict(data, Value())))
    message = Message(
        message_id=f"msg-{number}", role=Role.ROLE_USER, parts=parts, context_id=context_id, task_id=task_id
    )
    if metadata:
        message.metadata.update(metadata)
    return SendMessageRequest(message=message)


def plain(value: Any) -> Any:
    """A protocol value as JSON, without what changes each run (timestamps, the agent's message ids)."""
    data = MessageToDict(value) if hasattr(value, "DESCRIPTOR") else value
    if isinstance(data, dict):
        return {
            key: plain(item)
            for key, item in data.items()
            if key != "timestamp" and not (key == "messageId" and data.get("role") == "ROLE_AGENT")
        }
    if isinstance(data, list):
        return [plain(item) for item in data]
    return data


async def send(client: Client, request: SendMessageRequest) -> list[Any]:
    return [plain(event) for event in [event async for event in client.send_message(request)]]


def agent(task: dict[str, Any], *parts: dict[str, Any]) -> dict[str, Any]:
    return {"contextId": task["contextId"], "taskId": task["id"], "role": "ROLE_AGENT", "parts": list(parts)}


def user(task: dict[str, Any], text: str, number: int = 1) -> dict[str, Any]:
    return {
        "messageId": f"msg-{number}",
        "contextId": task["contextId"],
        "taskId": task["id"],
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }


def progress(task: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    message = agent(task, {"data": data, "mediaType": "application/json"})
    return {
        "statusUpdate": {
            "taskId": task["id"],
            "contextId": task["contextId"],
            "status": {"state": "TASK_STATE_WORKING", "message": message},
        }
    }


def replied(task: dict[str, Any], text: str, step: str) -> list[dict[str, Any]]:
    """The events that end a task with ``text`` as its reply."""
    ids = {"taskId": task["id"], "contextId": task["contextId"]}
    artifact = {"artifactId": "reply", "name": "reply", "parts": [{"text": text, "mediaType": "text/plain"}]}
    return [
        {"artifactUpdate": {**ids, "artifact": artifact, "lastChunk": True}},
        {
            "statusUpdate": {
                **ids,
                "status": {"state": "TASK_STATE_COMPLETED"},
                "metadata": {"ended": False, "step": step},
            }
        },
    ]


def completed(
    task: dict[str, Any], text: str, step: str, history: Sequence[Any], skill: str
) -> dict[str, Any]:
    return {
        "id": task["id"],
        "contextId": task["contextId"],
        "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [
            {"artifactId": "reply", "name": "reply", "parts": [{"text": text, "mediaType": "text/plain"}]}
        ],
        "history": list(history),
        "metadata": {"skill": skill, "ended": False, "step": step},
    }


def session_of(context_id: str, principal: str = "cust-1") -> str:
    return thread_session_id(principal, "a2a", context_id)


async def rpc(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """A raw JSON-RPC call, for what the SDK's client would never send; a JSON-RPC answer to a
    JSON-RPC request is held to A2A 1.0 (``conforms``)."""
    async with httpx.AsyncClient(timeout=30) as http:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        merged = {**CUSTOMER, **VERSION, "Content-Type": "application/json", **(headers or {})}
        answer = await http.post(
            f"{url}/a2a", content=content, headers={k: v for k, v in merged.items() if v}
        )
    if answer.status_code == 200 and isinstance(body, dict) and body.get("method") in RESULTS:
        conforms(body, answer.json())
    return answer


def send_body(message: dict[str, Any], method: str = "SendMessage") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"message": message}}


# --- the card ----------------------------------------------------------------------------------------------


async def test_the_card_lists_each_flow_as_a_skill_behind_the_api_keys() -> None:
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=DeskModel())
    async with live(engine) as url, httpx.AsyncClient() as http:
        shown = await http.get(f"{url}/.well-known/agent-card.json")  # public: no key
        assert shown.status_code == 200
        card = await A2ACardResolver(http, url).get_agent_card()
    assert MessageToDict(card) == {
        "name": "picoflow",
        "description": (
            "Conversational flows served by picoflow. Each skill is a flow: name it in the message's "
            "metadata.skill (default: desk). contextId is the conversation."
        ),
        "supportedInterfaces": [
            {"url": f"{url}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "version": card.version,
        "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": False},
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "An API key of this server, as a bearer token.",
                }
            },
            "apiKey": {
                "apiKeySecurityScheme": {
                    "location": "header",
                    "name": "X-API-Key",
                    "description": "An API key of this server.",
                }
            },
        },
        "securityRequirements": [{"schemes": {"bearer": {}}}, {"schemes": {"apiKey": {}}}],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "text/markdown", "application/json"],
        "skills": [
            {
                "id": "desk",
                "name": "desk",
                "description": "A help desk used by the server tests.",
                "tags": ["flow"],
            }
        ],
    }
    assert card.version and "session" not in shown.text


# --- turns -------------------------------------------------------------------------------------------------


async def test_a_message_is_a_turn_whose_task_holds_the_reply_and_streaming_continues_the_context() -> None:
    engine, model = hotel_engine(2)
    async with live(engine) as url:
        async with a2a(url) as client:
            (first,) = await send(client, said(CONVERSATION[0].user))
        task = first["task"]
        context_id = task["contextId"]
        assert len(context_id) == 36  # a new context: the server chose its id
        assert task == completed(task, HELLO, "Explore", [user(task, "Hi")], "hotel")

        async with a2a(url, streaming=True) as client:
            events = await send(client, said(CONVERSATION[1].user, context_id=context_id, number=2))
            second = events[0]["task"]
            assert second["contextId"] == context_id and second["id"] != task["id"]
            assert events == [
                {
                    "task": {
                        "id": second["id"],
                        "contextId": context_id,
                        "status": {"state": "TASK_STATE_WORKING"},
                        "history": [user(second, "yes", 2)],
                        "metadata": {"skill": "hotel"},
                    }
                },
                *replied(second, DATES, "Explore"),
            ]
            fetched = await client.get_task(GetTaskRequest(id=second["id"]))
            assert plain(fetched) == completed(second, DATES, "Explore", [user(second, "yes", 2)], "hotel")
            listed = await client.list_tasks(ListTasksRequest())
            assert sorted(t.id for t in listed.tasks) == sorted([task["id"], second["id"]])

    # One session for the context, holding both turns.
    session = await engine.get_session(session_of(context_id), principal="cust-1")
    assert session is not None and (session.flow, session.current_step) == ("hotel", "Explore")
    assert await transcript_lines(engine, session.id) == [
        "Explore | user: Hi",
        f"Explore | assistant [direct]: {HELLO}",
        "Explore | user: yes",
        f"Explore | assistant [direct]: {DATES}",
    ]
    model.assert_complete()


async def test_a_streamed_turn_tells_its_steps_and_tool_calls_and_a_failure_is_a_failed_task() -> None:
    async with live(desk_engine()) as url:
        async with a2a(url, streaming=True) as client:
            events = await send(client, said("who am I", context_id="desk-1"))
            task = events[0]["task"]
            whoami = json.dumps({"config": {}, "principal": "cust-1"})
            assert events[1:] == [
                progress(task, {"event": "step", "step": "Desk", "previous": None}),
                progress(
                    task, {"event": "tool_call", "step": "Desk", "id": "call_1", "name": "whoami", "args": {}}
                ),
                progress(
                    task,
                    {
                        "event": "tool_result",
                        "step": "Desk",
                        "id": "call_1",
                        "name": "whoami",
                        "content": whoami,
                        "is_error": False,
                    },
                ),
                *replied(task, f"tool said: {whoami}", "Desk"),
            ]

        async with a2a(url) as client:
            (failed,) = await send(client, said("down", context_id="desk-1", number=2))
            down = failed["task"]
            assert down == {
                "id": down["id"],
                "contextId": "desk-1",
                "status": {
                    "state": "TASK_STATE_FAILED",
                    "message": agent(
                        down,
                        {"text": "The language model is unavailable right now. Please try again shortly."},
                        {
                            "data": {
                                "event": "error",
                                "status": 503,
                                "kind": "model_unavailable",
                                "retryable": True,
                                "retry_after": 7.0,
                            },
                            "mediaType": "application/json",
                        },
                    ),
                },
                "history": [user(down, "down", 2)],
                "metadata": {"skill": "desk"},
            }


# --- approvals ---------------------------------------------------------------------------------------------


def waiting(task: dict[str, Any], approval_id: str) -> dict[str, Any]:
    """The status of a task waiting for the customer to approve the small refund."""
    return {
        "state": "TASK_STATE_INPUT_REQUIRED",
        "message": agent(
            task,
            {
                "text": "Waiting for approval: Refund $25.50 on order 40001 (the customer must approve)",
                "mediaType": "text/plain",
            },
            {
                "data": {
                    "event": "approval_requested",
                    "approval_id": approval_id,
                    "tool": "refund",
                    "args": {"order_id": 40001.0, "amount": 25.5, "note": ""},
                    "summary": "Refund $25.50 on order 40001",
                    "approvers": "the customer",
                    "expires_at": 4102445400.0,
                },
                "mediaType": "application/json",
            },
        ),
    }


async def test_an_approval_waits_as_input_required_and_a_structured_decision_runs_the_refund_once() -> None:
    engine, model = refund_engine([[SMALL_REFUND], "Your refund is on its way."])
    async with live(engine) as url:
        async with a2a(url) as client:
            (first,) = await send(client, said("refund order 40001", context_id="refund-1"))
        task = first["task"]
        approval_id = task["status"]["message"]["parts"][1]["data"]["approval_id"]
        assert task == {
            "id": task["id"],
            "contextId": "refund-1",
            "status": waiting(task, approval_id),
            "history": [user(task, "refund order 40001")],
            "metadata": {"skill": "refunds"},
        }
        assert Refunds.ledger == []

        decision = {"approval_id": approval_id, "decision": "approve"}
        async with a2a(url, streaming=True) as client:
            events = await send(
                client, said(context_id="refund-1", task_id=task["id"], data=decision, number=2)
            )
            asking = task["status"]["message"]
            answer = {**user(task, "", 2), "parts": [{"data": decision}]}
            assert events == [
                {
                    "task": {
                        "id": task["id"],
                        "contextId": "refund-1",
                        "status": {"state": "TASK_STATE_WORKING"},
                        "history": [user(task, "refund order 40001"), asking, answer],
                        "metadata": {"skill": "refunds"},
                    }
                },
                progress(
                    task,
                    {
                        "event": "approval_decided",
                        "approval_id": approval_id,
                        "tool": "refund",
                        "status": "approved",
                        "decided_by": "cust-1",
                    },
                ),
                progress(
                    task,
                    {
                        "event": "tool_call",
                        "step": "Refunds",
                        "id": "c1",
                        "name": "refund",
                        "args": {"order_id": 40001.0, "amount": 25.5},
                    },
                ),
                progress(
                    task,
                    {
                        "event": "tool_result",
                        "step": "Refunds",
                        "id": "c1",
                        "name": "refund",
                        "content": "refunded $25.50 on order 40001",
                        "is_error": False,
                    },
                ),
                *replied(task, "Your refund is on its way.", "Refunds"),
            ]
            assert Refunds.ledger == [(approval_id, 40001, 25.5)]

            # The same decision again, in a new task of the context: refused, and nothing runs twice.
            with pytest.raises(UnsupportedOperationError, match="approved already"):
                await send(client, said(context_id="refund-1", data=decision, number=3))
            # A finished task takes no more messages.
            with pytest.raises(UnsupportedOperationError, match="COMPLETED"):
                await send(client, said("again", context_id="refund-1", task_id=task["id"], number=4))
    assert Refunds.ledger == [(approval_id, 40001, 25.5)]
    assert await transcript_lines(engine, session_of("refund-1")) == [
        "Refunds | user: refund order 40001",
        'Refunds | assistant: -> refund({"amount": 25.5, "order_id": 40001}) #c1',
        "Refunds | tool refund #c1: refunded $25.50 on order 40001",
        "Refunds | assistant: Your refund is on its way.",
    ]
    model.assert_complete()


async def test_words_are_not_a_decision_they_withdraw_the_approval() -> None:
    engine, model = refund_engine([[SMALL_REFUND], "Then I will not refund it."])
    async with live(engine) as url, a2a(url) as client:
        (first,) = await send(client, said("refund order 40001", context_id="refund-2"))
        task = first["task"]
        approval_id = task["status"]["message"]["parts"][1]["data"]["approval_id"]
        (second,) = await send(
            client, said("yes, approve it", context_id="refund-2", task_id=task["id"], number=2)
        )
        assert second["task"]["status"] == {"state": "TASK_STATE_COMPLETED"}
        assert second["task"]["artifacts"][0]["parts"] == [
            {"text": "Then I will not refund it.", "mediaType": "text/plain"}
        ]
        # The withdrawn approval cannot be decided any more.
        decision = {"approval_id": approval_id, "decision": "approve"}
        with pytest.raises(UnsupportedOperationError, match="withdrawn"):
            await send(client, said(context_id="refund-2", data=decision, number=3))
    assert Refunds.ledger == []
    session = await engine.get_session(session_of("refund-2"), principal="cust-1")
    assert session is not None and [a.status for a in session.approvals] == ["withdrawn"]
    model.assert_complete()


async def test_cancelling_a_task_that_waits_for_input_closes_it_and_leaves_the_approval_pending() -> None:
    engine, _ = refund_engine([[SMALL_REFUND]])
    async with live(engine) as url, a2a(url) as client:
        (first,) = await send(client, said("refund order 40001", context_id="r3"))
        task = first["task"]
        approval_id = task["status"]["message"]["parts"][1]["data"]["approval_id"]
        async with a2a(url, streaming=True) as watcher:
            assert [
                plain(event) async for event in watcher.subscribe(SubscribeToTaskRequest(id=task["id"]))
            ] == [{"task": task}]
        cancelled = plain(await client.cancel_task(CancelTaskRequest(id=task["id"])))
        assert cancelled == {
            **task,
            "status": {"state": "TASK_STATE_CANCELED"},
            "history": [*task["history"], task["status"]["message"]],
        }
        decision = {"approval_id": approval_id, "decision": "approve"}
        with pytest.raises(UnsupportedOperationError, match="CANCELED"):
            await send(client, said(context_id="r3", task_id=task["id"], data=decision, number=2))
    session = await engine.get_session(session_of("r3"), principal="cust-1")
    assert session is not None and [(a.id, a.status) for a in session.approvals] == [(approval_id, "pending")]
    assert Refunds.ledger == []


# --- cancelling --------------------------------------------------------------------------------------------


async def test_cancelling_a_running_turn_leaves_the_session_as_it_was_before_it() -> None:
    model = DeskModel()
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=model)
    async with live(engine) as url, a2a(url, streaming=True) as client:
        await send(client, said("hello", context_id="held"))
        session_id = session_of("held")
        before = await engine.get_session(session_id, principal="cust-1")
        assert before is not None
        lines = await transcript_lines(engine, session_id)

        stream = client.send_message(said("please wait", context_id="held", number=2))
        opened = await anext(stream)
        task_id = opened.task.id
        await model.waiting.wait()  # the turn is inside the model, held there
        async with a2a(url, streaming=True) as watcher:
            watching = watcher.subscribe(SubscribeToTaskRequest(id=task_id))
            assert (await anext(watching)).task.status.state == opened.task.status.state
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert [plain(event) async for event in watching] == [
                {
                    "statusUpdate": {
                        "taskId": task_id,
                        "contextId": "held",
                        "status": {"state": "TASK_STATE_CANCELED"},
                    }
                }
            ]
        rest = [plain(event) async for event in stream]
        assert rest == [
            {
                "statusUpdate": {
                    "taskId": task_id,
                    "contextId": "held",
                    "status": {"state": "TASK_STATE_CANCELED"},
                }
            }
        ]
        assert plain(cancelled) == {
            "id": task_id,
            "contextId": "held",
            "status": {"state": "TASK_STATE_CANCELED"},
            "history": [user(plain(opened.task), "please wait", 2)],
            "metadata": {"skill": "desk"},
        }
        assert plain(await client.get_task(GetTaskRequest(id=task_id))) == plain(cancelled)
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))
        model.gate.set()  # nothing is left to release: the held turn is gone

    after = await engine.get_session(session_id, principal="cust-1")
    assert after is not None and after.revision == before.revision
    assert (
        await transcript_lines(engine, session_id)
        == lines
        == ["Desk | user: hello", "Desk | assistant: echo: hello"]
    )


async def test_a_turn_cancelled_by_its_session_route_ends_its_task_canceled() -> None:
    Started.reset()
    engine, model, script = hold_at(2, [[note("a", "c1")], "Back."])
    session_id = session_of("deleted")
    async with live(engine) as url, a2a(url, streaming=True) as client:
        stream = client.send_message(said("note a", context_id="deleted"))
        task = plain((await anext(stream)).task)
        await model.held.wait()  # note a ran; the turn waits in its next model request
        async with httpx.AsyncClient(base_url=url, headers=CUSTOMER) as http:
            cancel = await http.delete(f"/v1/sessions/{session_id}/turn")
        assert (cancel.status_code, cancel.json()) == (202, {"session_id": session_id, "cancelled": "turn"})
        rest = [plain(event) async for event in stream]
        canceled = {"taskId": task["id"], "contextId": "deleted", "status": {"state": "TASK_STATE_CANCELED"}}
        assert rest[-1] == {"statusUpdate": canceled}
        assert [event["statusUpdate"]["status"]["state"] for event in rest] == [
            "TASK_STATE_WORKING",
            "TASK_STATE_WORKING",
            "TASK_STATE_WORKING",
            "TASK_STATE_CANCELED",
        ]
        fetched = plain(await client.get_task(GetTaskRequest(id=task["id"])))
        assert fetched["status"] == {"state": "TASK_STATE_CANCELED"}
        assert await transcript_lines(engine, session_id) == []
    async with live(engine) as url, a2a(url) as client:
        (again,) = await send(client, said("hi", context_id="deleted", number=2))
    assert again["task"]["status"] == {"state": "TASK_STATE_COMPLETED"}
    assert await transcript_lines(engine, session_id) == ["Desk | user: hi", "Desk | assistant: Back."]
    assert Started.calls == ["note:a"]
    script.assert_complete()


# --- security ----------------------------------------------------------------------------------------------


async def test_another_principals_task_is_not_found_and_its_context_id_names_its_own_session() -> None:
    async with live(desk_engine()) as url:
        async with a2a(url) as mine:
            (first,) = await send(mine, said("who am I", context_id="shared"))
        task_id = first["task"]["id"]
        async with a2a(url, OTHER) as theirs:
            with pytest.raises(TaskNotFoundError):
                await theirs.get_task(GetTaskRequest(id=task_id))
            with pytest.raises(TaskNotFoundError):
                await theirs.cancel_task(CancelTaskRequest(id=task_id))
            with pytest.raises(TaskNotFoundError):
                await send(theirs, said("hi", context_id="shared", task_id=task_id))
            assert list((await theirs.list_tasks(ListTasksRequest())).tasks) == []
            (second,) = await send(theirs, said("who am I", context_id="shared", number=2))
        reply = second["task"]["artifacts"][0]["parts"][0]["text"]
        assert reply == "tool said: " + json.dumps({"config": {}, "principal": "cust-2"})
        assert second["task"]["contextId"] == "shared" and session_of("shared") != session_of(
            "shared", "cust-2"
        )


async def test_an_identity_in_metadata_is_ignored() -> None:
    engine = desk_engine()
    forged = {"principal": "sup-9", "customer_id": "cust-2", "user": "sup-9", "skill": "desk"}
    async with live(engine) as url, a2a(url) as client:
        request = said("who am I", context_id="forged", metadata=forged)
        request.metadata.update({"principal": "sup-9", "caller": {"principal": "sup-9"}})
        (result,) = await send(client, request)
    reply = result["task"]["artifacts"][0]["parts"][0]["text"]
    assert reply == "tool said: " + json.dumps({"config": {}, "principal": "cust-1"})
    session = await engine.get_session(session_of("forged"), principal="cust-1")
    assert session is not None and session.principal == "cust-1"


async def test_a_context_keeps_the_skill_of_its_first_turn() -> None:
    engine = desk_engine_with_other()
    async with live(engine) as url, a2a(url) as client:
        (first,) = await send(client, said("hello", context_id="mixed", metadata={"skill": "other"}))
        assert first["task"]["metadata"] == {"skill": "other", "step": "Desk", "ended": False}
        with pytest.raises(InvalidParamsError, match="belongs to another flow") as refused:
            await send(client, said("hello again", context_id="mixed", number=2))  # the default: desk
        assert refused.value.data is not None and refused.value.data["kind"] == "flow_mismatch"
        (goes_on,) = await send(
            client, said("and again", context_id="mixed", metadata={"skill": "other"}, number=3)
        )
        assert goes_on["task"]["status"] == {"state": "TASK_STATE_COMPLETED"}
    assert await transcript_lines(engine, session_of("mixed")) == [
        "Desk | user: hello",
        "Desk | assistant: echo: hello",
        "Desk | user: and again",
        "Desk | assistant: echo: and again",
    ]


async def test_without_a_valid_key_the_answer_is_401_and_nothing_is_stored() -> None:
    engine = desk_engine()
    body = send_body({"messageId": "m", "contextId": "c", "role": "ROLE_USER", "parts": [{"text": "hi"}]})
    async with live(engine) as url:
        for headers in (
            {"Authorization": ""},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "", "X-API-Key": "no"},
        ):
            answer = await rpc(url, body, headers)
            assert answer.status_code == 401, headers
            assert answer.headers["WWW-Authenticate"] == 'Bearer realm="picoflow"'
        async with a2a(url, {}) as client:
            with pytest.raises(A2AClientError, match="401"):
                await send(client, said("hi", context_id="c"))
        keyed = await rpc(url, body, {"Authorization": "", "X-API-Key": "cust-key"})
        assert (
            keyed.status_code == 200
            and keyed.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        )
    assert [info.principal for info in await engine.store.list_sessions()] == ["cust-1"]


def _error(answer: httpx.Response) -> tuple[int, str]:
    assert answer.status_code == 200, answer.text
    error = answer.json()["error"]
    return error["code"], error["message"]


async def test_invalid_requests_are_json_rpc_errors_and_store_nothing() -> None:
    engine = desk_engine()
    engine.max_message_chars = 50
    text = {"messageId": "m", "contextId": "c", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    decision = {"data": {"approval_id": "apr_x", "decision": "approve"}}
    async with live(engine) as url:
        cases: list[tuple[Any, dict[str, str] | None, int, str]] = [
            (b"{not json", None, -32700, "Expecting property name"),
            ({"jsonrpc": "2.0", "id": 1, "method": "Shout", "params": {}}, None, -32601, "Method not found"),
            (send_body(text), {"A2A-Version": ""}, -32009, "A2A version '0.3' is not supported"),
            (
                send_body({**text, "role": "ROLE_AGENT"}),
                None,
                -32602,
                "a client's message has the role ROLE_USER",
            ),
            (send_body({**text, "parts": []}), None, -32602, "message.parts must hold at least one part"),
            (send_body({**text, "messageId": ""}), None, -32602, "message.messageId is required"),
            (
                send_body({**text, "parts": [{"url": "https://x/y.pdf"}]}),
                None,
                -32005,
                "files are not accepted",
            ),
            (send_body({**text, "parts": [{"data": {"order": 1}}]}), None, -32602, "must be a decision"),
            (
                send_body({**text, "parts": [{"text": "yes"}, decision]}),
                None,
                -32602,
                "a decision travels alone",
            ),
            (send_body({**text, "contextId": "", "parts": [decision]}), None, -32602, "names the context"),
            (send_body({**text, "contextId": "x" * 201}), None, -32602, "longer than 200 characters"),
            (send_body({**text, "parts": [{"text": "x" * 51}]}), None, -32602, "longer than 50 characters"),
            (send_body({**text, "metadata": {"skill": "hotels"}}), None, -32602, "no skill 'hotels'"),
            (
                send_body({**text, "contextId": "", "metadata": {"skill": "hotels"}}),
                None,
                -32602,
                "no skill 'hotels'",
            ),
            (
                send_body({**text, "contextId": "", "parts": [{"text": "x" * 51}]}),
                None,
                -32602,
                "longer than 50",
            ),
            (send_body({**text, "contextId": "", "parts": [{"text": " "}]}), None, -32602, "empty"),
            (send_body({**text, "metadata": {"skill": 3}}), None, -32602, "metadata.skill must name a skill"),
            (send_body({**text, "taskId": "no-such-task"}), None, -32001, "Task not found"),
            (
                send_body(text, "SendStreamingMessage") | {"params": {}},
                None,
                -32602,
                "message.messageId is required",
            ),
            # The JSON-RPC envelope, and parameters of the wrong type.
            ([send_body(text)], None, -32600, "Batch requests are not supported"),
            (send_body(text) | {"jsonrpc": "1.0"}, None, -32600, "'jsonrpc' must be exactly '2.0'"),
            (send_body(text) | {"id": True}, None, -32600, "id must be a string, integer, or null"),
            (send_body(text) | {"user": "sup-9"}, None, -32600, "unknown members user"),
            ({"jsonrpc": "2.0", "id": 1}, None, -32600, "method must be a string"),
            (send_body(text) | {"params": [text]}, None, -32602, "params must be an object"),
            (
                send_body({**text, "parts": [{"text": 5}]}),
                None,
                -32602,
                "message.parts[0].text: Input should be",
            ),
            (
                send_body({**text, "parts": [{"text": "hi", "url": "https://x"}]}),
                None,
                -32602,
                "more than one",
            ),
            (send_body({**text, "parts": [{"mediaType": "text/plain"}]}), None, -32602, "parts[0] is empty"),
            (
                send_body(text) | {"params": {"message": text, "configuration": {"historyLength": -1}}},
                None,
                -32602,
                "non-negative",
            ),
            (
                {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 5}},
                None,
                -32602,
                "Invalid params",
            ),
            (send_body(text), {"A2A-Version": "2.0"}, -32009, "A2A version '2.0' is not supported"),
            (
                {"jsonrpc": "2.0", "id": "p", "method": "CreateTaskPushNotificationConfig", "params": {}},
                None,
                -32003,
                "Push Notification is not supported",
            ),
            (
                {"jsonrpc": "2.0", "id": 2, "method": "GetExtendedAgentCard"},
                None,
                -32004,
                "does not offer an extended card",
            ),
        ]
        for body, headers, code, words in cases:
            assert (found := _error(await rpc(url, body, headers)))[0] == code and words in found[1], (
                body,
                found,
            )
        too_big = await rpc(url, send_body({**text, "parts": [{"text": "x" * 1_100_000}]}))
        assert too_big.status_code == 413
        async with a2a(url) as client:
            with pytest.raises(InvalidParamsError, match="longer than 50 characters") as refused:
                await send(client, said("x" * 51, context_id="c"))
            assert refused.value.data == {
                "kind": "message_too_long",
                "retryable": "false",
                "errors": [{"field": "message.parts", "message": "message is longer than 50 characters"}],
            }
            with pytest.raises(ContentTypeNotSupportedError):
                await send(
                    client,
                    SendMessageRequest(
                        message=Message(message_id="m", role=Role.ROLE_USER, parts=[Part(url="https://x/y")])
                    ),
                )
            assert list((await client.list_tasks(ListTasksRequest())).tasks) == []
    assert await engine.store.list_sessions() == []


async def test_only_the_task_a_message_names_goes_on_and_one_message_at_a_time() -> None:
    model = DeskModel()
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=model)
    async with live(engine) as url, a2a(url, streaming=True) as client:
        stream = client.send_message(said("wait for me", context_id="busy"))
        task = (await anext(stream)).task
        await model.waiting.wait()
        with pytest.raises(UnsupportedOperationError, match="still working"):
            await send(client, said("hello?", context_id="busy", task_id=task.id, number=2))
        with pytest.raises(InvalidParamsError, match="not the context of the task"):
            await send(client, said("hello?", context_id="elsewhere", task_id=task.id, number=3))
        model.gate.set()
        rest = [plain(event) async for event in stream]
        step = {"event": "step", "step": "Desk", "previous": None}
        assert rest == [progress(plain(task), step), *replied(plain(task), "done waiting", "Desk")]


async def test_a_client_that_goes_away_mid_stream_leaves_its_turn_and_task_whole() -> None:
    model = DeskModel()
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=model)
    async with live(engine) as url:
        async with a2a(url, streaming=True) as client:
            stream = client.send_message(said("wait, then go", context_id="gone"))
            task = plain((await anext(stream)).task)
            await model.waiting.wait()
            await stream.aclose()
        async with a2a(url, streaming=True) as client:
            watching = client.subscribe(SubscribeToTaskRequest(id=task["id"]))
            assert plain((await anext(watching)).task) == task
            model.gate.set()
            assert [plain(event) async for event in watching] == replied(task, "done waiting", "Desk")
            fetched = plain(await client.get_task(GetTaskRequest(id=task["id"])))
    assert fetched == completed(task, "done waiting", "Desk", [user(task, "wait, then go")], "desk")
    assert await transcript_lines(engine, session_of("gone")) == [
        "Desk | user: wait, then go",
        "Desk | assistant: done waiting",
    ]


# --- tasks answered at once, listed, and streams kept alive -----------------------------------------------


async def test_a_task_answered_at_once_runs_on_and_its_subscriber_sees_it_end() -> None:
    model = DeskModel()
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=model)
    async with live(engine) as url, a2a(url) as client:
        request = said("wait for it", context_id="later")
        request.configuration.return_immediately = True
        (answered,) = await send(client, request)
        task = answered["task"]
        assert task == {
            "id": task["id"],
            "contextId": "later",
            "status": {"state": "TASK_STATE_WORKING"},
            "history": [user(task, "wait for it")],
            "metadata": {"skill": "desk"},
        }
        await model.waiting.wait()  # the turn goes on, inside the model
        async with a2a(url, streaming=True) as watcher:
            watching = watcher.subscribe(SubscribeToTaskRequest(id=task["id"]))
            assert plain((await anext(watching)).task) == task
            model.gate.set()
            assert [plain(event) async for event in watching] == replied(task, "done waiting", "Desk")
        done = completed(task, "done waiting", "Desk", [user(task, "wait for it")], "desk")
        assert plain(await client.get_task(GetTaskRequest(id=task["id"]))) == done
        short = plain(await client.get_task(GetTaskRequest(id=task["id"], history_length=0)))
        assert short == {key: value for key, value in done.items() if key != "history"}
    assert await transcript_lines(engine, session_of("later")) == [
        "Desk | user: wait for it",
        "Desk | assistant: done waiting",
    ]


async def test_tasks_are_listed_newest_first_by_page_by_context_and_by_state() -> None:
    async with live(desk_engine()) as url, a2a(url) as client:
        sent = [
            (await send(client, said(text, context_id=context, number=n)))[0]["task"]
            for n, (text, context) in enumerate([("one", "a"), ("two", "a"), ("three", "b")], start=1)
        ]
        first, second, third = (task["id"] for task in sent)

        def ids(page: ListTasksResponse) -> list[str]:
            return [task.id for task in page.tasks]

        everything = await client.list_tasks(ListTasksRequest())
        assert ids(everything) == [third, second, first]
        assert (everything.total_size, everything.page_size, everything.next_page_token) == (3, 50, "")
        # Without includeArtifacts a listing leaves them out; the history stays.
        listed = plain(everything.tasks[2])
        assert listed == {key: value for key, value in sent[0].items() if key != "artifacts"}

        page = await client.list_tasks(ListTasksRequest(page_size=2))
        assert ids(page) == [third, second] and page.total_size == 3 and page.next_page_token
        rest = await client.list_tasks(ListTasksRequest(page_size=2, page_token=page.next_page_token))
        assert ids(rest) == [first] and rest.next_page_token == ""

        assert ids(await client.list_tasks(ListTasksRequest(context_id="a"))) == [second, first]
        assert ids(await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))) == [
            third,
            second,
            first,
        ]
        assert ids(await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))) == []
        since = ListTasksRequest()
        since.status_timestamp_after.CopyFrom(everything.tasks[1].status.timestamp)
        assert ids(await client.list_tasks(since)) == [third, second]

        bare = await client.list_tasks(ListTasksRequest(history_length=0, include_artifacts=True))
        assert [plain(task) for task in bare.tasks] == [
            {key: value for key, value in task.items() if key != "history"} for task in reversed(sent)
        ]

        for wrong, words in (
            (ListTasksRequest(page_size=101), "maximum page size is 100"),
            (ListTasksRequest(page_token="bm9wZQ"), "Invalid page token"),
            (ListTasksRequest(history_length=-1), "non-negative"),
        ):
            with pytest.raises(InvalidParamsError, match=words):
                await client.list_tasks(wrong)


async def test_a_quiet_stream_is_kept_alive_with_ping_comments() -> None:
    model = DeskModel()
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=model)
    message = {"messageId": "m", "contextId": "quiet", "role": "ROLE_USER", "parts": [{"text": "wait"}]}
    body = send_body(message, "SendStreamingMessage")
    async with (
        live(engine, sse_heartbeat=0.01) as url,
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{url}/a2a", json=body, headers={**CUSTOMER, **VERSION}) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        events: list[dict[str, Any]] = []
        pings = 0
        async for line in response.aiter_lines():
            if line == ": ping":
                pings += 1
                if model.waiting.is_set():
                    model.gate.set()  # kept alive while the turn waited: now let it end
            elif line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
    assert pings >= 1
    for event in events:
        conforms(body, event)
    results = [plain(event["result"]) for event in events]
    task = results[0]["task"]
    assert results[1:] == [
        progress(task, {"event": "step", "step": "Desk", "previous": None}),
        *replied(task, "done waiting", "Desk"),
    ]
