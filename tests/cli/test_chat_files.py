"""``picoflow chat --attach``: files sent with the first message, ``/attach`` and ``/detach`` in the
chat, and a file that cannot be sent refused before anything starts."""

from __future__ import annotations

from pathlib import Path

from tests.server.files_support import pdf, png

from .support import invoke

FLOW = (
    "--flows",
    "tests.server.files_support:FilesFlow",
    "--model",
    "python:tests.server.files_support:READER",
)


def chat(tmp_path: Path, *args: str, said: str) -> tuple[int, str]:
    result = invoke(
        "chat", "files", "--store", f"sqlite:///{tmp_path / 'chat.sqlite3'}", *FLOW, *args, input=said
    )
    return result.exit_code, result.output


def test_attached_files_go_with_the_first_message_only(tmp_path: Path) -> None:
    invoice = tmp_path / "invoice.pdf"
    invoice.write_bytes(pdf())
    code, out = chat(tmp_path, "--attach", str(invoice), said="here\nand now?\n/quit\n")
    assert code == 0, out
    assert f"attached to your next message: invoice.pdf (application/pdf, {len(pdf()):,} bytes)" in out
    assert f"here: invoice.pdf (application/pdf, {len(pdf())} bytes); all bytes: True" in out
    # The next request shows the first message again, with its file's bytes read from the store.
    assert "and now?: no files; all bytes: True" in out


def test_attach_and_detach_inside_the_chat(tmp_path: Path) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(png())
    missing = tmp_path / "nope.pdf"
    said = f"/attach {missing}\n/attach {photo}\n/detach\nplain\n/attach {photo}\nlook\n/quit\n"
    code, out = chat(tmp_path, said=said)
    assert code == 0, out
    assert f"cannot read {missing}" in out
    assert "no files attached" in out
    assert "plain: no files; all bytes: True" in out
    assert f"look: photo.png (image/png, {len(png())} bytes); all bytes: True" in out


def test_a_file_that_cannot_be_sent_stops_the_chat_before_it_starts(tmp_path: Path) -> None:
    fake = tmp_path / "scan.png"
    fake.write_bytes(pdf())
    code, out = chat(tmp_path, "--attach", str(fake), said="hi\n")
    assert code == 1
    assert "attachment 'scan.png' is declared image/png but its bytes are application/pdf" in out
    code, out = chat(tmp_path, "--attach", str(tmp_path / "absent.pdf"), said="hi\n")
    assert code == 1 and "cannot read" in out and "absent.pdf" in out


def test_sessions_show_lists_the_files_of_each_message(tmp_path: Path) -> None:
    invoice = tmp_path / "invoice.pdf"
    invoice.write_bytes(pdf())
    code, out = chat(tmp_path, "--attach", str(invoice), said="here\n/quit\n")
    assert code == 0, out
    session_id = out.split("picoflow sessions show ")[1].split(")")[0]
    shown = invoke("sessions", "show", session_id, "--store", f"sqlite:///{tmp_path / 'chat.sqlite3'}")
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if "user: here" in line)
    assert line.endswith(f"[files: invoice.pdf (application/pdf, {len(pdf()):,} bytes)]")
