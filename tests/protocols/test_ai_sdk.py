"""The Vercel AI SDK UI message stream (``POST /ai-sdk/{flow}``), read by the ``ai`` package itself:
``DefaultChatTransport`` posts and parses each request (``js/ai_sdk_read.mjs`` folds the chunks
with ``readUIMessageStream``), and ``js/ai_sdk_chat.mjs`` plays whole conversations with the SDK's
``Chat`` (what ``useChat`` wraps), tool approvals answered with ``addToolApprovalResponse``.

Every stream is asserted whole, chunk by chunk, with the UI message it folds into and what the
store kept; the security tests check that the key alone says who is calling.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
from tests.cancel_support import Started, hold_at, note
from tests.server.support import TABLE, DeskFlow, DeskModel, LoadingDesk
from tests.server.support import desk_engine as desk_engine_with
from tests.server.test_readiness import DOWNLOADING_BODY

from picoflow import Caller, FlowEngine
from picoflow.diagram import flow_mermaid
from picoflow.messages import ModelRequest
from picoflow.models import TextDelta, ToolCall
from picoflow.models.readiness import Phase
from picoflow.server.protocols._threads import thread_session_id
from picoflow.server.protocols.ai_sdk import MAX_MESSAGES, markdown_tables
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
    node,
    refund_engine,
)

CUST_1 = Caller(principal="cust-1")
WHOAMI = '{"config": {}, "principal": "cust-1"}'
HOTEL_REPLIES = (
    "Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in the Portland area?",
    "Great. What are your check-in and check-out dates?",
    "Check-in Sunday August 1, 2027, check-out Sunday August 8, 2027: 7 nights. "
    "What nightly budget do you have in mind: a minimum, a maximum or both?",
)
WAITING = "Waiting for approval: Refund $25.50 on order 40001 (the customer must approve)"
SUMMARY = "Refund $25.50 on order 40001"
DESCRIPTOR = {"summary": SUMMARY, "approvers": "the customer", "expiresAt": 4102445400}


# --- the clients -----------------------------------------------------------------------------------------


async def read(
    url: str,
    flow: str,
    chat_id: str,
    messages: list[dict[str, Any]] | str,
    headers: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
) -> Any:
    """One request through ``DefaultChatTransport``, its answer read by ``readUIMessageStream``;
    ``messages`` may be the text of a single user message."""
    if isinstance(messages, str):
        messages = [user("u1", messages)]
    plan = {
        "api": f"{url}/ai-sdk/{flow}",
        "headers": CUSTOMER if headers is None else headers,
        "body": body or {},
        "chatId": chat_id,
        "messages": messages,
    }
    # Node runs in a thread: the server answers in this event loop.
    return await asyncio.to_thread(node, "ai_sdk_read.mjs", stdin=json.dumps(plan))


async def play(
    url: str,
    flow: str,
    chat_id: str,
    steps: list[dict[str, Any]],
    headers: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
) -> Any:
    """A conversation with the SDK's ``Chat``: ``{"send": text}`` or ``{"approve": bool}`` steps."""
    plan = {
        "api": f"{url}/ai-sdk/{flow}",
        "headers": CUSTOMER if headers is None else headers,
        "body": body or {},
        "chatId": chat_id,
        "steps": steps,
    }
    return await asyncio.to_thread(node, "ai_sdk_chat.mjs", stdin=json.dumps(plan))


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def session_of(chat_id: str, principal: str = "cust-1") -> str:
    return thread_session_id(principal, "ai-sdk", chat_id)


# --- the chunks ------------------------------------------------------------------------------------------


def start(message_id: str, session_id: str) -> dict[str, Any]:
    return {"type": "start", "messageId": message_id, "messageMetadata": {"sessionId": session_id}}


def text(reply: str, part: str = "text-1") -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": part},
        {"type": "text-delta", "id": part, "delta": reply},
        {"type": "text-end", "id": part},
    ]


def diagram(engine: FlowEngine, flow: str, step: str) -> dict[str, Any]:
    mermaid = flow_mermaid(engine.flow(flow), current=step)
    return {"type": "data-diagram", "id": "diagram", "data": {"flow": flow, "step": step, "mermaid": mermaid}}


def step_is(step: str) -> dict[str, Any]:
    return {"type": "message-metadata", "messageMetadata": {"step": step}}


def ended(
    session_id: str,
    flow: str,
    step: str,
    *,
    approvals: tuple[str, ...] = (),
    content_type: str = "text/plain",
) -> list[dict[str, Any]]:
    metadata = {
        "sessionId": session_id,
        "flow": flow,
        "step": step,
        "completed": False,
        "contentType": content_type,
        "approvals": list(approvals),
    }
    return [
        {"type": "message-metadata", "messageMetadata": metadata},
        {"type": "finish", "finishReason": "tool-calls" if approvals else "stop"},
    ]


