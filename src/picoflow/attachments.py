"""Files a user sends with a message: images (PNG, JPEG, WebP, GIF), PDFs and plain text.

An ``Attachment`` holds the bytes; what a message keeps is its ``AttachmentRef`` (name, type, size
and SHA-256), since a session stores each file once, by its hash, beside the session document.
The declared type must match the bytes (their magic numbers), and sizes are bounded per file and
per turn (``AttachmentLimits``); a refusal raises ``AttachmentRefused`` (415) or
``AttachmentTooLarge`` (413), both before anything is stored.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path

from picoflow.exceptions import AttachmentRefused, AttachmentTooLarge

__all__ = [
    "ACCEPTED_TYPES",
    "IMAGE_TYPES",
    "Attachment",
    "AttachmentLimits",
    "AttachmentRef",
    "check_attachments",
    "guess_media_type",
    "sniff",
]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
ACCEPTED_TYPES = IMAGE_TYPES | {"application/pdf", "text/plain"}
_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "application/x-pdf": "application/pdf"}


def sniff(data: bytes) -> str | None:
    """The type the bytes themselves say (their magic numbers), or None when they say none of ours.

    Plain text has no magic number: bytes that decode as UTF-8 without NUL or other control
    characters (tabs and line ends aside) count as text.
    """
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(char) < 32 and char not in "\t\n\r\f" for char in text):
        return None
    return "text/plain"


def guess_media_type(name: str, data: bytes) -> str:
    """The type of a file nobody declared: its name's extension, else its bytes, else
    ``application/octet-stream`` (which no turn accepts)."""
    return mimetypes.guess_type(name)[0] or sniff(data) or "application/octet-stream"


@dataclass(frozen=True, slots=True)
class AttachmentRef:
    """A stored file as a message refers to it (the bytes are kept once per session, by hash)."""

    name: str
    media_type: str
    size: int
    sha256: str

    @property
    def is_image(self) -> bool:
        return self.media_type in IMAGE_TYPES


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file with its bytes, as the caller hands it to ``engine.run(..., attachments=[...])``."""

    name: str
    media_type: str
    data: bytes = field(repr=False)
    sha256: str = field(init=False, repr=False, compare=False)
    """The bytes' SHA-256 (hex), computed once: the turn, the message and the store all use it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha256", hashlib.sha256(self.data).hexdigest())

    @classmethod
    def from_bytes(cls, data: bytes, media_type: str, name: str = "attachment") -> Attachment:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"an attachment's data must be bytes, not {type(data).__name__}")
        declared = media_type.split(";", 1)[0].strip().lower()
        return cls(_file_name(name), _ALIASES.get(declared, declared), bytes(data))

    @classmethod
    def from_path(
        cls, path: str | Path, media_type: str | None = None, *, name: str | None = None
    ) -> Attachment:
        """A file read from disk; its type from ``media_type``, else its extension, else its bytes."""
        file = Path(path)
        data = file.read_bytes()
        return cls.from_bytes(data, media_type or guess_media_type(file.name, data), name or file.name)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def is_image(self) -> bool:
        return self.media_type in IMAGE_TYPES

    def ref(self) -> AttachmentRef:
        return AttachmentRef(self.name, self.media_type, self.size, self.sha256)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachmentLimits:
    """How large the files of one turn may be."""

    max_file_bytes: int = 10 * 1024 * 1024
    """Largest single file (default 10 MiB)."""
    max_turn_bytes: int = 20 * 1024 * 1024
    """Largest total of one turn's files (default 20 MiB)."""
    max_files: int = 10
    """Most files one turn may carry."""
    accepted: frozenset[str] = ACCEPTED_TYPES
    """Media types accepted at all."""


def check_attachments(attachments: list[Attachment], limits: AttachmentLimits) -> None:
    """Refuse what may not be taken: an unknown type, a type the bytes contradict, too many or too
    large files. Names the file and the rule, never the contents."""
    if len(attachments) > limits.max_files:
        raise AttachmentTooLarge(f"a turn may carry at most {limits.max_files} files, not {len(attachments)}")
    total = 0
    for attachment in attachments:
        if not isinstance(attachment, Attachment):
            raise TypeError(f"attachments must be Attachment values, not {type(attachment).__name__}")
        where = f"attachment {attachment.name!r}"
        if attachment.media_type not in limits.accepted:
            allowed = ", ".join(sorted(limits.accepted))
            raise AttachmentRefused(f"{where}: type {attachment.media_type} is not accepted ({allowed})")
        if attachment.size == 0:
            raise AttachmentRefused(f"{where} is empty")
        if attachment.size > limits.max_file_bytes:
            raise AttachmentTooLarge(f"{where} is larger than {limits.max_file_bytes} bytes")
        total += attachment.size
        actual = sniff(attachment.data)
        if actual != attachment.media_type:
            says = f"its bytes are {actual}" if actual else "its bytes are none of the accepted types"
            raise AttachmentRefused(f"{where} is declared {attachment.media_type} but {says}")
    if total > limits.max_turn_bytes:
        raise AttachmentTooLarge(f"the files of one turn may total at most {limits.max_turn_bytes} bytes")


def _file_name(name: str) -> str:
    """A file name kept as a label only: no folders, no control characters, at most 200 characters."""
    base = str(name).replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = "".join(char for char in base if char.isprintable()).strip() or "attachment"
    return cleaned[:200]
