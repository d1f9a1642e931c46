"""Keeping what llama.cpp read of a flow's first prompt across restarts.

A flow's start step sends a long system prompt (tool schemas, the answer format): about 2,300
tokens for the hotel demo, which a 2-core CPU reads in 1–2 minutes. Warming reads it once per
start, but a restart used to read it all again. llama.cpp can save its one slot — the prompt's
tokens with their KV cache, some 60 MB — to a file and restore it later; a restored slot is
reused for exactly the tokens the next prompt shares with it (llama.cpp compares the tokens),
so a prompt that changed since costs only its changed tail and is never answered from stale data.

A file only fits the model file and the llama.cpp build that wrote it, so both are part of its
name; a restore that fails for any reason only means the prompt is read again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from picoflow.models.local._process import LlamaProcessError

logger = logging.getLogger("picoflow.models")

FOLDER = "prompt-cache"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")

Post = Callable[[str, Mapping[str, Any]], dict[str, Any]]
"""Sends a JSON request to the llama.cpp server and returns its JSON answer."""


def cache_folder(model_folder: Path) -> Path:
    return model_folder / FOLDER


def build_key(model_sha256: str, n_ctx: int, build: str) -> str:
    """What a saved slot depends on: the model's weights, the context size and llama.cpp's file format."""
    return hashlib.sha256(f"{model_sha256}|{n_ctx}|{build}".encode()).hexdigest()[:12]


class PromptCache:
    """Saves and restores slot 0 of one llama.cpp server under names of one key."""

    def __init__(self, post: Post | None, folder: Path, key: str) -> None:
        self.post = post
        self.folder = folder
        self.key = key

    def file_name(self, name: str) -> str:
        return f"{_UNSAFE.sub('_', name)[:64]}-{self.key}.slot"

    def restore(self, name: str) -> bool:
        """Load the slot saved under ``name``; False when there is none or it does not fit."""
        file_name = self.file_name(name)
        if not (self.folder / file_name).is_file():
            return False
        return self._slot_action("restore", file_name) is not None

    def save(self, name: str) -> bool:
        """Save the slot under ``name`` (atomically, replacing older saves of the same name)."""
        file_name = self.file_name(name)
        partial = f"{file_name}.{os.getpid()}.partial"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if self._slot_action("save", partial) is None:
                return False
            os.replace(self.folder / partial, self.folder / file_name)
        except OSError:
            logger.warning("picoflow: could not keep the prompt cache in %s", self.folder, exc_info=True)
            (self.folder / partial).unlink(missing_ok=True)
            return False
        prefix = file_name.removesuffix(f"{self.key}.slot")
        for stale in self.folder.glob(f"{prefix}*.slot"):
            if stale.name != file_name:  # written by another model file or llama.cpp build
                stale.unlink(missing_ok=True)
        return True

    def _slot_action(self, action: str, file_name: str) -> dict[str, Any] | None:
        if self.post is None:
            return None
        try:
            answer = self.post(f"/slots/0?action={action}", {"filename": file_name})
        except LlamaProcessError as exc:
            logger.info("picoflow: llama.cpp could not %s the prompt cache %s: %s", action, file_name, exc)
            return None
        if "error" in answer:
            logger.info("picoflow: llama.cpp could not %s the prompt cache %s: %s", action, file_name, answer)
            return None
        return answer