def metadata(session_id: str, flow: str, step: str, **more: Any) -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "step": step,
        "flow": flow,
        "completed": False,
        "contentType": "text/plain",
        "approvals": [],
        **more,
    }


def done(reply: str) -> dict[str, Any]:
    return {"type": "text", "text": reply, "state": "done"}


def tool_part(name: str, call_id: str, output: str, **more: Any) -> dict[str, Any]:
    return {
        "type": f"tool-{name}",
        "toolCallId": call_id,
        "state": "output-available",
        "input": {},
        "output": output,
        **more,
    }


# --- a streamed turn -------------------------------------------------------------------------------------


async def test_hotel_turn_is_read_into_ui_message_parts() -> None:
    engine, _ = hotel_engine(1)
    async with live(engine) as url:
        read_back = await read(url, "hotel", "trip-1", CONVERSATION[0].user)
    session_id = session_of("trip-1")
    message_id = read_back["chunks"][0]["messageId"]
    assert message_id.startswith("msg-")
    assert read_back["status"] == 200
    assert read_back["streamHeader"] == "v1"
    assert read_back["contentType"].startswith("text/event-stream")
    # The model's reading of the message (its structured output) is held back: the reply comes whole.
    assert read_back["chunks"] == [
        start(message_id, session_id),
        step_is("Explore"),
        {"type": "start-step"},
        *text(HOTEL_REPLIES[0]),
        diagram(engine, "hotel", "Explore"),
        {"type": "finish-step"},
        *ended(session_id, "hotel", "Explore"),
    ]
    assert read_back["message"] == {
        "id": message_id,
        "metadata": metadata(session_id, "hotel", "Explore"),
        "role": "assistant",
        "parts": [{"type": "step-start"}, done(HOTEL_REPLIES[0]), diagram(engine, "hotel", "Explore")],
    }
    assert read_back["errors"] == []
    assert await transcript_lines(engine, session_id) == [
        "Explore | user: Hi",
        f"Explore | assistant [direct]: {HOTEL_REPLIES[0]}",
    ]


async def test_chat_turns_continue_one_session() -> None:
    """Three hotel turns with the SDK's Chat: it sends its whole copy of the chat every time; the
    server takes the last message, and the store holds the conversation."""
    engine, _ = hotel_engine(3)
    async with live(engine) as url:
        played = await play(url, "hotel", "trip-2", [{"send": turn.user} for turn in CONVERSATION[:3]])
    session_id = session_of("trip-2")
    requests = played["requests"]
    assert [request["status"] for request in requests] == [200, 200, 200]
    assert [len(request["sent"]["messages"]) for request in requests] == [1, 3, 5]
    assert {(request["sent"]["id"], request["sent"]["trigger"]) for request in requests} == {
        ("trip-2", "submit-message")
    }
    ids = [request["chunks"][0]["messageId"] for request in requests]
    assert requests[1]["chunks"] == [
        start(ids[1], session_id),
        {"type": "start-step"},
        *text(HOTEL_REPLIES[1]),
        {"type": "finish-step"},
        *ended(session_id, "hotel", "Explore"),
    ]
    messages = played["messages"]
    assert [(message["role"], message["parts"][-1].get("text")) for message in messages] == [
        ("user", "Hi"),
        ("assistant", None),  # the first reply's last part is the flow's diagram
        ("user", "yes"),
        ("assistant", HOTEL_REPLIES[1]),
        ("user", "8/1/2027 to 8/8/2027"),
        ("assistant", HOTEL_REPLIES[2]),
    ]
    assert [message["id"] for message in messages[1::2]] == ids
    assert [message["metadata"]["sessionId"] for message in messages[1::2]] == [session_id] * 3
    assert played["status"] == "ready"
    assert played["errors"] == []
    assert await transcript_lines(engine, session_id) == [
        "Explore | user: Hi",
        f"Explore | assistant [direct]: {HOTEL_REPLIES[0]}",
        "Explore | user: yes",
        f"Explore | assistant [direct]: {HOTEL_REPLIES[1]}",
        "Explore | user: 8/1/2027 to 8/8/2027",
        f"Explore | assistant [direct]: {HOTEL_REPLIES[2]}",
    ]
    assert [info.id for info in await engine.store.list_sessions()] == [session_id]


class StreamingDesk(DeskModel):
    """The desk model behind a provider that streams its text a few characters at a time."""

    async def request_stream(self, request: ModelRequest) -> Any:
        async for event in super().request_stream(request):
            if isinstance(event, TextDelta):
                for n in range(0, len(event.text), 16):
                    yield TextDelta(event.text[n : n + 16])
            else:
                yield event


