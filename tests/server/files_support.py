"""A flow that reads the files of a turn, for the upload tests: in process, and as the app of a
server process whose memory a test watches (``uvicorn --factory tests.server.files_support:make_app``).

The model says what the request showed it: each file of the last user message with its size, and
whether the bytes of every file the messages refer to came with the request. A tool reads
``ctx.attachments`` when the user asks for "sizes".
"""

from __future__ import annotations

import io
import os
from typing import Any

from fastapi import FastAPI
from PIL import Image
from reportlab.pdfgen import canvas

from picoflow import Flow, FlowEngine, RunContext, Step, tool
from picoflow.attachments import AttachmentLimits
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ToolCall
from picoflow.server import ServerSettings, create_app
from picoflow.sessions import MemoryStore


def png(color: str = "red") -> bytes:
    """A small PNG (Pillow)."""
    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), color).save(buffer, "PNG")
    return buffer.getvalue()


def pdf(text: str = "Invoice 7: total 118.80") -> bytes:
    """A one-page PDF with ``text`` on it (reportlab, with fixed metadata: the same bytes every run)."""
    buffer = io.BytesIO()
    page = canvas.Canvas(buffer, invariant=1)
    page.drawString(72, 720, text)
    page.save()
    return buffer.getvalue()


class Reader(Step):
    """Read the files the user sends."""

    @tool
    def sizes(self, ctx: RunContext) -> str:
        """Tell the sizes of this turn's files."""
        return ", ".join(f"{file.name}={file.size}" for file in ctx.attachments) or "no files"


class FilesFlow(Flow):
    name = "files"
    steps = [Reader]


async def read_files(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.role == "tool":
        return f"tool says: {last.content}"
    if "sizes" in last.content:
        return ToolCall("sizes", {})
    shown = [ref for message in request.messages for ref in message.attachments]
    complete = all(
        request.files.get(ref.sha256, b"") and len(request.files[ref.sha256]) == ref.size for ref in shown
    )
    listed = ", ".join(f"{ref.name} ({ref.media_type}, {ref.size} bytes)" for ref in last.attachments)
    return f"{last.content}: {listed or 'no files'}; all bytes: {complete}"


def files_engine(limits: AttachmentLimits | None = None) -> FlowEngine:
    return FlowEngine(
        [FilesFlow], store=MemoryStore(), model=FunctionModel(read_files), attachment_limits=limits
    )


def make_app() -> FastAPI:
    """The app of the memory test's server process (default limits unless the environment sets one)."""
    max_file = int(os.environ.get("PICOFLOW_TEST_MAX_FILE", 10 * 1024 * 1024))
    engine = files_engine(AttachmentLimits(max_file_bytes=max_file))
    return create_app(engine, settings=ServerSettings(prepare_models=False))


READER = FunctionModel(read_files)
"""The model as ``picoflow chat --model python:tests.server.files_support:READER`` takes it."""
