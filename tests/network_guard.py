"""What keeps the test suite from ever reaching a real model provider.

A test that forgets ``model=`` gets the default model, and with ``OPENAI_API_KEY`` in the developer's
shell that is OpenAI: the test would pass or fail on a paid, slow, changing service. ``tests/conftest.py``
applies both halves of the guard for the whole session:

* ``provider_variables`` names every variable through which a provider, its SDK or picoflow's model
  choice could find a key, an endpoint or a model; they are removed, so the default model is the
  embedded one and no adapter holds a real key. A test that needs one sets it with ``monkeypatch``.
* ``block_remote_hosts`` patches the socket layer so that resolving or connecting to any host other
  than this machine raises ``RealNetworkCall``. Loopback stays open: the fake provider servers,
  PostgreSQL, the Temporal dev server and Chromium all live there.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

import pytest

#: Variables starting with these belong to a provider's SDK or to one of picoflow's presets
#: (keys, endpoints, organisations, projects, cloud back-ends such as Vertex, Bedrock or Azure).
PROVIDER_PREFIXES = (
    "OPENAI_",
    "AZURE_OPENAI_",
    "ANTHROPIC_",
    "GEMINI_",
    "GOOGLE_GENAI_",
    "GOOGLE_GEMINI_",
    "GOOGLE_VERTEX_",
    "GOOGLE_CLOUD_",
    "DEEPSEEK_",
    "OPENROUTER_",
    "OLLAMA_",
    "VLLM_",
    "LLAMACPP_",
)
#: Single variables of the same kind, and the one that chooses picoflow's default model.
PROVIDER_NAMES = (
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_BEARER_TOKEN_BEDROCK",
    "PICOFLOW_MODEL",
)
#: httpx (under every SDK) sends requests through these; a proxy would see the fake servers' traffic
#: leave loopback and the guard would blame the wrong request.
PROXY_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def is_provider_variable(name: str) -> bool:
    return name.startswith(PROVIDER_PREFIXES) or name in PROVIDER_NAMES or name in PROXY_NAMES


def provider_variables(environ: Mapping[str, str]) -> list[str]:
    """The names in ``environ`` the test session must not see."""
    return sorted(name for name in environ if is_provider_variable(name))


class RealNetworkCall(BaseException):
    """A test tried to reach a host that is not this machine.

    A ``BaseException`` rather than an ``Exception``: the SDKs' retry loops, httpx's error mapping and
    picoflow's own ``except Exception`` (a model outage becomes a failed turn, retried with backoff)
    would otherwise swallow it, retry it or turn it into an ordinary failed turn that some tests expect.
    """

    def __init__(self, host: str, port: object = None) -> None:
        where = host if port in (None, 0, "") else f"{host}:{port}"
        super().__init__(
            f"a test tried to reach {where}, but tests never use the network. Give the engine, flow or "
            "step a model: model=ScriptedModel([...]) or model=FunctionModel(...) "
            "(without one, the default model is chosen from the environment)"
        )
        self.host = host


def is_local(host: object) -> bool:
    """Whether ``host`` (a name, an address, None for "any") is this machine."""
    if host is None:
        return True
    text = host.decode() if isinstance(host, bytes) else str(host)
    name = text.strip().rstrip(".").lower()
    if name in ("", "localhost") or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    # 0.0.0.0 and :: as a destination are this machine on Linux and macOS.
    return address.is_loopback or address.is_unspecified


def _check_address(sock: socket.socket, address: Any) -> None:
    # Unix sockets (str or bytes paths) and other families name no host.
    if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
        host, port = address[0], address[1]
        if not is_local(host):
            raise RealNetworkCall(str(host), port)


def _guarded_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(self: socket.socket, address: Any) -> Any:
        _check_address(self, address)
        return original(self, address)

    return connect


def _guarded_lookup(original: Callable[..., Any]) -> Callable[..., Any]:
    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_local(host):
            port = args[0] if args else kwargs.get("port")
            raise RealNetworkCall(host.decode() if isinstance(host, bytes) else str(host), port)
        return original(host, *args, **kwargs)

    return lookup


def block_remote_hosts(patch: pytest.MonkeyPatch) -> None:
    """Make every connection to and every lookup of a non-local host raise ``RealNetworkCall``.

    asyncio resolves names with ``socket.getaddrinfo`` (in a worker thread) and connects with the
    socket's own ``connect``, so patching the module and the class covers both the blocking and the
    asynchronous clients.
    """
    patch.setattr(socket.socket, "connect", _guarded_connect(socket.socket.connect))
    patch.setattr(socket.socket, "connect_ex", _guarded_connect(socket.socket.connect_ex))
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex"):
        patch.setattr(socket, name, _guarded_lookup(getattr(socket, name)))


def remove_provider_variables(patch: pytest.MonkeyPatch) -> None:
    for name in provider_variables(os.environ):
        patch.delenv(name)
