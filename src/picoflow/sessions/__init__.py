"""Session stores."""

from picoflow.session import Session, SessionInfo
from picoflow.sessions.base import SessionStore
from picoflow.sessions.factory import open_store, upgrade_store
from picoflow.sessions.memory import MemoryStore
from picoflow.sessions.postgres import PostgresStore
from picoflow.sessions.sqlite import SQLiteStore

__all__ = [
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "Session",
    "SessionInfo",
    "SessionStore",
    "open_store",
    "upgrade_store",
]
