"""The public import paths users and the design rely on (DESIGN §4) keep importing, whatever
moves inside the package."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "picoflow": (
        "Flow Step LogicStep TerminateStep tool tools go stay direct direct_to Reject ToolError RunContext "
        "FlowEngine TurnResult UsageLimits Caller MCPServer SlotStep ask Prompt since_last_user Form Said "
        "Locale Catalog Handoff call Call"
    ),
    "picoflow.handoffs": "HandoffTicket QueuedHandoff STAFF_VISIBILITY handoff_summary",
    "picoflow.models": "ScriptedModel FunctionModel ToolCall ModelResponse Model FallbackModel",
    "picoflow.sessions": "MemoryStore SQLiteStore PostgresStore SessionStore open_store",
    "picoflow.engine": (
        "FlowEngine ANY_PRINCIPAL LocalExecutor TurnExecutor ToolRunner ToolJob LOCAL_TOOLS check_text"
    ),
    "picoflow.mcp": "MCPServer",
    "picoflow.slots": "SlotStep Form Said ask Extraction EXTRACT_RULES",
    "picoflow.models.local": "LocalModel fetch_model",
    "picoflow.models.readiness": "LoadStatus Phase",
    "picoflow.attachments": "Attachment AttachmentLimits",
    "picoflow.testing": "transcript_lines request_lines",
    "picoflow.messages": "Message ModelRequest",
    "picoflow.server": "create_app ServerSettings",
    "picoflow.server.mcp": "create_mcp_server serve_stdio serve_http mcp_http_app",
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_import(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC[module].split() if not hasattr(imported, name)]
    assert missing == []
