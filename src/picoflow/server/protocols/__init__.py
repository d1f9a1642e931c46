"""The protocols other clients already speak, each a thin adapter over the same turns, keys and
principals as the native API:

* ``ag_ui``: AG-UI (``POST /ag-ui/{flow}``), for CopilotKit and other AG-UI frontends;
* ``ai_sdk``: the Vercel AI SDK UI message stream (``POST /ai-sdk/{flow}``), for ``useChat``;
* ``a2a``: A2A 1.0 over JSON-RPC, with the agent card at ``/.well-known/agent-card.json``;
* ``openai_chat``: OpenAI Chat Completions (``GET /v1/models``, ``POST /v1/chat/completions``).

Each reads a turn's events from one ``Feed`` (``picoflow.server.streams``) and writes them in its
protocol; none decides anything the engine does not. A protocol whose SDK is an extra that is not
installed (``picoflow-ai[ag-ui]``, ``picoflow-ai[a2a]``) is not served, and ``picoflow serve`` says so.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

from fastapi import FastAPI

__all__ = ["PROTOCOLS", "Served", "install"]

logger = logging.getLogger("picoflow.server")

PROTOCOLS: tuple[tuple[str, str, str | None], ...] = (
    ("openai_chat", "OpenAI Chat Completions", None),
    ("ai_sdk", "Vercel AI SDK UI message stream", None),
    ("ag_ui", "AG-UI", "ag_ui"),
    ("a2a", "A2A", "a2a"),
)
"""(module, protocol, the import its optional SDK provides or None)."""


@dataclass(frozen=True, slots=True)
class Served:
    """A protocol the application serves, or could not (``missing``: the extra to install)."""

    protocol: str
    routes: tuple[str, ...] = ()
    missing: str | None = None

    def describe(self) -> str:
        if self.missing is not None:
            return f"{self.protocol}: not served (pip install 'picoflow-ai[{self.missing}]')"
        return f"{self.protocol}: {', '.join(self.routes)}"


def install(app: FastAPI) -> list[Served]:
    """Add every protocol's routes to ``app``; returns what each serves."""
    served: list[Served] = []
    for module_name, protocol, sdk in PROTOCOLS:
        if sdk is not None:
            try:
                importlib.import_module(sdk)
            except ImportError:
                extra = sdk.replace("_", "-")
                logger.info("picoflow.server: %s is not served: install picoflow-ai[%s]", protocol, extra)
                served.append(Served(protocol, missing=extra))
                continue
        module = importlib.import_module(f"picoflow.server.protocols.{module_name}")
        served.append(Served(protocol, tuple(module.install(app))))
    return served
