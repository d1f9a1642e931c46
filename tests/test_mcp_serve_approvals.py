"""Approvals over ``picoflow mcp serve``: a turn that ends waiting for approval says so in its
result (text and structured), and ``decide_approval`` decides as the MCP client's caller, so a
client whose principal and roles are not among the approvers is refused and nothing runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from tests.cli import desk
from tests.server.support import serving_asgi

from picoflow import FlowEngine
from picoflow.models import ScriptedModel, ToolCall
from picoflow.server import Identity
from picoflow.server.mcp import (
    DECIDE_SCHEMA,
    DECIDE_TOOL,
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    create_mcp_server,
    mcp_http_app,
)
from picoflow.sessions import MemoryStore

NOW = 1_800_000_000.0
BIG = ToolCall("refund", {"order_id": 40001, "amount": 250.0}, "c1")
WAITING = "Waiting for approval: Refund $250.00 on order 40001 (someone with the 'staff' role must approve)"


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    desk.LEDGER.clear()


def make_engine(script: list[Any]) -> FlowEngine:
    return FlowEngine([desk.DeskFlow], model=ScriptedModel(script), store=MemoryStore(), clock=lambda: NOW)


@asynccontextmanager
async def client_of(engine: FlowEngine, principal: str, *roles: str) -> AsyncIterator[Client]:
    async with Client(create_mcp_server(engine, principal=principal, roles=roles)) as client:
        yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    return result


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return result.content[0].text


def pending_result(session_id: str, approval_id: str) -> tuple[str, dict[str, Any]]:
    """The text and structured content of the turn that ends waiting for the big refund."""
    text = f"{WAITING}\napproval_id {approval_id}: decide it with decide_approval (session_id {session_id})"
    structured = {
        "reply": WAITING,
        "session_id": session_id,
        "completed": False,
        "step": "Desk",
        "content_type": "text/plain",
        "pending": [
            {
                "approval_id": approval_id,
                "tool": "refund",
                "summary": "Refund $250.00 on order 40001",
                "args": {"order_id": 40001, "amount": 250.0},
                "approvers": "someone with the 'staff' role",
                "roles": ["staff"],
                "expires_at": NOW + 600,
            }
        ],
    }
    return text, structured


async def test_a_pending_turn_says_so_and_only_an_approver_decides_it() -> None:
    engine = make_engine([[BIG], "Refunded."])
    async with (
        client_of(engine, "cust-1") as customer,
        client_of(engine, "sup-9", "staff") as staff,
        client_of(engine, "cust-2") as stranger,
    ):
        listed = await customer.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert list(tools) == ["desk", DECIDE_TOOL]
        assert tools["desk"].input_schema == INPUT_SCHEMA and tools["desk"].output_schema == OUTPUT_SCHEMA
        assert tools[DECIDE_TOOL].input_schema == DECIDE_SCHEMA
        assert tools[DECIDE_TOOL].output_schema == OUTPUT_SCHEMA

        asked = await call(customer, "desk", {"message": "refund order 40001"})
        assert not asked.is_error, asked.content
        assert asked.structured_content is not None
        session_id = asked.structured_content["session_id"]
        approval_id = asked.structured_content["pending"][0]["approval_id"]
        text, structured = pending_result(session_id, approval_id)
        assert text_of(asked) == text and asked.structured_content == structured
        assert desk.LEDGER == []

        decide = {"session_id": session_id, "approval_id": approval_id, "decision": "approve"}
        refused = await call(customer, DECIDE_TOOL, decide)
        assert refused.is_error
        assert text_of(refused) == (
            f"approval {approval_id} needs someone with the 'staff' role (approval_not_allowed)"
        )
        assert refused.structured_content == {
            "error": {
                "kind": "approval_not_allowed",
                "message": f"approval {approval_id} needs someone with the 'staff' role",
                "retryable": False,
                "session_id": session_id,
            }
        }
        unknown = await call(stranger, DECIDE_TOOL, decide)
        assert unknown.is_error
        assert text_of(unknown) == f"no approval {approval_id} for this caller (approval_not_found)"
        assert desk.LEDGER == []

        approved = await call(staff, DECIDE_TOOL, decide | {"reason": "checked the parcel"})
        assert not approved.is_error, approved.content
        assert text_of(approved) == "Refunded."
        assert approved.structured_content == {
            "reply": "Refunded.",
            "session_id": session_id,
            "completed": False,
            "step": "Desk",
            "content_type": "text/plain",
            "pending": [],
        }
        assert [(approval_id, 40001, 250.0)] == desk.LEDGER

        again = await call(staff, DECIDE_TOOL, decide | {"decision": "deny"})
        assert again.is_error
        assert text_of(again) == f"approval {approval_id} was approved already (approval_decided)"
    assert [(approval_id, 40001, 250.0)] == desk.LEDGER
    stored = await engine.store.load(session_id)
    assert stored is not None
    assert [(a.status, a.decided_by, a.reason) for a in stored.approvals] == [
        ("approved", "sup-9", "checked the parcel")
    ]


async def test_decide_approval_refuses_bad_arguments_before_anything_is_read() -> None:
    engine = make_engine([])
    async with client_of(engine, "sup-9", "staff") as staff:
        ids = {"session_id": "s1", "approval_id": "apr_" + "0" * 24}
        for arguments, rule in [
            ({}, "session_id is required and must be a string"),
            (
                {"session_id": "s1", "approval_id": 7, "decision": "approve"},
                "approval_id is required and must be a string",
            ),
            (ids | {"decision": "approve", "principal": "root"}, "unexpected argument(s): principal"),
            (ids | {"decision": "approve", "reason": 3}, "reason must be a string"),
            (ids | {"decision": "yes"}, 'decision must be "approve" or "deny"'),
            (
                {**ids, "approval_id": "apr_nope", "decision": "deny"},
                "approval id must be apr_ and 24 hexadecimal digits",
            ),
        ]:
            refused = await call(staff, DECIDE_TOOL, arguments)
            assert refused.is_error and text_of(refused) == f"{rule} (invalid_input)", text_of(refused)


def test_a_flow_may_not_hide_the_decision_tool() -> None:
    from picoflow import Flow

    class Clash(Flow):
        name = DECIDE_TOOL
        steps = [desk.Desk]

    with pytest.raises(
        ValueError, match="a flow named decide_approval would hide the tool deciding approvals"
    ):
        create_mcp_server(FlowEngine([Clash]))


async def test_over_http_an_api_key_with_the_role_decides() -> None:
    engine = make_engine([[BIG], "Refunded."])
    keys = {"key-c": "cust-1", "key-s": Identity("sup-9", frozenset({"staff"}))}
    async with serving_asgi(mcp_http_app(engine, api_keys=keys)) as base:

        async def as_key(key: str, tool: str, arguments: dict[str, Any]) -> CallToolResult:
            client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
            async with (
                client,
                streamable_http_client(f"{base}/mcp", http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool(tool, arguments)
            assert isinstance(result, CallToolResult)
            return result

        asked = await as_key("key-c", "desk", {"message": "refund order 40001"})
        assert asked.structured_content is not None
        session_id = asked.structured_content["session_id"]
        approval_id = asked.structured_content["pending"][0]["approval_id"]
        assert (text_of(asked), asked.structured_content) == pending_result(session_id, approval_id)
        decide = {"session_id": session_id, "approval_id": approval_id, "decision": "approve"}
        refused = await as_key("key-c", DECIDE_TOOL, decide)
        assert refused.is_error and "(approval_not_allowed)" in text_of(refused)
        assert desk.LEDGER == []
        approved = await as_key("key-s", DECIDE_TOOL, decide)
        assert not approved.is_error and text_of(approved) == "Refunded."
    assert [(approval_id, 40001, 250.0)] == desk.LEDGER
    await engine.aclose()
