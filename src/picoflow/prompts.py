"""Prompt helpers: load a prompt file that sits next to your module, and fill ``{{KEY}}`` slots.

    EXPLORE = Prompt.file("explore.md")          # at module level: read once, cached
    ...
    def prompt(self) -> str:
        return EXPLORE.render(today=self.flow.today, criteria=self.state.get("criteria"))

Rendering is strict: a slot without a value is an error, not silently left in the text. Values
that are not strings are written as JSON.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic_core import to_json

_SLOT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class PromptError(ValueError):
    """A prompt file is missing or a template slot has no value."""


@lru_cache(maxsize=256)
def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptError(f"cannot read prompt file {path}: {exc.strerror}") from exc


class Prompt:
    """A prompt template with ``{{KEY}}`` slots."""

    __slots__ = ("slots", "source", "text")

    def __init__(self, text: str, *, source: str = "<string>") -> None:
        self.text = text
        self.source = source
        self.slots = frozenset(match.group(1) for match in _SLOT.finditer(text))

    @classmethod
    def file(cls, relative: str | Path, *, anchor: str | Path | None = None) -> Prompt:
        """Load ``relative`` from the directory of the calling module (or of ``anchor``)."""
        if anchor is None:
            caller = sys._getframe(1).f_globals.get("__file__")
            if caller is None:
                raise PromptError("Prompt.file() needs anchor= when called outside a module file")
            anchor = caller
        base = Path(anchor)
        directory = base if base.is_dir() else base.parent
        path = (directory / relative).resolve()
        return cls(_read(path), source=str(path))

    def render(self, values: dict[str, Any] | None = None, /, **more: Any) -> str:
        """Fill every slot. Raises ``PromptError`` naming the slots left without a value."""
        merged = {**(values or {}), **more}
        missing = sorted(self.slots - merged.keys())
        if missing:
            raise PromptError(f"prompt {self.source} has no value for {', '.join(missing)}")

        def fill(match: re.Match[str]) -> str:
            value = merged[match.group(1)]
            return value if isinstance(value, str) else to_json(value).decode()

        return _SLOT.sub(fill, self.text)

    def __str__(self) -> str:
        return self.text


def render(template: str, values: dict[str, Any] | None = None, /, **more: Any) -> str:
    """Fill ``{{KEY}}`` slots of a template string."""
    return Prompt(template).render(values, **more)
