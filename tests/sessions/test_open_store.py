"""``open_store``: choosing the session store by URL or ``$PICOFLOW_STORE``."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import new_session, play_turn

from picoflow.sessions import MemoryStore, PostgresStore, SQLiteStore, open_store, upgrade_store


def test_memory_url() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)


def test_sqlite_urls_follow_the_three_and_four_slash_convention() -> None:
    relative = open_store("sqlite:///data/app.sqlite3")
    absolute = open_store("sqlite:////var/lib/app.sqlite3")
    assert isinstance(relative, SQLiteStore)
    assert isinstance(absolute, SQLiteStore)
    assert relative.path == Path("data/app.sqlite3")
    assert absolute.path == Path("/var/lib/app.sqlite3")


def test_sqlite_url_options() -> None:
    store = open_store("sqlite:///x.sqlite3?synchronous=normal&busy_timeout=2.5")
    assert isinstance(store, SQLiteStore)
    assert store.synchronous == "NORMAL"
    assert store.busy_timeout == 2.5


def test_postgres_url_takes_the_schema_out_for_libpq() -> None:
    store = open_store("postgresql://app:secret@db.internal:6543/chat?schema=tenant_a&sslmode=disable")
    assert isinstance(store, PostgresStore)
    assert store.schema == "tenant_a"
    assert store._url == "postgresql://app:secret@db.internal:6543/chat?sslmode=disable"
    assert "secret" not in repr(store)
    assert isinstance(open_store("postgres://db.internal/chat"), PostgresStore)


def test_postgres_url_takes_the_cancel_wait_out_for_libpq() -> None:
    store = open_store("postgresql://db.internal/chat?cancel_wait=0.5&sslmode=disable&schema=tenant_a")
    assert isinstance(store, PostgresStore)
    assert (store.cancel_wait, store.schema) == (0.5, "tenant_a")
    assert store._url == "postgresql://db.internal/chat?sslmode=disable"
    default = open_store("postgresql://db.internal/chat")
    assert isinstance(default, PostgresStore) and default.cancel_wait == 2.0
    # Stores of two schemas never hear each other's cancels.
    assert store.cancel_channel != default.cancel_channel


async def test_default_is_a_sqlite_file_in_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PICOFLOW_STORE", raising=False)
    store = open_store()
    assert isinstance(store, SQLiteStore)
    session = new_session("default-1")
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"))
    await store.close()
    assert (tmp_path / "picoflow.sqlite3").is_file()


def test_environment_variable_chooses_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOFLOW_STORE", f"sqlite:///{tmp_path}/env.sqlite3")
    store = open_store()
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "env.sqlite3"
    monkeypatch.setenv("PICOFLOW_STORE", "memory://")
    assert isinstance(open_store(), MemoryStore)
    # An explicit URL wins over the environment.
    assert isinstance(open_store(f"sqlite:///{tmp_path}/x.sqlite3"), SQLiteStore)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "not a session store URL"),
        ("picoflow.sqlite3", "not a session store URL"),
        ("mysql://db/app", "unknown session store 'mysql'"),
        ("sqlite://", "names no database file"),
        ("sqlite:///", "names no database file"),
        ("sqlite:///:memory:", "use memory://"),
        ("sqlite://host/app.db", "has no host"),
        ("sqlite:///app.db?journal=off", "unknown SQLite option"),
        ("sqlite:///app.db?synchronous=off", "synchronous must be full or normal"),
        ("sqlite:///app.db?busy_timeout=soon", "busy_timeout must be a number"),
        ("memory://somewhere", "takes no path"),
        ("postgresql://db/app?schema=bad-name", "plain identifier"),
        ("postgresql://db/app?schema=a&schema=b", "more than once"),
        ("postgresql://db/app?cancel_wait=soon", "cancel_wait must be a number"),
        ("postgresql://db/app?cancel_wait=0", "cancel_wait must be a number of seconds above 0"),
        ("postgresql://db/app?cancel_wait=nan", "cancel_wait must be a number of seconds above 0"),
        ("postgresql://db/app?cancel_wait=1&cancel_wait=2", "more than once"),
    ],
)
def test_bad_urls_are_refused_clearly(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(url)


def test_errors_never_show_a_password() -> None:
    with pytest.raises(ValueError, match="unknown session store") as caught:
        open_store("mongodb://admin:hunter2@db/app")
    assert "hunter2" not in str(caught.value)


async def test_upgrade_store_migrates_the_database_the_url_names(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.sqlite3"
    assert await upgrade_store(url) == [1, 2, 3, 4]
    assert await upgrade_store(url) == []
    assert await upgrade_store("memory://") == []
    strict = open_store(url, auto_upgrade=False)
    assert await strict.load("any") is None
    await strict.close()