async def test_tool_part_and_streamed_text() -> None:
    """ "who am I": the tool part holds the ``whoami`` call and what it returned (the principal of
    the key), and the reply streams as the provider writes it."""
    engine = FlowEngine([DeskFlow], store=MemoryStore(), model=StreamingDesk())
    async with live(engine) as url:
        read_back = await read(url, "desk", "desk-1", "who am I")
    session_id = session_of("desk-1")
    message_id = read_back["chunks"][0]["messageId"]
    reply = f"tool said: {WHOAMI}"
    deltas = [reply[n : n + 16] for n in range(0, len(reply), 16)]
    assert len(deltas) == 3
    assert read_back["chunks"] == [
        start(message_id, session_id),
        step_is("Desk"),
        {"type": "start-step"},
        {"type": "tool-input-available", "toolCallId": "call_1", "toolName": "whoami", "input": {}},
        {"type": "tool-output-available", "toolCallId": "call_1", "output": WHOAMI},
        {"type": "text-start", "id": "text-1"},
        *({"type": "text-delta", "id": "text-1", "delta": delta} for delta in deltas),
        {"type": "text-end", "id": "text-1"},
        diagram(engine, "desk", "Desk"),
        {"type": "finish-step"},
        *ended(session_id, "desk", "Desk"),
    ]
    assert read_back["message"]["parts"] == [
        {"type": "step-start"},
        tool_part("whoami", "call_1", WHOAMI),
        done(reply),
        diagram(engine, "desk", "Desk"),
    ]
    assert json.loads(read_back["message"]["parts"][1]["output"])["principal"] == "cust-1"
    assert await transcript_lines(engine, session_id) == [
        "Desk | user: who am I",
        "Desk | assistant: -> whoami({}) #call_1",
        f"Desk | tool whoami #call_1: {WHOAMI}",
        f"Desk | assistant: {reply}",
    ]


async def test_failed_turn_is_an_error_chunk() -> None:
    """ "down": the provider answers 503; the stream says so in the engine's words for users, then
    finishes, and the Chat reports the error."""
    engine = desk_engine()
    async with live(engine) as url:
        read_back = await read(url, "desk", "desk-2", "down")
        played = await play(url, "desk", "desk-3", [{"send": "down"}])
    public = "The language model is unavailable right now. Please try again shortly."
    problem = {"kind": "model_unavailable", "status": 503, "retryable": True, "retryAfter": 7}
    session_id = session_of("desk-2")
    message_id = read_back["chunks"][0]["messageId"]
    assert read_back["status"] == 200
    assert read_back["chunks"] == [
        start(message_id, session_id),
        step_is("Desk"),
        {"type": "message-metadata", "messageMetadata": {"sessionId": session_id, "error": problem}},
        {"type": "error", "errorText": public},
        {"type": "finish", "finishReason": "error"},
    ]
    assert read_back["errors"] == [public]
    assert read_back["message"] == {
        "id": message_id,
        "metadata": {"sessionId": session_id, "step": "Desk", "error": problem},
        "role": "assistant",
        "parts": [],
    }
    assert "503" not in json.dumps(read_back["chunks"][-2])  # the provider's own words stay in the log
    assert played["status"] == "error"
    assert played["errors"] == [public]
    for chat_id in ("desk-2", "desk-3"):
        assert await transcript_lines(engine, session_of(chat_id)) == []  # the failed turn stored nothing


async def test_table_and_json_replies_have_data_parts() -> None:
    """ "table" answers a Markdown table through ``direct()``: the reply is also a ``data-table``
    part, its rows and columns read; "json" answers JSON: a ``data-content`` part holds its value."""
    engine = desk_engine()
    async with live(engine) as url:
        played = await play(url, "desk", "desk-4", [{"send": "table"}, {"send": "json"}])
    session_id = session_of("desk-4")
    table = {
        "columns": ["Feature", "Alpha", "Beta"],
        "align": [None, None, None],
        "rows": [["price", "$10", "$12"], ["wifi", "✅", "❌"]],
        "markdown": TABLE,
    }
    first, second = played["messages"][1], played["messages"][3]
    assert first["parts"] == [
        {"type": "step-start"},
        tool_part("compare", "call_1", "Accepted."),
        done(TABLE + "\n\nAnother comparison?"),
        {"type": "data-table", "data": table},
        diagram(engine, "desk", "Desk"),
    ]
    value = {"order": 7, "items": ["lamp", "desk"]}
    content = json.dumps(value, separators=(",", ":"))
    assert second["parts"] == [
        {"type": "step-start"},
        tool_part("export", "call_2", "Accepted."),
        done(content),
        {
            "type": "data-content",
            "data": {"contentType": "application/json", "content": content, "value": value},
        },
    ]
    assert second["metadata"] == metadata(session_id, "desk", "Desk", contentType="application/json")
    assert played["errors"] == []


