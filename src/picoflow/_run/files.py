"""The files of a turn: those the user sent with the message, and those earlier messages of the
session refer to, whose bytes the store keeps (loaded once per turn, only when a request shows the
message that refers to them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from picoflow.attachments import Attachment, AttachmentRef
from picoflow.exceptions import AttachmentRefused, StoreError
from picoflow.messages import Message

Loader = Callable[[Collection[str]], Awaitable[dict[str, bytes]]]
"""Reads stored files of the session by SHA-256 (``SessionStore.load_files``)."""

_NONE: Mapping[str, bytes] = {}


class TurnFiles:
    """What a turn knows of files: the new ones (stored with the turn) and the bytes it has read."""

    __slots__ = ("_known", "_load", "incoming", "refs")

    def __init__(self, incoming: Sequence[Attachment], load: Loader | None) -> None:
        self.incoming = tuple(incoming)
        """The files sent with this turn's message, with their bytes (``RunContext.attachments``)."""
        self.refs = tuple(attachment.ref() for attachment in self.incoming)
        """What the user message keeps of them."""
        self._known: dict[str, bytes] = {attachment.sha256: attachment.data for attachment in self.incoming}
        self._load = load

    async def for_messages(self, messages: Sequence[Message]) -> Mapping[str, bytes]:
        """The bytes of every file ``messages`` refer to (what a request to the model carries)."""
        wanted = {ref.sha256: ref for message in messages for ref in message.attachments}
        if not wanted:
            return _NONE
        missing = [sha for sha in wanted if sha not in self._known]
        if missing:
            found = await self._load(missing) if self._load is not None else {}
            self._known.update(found)
            lost = [wanted[sha] for sha in missing if sha not in found]
            if lost:
                raise StoreError(f"the stored bytes of {_names(lost)} are missing")
        return {sha: self._known[sha] for sha in wanted}


def refuse_images(refs: Sequence[AttachmentRef], model: str) -> None:
    """A model that cannot see images is never sent one: the turn is refused, nothing stored."""
    images = [ref for ref in refs if ref.is_image]
    if images:
        raise AttachmentRefused(
            f"{model} cannot read images ({_names(images)}); choose a model with vision (openai:, "
            "anthropic: or google:) or send a PDF or text file"
        )


def _names(refs: Sequence[AttachmentRef]) -> str:
    return ", ".join(repr(ref.name) for ref in refs)
