"""Model adapters behind the ``Model.request`` seam, and models for tests."""

from picoflow.messages import ModelRequest, ModelResponse, ToolCall, ToolDefinition
from picoflow.models.base import Model, ResponseDone, StreamEvent, TextDelta, ToolCallDelta
from picoflow.models.catalog import ModelSelection
from picoflow.models.fallback import FallbackModel
from picoflow.models.scripted import FunctionModel, ScriptedModel

__all__ = [
    "FallbackModel",
    "FunctionModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSelection",
    "ResponseDone",
    "ScriptedModel",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolDefinition",
]
