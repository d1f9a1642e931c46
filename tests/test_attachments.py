"""Files sent with a message: checked against their bytes and the limits before anything is
stored, kept once per session by hash, referred to by the user message, handed to the model with
every request that shows that message, and to tools through ``ctx.attachments``."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from picoflow import Flow, FlowEngine, RunContext, Step, tool
from picoflow.attachments import Attachment, AttachmentLimits, AttachmentRef, check_attachments, sniff
from picoflow.exceptions import AttachmentRefused, AttachmentTooLarge
from picoflow.messages import ModelRequest
from picoflow.models import FallbackModel, FunctionModel
from picoflow.models.local import LocalModel
from picoflow.sessions import SQLiteStore


def png(width: int = 2, height: int = 1) -> bytes:
    """A valid PNG of grey pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def test_the_bytes_say_their_type() -> None:
    assert sniff(png()) == "image/png"
    assert sniff(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert sniff(b"GIF89a....") == "image/gif"
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert sniff(PDF) == "application/pdf"
    assert sniff("Total: 12,50 €\n".encode()) == "text/plain"
    assert sniff(b"PK\x03\x04zip") is None
    assert sniff(b"\xff\xfe\x00\x01") is None


def test_what_the_limits_and_the_bytes_refuse() -> None:
    limits = AttachmentLimits(max_file_bytes=1000, max_turn_bytes=1500, max_files=2)
    check_attachments([Attachment.from_bytes(png(), "image/png", "a.png")], limits)
    cases: list[tuple[list[Attachment], type[Exception], str]] = [
        (
            [Attachment.from_bytes(PDF, "image/png", "scan.png")],
            AttachmentRefused,
            "declared image/png but its bytes are application/pdf",
        ),
        (
            [Attachment.from_bytes(b"PK\x03\x04", "application/zip", "x.zip")],
            AttachmentRefused,
            "type application/zip is not accepted",
        ),
        ([Attachment.from_bytes(b"", "text/plain", "e.txt")], AttachmentRefused, "'e.txt' is empty"),
        (
            [Attachment.from_bytes(b"a" * 1001, "text/plain", "big.txt")],
            AttachmentTooLarge,
            "larger than 1000 bytes",
        ),
        (
            [Attachment.from_bytes(b"a" * 800, "text/plain", f"{n}.txt") for n in range(2)],
            AttachmentTooLarge,
            "at most 1500 bytes",
        ),
        (
            [Attachment.from_bytes(b"a", "text/plain", f"{n}.txt") for n in range(3)],
            AttachmentTooLarge,
            "at most 2 files",
        ),
    ]
    for attachments, error, says in cases:
        with pytest.raises(error, match=says):
            check_attachments(attachments, limits)


def test_a_file_from_disk_and_its_reference(tmp_path: Path) -> None:
    path = tmp_path / "receipt.PNG"
    path.write_bytes(png())
    attachment = Attachment.from_path(path)
    assert (attachment.name, attachment.media_type, attachment.size) == (
        "receipt.PNG",
        "image/png",
        len(png()),
    )
    assert attachment.ref() == AttachmentRef("receipt.PNG", "image/png", len(png()), attachment.sha256)
    assert Attachment.from_bytes(b"x", "image/JPG; q=1", "../../etc/passwd").name == "passwd"
    assert Attachment.from_bytes(b"x", "image/jpg").media_type == "image/jpeg"


class Reader(Step):
    """Read the files."""

    seen: list[tuple[str, int]] = []

    @tool
    def inspect(self, ctx: RunContext) -> str:
        """Look at the files of this message."""
        Reader.seen = [(a.name, len(a.data)) for a in ctx.attachments]
        return f"{len(ctx.attachments)} files"


class Reading(Flow):
    name = "reading"
    steps = [Reader]


def recording() -> tuple[FunctionModel, list[ModelRequest]]:
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> Any:
        requests.append(request)
        last = request.messages[-1]
        if last.role == "user" and last.attachments:
            from picoflow.messages import ToolCall

            return ToolCall("inspect", {}, f"i{len(requests)}")
        return "Read."

    return FunctionModel(answer), requests


async def test_files_are_kept_once_by_hash_and_reach_the_model_and_the_tools(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    model, requests = recording()
    engine = FlowEngine([Reading], model=model, store=store)
    picture, pdf = (
        Attachment.from_bytes(png(), "image/png", "photo.png"),
        Attachment.from_bytes(PDF, "application/pdf", "a.pdf"),
    )
    first = await engine.run("reading", "two files", attachments=[picture, pdf])
    assert first.ok and first.message == "Read."
    assert Reader.seen == [("photo.png", len(png())), ("a.pdf", len(PDF))]
    assert requests[0].files == {picture.sha256: picture.data, pdf.sha256: pdf.data}
    session_id = first.session_id or ""
    transcript = await store.transcript(session_id)
    assert transcript[0].attachments == (picture.ref(), pdf.ref())
    assert [ref.name for ref in await store.list_files(session_id)] == ["photo.png", "a.pdf"]
    await store.close()

    # A later turn, by another engine on the same database: the earlier message still shows its
    # files to the model, read back byte-identical from the store.
    store = SQLiteStore(tmp_path / "s.db")
    model, requests = recording()
    engine = FlowEngine([Reading], model=model, store=store)
    again = await engine.run("reading", "and the same photo again", session_id, attachments=[picture])
    assert again.ok
    assert requests[0].files == {picture.sha256: picture.data, pdf.sha256: pdf.data}
    assert [ref.name for ref in await store.list_files(session_id)] == ["photo.png", "a.pdf"]  # kept once
    await store.close()


async def test_a_refused_file_leaves_the_session_as_it_was() -> None:
    model, _ = recording()
    engine = FlowEngine([Reading], model=model)
    first = await engine.run("reading", "hello")
    session_id = first.session_id or ""
    before = await engine.store.load(session_id)
    lying = Attachment.from_bytes(PDF, "image/png", "scan.png")
    result = await engine.run("reading", "this one", session_id, attachments=[lying])
    assert result.error is not None and result.error.status == 415 and result.error.is_a(AttachmentRefused)
    assert result.message == "attachment 'scan.png' is declared image/png but its bytes are application/pdf"
    assert await engine.store.load(session_id) == before
    assert await engine.store.list_files(session_id) == []


class Blind(FunctionModel):
    reads_images = False


async def test_a_model_that_cannot_see_images_is_never_sent_one() -> None:
    engine = FlowEngine([Reading], model=Blind(lambda request: "never"))
    picture = Attachment.from_bytes(png(), "image/png", "photo.png")
    result = await engine.run("reading", "look", attachments=[picture])
    assert result.error is not None and result.error.status == 415
    assert "cannot read images ('photo.png')" in result.message
    assert result.session_id is None  # a first turn: nothing was stored


def test_which_models_can_be_shown_images() -> None:
    blind, seeing = LocalModel(), FunctionModel(lambda request: "ok")
    assert (blind.reads_images, seeing.reads_images) == (False, True)
    assert FallbackModel([seeing, blind]).reads_images is True
    assert FallbackModel([Blind(lambda request: "no"), blind]).reads_images is False