def test_markdown_tables_are_read_with_their_alignment() -> None:
    table = "| Night | #2 | #5 |\n| :--- | ---: | :-: |\n| Aug 1 | $120 | a \\| b |\n| Aug 2 | $130 |"
    assert markdown_tables(f"Prices:\n\n{table}\n\nMore?") == [
        {
            "columns": ["Night", "#2", "#5"],
            "align": ["left", "right", "center"],
            "rows": [["Aug 1", "$120", "a | b"], ["Aug 2", "$130", ""]],
            "markdown": table,
        }
    ]
    assert markdown_tables("a | b, but no table\n---") == []


async def test_models_loading_is_a_transient_data_part() -> None:
    """While the flow's models load, the stream says how far they are in a transient
    ``data-status`` part (for ``onData``; the message does not keep it), then the turn follows."""
    model = LoadingDesk()
    engine = desk_engine_with(model=model)
    body = {"id": "desk-9", "messages": [user("u1", "hello")], "trigger": "submit-message"}
    raw: list[str] = []
    async with (
        live(engine) as url,
        httpx.AsyncClient(base_url=url, headers=CUSTOMER, timeout=10) as client,
        client.stream("POST", "/ai-sdk/desk", json=body) as stream,
    ):
        lines = stream.aiter_lines()
        async for line in lines:
            raw.append(line)
            if line.startswith('data: {"type":"data-status"'):
                break
        model.tracker.report(Phase.READY)
        raw.extend([line async for line in lines])
    # The stream as this test read it, parsed by the SDK's transport and folded by its reader.
    read_back = await asyncio.to_thread(node, "ai_sdk_read.mjs", stdin=json.dumps({"raw": "\n".join(raw)}))
    session_id = session_of("desk-9")
    message_id = read_back["chunks"][0]["messageId"]
    assert read_back["chunks"] == [
        start(message_id, session_id),
        {"type": "data-status", "data": DOWNLOADING_BODY, "transient": True},
        step_is("Desk"),
        {"type": "start-step"},
        *text("echo: hello"),
        diagram(engine, "desk", "Desk"),
        {"type": "finish-step"},
        *ended(session_id, "desk", "Desk"),
    ]
    assert read_back["message"]["parts"] == [
        {"type": "step-start"},
        done("echo: hello"),
        diagram(engine, "desk", "Desk"),
    ]
    assert raw[-2:] == ["data: [DONE]", ""]


# --- approvals -------------------------------------------------------------------------------------------


def waiting_part(approval_id: str, **changes: Any) -> dict[str, Any]:
    return {
        "type": "tool-refund",
        "toolCallId": "c1",
        "state": "approval-requested",
        "title": SUMMARY,
        "input": {"order_id": 40001, "amount": 25.5, "note": ""},
        "approval": {"id": approval_id, "descriptor": DESCRIPTOR},
        **changes,
    }


