"""The files a session keeps (its attachments), as every store takes them: checked and hashed
before any I/O, and kept once per session by SHA-256.

Files live beside the session document, never inside it, so a turn's save stays small however many
files the session holds, and a file's bytes are read only when something asks for them. A save
that brings a file the session already holds keeps the stored one as it is (first name wins).

The order files were first stored in is ``(revision, ordinal)``: the revision of the save that
brought them and their place among its files. Saves of one session are serialised by their
compare-and-swap, so this order is the same on every store and needs no clock.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from picoflow.attachments import Attachment, AttachmentRef

_SHA256 = re.compile(r"[0-9a-f]{64}")

NO_FILES: tuple[Attachment, ...] = ()
"""The default of ``save(files=...)``: recognised by identity, so a save without files does no file
work, while any other value (``None`` and ``""`` too) is checked by ``file_rows`` like on every store."""


@dataclass(frozen=True, slots=True)
class FileRow:
    """One file of a save, checked, with its place among the save's files."""

    sha256: str
    name: str
    media_type: str
    size: int
    data: bytes = field(repr=False)
    ordinal: int = 0
    """Its place among the save's files (after duplicates are dropped)."""

    def ref(self) -> AttachmentRef:
        return AttachmentRef(self.name, self.media_type, self.size, self.sha256)


def file_rows(files: Sequence[Attachment]) -> list[FileRow]:
    """Check a save's files and hash them, each file once (the first of duplicates kept).

    Raises ``TypeError`` for anything but ``Attachment`` values with bytes, ``ValueError`` for a
    name or media type no store can keep alike (empty, or with NUL, which PostgreSQL's text refuses).
    """
    if isinstance(files, str | bytes | bytearray | memoryview) or not isinstance(files, Sequence):
        raise TypeError(f"files must be a sequence of Attachment values, not {type(files).__name__}")
    rows: list[FileRow] = []
    seen: set[str] = set()
    for index, file in enumerate(files):
        if not isinstance(file, Attachment):
            raise TypeError(f"files[{index}] must be an Attachment, not {type(file).__name__}")
        if not isinstance(file.data, bytes):
            raise TypeError(f"files[{index}]: data must be bytes, not {type(file.data).__name__}")
        for label, value in (("name", file.name), ("media type", file.media_type)):
            if not isinstance(value, str) or not value or "\x00" in value:
                raise ValueError(f"files[{index}]: the {label} must be a non-empty string without NUL")
        digest = file.sha256
        if digest in seen:
            continue
        seen.add(digest)
        rows.append(FileRow(digest, file.name, file.media_type, len(file.data), file.data, len(rows)))
    return rows


def wanted_hashes(hashes: Collection[str]) -> list[str]:
    """The distinct hashes worth looking up, in the order given.

    Only lowercase SHA-256 hex digests can be stored, so anything else is simply absent: never sent
    to a database, where odd text (NUL, lone surrogates) would fail differently on each store.
    """
    if isinstance(hashes, str | bytes | bytearray):
        raise TypeError("hashes must be a collection of SHA-256 hex digests, not a single string")
    wanted: dict[str, None] = {}
    for value in hashes:
        if not isinstance(value, str):
            raise TypeError(f"hashes must be strings, not {type(value).__name__}")
        if _SHA256.fullmatch(value):
            wanted[value] = None
    return list(wanted)


def as_bytes(data: object) -> bytes:
    """A driver's blob as ``bytes`` (copied only when the driver gave a buffer)."""
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"a stored file came back as {type(data).__name__}, not bytes")


class SessionFiles:
    """The files of the sessions of a ``MemoryStore``: per session, by hash, in the order stored."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, FileRow]] = {}

    def add(self, session_id: str, rows: list[FileRow]) -> None:
        held = self._files.setdefault(session_id, {})
        for row in rows:
            held.setdefault(row.sha256, row)  # a file already stored is kept as it is

    def load(self, session_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        held = self._files.get(session_id, {})
        return {sha: held[sha].data for sha in wanted_hashes(hashes) if sha in held}

    def list(self, session_id: str) -> list[AttachmentRef]:
        return [row.ref() for row in self._files.get(session_id, {}).values()]

    def drop(self, session_id: str) -> None:
        self._files.pop(session_id, None)
