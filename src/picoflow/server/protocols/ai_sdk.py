"""(being written)"""

from __future__ import annotations

from fastapi import FastAPI

__all__ = ["install"]


def install(app: FastAPI) -> list[str]:
    """Add this protocol's routes to ``app``; returns them as ``METHOD path`` strings."""
    return []