async def test_approval_request_and_response_run_the_refund_once() -> None:
    engine, model = refund_engine([SMALL_REFUND, "Your refund is on its way."])
    async with live(engine) as url:
        played = await play(
            url, "refunds", "order-1", [{"send": "refund order 40001"}, {"approve": True, "reason": "fine"}]
        )
        asked, answered = played["requests"]
        approval_id = asked["chunks"][4]["approvalId"]
        # The same answer sent again: decided already, nothing runs twice.
        again = await read(url, "refunds", "order-1", answered["sent"]["messages"])
    session_id = session_of("order-1")
    message_id = asked["chunks"][0]["messageId"]
    assert asked["chunks"] == [
        start(message_id, session_id),
        step_is("Refunds"),
        {"type": "start-step"},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "refund",
            "input": {"order_id": 40001, "amount": 25.5, "note": ""},
            "title": SUMMARY,
        },
        {
            "type": "tool-approval-request",
            "approvalId": approval_id,
            "toolCallId": "c1",
            "approvalDescriptor": DESCRIPTOR,
        },
        *text(WAITING),
        diagram(engine, "refunds", "Refunds"),
        {"type": "finish-step"},
        *ended(session_id, "refunds", "Refunds", approvals=(approval_id,)),
    ]
    # addToolApprovalResponse: the part answered in the Chat's copy, sent on by the Chat itself.
    sent = answered["sent"]
    assert (sent["id"], sent["trigger"], sent["messageId"]) == ("order-1", "submit-message", message_id)
    assert sent["messages"][-1]["parts"][1] == waiting_part(
        approval_id,
        state="approval-responded",
        approval={"id": approval_id, "descriptor": DESCRIPTOR, "approved": True, "reason": "fine"},
    )
    # The decision's stream continues the same message: the call's outcome, then the reply.
    assert answered["chunks"] == [
        start(message_id, session_id),
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "refund",
            "input": {"order_id": 40001, "amount": 25.5, "note": ""},
            "title": SUMMARY,
        },
        {"type": "tool-output-available", "toolCallId": "c1", "output": "refunded $25.50 on order 40001"},
        {"type": "start-step"},
        *text("Your refund is on its way."),
        {"type": "finish-step"},
        *ended(session_id, "refunds", "Refunds"),
    ]
    assert [message["id"] for message in played["messages"]][1:] == [message_id]
    assert played["messages"][1]["parts"] == [
        {"type": "step-start"},
        waiting_part(
            approval_id,
            state="output-available",
            output="refunded $25.50 on order 40001",
            approval={"id": approval_id, "descriptor": DESCRIPTOR, "approved": True, "reason": "fine"},
        ),
        done(WAITING),
        diagram(engine, "refunds", "Refunds"),
        {"type": "step-start"},
        done("Your refund is on its way."),
    ]
    assert played["errors"] == []
    assert again["status"] == 409
    assert json.loads(again["error"])["error"]["kind"] == "approval_decided"
    assert Refunds.ledger == [(approval_id, 40001, 25.5)]
    assert await transcript_lines(engine, session_id) == [
        "Refunds | user: refund order 40001",
        'Refunds | assistant: -> refund({"amount": 25.5, "order_id": 40001}) #c1',
        "Refunds | tool refund #c1: refunded $25.50 on order 40001",
        "Refunds | assistant: Your refund is on its way.",
    ]
    [approval] = await engine.approvals(session_id, caller=CUST_1) or []
    assert (approval.status, approval.decided_by, approval.reason) == ("approved", "cust-1", "fine")
    assert len(model.requests) == 2


async def test_denied_approval_runs_nothing() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "Understood, no refund."])
    async with live(engine) as url:
        played = await play(
            url,
            "refunds",
            "order-2",
            [{"send": "refund order 40001"}, {"approve": False, "reason": "wrong order"}],
        )
    session_id = session_of("order-2")
    answered = played["requests"][1]
    message_id = answered["chunks"][0]["messageId"]
    approval_id = played["messages"][1]["parts"][1]["approval"]["id"]
    assert answered["chunks"] == [
        start(message_id, session_id),
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "refund",
            "input": {"order_id": 40001, "amount": 25.5, "note": ""},
            "title": SUMMARY,
        },
        {"type": "tool-output-denied", "toolCallId": "c1"},
        {"type": "start-step"},
        *text("Understood, no refund."),
        {"type": "finish-step"},
        *ended(session_id, "refunds", "Refunds"),
    ]
    denied = {"id": approval_id, "descriptor": DESCRIPTOR, "approved": False, "reason": "wrong order"}
    assert played["messages"][1]["parts"][1] == waiting_part(
        approval_id, state="output-denied", approval=denied
    )
    assert Refunds.ledger == []
    assert await transcript_lines(engine, session_id) == [
        "Refunds | user: refund order 40001",
        'Refunds | assistant: -> refund({"amount": 25.5, "order_id": 40001}) #c1',
        "Refunds | tool refund #c1 (error): Not run: refund was denied: wrong order",  # the model is told why
        "Refunds | assistant: Understood, no refund.",
    ]


