"""The files of a user message (``Message.attachments``) in each provider's wire format.

Every adapter sends a user message that carries files as its text followed by one part per file,
in the order they were attached. The bytes come from ``ModelRequest.files``, by SHA-256; a file
whose bytes are missing there is a bug upstream, raised as ``MissingAttachment`` naming the file.
What a provider cannot take natively goes as text, labelled ``[file NAME]``: a text file's text
everywhere, and a PDF's extracted text (``_pdf_text``) for servers without file input and for the
embedded model. No SDK import here: plain data the SDKs send as they are.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from picoflow.attachments import AttachmentRef
from picoflow.exceptions import AttachmentRefused, ModelError
from picoflow.messages import Message
from picoflow.models._pdf_text import pdf_text

PDF = "application/pdf"
TEXT = "text/plain"

Files = Mapping[str, bytes]
"""``ModelRequest.files``: the bytes of every file the messages refer to, by SHA-256."""


class MissingAttachment(ModelError):
    """A message refers to a file whose bytes the request does not hold: a bug, not an outage."""

    kind = "internal"
    status = 500
    retryable = False
    public_message = "The assistant could not complete this turn."


@dataclass(frozen=True, slots=True)
class File:
    """One attached file with its bytes."""

    ref: AttachmentRef
    data: bytes

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    @property
    def data_url(self) -> str:
        return f"data:{self.ref.media_type};base64,{self.base64}"

    @property
    def is_pdf(self) -> bool:
        return self.ref.media_type == PDF

    def text(self) -> str:
        """The file's text: a text file's own, a PDF's extracted (capped)."""
        if self.is_pdf:
            return pdf_text(self.data, name=self.ref.name, key=self.ref.sha256)
        return self.data.decode("utf-8", "replace")

    def labelled_text(self) -> str:
        """The file's text under a line naming it, as a model reads a file given as text."""
        return f"[file {self.ref.name}]\n{self.text()}"


def files_of(message: Message, files: Files) -> list[File]:
    """The files of ``message`` with their bytes; ``MissingAttachment`` when some bytes are missing."""
    found: list[File] = []
    for ref in message.attachments:
        data = files.get(ref.sha256)
        if data is None:
            raise MissingAttachment(
                f"the request holds no bytes for attachment {ref.name!r} ({ref.media_type}, "
                f"{ref.size} bytes, sha256 {ref.sha256[:16]}...): every file a message refers to "
                "must be in ModelRequest.files"
            )
        found.append(File(ref, bytes(data)))
    return found


def responses_content(message: Message, files: Files) -> list[dict[str, Any]]:
    """A user message with files as Responses API content parts."""
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": message.content}] if message.content else []
    for file in files_of(message, files):
        if file.ref.is_image:
            parts.append({"type": "input_image", "image_url": file.data_url, "detail": "auto"})
        elif file.is_pdf:
            parts.append({"type": "input_file", "filename": file.ref.name, "file_data": file.data_url})
        else:
            parts.append({"type": "input_text", "text": file.labelled_text()})
    return parts


def chat_content(message: Message, files: Files, *, reads_pdf: bool) -> list[dict[str, Any]]:
    """A user message with files as Chat Completions content parts. ``reads_pdf``: the server takes
    ``file`` parts (OpenAI does; compatible servers rarely do, and get the PDF's text)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    for file in files_of(message, files):
        if file.ref.is_image:
            parts.append({"type": "image_url", "image_url": {"url": file.data_url}})
        elif file.is_pdf and reads_pdf:
            parts.append({"type": "file", "file": {"filename": file.ref.name, "file_data": file.data_url}})
        else:
            parts.append({"type": "text", "text": file.labelled_text()})
    return parts


def anthropic_blocks(message: Message, files: Files) -> list[dict[str, Any]]:
    """The file blocks of a user message for the Messages API (its text block goes before them)."""
    blocks: list[dict[str, Any]] = []
    for file in files_of(message, files):
        media_type = file.ref.media_type
        if file.ref.is_image:
            source = {"type": "base64", "media_type": media_type, "data": file.base64}
            blocks.append({"type": "image", "source": source})
        elif file.is_pdf:
            source = {"type": "base64", "media_type": PDF, "data": file.base64}
            blocks.append({"type": "document", "source": source, "title": file.ref.name})
        else:
            source = {"type": "text", "media_type": TEXT, "data": file.text()}
            blocks.append({"type": "document", "source": source, "title": file.ref.name})
    return blocks


def gemini_parts(message: Message, files: Files) -> list[dict[str, Any]]:
    """The file parts of a user message for Gemini (its text part goes before them); the SDK encodes
    the bytes of ``inline_data``."""
    parts: list[dict[str, Any]] = []
    for file in files_of(message, files):
        if file.ref.is_image or file.is_pdf:
            parts.append({"inline_data": {"mime_type": file.ref.media_type, "data": file.data}})
        else:
            parts.append({"text": file.labelled_text()})
    return parts


def text_with_files(message: Message, files: Files) -> str:
    """A user message with its files as text, for a model without vision or file input: PDFs and
    text files appended as their text; an image is refused (``AttachmentRefused``, 415)."""
    texts = [message.content] if message.content else []
    for file in files_of(message, files):
        if file.ref.is_image:
            raise AttachmentRefused(
                f"attachment {file.ref.name!r} is an image, and this model cannot read images; "
                "choose a model with vision (openai:, anthropic: or google:) or send a PDF or text file"
            )
        texts.append(file.labelled_text())
    return "\n\n".join(texts)
