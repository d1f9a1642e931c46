"""The suite's own guard (``tests/conftest.py``): no test can reach a model provider, loopback works."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from network_guard import RealNetworkCall, is_local, is_provider_variable, remove_provider_variables
from picoflow import Flow, FlowEngine, Step
from picoflow.models._presets import PRESETS
from picoflow.models.anthropic import AnthropicModel
from picoflow.models.catalog import default_selection
from picoflow.models.google import KEY_VARIABLES, GoogleModel
from picoflow.models.openai import OpenAIClientModel

ROOT = Path(__file__).resolve().parents[1]


class Chat(Step):
    """Chat."""


class ChatFlow(Flow):
    name = "chat"
    steps = [Chat]


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hosts resolved from now on (through the guard, which stays underneath)."""
    hosts: list[str] = []
    guarded = socket.getaddrinfo

    def counting(host: Any, *args: Any, **kwargs: Any) -> Any:
        hosts.append(host.decode() if isinstance(host, bytes) else str(host))
        return guarded(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    return hosts


@pytest.mark.parametrize(
    ("model", "key_variable", "host"),
    [
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY", "api.openai.com"),
        ("openai-chat:gpt-4.1-mini", "OPENAI_API_KEY", "api.openai.com"),
        ("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY", "api.anthropic.com"),
        ("google:gemini-2.5-flash", "GEMINI_API_KEY", "generativelanguage.googleapis.com"),
    ],
)
async def test_a_turn_on_a_real_provider_fails_at_once_with_the_guards_error(
    monkeypatch: pytest.MonkeyPatch, model: str, key_variable: str, host: str
) -> None:
    # A key, so the adapter gets as far as the network; no base URL, so it aims at the provider itself.
    monkeypatch.setenv(key_variable, "sk-test-not-a-real-key")
    lookups = count_lookups(monkeypatch)
    engine = FlowEngine([ChatFlow], model=model)
    try:
        with pytest.raises(RealNetworkCall, match=rf"{re.escape(host)}:443.*model=ScriptedModel"):
            await engine.run("chat", "hello")
    finally:
        await engine.aclose()
    # Asked once: neither the SDK nor picoflow's retry loop saw an error to back off from and retry.
    assert lookups == [host]


async def test_the_guard_is_not_an_exception_so_no_handler_can_swallow_it() -> None:
    assert not issubclass(RealNetworkCall, Exception)
    with pytest.raises(RealNetworkCall, match=r"example\.com:443"):
        await asyncio.get_running_loop().getaddrinfo("example.com", 443)
    with pytest.raises(RealNetworkCall, match=r"93\.184\.215\.14:80"), socket.socket() as sock:
        sock.connect(("93.184.215.14", 80))
    with pytest.raises(RealNetworkCall, match=r"93\.184\.215\.14:443"), socket.socket() as sock:
        sock.connect_ex(("93.184.215.14", 443))
    with pytest.raises(RealNetworkCall, match=r"api\.anthropic\.com"):
        socket.gethostbyname("api.anthropic.com")
    assert not is_local("2606:4700::1") and not is_local("10.0.0.1") and not is_local("localhost.example")
    assert is_local("::1") and is_local("[::1]") and is_local("127.0.0.2") and is_local(b"localhost")


async def test_loopback_connections_still_work() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for host in ("127.0.0.1", "localhost"):
            async with httpx.AsyncClient() as client:
                reply = await client.get(f"http://{host}:{port}/")
            assert reply.text == "ok"
    finally:
        server.close()
        await server.wait_closed()
    assert socket.getaddrinfo("localhost", 80)
    left, right = socket.socketpair()  # unix sockets name no host
    left.close()
    right.close()


def test_picoflow_and_sdk_variables_all_count_as_provider_variables() -> None:
    known = {
        "PICOFLOW_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_COMPATIBLE_API_KEY",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
        "HTTPS_PROXY",
        *KEY_VARIABLES,
        *(name for preset in PRESETS.values() for name in (preset.key_env, preset.base_url_env) if name),
        *(
            model.base_url_env
            for model in (OpenAIClientModel, AnthropicModel, GoogleModel)
            if model.base_url_env
        ),
    }
    assert {name for name in known if not is_provider_variable(name)} == set()
    # The test database and ordinary settings are left alone.
    assert not is_provider_variable("PICOFLOW_TEST_POSTGRES") and not is_provider_variable("HOME")


def test_removing_provider_variables_is_undone_with_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("PICOFLOW_MODEL", "anthropic:claude-haiku-4-5")
    with pytest.MonkeyPatch.context() as patch:
        remove_provider_variables(patch)
        assert "OPENAI_API_KEY" not in os.environ and "PICOFLOW_MODEL" not in os.environ
        assert default_selection().provider == "local"
    assert os.environ["OPENAI_API_KEY"] == "sk-test-not-a-real-key"


def test_no_provider_variable_is_visible_to_a_test() -> None:
    assert [name for name in os.environ if is_provider_variable(name)] == []
    assert default_selection().provider == "local"


def test_a_developers_keys_never_reach_the_tests() -> None:
    # A session started from the shell of a developer with keys and a model chosen.
    shell = {
        **os.environ,
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
        "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
        "GEMINI_API_KEY": "not-a-real-key",
        "PICOFLOW_MODEL": "openai:gpt-4.1-mini",
    }
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            f"{__file__}::test_no_provider_variable_is_visible_to_a_test",
        ],
        env=shell,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