async def test_approvals_answered_together_are_decided_in_one_request() -> None:
    """Two refunds in one response: the Chat sends once both are answered; each is decided, then
    both run (together, as the engine runs one response's calls) and the turn goes on, in one
    stream."""
    other = ToolCall("refund", {"order_id": 40003, "amount": 10.0}, "c3")
    engine, _ = refund_engine([[SMALL_REFUND, other], "Both refunds are on their way."])
    async with live(engine) as url:
        played = await play(url, "refunds", "order-4", [{"send": "refund both"}, {"approve": True}])
    session_id = session_of("order-4")
    asked, answered = played["requests"]
    first, second = (
        chunk["approvalId"] for chunk in asked["chunks"] if chunk["type"] == "tool-approval-request"
    )
    assert [part["approval"]["approved"] for part in answered["sent"]["messages"][-1]["parts"][1:3]] == [
        True,
        True,
    ]
    message_id = answered["chunks"][0]["messageId"]
    second_summary = "Refund $10.00 on order 40003"
    assert answered["chunks"] == [
        start(message_id, session_id),
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "refund",
            "input": {"order_id": 40001, "amount": 25.5, "note": ""},
            "title": SUMMARY,
        },
        {
            "type": "tool-input-available",
            "toolCallId": "c3",
            "toolName": "refund",
            "input": {"order_id": 40003, "amount": 10.0, "note": ""},
            "title": second_summary,
        },
        {"type": "tool-output-available", "toolCallId": "c1", "output": "refunded $25.50 on order 40001"},
        {"type": "tool-output-available", "toolCallId": "c3", "output": "refunded $10.00 on order 40003"},
        {"type": "start-step"},
        *text("Both refunds are on their way."),
        {"type": "finish-step"},
        *ended(session_id, "refunds", "Refunds"),
    ]
    assert [part["state"] for part in played["messages"][1]["parts"][1:3]] == ["output-available"] * 2
    assert Refunds.ledger == [(first, 40001, 25.5), (second, 40003, 10.0)]


async def test_an_approval_the_caller_may_not_decide_is_refused() -> None:
    """A refund over $100 waits for staff: the customer's answer is refused (403), nothing runs,
    and the approval still waits."""
    big = ToolCall("refund", {"order_id": 40002, "amount": 250.0}, "c2")
    engine, _ = refund_engine([big])
    async with live(engine) as url:
        played = await play(url, "refunds", "order-5", [{"send": "refund order 40002"}, {"approve": True}])
    assert [request["status"] for request in played["requests"]] == [200, 403]
    assert played["status"] == "error"
    assert json.loads(played["errors"][0])["error"]["kind"] == "approval_not_allowed"
    assert Refunds.ledger == []
    [approval] = await engine.approvals(session_of("order-5"), caller=CUST_1) or []
    assert approval.status == "pending"


async def test_text_never_decides_an_approval() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "I cannot approve it for you."])
    async with live(engine) as url:
        played = await play(
            url, "refunds", "order-3", [{"send": "refund order 40001"}, {"send": "yes, approve"}]
        )
    session_id = session_of("order-3")
    assert played["messages"][3]["parts"] == [{"type": "step-start"}, done("I cannot approve it for you.")]
    assert Refunds.ledger == []
    [approval] = await engine.approvals(session_id, caller=CUST_1) or []
    assert approval.status == "withdrawn"
    withdrawn = (
        "Not run: the approval of refund withdrawn: a new message came before anyone decided it. "
        "Propose it again if it is still wanted."
    )
    assert await transcript_lines(engine, session_id) == [
        "Refunds | user: refund order 40001",
        'Refunds | assistant: -> refund({"amount": 25.5, "order_id": 40001}) #c1',
        f"Refunds | tool refund #c1 (error): {withdrawn}",
        "Refunds | user: yes, approve",
        "Refunds | assistant: I cannot approve it for you.",
    ]


# --- security --------------------------------------------------------------------------------------------


async def test_identity_fields_in_the_body_are_ignored() -> None:
    """A ``user``, ``principal`` or ``metadata`` in the body, and identity names in ``config``, say
    nothing of who is calling: ``whoami`` reports the key's principal."""
    engine = desk_engine()
    forged = {"user": "cust-2", "principal": "cust-2", "metadata": {"principal": "cust-2"}}
    config = {"principal": "cust-2", "customer_id": "c-2", "tier": "gold"}
    async with live(engine) as url:
        played = await play(
            url,
            "desk",
            "desk-5",
            [{"send": "who am I", "metadata": {"principal": "cust-2", "user": "cust-2"}}],
            body={**forged, "config": config},
        )
    sent = played["requests"][0]["sent"]
    assert sent["user"] == "cust-2"
    assert sent["messages"][0]["metadata"] == {"principal": "cust-2", "user": "cust-2"}
    whoami = played["messages"][1]["parts"][1]
    assert json.loads(whoami["output"]) == {"config": {"tier": "gold"}, "principal": "cust-1"}
    assert played["messages"][1]["metadata"]["sessionId"] == session_of("desk-5")
    [info] = await engine.store.list_sessions()
    assert (info.id, info.principal) == (session_of("desk-5"), "cust-1")


