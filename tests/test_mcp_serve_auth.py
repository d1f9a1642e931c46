"""``picoflow mcp serve`` over HTTP with API keys: a request without a valid key is a 401 before
the MCP transport sees it, and each key's turns run as its own principal, so one client can never
continue another's conversation."""

from __future__ import annotations

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent
from tests.server.files_support import FilesFlow, read_files
from tests.server.support import serving_asgi

from picoflow import FlowEngine
from picoflow.models import FunctionModel
from picoflow.server import Identity
from picoflow.server.mcp import mcp_http_app
from picoflow.sessions import MemoryStore

KEYS = {"key-a": "alice", "key-b": Identity("bob")}


async def _call(url: str, key: str, arguments: dict[str, str]) -> tuple[bool, str, dict[str, object]]:
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("files", arguments)
    text = result.content[0]
    assert isinstance(text, TextContent)
    return bool(result.is_error), text.text, dict(result.structured_content or {})


async def test_each_key_is_its_own_principal_and_no_key_is_401() -> None:
    store = MemoryStore()
    engine = FlowEngine([FilesFlow], store=store, model=FunctionModel(read_files))
    app = mcp_http_app(engine, api_keys=KEYS)
    async with serving_asgi(app) as base:
        url = f"{base}/mcp"
        async with httpx.AsyncClient() as plain:
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            refused = await plain.post(url, json=initialize)
            wrong = await plain.post(url, json=initialize, headers={"Authorization": "Bearer nope"})
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == 'Bearer realm="picoflow"'
        assert refused.json() == {
            "error": {
                "kind": "unauthorized",
                "message": "this server needs an API key: send 'Authorization: Bearer <key>'",
            }
        }
        assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "the API key is not valid"

        failed, reply, answer = await _call(url, "key-a", {"message": "hello"})
        assert (failed, reply) == (False, "hello: no files; all bytes: True")
        session_id = str(answer["session_id"])
        # Bob holds Alice's session id, and still cannot continue her conversation.
        failed, reply, _ = await _call(url, "key-b", {"message": "mine now", "session_id": session_id})
        assert failed and reply == "No such session. (session_not_found)"
        failed, reply, _ = await _call(url, "key-a", {"message": "again", "session_id": session_id})
        assert (failed, reply) == (False, "again: no files; all bytes: True")
    stored = await store.load(session_id)
    assert stored is not None and stored.principal == "alice" and stored.turns == 2
    await engine.aclose()
