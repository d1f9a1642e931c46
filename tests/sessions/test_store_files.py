"""A session's files, checked on every store: memory, SQLite and PostgreSQL.

Files are kept beside the session document, once per session by SHA-256 (the first name wins), in
the order first stored, written in the save's transaction or not at all, and never handed to
another session.
"""

from __future__ import annotations

import base64
import hashlib
import random
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import Appended, Backend, append, new_session, play_turn

from picoflow import Flow, FlowEngine, Step
from picoflow.attachments import Attachment, AttachmentRef
from picoflow.exceptions import SessionConflict
from picoflow.messages import Message, ModelRequest
from picoflow.models import FunctionModel
from picoflow.session import Session
from picoflow.sessions import SessionStore
from picoflow.sessions._sql import SQLStore

PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def text(content: str, name: str | None = None) -> Attachment:
    return Attachment(name or f"{content}.txt", "text/plain", content.encode())


async def created(store: SessionStore, session_id: str, files: list[Attachment] | None = None) -> Session:
    session = new_session(session_id)
    await store.save(session, expected_revision=None, appended=play_turn(session, "t1"), files=files or [])
    return session


async def saved_turn(store: SessionStore, session: Session, files: list[Attachment]) -> int:
    appended = play_turn(session, f"t{session.turns + 1}")
    return await store.save(session, expected_revision=session.revision, appended=appended, files=files)


def file_count(backend: Backend, session_id: str | None = None) -> int:
    """Rows in the files table (of one session, or all): what no ``SessionStore`` call shows."""
    if session_id is None:
        return int(backend.sql("SELECT count(*) FROM {p}picoflow_files")[0][0])
    rows = backend.sql("SELECT count(*) FROM {p}picoflow_files WHERE session_id = ?", (session_id,))
    return int(rows[0][0])


# --- round trips ------------------------------------------------------------------------------


async def test_files_come_back_byte_identical(store: SessionStore) -> None:
    every_byte = bytes(range(256)) * 4
    files = [
        Attachment("bytes.bin", "application/octet-stream", every_byte),
        Attachment("nul.bin", "application/octet-stream", b"\x00" * 1000),
        Attachment("empty.bin", "application/octet-stream", b""),
        Attachment("photo 😀 é.png", "image/png", b"\x89PNG\r\n\x1a\n" + every_byte),
    ]
    session = await created(store, "rt-1", files)

    assert session.revision == 1
    assert await store.list_files("rt-1") == [f.ref() for f in files]
    assert await store.load_files("rt-1", [f.sha256 for f in files]) == {f.sha256: f.data for f in files}
    assert await store.load_files("rt-1", {files[2].sha256}) == {files[2].sha256: b""}


async def test_a_five_megabyte_file_round_trips(store: SessionStore) -> None:
    big = Attachment("scan.pdf", "application/pdf", random.Random(5).randbytes(5 * 1024 * 1024 + 17))
    session = await created(store, "big-1")
    await saved_turn(store, session, [big])

    assert await store.list_files("big-1") == [
        AttachmentRef("scan.pdf", "application/pdf", big.size, big.sha256)
    ]
    loaded = await store.load_files("big-1", [big.sha256])
    assert loaded == {big.sha256: big.data}
    assert hashlib.sha256(loaded[big.sha256]).hexdigest() == big.sha256


def payloads() -> st.SearchStrategy[bytes]:
    """Arbitrary bytes: small ones shrinkable by hypothesis, large ones (up to 400 KB) from a seed."""
    seeded = st.builds(
        lambda size, seed: random.Random(seed).randbytes(size),
        st.integers(min_value=0, max_value=400_000),
        st.integers(min_value=0, max_value=2**32),
    )
    return st.one_of(st.binary(max_size=4096), seeded)