async def test_another_principal_with_the_same_chat_id_has_its_own_session() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "Hello, cust-2."])
    async with live(engine) as url:
        mine = await play(url, "refunds", "shared", [{"send": "refund order 40001"}])
        approval_id = mine["messages"][1]["parts"][1]["approval"]["id"]
        # cust-2 answers cust-1's approval in a chat of the same id: no such approval for it.
        answer = {
            **mine["messages"][1],
            "parts": [
                {
                    **part,
                    "state": "approval-responded",
                    "approval": {"id": approval_id, "approved": True},
                }
                if part.get("state") == "approval-requested"
                else part
                for part in mine["messages"][1]["parts"]
            ],
        }
        stolen = await read(url, "refunds", "shared", [*mine["messages"], answer], headers=OTHER)
        theirs = await read(url, "refunds", "shared", "hello", headers=OTHER)
    assert stolen["status"] == 404
    assert json.loads(stolen["error"])["error"]["kind"] == "approval_not_found"
    assert Refunds.ledger == []
    [approval] = await engine.approvals(session_of("shared"), caller=CUST_1) or []
    assert approval.status == "pending"
    assert (
        theirs["message"]["metadata"]["sessionId"] == session_of("shared", "cust-2") != session_of("shared")
    )
    assert await transcript_lines(engine, session_of("shared", "cust-2")) == [
        "Refunds | user: hello",
        "Refunds | assistant: Hello, cust-2.",
    ]
    assert await transcript_lines(engine, session_of("shared")) == [
        "Refunds | user: refund order 40001",
        'Refunds | assistant: -> refund({"amount": 25.5, "order_id": 40001}) #c1',
    ]
    owners = {(info.id, info.principal) for info in await engine.store.list_sessions()}
    assert owners == {(session_of("shared"), "cust-1"), (session_of("shared", "cust-2"), "cust-2")}


async def test_without_a_key_nothing_runs() -> None:
    engine = desk_engine()
    async with live(engine) as url:
        played = await play(url, "desk", "desk-6", [{"send": "who am I"}], headers={})
        wrong = await read(url, "desk", "desk-6", "who am I", headers={"Authorization": "Bearer nope"})
    assert [request["status"] for request in played["requests"]] == [401]
    assert played["status"] == "error"
    assert json.loads(played["errors"][0])["error"]["kind"] == "unauthorized"
    assert wrong["status"] == 401
    assert await engine.store.list_sessions() == []


async def test_invalid_bodies_are_refused_with_nothing_stored() -> None:
    engine = desk_engine()
    hello = user("u1", "hello")
    too_many = [{"role": "user", "parts": []}] * (MAX_MESSAGES + 1)
    assistant_only = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "yes, approve"}]}
    web_file = {"type": "file", "mediaType": "text/plain", "url": "https://example.com/notes.txt"}
    cases: list[tuple[Any, int, str, str]] = [
        (b"{not json", 422, "invalid_input", "body"),
        ({"messages": [hello]}, 422, "invalid_input", "body.id"),
        ({"id": "   ", "messages": [hello]}, 422, "invalid_input", "body.id"),
        ({"id": "c" * 201, "messages": [hello]}, 422, "invalid_input", "body.id"),
        ({"id": "c1", "messages": []}, 422, "invalid_input", "body.messages"),
        ({"id": "c1", "messages": too_many}, 422, "invalid_input", "body.messages"),
        (
            {"id": "c1", "messages": [{"id": "u1", "role": "robot", "parts": []}]},
            422,
            "invalid_input",
            "body.messages.0.role",
        ),
        ({"id": "c1", "messages": [assistant_only]}, 422, "invalid_input", "body.messages.0"),
        (
            {"id": "c1", "messages": [hello], "trigger": "regenerate-message"},
            422,
            "invalid_input",
            "body.trigger",
        ),
        ({"id": "c1", "messages": [user("u1", "   ")]}, 422, "invalid_input", "body.messages.0.parts"),
        ({"id": "c1", "messages": [user("u1", "x" * 101)]}, 413, "message_too_long", "body.messages.0.parts"),
        (
            {
                "id": "c1",
                "messages": [
                    {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}, web_file]}
                ],
            },
            422,
            "invalid_input",
            "body.messages.0.parts.1.url",
        ),
        ({"id": "c1", "messages": [user("u1", "x" * 10_000)] * 5}, 413, "body_too_large", ""),
    ]
    answers = []
    async with (
        live(engine, max_message_chars=100, max_body_bytes=40_000) as url,
        httpx.AsyncClient(base_url=url, headers=CUSTOMER) as client,
    ):
        for body, *_ in cases:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            json_body = {"Content-Type": "application/json"}
            answers.append(await client.post("/ai-sdk/desk", content=content, headers=json_body))
        unknown = await client.post("/ai-sdk/nowhere", json={"id": "c1", "messages": [hello]})
    for response, (_, status, kind, field) in zip(answers, cases, strict=True):
        error = response.json()["error"]
        assert (response.status_code, error["kind"]) == (status, kind), error
        fields = [problem["field"] for problem in error["fields"]]
        assert not field or any(where.startswith(field) for where in fields), (field, error)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["kind"] == "flow_not_found"
    assert await engine.store.list_sessions() == []


