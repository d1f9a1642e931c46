"""AG-UI (``POST /ag-ui/{flow}``) on a live server, read by clients no one here wrote: the
``ag-ui-validate`` conformance validator (its pytest helper and its CLI) and ``@ag-ui/client``'s
``HttpAgent`` under Node. A thread is the caller's session; an approval is the run's interrupt and
the next run's resume decides it; the principal comes from the key alone."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from ag_ui.core import Event
from ag_ui_validate.pytest_plugin import validate_agui_endpoint
from pydantic import TypeAdapter
from tests.cancel_support import Started, hold_at, note
from tests.server.support import DeskModel, LoadingDesk
from tests.server.support import desk_engine as desk_engine_with
from tests.server.test_readiness import DOWNLOADING_BODY

from picoflow import FlowEngine
from picoflow.messages import ModelRequest
from picoflow.models import ToolCall
from picoflow.models.base import ResponseDone, StreamEvent, TextDelta
from picoflow.models.readiness import Phase
from picoflow.server.protocols._threads import thread_session_id
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

VALIDATE = str(Path(sys.executable).with_name("ag-ui-validate"))
TIMING = {"AGUI506", "AGUI507"}
"""The validator's timing rules (no keepalive for a while; the body read in one chunk): infos about
how fast a busy machine delivered the stream, not about the stream."""
SCHEMA = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "deny"]},
        "reason": {"type": "string", "description": "Why; kept with the decision, told to the flow."},
    },
    "required": ["decision"],
    "additionalProperties": False,
}
GREETING = (
    "Hello! I can help you find a hotel in the Portland, Oregon area. Is your stay in the Portland area?"
)
DATES = "Great. What are your check-in and check-out dates?"
BUDGET = (
    "Check-in Sunday August 1, 2027, check-out Sunday August 8, 2027: 7 nights. "
    "What nightly budget do you have in mind: a minimum, a maximum or both?"
)
ROOM = "Noted: up to $700 a night. Which room type would you like: one bed, two beds or suite?"
HOTEL_REPLIES = (GREETING, DATES, BUDGET, ROOM)


# --- helpers ---------------------------------------------------------------------------------------------


def user(n: int, text: str) -> dict[str, Any]:
    return {"id": f"user-{n}", "role": "user", "content": text}


def run_input(thread: str, run: str, messages: Sequence[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` as ``HttpAgent`` sends it."""
    return {
        "threadId": thread,
        "runId": run,
        "protocolVersion": "1.0",
        "state": {},
        "messages": list(messages),
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }


EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def conforming(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` once checked against the SDK's own schema: it parses as the event its type
    names, with nothing the schema does not know, and reads back as it was written."""
    parsed = EVENT.validate_python(event)
    assert parsed.model_extra == {}, event
    for interrupt in getattr(getattr(parsed, "outcome", None), "interrupts", ()):
        assert interrupt.model_extra == {}, event
    assert parsed.model_dump(mode="json", by_alias=True) == event
    return event


def sse_events(body: str) -> list[dict[str, Any]]:
    """The events of an AG-UI SSE body (``data:`` lines only), each held to the SDK's schema, with
    its timestamp (milliseconds) taken out."""
    events = [conforming(json.loads(line[6:])) for line in body.splitlines() if line.startswith("data: ")]
    assert all(isinstance(event.pop("timestamp"), int) for event in events)
    return events


def ids_named(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with each random message id replaced by ``m1``, ``m2``... in order of appearance."""
    names: dict[str, str] = {}

    def name(value: str) -> str:
        return names.setdefault(value, f"m{len(names) + 1}")

    return [
        {**event, "messageId": name(event["messageId"])} if "messageId" in event else event
        for event in events
    ]


async def post(
    url: str, body: Any, headers: dict[str, str] | None = None, flow: str = "desk"
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, headers=CUSTOMER if headers is None else headers) as client:
        if isinstance(body, bytes):
            return await client.post(
                f"/ag-ui/{flow}", content=body, headers={"Content-Type": "application/json"}
            )
        return await client.post(f"/ag-ui/{flow}", json=body)


async def run_events(url: str, body: Any, headers: dict[str, str] | None = None, flow: str = "desk") -> Any:
    response = await post(url, body, headers, flow)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    return ids_named(sse_events(response.text))


def snapshot(session_id: str, flow: str, step: str, visited: list[str], **changes: Any) -> dict[str, Any]:
    return {
        "type": "STATE_SNAPSHOT",
        "snapshot": {
            "sessionId": session_id,
            "flow": flow,
            "step": step,
            "status": "running",
            "completed": False,
            "stepsVisited": visited,
            "contentType": "text/plain",
            "pending": [],
            **changes,
        },
    }


def finished(thread: str, run: str, usage: tuple[int, int] | None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": thread, "runId": run, **extra}
    if usage is not None:
        event["usage"] = [
            {
                "inputTokens": usage[0],
                "outputTokens": usage[1],
                "totalTokens": usage[0] + usage[1],
                "reasoningTokens": 0,
                "cachedInputTokens": 0,
                "cacheWriteInputTokens": 0,
            }
        ]
    return event


def reply(message: str, name: str = "m1") -> list[dict[str, Any]]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": name, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": name, "delta": message},
        {"type": "TEXT_MESSAGE_END", "messageId": name},
    ]


def tool_call(
    call_id: str, name: str, args: str, content: str, result: str = "m1", **extra: Any
) -> list[Any]:
    return [
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args},
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
        {
            "type": "TOOL_CALL_RESULT",
            "messageId": result,
            "toolCallId": call_id,
            "content": content,
            "role": "tool",
        }
        | extra,
    ]


def interrupt_of(approval_id: str, call_id: str = "c1") -> dict[str, Any]:
    return {
        "id": approval_id,
        "reason": "tool_approval",
        "message": "Refund $25.50 on order 40001 (the customer must approve)",
        "toolCallId": call_id,
        "responseSchema": SCHEMA,
        "expiresAt": "2100-01-01T00:10:00Z",
        "metadata": {
            "tool": "refund",
            "args": {"order_id": 40001, "amount": 25.5, "note": ""},
            "summary": "Refund $25.50 on order 40001",
            "approvers": "the customer",
            "roles": [],
            "step": "Refunds",
        },
    }


def pending_of(approval_id: str) -> dict[str, Any]:
    return {
        "id": approval_id,
        "tool": "refund",
        "summary": "Refund $25.50 on order 40001",
        "args": {"order_id": 40001, "amount": 25.5, "note": ""},
        "approvers": "the customer",
        "expiresAt": "2100-01-01T00:10:00Z",
    }


def session_of(principal: str, thread: str) -> str:
    return thread_session_id(principal, "ag-ui", thread)


async def sessions(engine: FlowEngine) -> list[str]:
    return [info.id for info in await engine.store.list_sessions()]


async def validate(
    url: str, body: dict[str, Any], flow: str, *features: str
) -> tuple[Any, list[dict[str, Any]]]:
    """The validator's report on a live run of ``body`` (its pytest helper), and the run's events."""
    raw: list[str] = []
    report = await validate_agui_endpoint(
        f"{url}/ag-ui/{flow}",
        input=body,
        headers=CUSTOMER,
        features=["shared-state", *features],
        on_event=lambda event, _: raw.append(event),
    )
    assert [(d.rule, d.severity) for d in report.diagnostics if d.rule not in TIMING] == []
    assert report.internal_errors == []
    return report, [conforming(json.loads(event)) for event in raw]


# --- the conformance validator ---------------------------------------------------------------------------


async def test_the_validator_passes_a_live_hotel_conversation() -> None:
    engine, _ = hotel_engine(4)
    thread, messages = "hotel-validated", []
    async with live(engine) as url:
        for n, turn in enumerate(CONVERSATION[:4], start=1):
            messages.append(user(n, turn.user))
            report, events = await validate(url, run_input(thread, f"run-{n}", messages), "hotel")
            assert report.features["agentic-chat"] == "exercised"
            assert report.features["shared-state"] == "exercised"
            text = next(event for event in events if event["type"] == "TEXT_MESSAGE_CONTENT")
            assert text["delta"] == HOTEL_REPLIES[n - 1]
            messages.append({"id": text["messageId"], "role": "assistant", "content": text["delta"]})
    session_id = session_of("cust-1", thread)
    assert await transcript_lines(engine, session_id) == [
        line
        for turn, answer in zip(CONVERSATION, HOTEL_REPLIES, strict=False)
        for line in hotel_lines(turn.user, answer)
    ]


def hotel_lines(said: str, answer: str) -> list[str]:
    """A hotel turn in the transcript: the guest's words and the reply code wrote (``direct``)."""
    return [f"Explore | user: {said}", f"Explore | assistant [direct]: {answer}"]


async def test_the_validator_passes_a_tool_calling_turn() -> None:
    async with live(desk_engine()) as url:
        report, events = await validate(url, run_input("desk", "r1", [user(1, "who am I")]), "desk")
    assert report.features["backend-tool-rendering"] == "exercised"
    assert [event["type"] for event in events][2:6] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]


async def test_the_validator_passes_an_interrupt_and_the_resume_that_approves_it() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "Your refund is on its way."])
    messages = [user(1, "refund order 40001")]
    async with live(engine) as url:
        report, asked = await validate(
            url, run_input("refund", "r1", messages), "refunds", "human-in-the-loop"
        )
        assert report.features["human-in-the-loop"] == "exercised"
        (interrupt,) = asked[-1]["outcome"]["interrupts"]
        answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
        report, resumed = await validate(url, run_input("refund", "r2", messages, resume=[answer]), "refunds")
    assert report.features["backend-tool-rendering"] == "exercised"
    assert resumed[-1]["type"] == "RUN_FINISHED" and "outcome" not in resumed[-1]
    assert Refunds.ledger == [(interrupt["id"], 40001, 25.5)]


async def test_the_validator_cli_passes_a_live_endpoint() -> None:
    async with live(desk_engine()) as url:
        # The CLI posts its own RunAgentInput (a greeting in a new thread), with the key it is given.
        command = [VALIDATE, f"{url}/ag-ui/desk", "--header", "Authorization: Bearer cust-key", "--json"]
        process = await asyncio.create_subprocess_exec(
            *command, "--max-warnings", "0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode() + out.decode()
    report = json.loads(out)
    assert (report["summary"]["errors"], report["summary"]["warnings"]) == (0, 0)
    assert [item["rule"] for item in report["diagnostics"] if item["rule"] not in TIMING] == []
    assert report["eventCount"] == 8
    assert report["features"]["agentic-chat"] == "exercised"


# --- HttpAgent -------------------------------------------------------------------------------------------


def received(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The events ``HttpAgent`` handed its subscriber in one run, held to the SDK's schema, without
    their timestamps, random message ids named in order."""
    events = [conforming(event) for event in run["events"]]
    return ids_named([{k: v for k, v in event.items() if k != "timestamp"} for event in events])


async def play(script: str, *args: str) -> Any:
    """Run ``js/<script>`` (which blocks) beside the live server this loop serves."""
    return await asyncio.to_thread(node, script, *args)


async def test_http_agent_plays_three_hotel_turns_in_one_thread() -> None:
    engine, _ = hotel_engine(3)
    said = [turn.user for turn in CONVERSATION[:3]]
    async with live(engine) as url:
        played = await play(
            "ag_ui_client.mjs", "chat", f"{url}/ag-ui/hotel", "cust-key", "hotel-thread", *said
        )
    assert played["warnings"] == []
    session_id = session_of("cust-1", "hotel-thread")
    runs = played["runs"]
    assert [run.get("error") for run in runs] == [None, None, None]
    usages = [(537, 4), (562, 17), (554, 49)]
    run_ids = [run["events"][0]["runId"] for run in runs]
    assert len(set(run_ids)) == 3
    for n, run in enumerate(runs):
        # The first turn enters the start step; the next ones stay in it.
        entered = [{"type": "STEP_STARTED", "stepName": "Explore"}] if n == 0 else []
        left = [{"type": "STEP_FINISHED", "stepName": "Explore"}] if n == 0 else []
        assert received(run) == [
            {
                "type": "RUN_STARTED",
                "threadId": "hotel-thread",
                "runId": run_ids[n],
                "protocolVersion": "1.0",
            },
            *entered,
            *reply(HOTEL_REPLIES[n]),
            *left,
            snapshot(session_id, "hotel", "Explore", ["Explore"]),
            finished("hotel-thread", run_ids[n], usages[n]),
        ]
        assert [message["content"] for message in run["newMessages"]] == [HOTEL_REPLIES[n]]
    # The agent's conversation: what the user said and what the flow answered, nothing else.
    messages = runs[-1]["messages"]
    assert [(message["role"], message["content"]) for message in messages] == [
        pair
        for turn, answer in zip(said, HOTEL_REPLIES, strict=False)
        for pair in (("user", turn), ("assistant", answer))
    ]
    assert [message["id"] for message in messages[::2]] == ["user-1", "user-2", "user-3"]
    assert runs[-1]["state"] == snapshot(session_id, "hotel", "Explore", ["Explore"])["snapshot"]
    assert runs[-1]["pendingInterrupts"] == []
    # The store holds the conversation once, in the caller's session of the thread.
    assert await sessions(engine) == [session_id]
    assert await transcript_lines(engine, session_id) == [
        line for turn, answer in zip(said, HOTEL_REPLIES, strict=False) for line in hotel_lines(turn, answer)
    ]
    session = await engine.get_session(session_id, principal="cust-1")
    assert session is not None
    assert (session.flow, session.current_step, session.status, session.sequence) == (
        "hotel",
        "Explore",
        "running",
        ["Explore"],
    )
    assert (session.principal, session.turns, session.approvals, session.paused) == ("cust-1", 3, (), None)
    assert session.states == {
        "Explore": {
            "form": {
                "known": {"in_portland": True, "check_in": "2027-08-01", "check_out": "2027-08-08"},
                "declined": [],
                "asking": "max_price",
                "introduced": True,
            },
            "locale": "en",  # the language the guest wrote in, which the demo answers in
        }
    }


async def test_http_agent_approves_a_refund_through_the_interrupt_and_its_resume() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "Your refund is on its way."])
    async with live(engine) as url:
        played = await play(
            "ag_ui_client.mjs",
            "approval",
            f"{url}/ag-ui/refunds",
            "cust-key",
            "refund-thread",
            "refund order 40001",
        )
    assert played["warnings"] == []
    session_id = session_of("cust-1", "refund-thread")
    asked, resumed, replayed = played["runs"]
    (interrupt,) = asked["pendingInterrupts"]
    approval_id = interrupt["id"]
    assert interrupt == interrupt_of(approval_id)

    first, second = asked["events"][0]["runId"], resumed["events"][0]["runId"]
    assert received(asked) == [
        {"type": "RUN_STARTED", "threadId": "refund-thread", "runId": first, "protocolVersion": "1.0"},
        {"type": "STEP_STARTED", "stepName": "Refunds"},
        {"type": "STEP_FINISHED", "stepName": "Refunds"},
        snapshot(
            session_id,
            "refunds",
            "Refunds",
            ["Refunds"],
            status="awaiting_approval",
            pending=[pending_of(approval_id)],
        ),
        finished("refund-thread", first, (13, 9), outcome={"type": "interrupt", "interrupts": [interrupt]}),
    ]
    decided = {
        "id": approval_id,
        "tool": "refund",
        "status": "approved",
        "decidedBy": "cust-1",
        "reason": "yes, refund it",
    }
    assert received(resumed) == [
        {"type": "RUN_STARTED", "threadId": "refund-thread", "runId": second, "protocolVersion": "1.0"},
        {"type": "CUSTOM", "name": "picoflow.approval_decided", "value": decided},
        *tool_call("c1", "refund", '{"order_id": 40001, "amount": 25.5}', "refunded $25.50 on order 40001"),
        *reply("Your refund is on its way.", "m2"),
        snapshot(session_id, "refunds", "Refunds", ["Refunds"]),
        finished("refund-thread", second, (20, 7)),
    ]
    assert [(m["role"], m.get("content"), m.get("toolCalls")) for m in resumed["messages"]] == [
        ("user", "refund order 40001", None),
        (
            "assistant",
            None,
            [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "refund", "arguments": '{"order_id": 40001, "amount": 25.5}'},
                }
            ],
        ),
        ("tool", "refunded $25.50 on order 40001", None),
        ("assistant", "Your refund is on its way.", None),
    ]
    assert resumed["pendingInterrupts"] == []
    # The same decision sent again is refused before any run: the refund ran once.
    assert replayed["events"] == []
    assert replayed["error"]["status"] == 409
    assert "approval_decided" in replayed["error"]["message"]
    assert Refunds.ledger == [(approval_id, 40001, 25.5)]
    assert await transcript_lines(engine, session_id) == [
        "Refunds | user: refund order 40001",
        'Refunds | assistant: -> refund({"amount": 25.5, "order_id": 40001}) #c1',
        "Refunds | tool refund #c1: refunded $25.50 on order 40001",
        "Refunds | assistant: Your refund is on its way.",
    ]
    session = await engine.get_session(session_id, principal="cust-1")
    assert session is not None
    assert (session.status, session.paused, session.turns) == ("running", None, 2)  # the decision is a turn
    (approval,) = session.approvals
    assert (approval.id, approval.status, approval.decided_by, approval.reason) == (
        approval_id,
        "approved",
        "cust-1",
        "yes, refund it",
    )


# --- the stream ------------------------------------------------------------------------------------------


async def test_a_tool_calling_turn_streams_the_call_its_result_and_the_reply() -> None:
    engine = desk_engine()
    async with live(engine) as url:
        events = await run_events(url, run_input("t", "r1", [user(1, "who am I")]))
    session_id = session_of("cust-1", "t")
    said = '{"config": {}, "principal": "cust-1"}'
    assert events == [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r1", "protocolVersion": "1.0"},
        {"type": "STEP_STARTED", "stepName": "Desk"},
        *tool_call("call_1", "whoami", "{}", said),
        *reply(f"tool said: {said}", "m2"),
        {"type": "STEP_FINISHED", "stepName": "Desk"},
        snapshot(session_id, "desk", "Desk", ["Desk"]),
        finished("t", "r1", (33, 13)),
    ]


class StreamingDesk(DeskModel):
    """The desk model, its answers written in pieces, as a provider that streams writes them."""

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self.request(request)
        for piece in re.findall(r"\S+\s*", response.text):
            yield TextDelta(piece)
        yield ResponseDone(response)


async def test_a_streamed_reply_arrives_as_the_model_writes_it() -> None:
    engine = desk_engine_with(model=StreamingDesk())
    async with live(engine) as url:
        events = await run_events(url, run_input("t", "r1", [user(1, "hello there")]))
    assert [event.get("delta") for event in events if event["type"] == "TEXT_MESSAGE_CONTENT"] == [
        "echo: ",
        "hello ",
        "there",
    ]
    assert [event["type"] for event in events][2:7] == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]


async def test_a_provider_failure_ends_the_run_with_run_error() -> None:
    engine = desk_engine()
    async with live(engine) as url:
        events = await run_events(url, run_input("t", "r1", [user(1, "down")]))
    assert events == [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r1", "protocolVersion": "1.0"},
        {"type": "STEP_STARTED", "stepName": "Desk"},
        {
            "type": "RUN_ERROR",
            "message": events[2]["message"],
            "code": "model_unavailable",
            "metadata": {"status": 503, "retryable": True, "retryAfter": 7.0},
        },
    ]
    assert "unavailable" in events[2]["message"].lower()


async def test_the_models_load_shows_as_a_custom_event_before_the_turn() -> None:
    model = LoadingDesk()
    engine = desk_engine_with(model=model)
    async with live(engine) as url, httpx.AsyncClient(base_url=url, headers=CUSTOMER, timeout=10) as client:
        body = run_input("t", "r1", [user(1, "hello")])
        async with client.stream("POST", "/ag-ui/desk", json=body) as stream:
            lines = stream.aiter_lines()

            async def next_event() -> dict[str, Any]:
                async for line in lines:
                    if line.startswith("data: "):
                        event: dict[str, Any] = json.loads(line[6:])
                        del event["timestamp"]
                        return event
                raise AssertionError("the stream ended early")

            first = [await next_event(), await next_event()]
            model.tracker.report(Phase.READY)
            rest = [json.loads(line[6:])["type"] async for line in lines if line.startswith("data: ")]
    assert first == [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r1", "protocolVersion": "1.0"},
        {"type": "CUSTOM", "name": "picoflow.load_status", "value": DOWNLOADING_BODY},
    ]
    assert rest == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]


async def test_a_denied_refund_streams_its_refused_call_and_never_runs_it() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "Understood, no refund."])
    messages = [user(1, "refund order 40001")]
    async with live(engine) as url:
        asked = await run_events(url, run_input("t", "r1", messages), flow="refunds")
        approval_id = asked[-1]["outcome"]["interrupts"][0]["id"]
        deny = {"interruptId": approval_id, "status": "cancelled"}
        events = await run_events(url, run_input("t", "r2", messages, resume=[deny]), flow="refunds")
    decided = {"id": approval_id, "tool": "refund", "status": "denied", "decidedBy": "cust-1", "reason": None}
    not_run = "Not run: refund was denied."
    args = '{"order_id": 40001, "amount": 25.5, "note": ""}'
    assert events == [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r2", "protocolVersion": "1.0"},
        {"type": "CUSTOM", "name": "picoflow.approval_decided", "value": decided},
        *tool_call("c1", "refund", args, not_run, metadata={"isError": True}),
        *reply("Understood, no refund.", "m2"),
        snapshot(session_of("cust-1", "t"), "refunds", "Refunds", ["Refunds"]),
        finished("t", "r2", (19, 6)),
    ]
    assert Refunds.ledger == []


async def test_a_finished_conversation_refuses_the_next_run() -> None:
    engine = desk_engine()
    async with live(engine) as url:
        events = await run_events(url, run_input("t", "r1", [user(1, "bye")]))
        again = await post(url, run_input("t", "r2", [user(1, "bye"), user(2, "hello?")]))
    session_id = session_of("cust-1", "t")
    assert [event["type"] for event in events] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert events[-2] == snapshot(
        session_id, "desk", "Farewell", ["Desk", "Farewell"], status="completed", completed=True
    )
    assert again.status_code == 409
    assert again.json()["error"]["kind"] == "session_completed"
    assert await transcript_lines(engine, session_id) == [
        "Desk | user: bye",
        "Desk | assistant: -> finish({}) #call_1",
        "Desk | tool finish #call_1: Accepted.",
        "Farewell | user [crossing]: I'm done, thank you.",
        "Farewell | assistant: Goodbye!",
    ]


# --- security --------------------------------------------------------------------------------------------


async def test_another_principal_using_the_same_thread_id_gets_a_session_of_its_own() -> None:
    engine = desk_engine()
    async with live(engine) as url:
        mine = await run_events(url, run_input("shared", "r1", [user(1, "hello")]))
        theirs = await run_events(url, run_input("shared", "r2", [user(1, "who am I")]), headers=OTHER)
    own, other = session_of("cust-1", "shared"), session_of("cust-2", "shared")
    assert own != other
    assert mine[-2]["snapshot"]["sessionId"] == own
    assert theirs[-2]["snapshot"]["sessionId"] == other
    result = next(event for event in theirs if event["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == '{"config": {}, "principal": "cust-2"}'
    assert sorted(await sessions(engine)) == sorted([own, other])
    assert await transcript_lines(engine, own) == ["Desk | user: hello", "Desk | assistant: echo: hello"]
    assert await transcript_lines(engine, other) == [
        "Desk | user: who am I",
        "Desk | assistant: -> whoami({}) #call_1",
        'Desk | tool whoami #call_1: {"config": {}, "principal": "cust-2"}',
        'Desk | assistant: tool said: {"config": {}, "principal": "cust-2"}',
    ]
    assert await engine.get_session(own, principal="cust-2") is None


async def test_a_resume_on_another_principals_thread_finds_no_interrupt() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "Understood, no refund."])
    messages = [user(1, "refund order 40001")]
    async with live(engine) as url:
        asked = await run_events(url, run_input("t", "r1", messages), flow="refunds")
        approval_id = asked[-1]["outcome"]["interrupts"][0]["id"]
        approve = {"interruptId": approval_id, "status": "resolved", "payload": {"decision": "approve"}}
        stolen = await post(url, run_input("t", "r2", messages, resume=[approve]), OTHER, "refunds")
        assert stolen.status_code == 404
        assert stolen.json()["error"]["kind"] == "approval_not_found"
        # Nothing ran, nothing was stored for the other principal, and the approval still waits.
        assert Refunds.ledger == []
        assert await sessions(engine) == [session_of("cust-1", "t")]
        session = await engine.get_session(session_of("cust-1", "t"), principal="cust-1")
        assert session is not None and session.status == "awaiting_approval"
        assert [approval.status for approval in session.approvals] == ["pending"]
        deny = {
            "interruptId": approval_id,
            "status": "resolved",
            "payload": {"decision": "deny", "reason": "no"},
        }
        events = await run_events(url, run_input("t", "r3", messages, resume=[deny]), flow="refunds")
    assert events[-1] == finished("t", "r3", (20, 6))
    assert Refunds.ledger == []


async def test_an_identity_in_the_body_is_ignored() -> None:
    engine = desk_engine()
    forged = {"principal": "cust-2", "customer_id": "c-2", "session_id": "s-2", "visibilities": ["staff"]}
    body = run_input(
        "t",
        "r1",
        [{**user(1, "who am I"), "name": "cust-2"}],
        forwardedProps={**forged, "tone": "brief"},
        state={"principal": "cust-2", "sessionId": session_of("cust-2", "t")},
        context=[{"description": "principal", "value": "cust-2"}],
        user="cust-2",
    )
    async with live(engine) as url:
        events = await run_events(url, body)
    result = next(event for event in events if event["type"] == "TOOL_CALL_RESULT")
    # forwardedProps is the turn's config, without any name that says who is calling.
    assert result["content"] == '{"config": {"tone": "brief"}, "principal": "cust-1"}'
    assert await sessions(engine) == [session_of("cust-1", "t")]


async def test_refused_requests_are_plain_http_errors_and_store_nothing() -> None:
    engine = desk_engine()
    good = run_input("t", "r1", [user(1, "hello")])
    unknown = {
        "interruptId": "apr_000000000000000000000000",
        "status": "resolved",
        "payload": {"decision": "approve"},
    }
    refused: list[tuple[Any, dict[str, str] | None, str, int, str, list[str]]] = [
        (good, {}, "desk", 401, "unauthorized", []),
        (good, {"Authorization": "Bearer nope"}, "desk", 401, "unauthorized", []),
        (b"{not json", None, "desk", 422, "invalid_input", ["body"]),
        ({**good, "threadId": ""}, None, "desk", 422, "invalid_input", ["body.threadId"]),
        ({**good, "threadId": "x" * 201}, None, "desk", 422, "invalid_input", ["body.threadId"]),
        ({k: v for k, v in good.items() if k != "runId"}, None, "desk", 422, "invalid_input", ["body.runId"]),
        ({**good, "messages": "hello"}, None, "desk", 422, "invalid_input", ["body.messages"]),
        (
            {**good, "messages": [{"id": "a", "role": "assistant", "content": "hi"}]},
            None,
            "desk",
            422,
            "invalid_input",
            ["body.messages"],
        ),
        (
            {
                **good,
                "messages": [
                    {
                        "id": "u",
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "url", "value": "https://x/y.png"}}],
                    }
                ],
            },
            None,
            "desk",
            422,
            "invalid_input",
            ["body.messages.0.content.0"],
        ),
        (
            {**good, "messages": [user(1, "x" * 101)]},
            None,
            "desk",
            413,
            "message_too_long",
            ["body.messages.0.content"],
        ),
        (
            {**good, "resume": [{**unknown, "payload": {"decision": "maybe"}}]},
            None,
            "desk",
            422,
            "invalid_input",
            ["body.resume.0.payload.decision"],
        ),
        (
            {**good, "resume": [{**unknown, "payload": None}]},
            None,
            "desk",
            422,
            "invalid_input",
            ["body.resume.0.payload"],
        ),
        (
            {**good, "resume": [unknown, unknown]},
            None,
            "desk",
            422,
            "invalid_input",
            ["body.resume.1.interruptId"],
        ),
        ({**good, "resume": [unknown]}, None, "desk", 404, "approval_not_found", []),
        (good, None, "nope", 404, "flow_not_found", []),
        ({**good, "resume": [unknown]}, None, "nope", 404, "flow_not_found", []),
        ({**good, "forwardedProps": {"pad": "x" * 5000}}, None, "desk", 413, "body_too_large", []),
    ]
    async with live(engine, max_message_chars=100, max_body_bytes=4096) as url:
        for body, headers, flow, status, kind, fields in refused:
            response = await post(url, body, headers, flow)
            assert response.status_code == status, (body, response.text)
            error = response.json()["error"]
            assert error["kind"] == kind, (body, error)
            assert [item["field"] for item in error.get("fields", [])][: len(fields)] == fields, (body, error)
    assert await sessions(engine) == []


async def test_a_thread_belongs_to_the_flow_of_its_first_run() -> None:
    engine = desk_engine_with()  # flows "desk" and "other"
    async with live(engine) as url:
        await run_events(url, run_input("t", "r1", [user(1, "hello")]))
        elsewhere = await post(url, run_input("t", "r2", [user(2, "hello again")]), flow="other")
    assert elsewhere.status_code == 409
    assert elsewhere.json()["error"]["kind"] == "flow_mismatch"
    session_id = session_of("cust-1", "t")
    assert await sessions(engine) == [session_id]
    assert await transcript_lines(engine, session_id) == [
        "Desk | user: hello",
        "Desk | assistant: echo: hello",
    ]


def approve(approval_id: str) -> dict[str, Any]:
    return {"interruptId": approval_id, "status": "resolved", "payload": {"decision": "approve"}}


async def test_one_resume_decides_each_interrupt_it_answers() -> None:
    calls = [SMALL_REFUND, *(ToolCall("refund", {"order_id": n, "amount": 10.0}, f"c{n}") for n in (2, 3))]
    engine, _ = refund_engine([calls, "All three refunds are on their way."])
    messages = [user(1, "refund orders 40001, 2 and 3")]
    session_id = session_of("cust-1", "t")
    bogus = "apr_" + "0" * 24
    async with live(engine) as url:

        async def resumed(run: str, *entries: dict[str, Any]) -> Any:
            return await run_events(url, run_input("t", run, messages, resume=list(entries)), flow="refunds")

        asked = await run_events(url, run_input("t", "r1", messages), flow="refunds")
        interrupts = asked[-1]["outcome"]["interrupts"]
        assert [item["toolCallId"] for item in interrupts] == ["c1", "c2", "c3"]
        first, second, third = (item["id"] for item in interrupts)
        # The first entry is decided; the next names no interrupt: the run ends with its error.
        events = await resumed("r2", approve(first), approve(bogus))
        assert [event["type"] for event in events] == ["RUN_STARTED", "CUSTOM", "RUN_ERROR"]
        assert (events[1]["value"]["id"], events[1]["value"]["status"]) == (first, "approved")
        assert events[2] == {
            "type": "RUN_ERROR",
            "message": f"no approval {bogus} for this caller",
            "code": "approval_not_found",
            "metadata": {"status": 404, "retryable": False},
        }
        # A resume that leaves one undecided ends with the interrupt again: nothing has run yet.
        events = await resumed("r3", approve(second))
        assert [event["type"] for event in events] == [
            "RUN_STARTED",
            "CUSTOM",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert events[-1]["outcome"]["interrupts"] == [interrupts[2]]
        assert events[-2]["snapshot"]["status"] == "awaiting_approval"
        assert Refunds.ledger == []
        # The last decision runs the three calls, in the order proposed, and the turn goes on;
        # an entry after it answers nothing.
        events = await resumed("r4", approve(third), approve(bogus))
    decided = {"id": third, "tool": "refund", "status": "approved", "decidedBy": "cust-1", "reason": None}
    assert events == [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r4", "protocolVersion": "1.0"},
        {"type": "CUSTOM", "name": "picoflow.approval_decided", "value": decided},
        # The calls are announced, then run, then answered.
        *tool_call("c1", "refund", '{"order_id": 40001, "amount": 25.5}', "")[:3],
        *tool_call("c2", "refund", '{"order_id": 2, "amount": 10.0}', "")[:3],
        *tool_call("c3", "refund", '{"order_id": 3, "amount": 10.0}', "")[:3],
        tool_call("c1", "refund", "", "refunded $25.50 on order 40001")[3],
        tool_call("c2", "refund", "", "refunded $10.00 on order 2", "m2")[3],
        tool_call("c3", "refund", "", "refunded $10.00 on order 3", "m3")[3],
        *reply("All three refunds are on their way.", "m4"),
        snapshot(session_id, "refunds", "Refunds", ["Refunds"]),
        finished("t", "r4", (36, 9)),
    ]
    assert Refunds.ledger == [(first, 40001, 25.5), (second, 2, 10.0), (third, 3, 10.0)]


async def test_an_approval_only_staff_may_decide_is_refused_to_the_customer() -> None:
    big = ToolCall("refund", {"order_id": 40002, "amount": 250.0}, "c2")
    engine, _ = refund_engine([big])
    messages = [user(1, "refund order 40002")]
    async with live(engine) as url:
        asked = await run_events(url, run_input("t", "r1", messages), flow="refunds")
        (interrupt,) = asked[-1]["outcome"]["interrupts"]
        assert (
            interrupt["message"]
            == "Refund $250.00 on order 40002 (someone with the 'staff' role must approve)"
        )
        assert interrupt["metadata"]["roles"] == ["staff"]
        refused = await post(
            url, run_input("t", "r2", messages, resume=[approve(interrupt["id"])]), flow="refunds"
        )
    assert refused.status_code == 403
    assert refused.json()["error"]["kind"] == "approval_not_allowed"
    assert Refunds.ledger == []
    session = await engine.get_session(session_of("cust-1", "t"), principal="cust-1")
    assert session is not None and [approval.status for approval in session.approvals] == ["pending"]


async def test_a_call_id_the_client_holds_already_gets_a_suffix() -> None:
    engine, _ = refund_engine([SMALL_REFUND, "Refunded.", SMALL_REFUND, "Refunded again."])
    history: list[dict[str, Any]] = [user(1, "refund order 40001")]
    async with live(engine) as url:
        asked = await run_events(url, run_input("t", "r1", history), flow="refunds")
        answer = approve(asked[-1]["outcome"]["interrupts"][0]["id"])
        await run_events(url, run_input("t", "r2", history, resume=[answer]), flow="refunds")
        # The client keeps the call it was shown (HttpAgent does) and asks again: the model's new
        # call has the same id, "c1", which the client would merge with the first.
        call = {"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{}"}}
        history += [{"id": "a1", "role": "assistant", "toolCalls": [call]}, user(2, "once more")]
        asked = await run_events(url, run_input("t", "r3", history), flow="refunds")
        (interrupt,) = asked[-1]["outcome"]["interrupts"]
        assert interrupt["toolCallId"] == "c1~2"
        events = await run_events(
            url, run_input("t", "r4", history, resume=[approve(interrupt["id"])]), flow="refunds"
        )
    assert {event.get("toolCallId") for event in events if "toolCallId" in event} == {"c1~2"}
    assert len(Refunds.ledger) == 2


async def test_the_route_is_in_the_openapi_document() -> None:
    async with live(desk_engine()) as url, httpx.AsyncClient(base_url=url) as client:
        document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/ag-ui/{flow}"]["post"]
    assert operation["tags"] == ["AG-UI"]
    # The SDK's own schema of RunAgentInput, among the document's components.
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/AgUiRunAgentInput"}
    run_input = document["components"]["schemas"]["AgUiRunAgentInput"]
    assert run_input["required"] == ["threadId", "runId", "messages"]
    assert "AgUiUserMessage" in document["components"]["schemas"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]


# --- cancelling ------------------------------------------------------------------------------------------


async def test_aborting_a_run_cancels_its_turn_and_the_next_run_of_the_thread_works() -> None:
    Started.reset()
    engine, model, script = hold_at(2, [[note("a", "c1")], "Back."])
    async with live(engine, sse_heartbeat=3600) as url:  # no heartbeat finds the closed connection
        # HttpAgent.abortRun() on the first TOOL_CALL_RESULT: the turn waits in its next model request.
        played = await play(
            "ag_ui_client.mjs", "abort", f"{url}/ag-ui/desk", "cust-key", "stop", "note a", "hi"
        )
    first, second = played["runs"]
    assert model.cancelled.is_set()  # the held request was cancelled with its turn
    assert (first["aborted"], "error" in first) == (True, False)  # an abort is no failure to the client
    events = received(first)
    assert [event["type"] for event in events[:-1]] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    # The run's end as the client tells it to its subscriber (the server's stream is gone).
    assert events[-1] == {
        "type": "RUN_ERROR",
        "rawEvent": {},
        "message": "This operation was aborted",
        "code": "abort",
    }
    assert [event["type"] for event in received(second)][-3:] == [
        "STEP_FINISHED",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert second["messages"][-1] == {
        "id": second["messages"][-1]["id"],
        "role": "assistant",
        "content": "Back.",
    }
    assert played["warnings"] == []
    assert await transcript_lines(engine, thread_session_id("cust-1", "ag-ui", "stop")) == [
        "Desk | user: hi",
        "Desk | assistant: Back.",
    ]
    assert Started.calls == ["note:a"]  # nothing after the abort
    script.assert_complete()


async def test_a_run_whose_turn_is_cancelled_elsewhere_ends_with_run_error_turn_cancelled() -> None:
    Started.reset()
    engine, model, script = hold_at(2, [[note("a", "c1")], "Back."])
    async with live(engine) as url:
        playing = asyncio.create_task(
            play("ag_ui_client.mjs", "chat", f"{url}/ag-ui/desk", "cust-key", "held", "note a", "hi")
        )
        await model.held.wait()
        session_id = thread_session_id("cust-1", "ag-ui", "held")
        async with httpx.AsyncClient(base_url=url, headers=CUSTOMER) as client:
            cancel = await client.delete(f"/v1/sessions/{session_id}/turn")
        assert (cancel.status_code, cancel.json()) == (202, {"session_id": session_id, "cancelled": "turn"})
        played = await playing
    first, second = played["runs"]
    events = received(first)
    assert events[-1] == {
        "type": "RUN_ERROR",
        "message": "This turn was cancelled; nothing of it was saved.",
        "code": "turn_cancelled",
        "metadata": {"status": 409, "retryable": False},
    }
    assert [event["type"] for event in events[:-1]] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    assert "error" not in first  # the client hands RUN_ERROR to its subscriber, as any event
    assert [event["type"] for event in received(second)][-1] == "RUN_FINISHED"
    assert await transcript_lines(engine, session_id) == ["Desk | user: hi", "Desk | assistant: Back."]
    assert Started.calls == ["note:a"]
    script.assert_complete()