# Each example saves a session of its own, so sharing the test's store between examples is sound.
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(payloads(), min_size=1, max_size=3), min_size=1, max_size=3))
async def test_any_bytes_round_trip(store: SessionStore, batches: list[list[bytes]]) -> None:
    session_id = f"prop-{uuid.uuid4().hex}"
    session = new_session(session_id)
    expected: dict[str, AttachmentRef] = {}
    for turn, batch in enumerate(batches):
        files = [Attachment(f"f{turn}-{i}", "application/octet-stream", data) for i, data in enumerate(batch)]
        for file in files:
            expected.setdefault(file.sha256, file.ref())
        revision = None if turn == 0 else session.revision
        await store.save(
            session, expected_revision=revision, appended=play_turn(session, f"t{turn}"), files=files
        )

    assert await store.list_files(session_id) == list(expected.values())
    everything = {data for batch in batches for data in batch}
    wanted = [hashlib.sha256(data).hexdigest() for data in everything]
    assert await store.load_files(session_id, wanted) == {
        hashlib.sha256(d).hexdigest(): d for d in everything
    }


# --- once per hash, in the order first stored -------------------------------------------------


async def test_each_file_is_stored_once_under_its_first_name_in_the_order_first_stored(
    backend: Backend,
) -> None:
    store = backend.open()
    a, b, c, d = text("alpha", "z-alpha.txt"), text("bravo", "b.txt"), text("charlie"), text("delta", "a.txt")
    session = await created(store, "once-1", [a, text("alpha", "alpha-again.txt"), b])
    await saved_turn(store, session, [text("bravo", "renamed.txt"), d, text("alpha", "third.txt")])
    await saved_turn(store, session, [c, text("delta", "d2.txt"), text("charlie", "charlie-2.txt")])

    expected = [a.ref(), b.ref(), d.ref(), c.ref()]
    # Neither by name nor by hash: only (revision, ordinal) gives this order.
    assert [ref.name for ref in expected] == ["z-alpha.txt", "b.txt", "a.txt", "charlie.txt"]
    assert [ref.sha256 for ref in expected] != sorted(ref.sha256 for ref in expected)
    assert await store.list_files("once-1") == expected
    hashes = [f.sha256 for f in (a, b, c, d)]
    assert await store.load_files("once-1", hashes) == {f.sha256: f.data for f in (a, b, c, d)}
    if backend.kind != "memory":
        assert file_count(backend, "once-1") == 4


async def test_a_file_repeated_within_one_save_keeps_its_first_name(store: SessionStore) -> None:
    twice, other = text("same", "first.txt"), text("other")
    await created(store, "dup-1", [twice, text("same", "second.txt"), other, text("same", "third.txt")])

    assert await store.list_files("dup-1") == [twice.ref(), other.ref()]


async def test_a_save_without_files_keeps_those_stored(store: SessionStore) -> None:
    kept = text("kept")
    session = await created(store, "none-1", [kept])
    await saved_turn(store, session, [])

    assert await store.list_files("none-1") == [kept.ref()]
    assert await store.load_files("none-1", [kept.sha256]) == {kept.sha256: kept.data}


# --- per session ------------------------------------------------------------------------------


async def test_files_belong_to_their_session(store: SessionStore) -> None:
    secret, shared = text("only for a"), text("both")
    await created(store, "iso-a", [secret, shared])
    await created(store, "iso-b", [text("both", "b-name.txt")])

    assert await store.load_files("iso-b", [secret.sha256, shared.sha256]) == {shared.sha256: shared.data}
    assert await store.list_files("iso-b") == [replace(shared.ref(), name="b-name.txt")]
    assert await store.list_files("iso-a") == [secret.ref(), shared.ref()]
    assert await store.list_files("unknown") == []
    assert await store.load_files("unknown", [secret.sha256]) == {}
    assert await store.load_files("iso-", [secret.sha256]) == {}


async def test_delete_removes_the_files_of_that_session_only(backend: Backend) -> None:
    store = backend.open()
    mine, shared = text("mine"), text("shared")
    await created(store, "del-a", [mine, shared])
    await created(store, "del-b", [shared])

    assert await store.delete("del-a") is True
    assert await store.list_files("del-a") == []
    assert await store.load_files("del-a", [mine.sha256, shared.sha256]) == {}
    assert await store.load_files("del-b", [shared.sha256]) == {shared.sha256: shared.data}
    # The id again: a new session starts without the old one's files.
    await created(store, "del-a")
    assert await store.list_files("del-a") == []
    if backend.kind != "memory":
        assert file_count(backend, "del-a") == 0
        assert file_count(backend) == 1


# --- failed saves write nothing ---------------------------------------------------------------

