"""Which protocols an application serves: each one whose SDK is installed, and what it lacks for
the others, with nothing of theirs routed."""

from __future__ import annotations

import sys

import httpx
import pytest

from picoflow.server import ServerSettings, create_app
from picoflow.server.protocols import Served

from .conftest import CUSTOMER, KEYS, desk_engine


async def test_a_protocol_whose_sdk_is_missing_is_not_served_and_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes ``import ag_ui`` fail as it does where the package is not installed.
    monkeypatch.setitem(sys.modules, "ag_ui", None)
    monkeypatch.setitem(sys.modules, "a2a", None)
    app = create_app(desk_engine(), settings=ServerSettings(api_keys=KEYS))
    served = app.state.picoflow.protocols
    assert served == [
        Served(
            "OpenAI Chat Completions",
            ("GET /v1/models", "GET /v1/models/{model}", "POST /v1/chat/completions"),
        ),
        Served("Vercel AI SDK UI message stream", ("POST /ai-sdk/{flow}",)),
        Served("AG-UI", missing="ag-ui"),
        Served("A2A", missing="a2a"),
    ]
    assert served[2].describe() == "AG-UI: not served (pip install 'picoflow-ai[ag-ui]')"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=CUSTOMER) as http:
        body = {"threadId": "t", "runId": "r", "messages": []}
        assert (await http.post("/ag-ui/desk", json=body)).status_code == 404
        assert (await http.get("/.well-known/agent-card.json")).status_code == 404
        assert (await http.get("/v1/models")).status_code == 200
