"""picoflow: conversational LLM applications as a flow of steps.

The model only proposes; your code validates, authorizes, runs and decides what happens next.
"""

from picoflow.approvals import Approval, Approvers
from picoflow.context import Caller, RunContext
from picoflow.engine import Cancelled, FlowEngine, TurnError, TurnFinished, TurnResult
from picoflow.exceptions import (
    FlowDefinitionError,
    PicoflowError,
    RunError,
    SessionConflict,
    SubStepFailed,
    SubStepsFailed,
    ToolError,
    UsageLimitExceeded,
)
from picoflow.flow import Flow
from picoflow.locale import Catalog, Locale
from picoflow.mcp import MCPServer
from picoflow.memory import Compaction
from picoflow.messages import Message
from picoflow.outcomes import (
    Call,
    Direct,
    Go,
    Outcome,
    Reject,
    Repair,
    RetryWith,
    Stay,
    call,
    direct,
    direct_to,
    go,
    repair,
    retry_with,
    stay,
)
from picoflow.prompts import Prompt
from picoflow.repairs import Repairs, RepairTexts
from picoflow.slots.form import Ask, Form, ask
from picoflow.slots.reading import Extraction
from picoflow.slots.said import Said
from picoflow.slots.step import SlotStep
from picoflow.step import Handoff, LogicStep, Step, TerminateStep, since_last_user
from picoflow.tools import ValidCall, declare_tool, tool, tools
from picoflow.usage import Usage, UsageLimits

__all__ = [
    "Approval",
    "Approvers",
    "Ask",
    "Call",
    "Caller",
    "Cancelled",
    "Catalog",
    "Compaction",
    "Direct",
    "Extraction",
    "Flow",
    "FlowDefinitionError",
    "FlowEngine",
    "Form",
    "Go",
    "Handoff",
    "Locale",
    "LogicStep",
    "MCPServer",
    "Message",
    "Outcome",
    "PicoflowError",
    "Prompt",
    "Reject",
    "Repair",
    "RepairTexts",
    "Repairs",
    "RetryWith",
    "RunContext",
    "RunError",
    "Said",
    "SessionConflict",
    "SlotStep",
    "Stay",
    "Step",
    "SubStepFailed",
    "SubStepsFailed",
    "TerminateStep",
    "ToolError",
    "TurnError",
    "TurnFinished",
    "TurnResult",
    "Usage",
    "UsageLimitExceeded",
    "UsageLimits",
    "ValidCall",
    "ask",
    "call",
    "declare_tool",
    "direct",
    "direct_to",
    "go",
    "repair",
    "retry_with",
    "since_last_user",
    "stay",
    "tool",
    "tools",
]

__version__ = "0.1.0"