FRESH = text("fresh bytes")
NOT_BYTES: Any = bytearray(b"x")
BadSave = Callable[[SessionStore, Session], Awaitable[int]]


def saving(
    files: Any, *, expected: Callable[[Session], int | None] = lambda s: s.revision, seq: int | None = None
) -> BadSave:
    """A save of the next turn with ``files``, ``expected`` as the revision, a message at ``seq``."""

    async def save(store: SessionStore, session: Session) -> int:
        appended = play_turn(session, "t2")
        if seq is not None:
            appended[0] = (appended[0][0], replace(appended[0][1], seq=seq))
        return await store.save(session, expected_revision=expected(session), appended=appended, files=files)

    return save


FAILED_SAVES = [
    pytest.param(saving([FRESH], expected=lambda s: s.revision + 1), SessionConflict, id="revision-moved"),
    pytest.param(saving([FRESH], expected=lambda s: 0), SessionConflict, id="revision-stale"),
    pytest.param(saving([FRESH], expected=lambda s: None), SessionConflict, id="exists-already"),
    pytest.param(saving([FRESH], seq=0), ValueError, id="seq-reused"),
    pytest.param(saving([FRESH, b"raw bytes"]), TypeError, id="not-an-attachment"),
    pytest.param(saving([FRESH, Attachment("a", "text/plain", NOT_BYTES)]), TypeError, id="bytearray"),
    pytest.param(saving(FRESH.sha256), TypeError, id="a-string"),
    pytest.param(saving(None), TypeError, id="none"),
    pytest.param(saving(""), TypeError, id="empty-string"),
    pytest.param(saving([FRESH, Attachment("nul\x00.txt", "text/plain", b"x")]), ValueError, id="nul-name"),
    pytest.param(saving([FRESH, Attachment("", "text/plain", b"x")]), ValueError, id="empty-name"),
    pytest.param(saving([FRESH, Attachment("t.txt", "text/\x00", b"x")]), ValueError, id="nul-type"),
]


@pytest.mark.parametrize(("bad_save", "error"), FAILED_SAVES)
async def test_a_failed_save_writes_no_file_and_changes_nothing(
    backend: Backend, bad_save: BadSave, error: type[Exception]
) -> None:
    store = backend.open()
    kept = text("kept")
    await created(store, "fail-1", [kept])
    before = await store.load("fail-1")
    transcript = await store.transcript("fail-1")
    assert before is not None
    session = before.copy()

    with pytest.raises(error):
        await bad_save(store, session)

    assert session.revision == before.revision
    assert await store.load("fail-1") == before
    assert await store.transcript("fail-1") == transcript
    assert await store.list_files("fail-1") == [kept.ref()]
    assert await store.load_files("fail-1", [FRESH.sha256]) == {}
    if backend.kind != "memory":
        assert file_count(backend) == 1
    # The store still takes the turn once it is right.
    assert await saved_turn(store, session, [FRESH]) == 2
    assert await store.list_files("fail-1") == [kept.ref(), FRESH.ref()]


# --- hashes asked for -------------------------------------------------------------------------


