"""Files over HTTP: multipart and base64 JSON turns, the statuses of what is refused (413, 415,
422) with nothing stored, a session's files listed and served to their owner only, and a 20 MB
upload refused while the server's memory stays flat."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from picoflow.attachments import AttachmentLimits
from picoflow.server import ServerSettings

from .files_support import files_engine, pdf, png
from .support import client_for, events_of

ROOT = Path(__file__).resolve().parents[2]
KEYS = ServerSettings(api_keys={"key-a": "alice", "key-b": "bob"})
ALICE = {"Authorization": "Bearer key-a"}
BOB = {"Authorization": "Bearer key-b"}
NOTE = b"Total: 118.80 EUR\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_multipart_turn_then_a_json_turn_and_the_files_served_to_their_owner() -> None:
    engine = files_engine()
    image, document = png(), pdf()
    async with client_for(engine, KEYS) as client:
        created = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "here"},
            files=[
                ("attachments", ("scan.png", image, "image/png")),
                ("attachments", ("invoice.pdf", document, "application/pdf")),
            ],
            headers=ALICE,
        )
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]
        assert created.json()["message"] == (
            f"here: scan.png (image/png, {len(image)} bytes), invoice.pdf (application/pdf, "
            f"{len(document)} bytes); all bytes: True"
        )
        # The next turn sends a text file as base64 JSON, and the PNG again (kept once).
        body = {
            "message": "more",
            "attachments": [
                {"name": "note.txt", "media_type": "text/plain", "data": base64.b64encode(NOTE).decode()},
                {"name": "again.png", "media_type": "image/png", "data": base64.b64encode(image).decode()},
            ],
        }
        turn = await client.post(f"/v1/sessions/{session_id}/turns", json=body, headers=ALICE)
        assert turn.status_code == 200, turn.text
        # The request of the second turn carried the first turn's files too (from the store).
        assert turn.json()["message"].endswith("; all bytes: True")
        sizes = await client.post(
            f"/v1/sessions/{session_id}/turns", json={"message": "sizes"}, headers=ALICE
        )
        assert sizes.json()["message"] == "tool says: no files"

        url = f"/v1/sessions/{session_id}/attachments"
        listed = (await client.get(url, headers=ALICE)).json()
        expected = [
            ("scan.png", "image/png", image),
            ("invoice.pdf", "application/pdf", document),
            ("note.txt", "text/plain", NOTE),
        ]
        assert listed == [
            {
                "name": name,
                "media_type": media_type,
                "size": len(data),
                "sha256": sha(data),
                "url": f"{url}/{sha(data)}",
            }
            for name, media_type, data in expected
        ]
        session = (await client.get(f"/v1/sessions/{session_id}", headers=ALICE)).json()
        assert session["attachments"] == listed
        users = [m for m in session["transcript"] if m["role"] == "user"]
        assert [[a["name"] for a in m["attachments"]] for m in users] == [
            ["scan.png", "invoice.pdf"],
            ["note.txt", "again.png"],
            [],
        ]
        for name, media_type, data in expected:
            served = await client.get(f"{url}/{sha(data)}", headers=ALICE)
            assert served.status_code == 200
            assert served.content == data
            assert served.headers["content-type"].split(";")[0] == media_type
            assert served.headers["x-content-type-options"] == "nosniff"
            assert "sandbox" in served.headers["content-security-policy"]
            assert name in served.headers["content-disposition"]
        # Another principal learns nothing: the same 404 as for an unknown session.
        for path in (url, f"{url}/{sha(image)}", f"/v1/sessions/{session_id}"):
            refused = await client.get(path, headers=BOB)
            assert refused.status_code == 404 and refused.json()["error"]["kind"] == "session_not_found"
        unknown = await client.get(f"{url}/{sha(b'never sent')}", headers=ALICE)
        assert unknown.status_code == 404 and unknown.json()["error"]["kind"] == "attachment_not_found"
        assert (await client.get(f"{url}/not-a-hash", headers=ALICE)).status_code == 404


async def test_a_tool_reads_the_files_of_its_turn() -> None:
    image = png("blue")
    async with client_for(files_engine()) as client:
        reply = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "sizes"},
            files={"attachments": ("blue.png", image, "image/png")},
        )
        assert reply.json()["message"] == f"tool says: blue.png={len(image)}"


async def test_a_type_the_bytes_contradict_is_415_and_nothing_is_stored() -> None:
    engine = files_engine()
    async with client_for(engine) as client:
        form = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "hi"},
            files={"attachments": ("scan.png", pdf(), "image/png")},
        )
        assert form.status_code == 415
        assert form.json()["error"]["kind"] == "attachment_refused"
        assert form.json()["error"]["fields"] == [
            {"field": "body.attachments", "problem": form.json()["error"]["message"]}
        ]
        assert "declared image/png but its bytes are application/pdf" in form.json()["error"]["message"]
        zipped = base64.b64encode(b"PK\x03\x04zip").decode()
        body = {
            "message": "hi",
            "attachments": [{"name": "a.zip", "media_type": "application/zip", "data": zipped}],
        }
        as_json = await client.post("/v1/flows/files/sessions", json=body)
        assert as_json.status_code == 415 and "is not accepted" in as_json.json()["error"]["message"]
        created = await client.post("/v1/flows/files/sessions", json={"message": "hi"})
        session_id = created.json()["session_id"]
        refused = await client.post(
            f"/v1/sessions/{session_id}/turns",
            data={"message": "again"},
            files={"attachments": ("x.pdf", png(), "application/pdf")},
        )
        assert refused.status_code == 415
    stored = await engine.store.load(session_id)
    assert stored is not None and stored.turns == 1 and stored.files_sent == 0
    assert await engine.store.list_files(session_id) == []
    assert [info.id for info in await engine.store.list_sessions()] == [session_id]


async def test_files_over_the_limits_are_413_before_they_are_read() -> None:
    limits = AttachmentLimits(max_file_bytes=2000, max_turn_bytes=3000, max_files=2)
    engine = files_engine(limits)
    async with client_for(engine) as client:
        big = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "hi"},
            files={"attachments": ("big.txt", b"x" * 2001, "text/plain")},
        )
        assert big.status_code == 413
        assert big.json()["error"] == {
            "kind": "attachment_too_large",
            "message": "attachment 'big.txt' is larger than 2000 bytes",
            "retryable": False,
            "retry_after": None,
            "fields": [
                {"field": "body.attachments", "problem": "attachment 'big.txt' is larger than 2000 bytes"}
            ],
            "session_id": None,
        }
        together = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "hi"},
            files=[("attachments", (f"{n}.txt", b"y" * 1600, "text/plain")) for n in range(2)],
        )
        assert together.status_code == 413 and "total at most 3000" in together.json()["error"]["message"]
        many = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "hi"},
            files=[("attachments", (f"{n}.txt", b"z", "text/plain")) for n in range(3)],
        )
        assert many.status_code == 413
        assert many.json()["error"]["message"] == "a turn may carry at most 2 files"
        # A body announced larger than a turn's files could make is refused before it is read.
        announced = await client.post(
            "/v1/flows/files/sessions",
            content=b"{}",
            headers={"content-type": "application/json", "content-length": str(10**9)},
        )
        assert announced.status_code == 413 and announced.json()["error"]["kind"] == "body_too_large"
        # Other routes keep the small body limit.
        other = await client.post(
            "/ai/run", content=b"x" * 1_100_000, headers={"content-type": "application/json"}
        )
        assert other.status_code == 413
    assert await engine.store.list_sessions() == []


@pytest.mark.parametrize(
    ("request_kwargs", "field", "problem"),
    [
        (
            {"data": {"stream": "false"}, "files": {"attachments": ("a.txt", b"a", "text/plain")}},
            "body.message",
            "is required",
        ),
        ({"data": {"message": "hi", "config": "{not json"}, "files": []}, "body.config", "is not valid JSON"),
        (
            {"data": {"message": "hi"}, "files": {"photo": ("a.txt", b"a", "text/plain")}},
            "body.photo",
            "only 'attachments' parts may carry files",
        ),
        (
            {"data": {"message": "hi", "attachments": "text"}, "files": []},
            "body.attachments",
            "must be a file part (with a filename)",
        ),
        (
            {"data": {"message": "hi", "stream": "maybe"}, "files": []},
            "body.stream",
            "must be true or false",
        ),
    ],
)
async def test_malformed_multipart_turns_are_422_naming_the_field(
    request_kwargs: dict[str, object], field: str, problem: str
) -> None:
    engine = files_engine()
    async with client_for(engine) as client:
        reply = await client.post("/v1/flows/files/sessions", **_multipart(request_kwargs))
        assert reply.status_code == 422, reply.text
        assert reply.json()["error"]["fields"] == [{"field": field, "problem": problem}]
    assert await engine.store.list_sessions() == []


def _multipart(kwargs: dict[str, object]) -> dict[str, object]:
    """httpx sends a form without files url-encoded; encode it as multipart here so every case
    reaches the multipart reader."""
    data = dict(kwargs.get("data") or {})  # type: ignore[call-overload]
    files = kwargs.get("files")
    if files:
        return {"data": data, "files": files}
    boundary = "picoflow-test-boundary"
    parts = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in data.items()
    )
    return {
        "content": parts + f"--{boundary}--\r\n".encode(),
        "headers": {"content-type": f"multipart/form-data; boundary={boundary}"},
    }


async def test_broken_multipart_and_bad_base64_are_422() -> None:
    engine = files_engine()
    async with client_for(engine) as client:
        broken = await client.post(
            "/v1/flows/files/sessions",
            content=b"--x\r\nnot a header\r\n\r\n",
            headers={"content-type": "multipart/form-data"},
        )
        assert broken.status_code == 422
        assert broken.json()["error"]["fields"][0]["field"] == "body"
        assert "multipart/form-data" in broken.json()["error"]["fields"][0]["problem"]
        body = {
            "message": "hi",
            "attachments": [{"name": "a.png", "media_type": "image/png", "data": "@@not base64@@"}],
        }
        bad = await client.post("/v1/flows/files/sessions", json=body)
        assert bad.status_code == 422
        assert bad.json()["error"]["fields"][0]["field"] == "body.attachments.0.data"
        assert "@@" not in bad.text
    assert await engine.store.list_sessions() == []


async def test_a_streamed_multipart_turn() -> None:
    image = png()
    async with client_for(files_engine()) as client:
        reply = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "look", "stream": "true"},
            files={"attachments": ("s.png", image, "image/png")},
        )
        assert reply.status_code == 200
        events = events_of(reply.text)
        assert events[-1][0] == "result"
        assert events[-1][1]["message"] == f"look: s.png (image/png, {len(image)} bytes); all bytes: True"


# --- a 20 MB upload, watched from outside the server process -----------------------------------------------


@pytest.fixture
def server_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "tests.server.files_support:make_app",
        "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        # Ready when uvicorn says it listens (its own line, read as it comes: no time budget).
        assert process.stderr is not None
        for line in process.stderr:
            if "Uvicorn running on" in line:
                break
        else:
            raise AssertionError("the server process exited before it listened")
        yield process, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stderr.close()


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc")


async def _chunks(boundary: str, size: int) -> AsyncIterator[bytes]:
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="message"\r\n\r\nhi\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="attachments"; filename="big.pdf"\r\n'
        "Content-Type: application/pdf\r\n\r\n%PDF-1.4\n"
    ).encode()
    block = b"0" * 65536
    sent = 0
    while sent < size:
        yield block
        sent += len(block)
    yield f"\r\n--{boundary}--\r\n".encode()


async def test_a_20_mb_upload_is_413_and_the_server_memory_stays_flat(
    server_process: tuple[subprocess.Popen[str], str],
) -> None:
    process, url = server_process
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        small = await client.post(
            "/v1/flows/files/sessions",
            data={"message": "hi"},
            files={"attachments": ("a.pdf", pdf(), "application/pdf")},
        )
        assert small.status_code == 201
        before = _peak_rss_kib(process.pid)
        boundary = "upload-boundary"
        # Streamed with chunked encoding: no Content-Length tells the server the size beforehand.
        reply = await client.post(
            "/v1/flows/files/sessions",
            content=_chunks(boundary, 20 * 1024 * 1024),
            headers={"content-type": f"multipart/form-data; boundary={boundary}"},
        )
        assert reply.status_code == 413, reply.text
        assert reply.json()["error"]["message"] == "attachment 'big.pdf' is larger than 10485760 bytes"
        grown = _peak_rss_kib(process.pid) - before
    print(f"peak RSS growth for a refused 20 MB upload: {grown} KiB")
    # The file waited on disk: the peak grew by a few blocks and the spool's first MiB, not 20 MB.
    assert grown < 6 * 1024, f"the server's peak memory grew by {grown} KiB for a refused 20 MB upload"