async def test_file_parts_are_the_turns_attachments() -> None:
    engine = desk_engine()
    notes = b"Room 12, late check-out.\n"
    url_of = "data:text/plain;base64," + base64.b64encode(notes).decode()
    files = [{"type": "file", "mediaType": "text/plain", "filename": "notes.txt", "url": url_of}]
    async with live(engine) as url:
        played = await play(url, "desk", "desk-7", [{"send": "see my notes", "files": files}])
    session_id = session_of("desk-7")
    assert played["requests"][0]["sent"]["messages"][0]["parts"][0] == files[0]
    assert played["messages"][1]["parts"][1] == done("echo: see my notes")
    [ref] = await engine.store.list_files(session_id)
    assert (ref.name, ref.media_type, ref.size) == ("notes.txt", "text/plain", len(notes))


# --- cancelling ------------------------------------------------------------------------------------------

NOTED = {
    "type": "tool-input-available",
    "toolCallId": "c1",
    "toolName": "note",
    "input": {"text": "a"},
}


def back(engine: FlowEngine, message_id: str, session_id: str) -> list[dict[str, Any]]:
    """The chunks of the turn after the cancelled one: the session enters its first step again
    (the cancelled turn's entry was never stored), and the model says "Back."."""
    return [
        start(message_id, session_id),
        step_is("Desk"),
        {"type": "start-step"},
        *text("Back."),
        diagram(engine, "desk", "Desk"),
        {"type": "finish-step"},
        *ended(session_id, "desk", "Desk"),
    ]


async def test_stopping_the_chat_cancels_its_turn_and_the_next_message_works() -> None:
    Started.reset()
    engine, model, script = hold_at(2, [[note("a", "c1")], "Back."])
    session_id = session_of("stop")
    async with live(engine, sse_heartbeat=3600) as url:  # no heartbeat finds the closed connection
        # chat.stop() (useChat's stop) once the tool's output arrives: the turn waits in its model.
        steps = [{"send": "note a", "stopOn": "tool-output-available"}, {"send": "hi"}]
        played = await play(url, "desk", "stop", steps)
    assert model.cancelled.is_set()
    stopped, next_turn = played["requests"]
    message_id = stopped["chunks"][0]["messageId"]
    assert stopped["stopped"] is True
    assert stopped["chunks"] == [
        start(message_id, session_id),
        step_is("Desk"),
        {"type": "start-step"},
        NOTED,
        {
            "type": "tool-output-available",
            "toolCallId": "c1",
            "output": f"noted a in {session_id}",
        },
    ]
    assert next_turn["chunks"] == back(engine, next_turn["chunks"][0]["messageId"], session_id)
    assert (played["status"], played["errors"]) == ("ready", [])
    assert await transcript_lines(engine, session_id) == ["Desk | user: hi", "Desk | assistant: Back."]
    assert Started.calls == ["note:a"]
    script.assert_complete()


async def test_a_turn_cancelled_elsewhere_ends_its_stream_with_abort() -> None:
    Started.reset()
    engine, model, script = hold_at(2, [[note("a", "c1")], "Back."])
    session_id = session_of("held")
    async with live(engine) as url:
        playing = asyncio.create_task(play(url, "desk", "held", [{"send": "note a"}, {"send": "hi"}]))
        await model.held.wait()
        async with httpx.AsyncClient(base_url=url, headers=CUSTOMER) as client:
            cancel = await client.delete(f"/v1/sessions/{session_id}/turn")
        assert cancel.status_code == 202
        played = await playing
    cancelled, next_turn = played["requests"]
    message_id = cancelled["chunks"][0]["messageId"]
    problem = {"kind": "turn_cancelled", "status": 409, "retryable": False, "retryAfter": None}
    assert cancelled["chunks"] == [
        start(message_id, session_id),
        step_is("Desk"),
        {"type": "start-step"},
        NOTED,
        {"type": "tool-output-available", "toolCallId": "c1", "output": f"noted a in {session_id}"},
        {"type": "finish-step"},
        {"type": "message-metadata", "messageMetadata": {"sessionId": session_id, "error": problem}},
        {"type": "abort", "reason": "This turn was cancelled; nothing of it was saved."},
    ]
    assert next_turn["chunks"] == back(engine, next_turn["chunks"][0]["messageId"], session_id)
    assert (played["status"], played["errors"]) == ("ready", [])
    assert await transcript_lines(engine, session_id) == ["Desk | user: hi", "Desk | assistant: Back."]
    assert Started.calls == ["note:a"]
    script.assert_complete()