async def test_junk_hashes_are_simply_absent_and_never_reach_the_database(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = text("kept")
    await created(store, "junk-1", [kept])
    sha = kept.sha256
    junk = [sha.upper(), sha[:12], "g" * 64, sha + "0", "", f" {sha}", f"{sha}\n", "\x00" * 64, "\ud800"]

    if isinstance(store, SQLStore):

        async def touched(query: str, params: object) -> list[Any]:
            raise AssertionError(f"load_files queried the database: {query}")

        monkeypatch.setattr(store, "_fetch", touched)
    assert await store.load_files("junk-1", junk) == {}
    assert await store.load_files("junk-1", ()) == {}
    monkeypatch.undo()

    assert await store.load_files("junk-1", [*junk, sha, sha]) == {sha: kept.data}
    assert await store.load_files("junk-1", {sha: None}.keys()) == {sha: kept.data}


@pytest.mark.parametrize(
    "hashes",
    [
        pytest.param("0" * 64, id="str"),
        pytest.param(b"0" * 64, id="bytes"),
        pytest.param([hashlib.sha256(b"kept").digest()], id="bytes-inside"),
        pytest.param([None], id="none-inside"),
    ],
)
async def test_hashes_that_are_not_a_collection_of_strings_are_a_type_error(
    store: SessionStore, hashes: Collection[str]
) -> None:
    await created(store, "type-1", [text("kept")])
    with pytest.raises(TypeError):
        await store.load_files("type-1", hashes)


# --- beside the document, never inside it -----------------------------------------------------


async def test_the_bytes_are_kept_beside_the_session_document(sql_backend: Backend) -> None:
    store = sql_backend.open()
    payload = b"PAYLOAD-" + b"only-in-the-file-" * 40
    file = Attachment("note.txt", "text/plain", payload)
    session = new_session("beside-1")
    appended: Appended = []
    append(session, "ask", replace(Message.user("see the note"), attachments=(file.ref(),)), appended)
    await store.save(session, expected_revision=None, appended=appended, files=[file])
    await saved_turn(store, session, [file])

    [(document,)] = sql_backend.sql(
        "SELECT CAST(document AS TEXT) FROM {p}picoflow_sessions WHERE id = ?", ("beside-1",)
    )
    bodies = sql_backend.sql(
        "SELECT CAST(body AS TEXT) FROM {p}picoflow_messages WHERE session_id = ?", ("beside-1",)
    )
    encodings = [payload.decode(), base64.b64encode(payload).decode(), payload.hex(), "PAYLOAD-"]
    for stored in [document, *(body for (body,) in bodies)]:
        assert [form for form in encodings if form in stored] == []
    assert '"revision":2' in document.replace(" ", "")
    rows = sql_backend.sql("SELECT name, data FROM {p}picoflow_files WHERE session_id = ?", ("beside-1",))
    assert [(name, bytes(data)) for name, data in rows] == [("note.txt", payload)]
    transcript = await store.transcript("beside-1")
    assert transcript[0].attachments == (file.ref(),)


# --- through the engine -----------------------------------------------------------------------


class Reader(Step):
    """Read what the user sends."""


class Reading(Flow):
    name = "reading"
    steps = [Reader]


def recording() -> tuple[FunctionModel, list[ModelRequest]]:
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> str:
        requests.append(request)
        return "Read."

    return FunctionModel(answer), requests


async def test_a_later_turn_by_a_new_engine_sends_the_stored_file_again(backend: Backend) -> None:
    note = Attachment.from_bytes(PDF, "application/pdf", "note.pdf")
    model, requests = recording()
    first = await FlowEngine([Reading], model=model, store=backend.open()).run(
        "reading", "here it is", attachments=[note]
    )
    assert (first.ok, first.message) == (True, "Read.")
    assert [request.files for request in requests] == [{note.sha256: PDF}]
    session_id = first.session_id or ""

    # Another engine, with another store on the same database (memory has just the one store):
    # the bytes can only come from the store.
    store = backend.open()
    model, requests = recording()
    second = await FlowEngine([Reading], model=model, store=store).run("reading", "again?", session_id)
    assert (second.ok, second.message) == (True, "Read.")
    assert [request.files for request in requests] == [{note.sha256: PDF}]
    assert [m.attachments for m in requests[0].messages] == [(note.ref(),), (), ()]
    assert await store.list_files(session_id) == [note.ref()]


async def test_a_refused_file_stores_neither_session_nor_file(backend: Backend) -> None:
    store = backend.open()
    model, requests = recording()
    engine = FlowEngine([Reading], model=model, store=store)
    lying = Attachment.from_bytes(PDF, "image/png", "scan.png")
    good = Attachment.from_bytes(b"fine text\n", "text/plain", "fine.txt")

    refused = await engine.run("reading", "new", attachments=[good, lying])
    assert refused.error is not None
    assert (refused.error.status, refused.session_id) == (415, None)
    assert await store.find_ids("") == []

    first = await engine.run("reading", "hello")
    session_id = first.session_id or ""
    before = await store.load(session_id)
    again = await engine.run("reading", "and this", session_id, attachments=[good, lying])
    assert again.error is not None and again.error.status == 415
    assert await store.load(session_id) == before
    assert await store.list_files(session_id) == []
    assert await store.load_files(session_id, [good.sha256, lying.sha256]) == {}
    assert len(requests) == 1  # only the turn without files reached the model
    if backend.kind != "memory":
        assert file_count(backend) == 0
