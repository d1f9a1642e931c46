"""``open_store``: a session store from a URL, so deployments choose storage by configuration.

| URL | store |
|---|---|
| ``memory://`` | ``MemoryStore`` (lost on exit) |
| ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` | ``SQLiteStore`` |
| ``postgresql://user@host:5432/db`` (also ``postgres://``) | ``PostgresStore`` |

SQLite accepts ``?synchronous=full|normal`` and ``?busy_timeout=SECONDS``; PostgreSQL accepts
``?schema=NAME`` and ``?cancel_wait=SECONDS`` (every other query parameter goes to libpq unchanged).
"""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from picoflow.sessions.base import SessionStore
from picoflow.sessions.memory import MemoryStore
from picoflow.sessions.postgres import PostgresStore
from picoflow.sessions.sqlite import SQLiteStore

ENV_VAR = "PICOFLOW_STORE"
DEFAULT_URL = "sqlite:///picoflow.sqlite3"

_EXAMPLES = "memory://, sqlite:///picoflow.sqlite3 or postgresql://user@host:5432/dbname"


def open_store(url: str | None = None, *, auto_upgrade: bool = True) -> SessionStore:
    """The store ``url`` names; without one, ``$PICOFLOW_STORE``, else a SQLite file in the working folder.

    Nothing is connected or created until the store is first used.
    """
    if url is None:
        url = os.environ.get(ENV_VAR) or DEFAULT_URL
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"not a session store URL: {_redact(url)!r}; expected {_EXAMPLES}")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        if url.split("://", 1)[1] not in ("", "/"):
            raise ValueError(f"memory:// takes no path or options, got {url!r}")
        return MemoryStore()
    if scheme == "sqlite":
        return _sqlite(url, auto_upgrade)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url, auto_upgrade)
    raise ValueError(f"unknown session store {scheme!r} in {_redact(url)!r}; expected {_EXAMPLES}")


async def upgrade_store(url: str | None = None) -> list[int]:
    """Bring the database ``url`` names up to the current schema (``picoflow db upgrade``).

    Returns the migration versions applied: empty when it was already current, or for memory://.
    """
    store = open_store(url, auto_upgrade=False)
    try:
        return await store.upgrade() if isinstance(store, SQLiteStore | PostgresStore) else []
    finally:
        await store.close()


def _sqlite(url: str, auto_upgrade: bool) -> SQLiteStore:
    parts = urlsplit(url)
    if parts.netloc:
        raise ValueError(
            f"{url!r}: a SQLite URL has no host; write sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    # Like SQLAlchemy: three slashes and a relative path, four slashes and an absolute one.
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not path or path == ":memory:":
        raise ValueError(f"{url!r} names no database file; use memory:// for sessions kept in memory")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    synchronous = options.pop("synchronous", "full").upper()
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"{url!r}: synchronous must be full or normal")
    try:
        busy_timeout = float(options.pop("busy_timeout", "5"))
    except ValueError:
        raise ValueError(f"{url!r}: busy_timeout must be a number of seconds") from None
    if options:
        raise ValueError(f"{url!r}: unknown SQLite option(s) {', '.join(sorted(options))}")
    return SQLiteStore(
        path,
        auto_upgrade=auto_upgrade,
        busy_timeout=busy_timeout,
        synchronous="FULL" if synchronous == "FULL" else "NORMAL",
    )


def _postgres(url: str, auto_upgrade: bool) -> PostgresStore:
    parts = urlsplit(url)
    options = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: [value for k, value in options if k == key] for key in ("schema", "cancel_wait")}
    for key, values in ours.items():
        if len(values) > 1:
            raise ValueError(f"{_redact(url)!r}: {key} is given more than once")
    cancel_wait = 2.0
    if ours["cancel_wait"]:
        try:
            cancel_wait = float(ours["cancel_wait"][0])
        except ValueError:
            raise ValueError(f"{_redact(url)!r}: cancel_wait must be a number of seconds") from None
    # libpq rejects query parameters it does not know, so ours are taken out. Spaces as %20: libpq
    # reads a "+" literally (``options=-c lock_timeout=200`` must survive).
    passed = urlencode([(k, v) for k, v in options if k not in ours], quote_via=quote)
    libpq = urlunsplit(parts._replace(query=passed))
    schema = ours["schema"][0] if ours["schema"] else None
    return PostgresStore(libpq, schema=schema, auto_upgrade=auto_upgrade, cancel_wait=cancel_wait)


def _redact(url: object) -> str:
    """The URL without its password, fit for an error message."""
    if not isinstance(url, str):
        return str(url)
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<unparsable URL>"
