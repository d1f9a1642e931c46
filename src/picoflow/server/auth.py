"""Who is calling: API keys (or bearer tokens) mapped to a principal, and the open mode for local use.

The principal found here becomes ``Caller.principal``; nothing in a request body can set it. The
engine binds each session to the principal that created it, so a caller can read and continue
only its own sessions.

Keys come from ``PICOFLOW_API_KEYS`` (``"key1=alice,key2=bob"``) and/or a file named by
``PICOFLOW_API_KEYS_FILE``: either JSON (``{"key1": "alice"}``, or ``{"key1": {"principal":
"alice", "visibilities": ["staff"]}}``) or lines of ``key=principal`` (``#`` starts a comment).
Only SHA-256 digests of the keys are kept in memory, so a lookup takes the same time whatever
key is sent and a memory dump does not reveal them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import HTTPConnection

from picoflow.context import Caller

__all__ = [
    "AuthError",
    "Authenticator",
    "Identity",
    "UnsafeBind",
    "check_bind",
    "is_loopback",
    "load_api_keys",
    "parse_api_keys",
]

KEYS_ENV = "PICOFLOW_API_KEYS"
KEYS_FILE_ENV = "PICOFLOW_API_KEYS_FILE"


@dataclass(frozen=True, slots=True)
class Identity:
    """What an API key stands for."""

    principal: str
    visibilities: frozenset[str] = frozenset()


class AuthError(Exception):
    """The request carries no valid credentials (401)."""


class UnsafeBind(Exception):
    """Serving without authentication on an address other machines can reach."""


def _identity(value: Any, where: str) -> Identity:
    if isinstance(value, str) and value.strip():
        return Identity(value.strip())
    if isinstance(value, Mapping) and isinstance(value.get("principal"), str) and value["principal"].strip():
        labels = value.get("visibilities", [])
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ValueError(f"{where}: visibilities must be a list of strings")
        return Identity(value["principal"].strip(), frozenset(labels))
    raise ValueError(f"{where}: each key needs a principal (a non-empty string)")


def parse_api_keys(text: str, *, where: str = KEYS_ENV) -> dict[str, Identity]:
    """Keys from ``key=principal`` pairs separated by commas or new lines, or from a JSON object."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object of key -> principal")
        return {str(key): _identity(value, f"{where}, a key") for key, value in data.items() if key}
    keys: dict[str, Identity] = {}
    for number, raw in enumerate(stripped.replace(",", "\n").splitlines(), start=1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        key, sep, principal = entry.partition("=")
        if not sep or not key.strip() or not principal.strip():
            # Never echo the entry: it holds a secret.
            raise ValueError(f"{where}: entry {number} is not of the form key=principal")
        keys[key.strip()] = Identity(principal.strip())
    return keys


def load_api_keys(environ: Mapping[str, str] | None = None) -> dict[str, Identity]:
    """Keys configured in the environment (``PICOFLOW_API_KEYS`` and ``PICOFLOW_API_KEYS_FILE``)."""
    env = os.environ if environ is None else environ
    keys: dict[str, Identity] = {}
    path = env.get(KEYS_FILE_ENV, "").strip()
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{KEYS_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
        keys.update(parse_api_keys(text, where=path))
    inline = env.get(KEYS_ENV, "").strip()
    if inline:
        keys.update(parse_api_keys(inline))
    return keys


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class Authenticator:
    """Turns a request's credentials into a ``Caller``.

    Credentials are read from ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. In open
    mode a request without credentials is served as ``open_principal``; a request *with* a key is
    still checked, so a wrong key is an error rather than a silent downgrade to anonymous.
    """

    def __init__(
        self, keys: Mapping[str, Identity | str], *, open_mode: bool, open_principal: str | None = "local"
    ) -> None:
        self._keys = {
            _digest(key): identity if isinstance(identity, Identity) else Identity(identity)
            for key, identity in keys.items()
        }
        self.open_mode = open_mode
        self.open_principal = open_principal

    @property
    def has_keys(self) -> bool:
        return bool(self._keys)

    def caller(self, connection: HTTPConnection, config: Mapping[str, Any] | None = None) -> Caller:
        """The caller of ``connection``; raises ``AuthError`` when credentials are missing or wrong."""
        key = _presented_key(connection)
        if key is None:
            if self.open_mode:
                return Caller(principal=self.open_principal, config=dict(config or {}))
            raise AuthError("this server needs an API key: send 'Authorization: Bearer <key>'")
        identity = self._keys.get(_digest(key))
        if identity is None:
            raise AuthError("the API key is not valid")
        return Caller(
            principal=identity.principal, visibilities=identity.visibilities, config=dict(config or {})
        )

    def is_open(self, connection: HTTPConnection) -> bool:
        """Whether ``connection`` is served by the open mode: no key, and the server open."""
        return (
            self.open_mode and not connection.headers.get("authorization") and not _presented_key(connection)
        )


def _presented_key(connection: HTTPConnection) -> str | None:
    header = connection.headers.get("authorization")
    if header:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        # A bare key or another scheme (Basic, ...) is refused outright: accepting a bare key
        # would teach clients a form that proxies and logs treat as an unknown, loggable header.
        raise AuthError("the Authorization header must read 'Bearer <key>' (or send X-API-Key)")
    key = connection.headers.get("x-api-key", "").strip()
    return key or None


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``127.0.0.1``, ``::1``, ``localhost``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, has_keys: bool, open_flag: bool | None) -> bool:
    """Decide whether the server runs in open mode, refusing an unauthenticated public bind.

    ``open_flag`` is the operator's explicit choice (``--open``/``--no-open``); ``None`` means the
    default: open only on a loopback address and only when no keys are configured.
    """
    if open_flag is None:
        open_flag = not has_keys and is_loopback(host)
    if not has_keys and not open_flag:
        if is_loopback(host):
            return False
        raise UnsafeBind(
            f"refusing to serve on {host} without authentication: anyone who can reach this address "
            f"could use the flows and read their sessions. Configure API keys ({KEYS_ENV}='key=principal' "
            f"or {KEYS_FILE_ENV}=path), bind to 127.0.0.1, or pass --open to accept the risk."
        )
    return open_flag
