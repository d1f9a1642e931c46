"""Scenario turns that attach files, and the count of checks passed (a field accuracy) in the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from picoflow.evals import ScenarioError, load_scenarios
from picoflow.evals.report import print_result
from picoflow.evals.runner import run_eval
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel

from .shop import ShopFlow

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
TWO_FILES = """\
name: receipts
flow: shop
turns:
  - user: here are my receipts
    attach: [files/receipt.png, notes.txt]
    expect: {reply_contains: "Got 2 file"}
  - user: and this one
    attach: files/receipt.png
    expect: {reply_contains: ["Got 1 file", "receipt\\\\.png"]}
  - user: no file now
    expect: {reply_contains: "Got 0 file"}
"""


def folder(tmp_path: Path, text: str = TWO_FILES) -> Path:
    (tmp_path / "files").mkdir(exist_ok=True)
    (tmp_path / "files" / "receipt.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("paid in cash\n", encoding="utf-8")
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def counting_files(request: ModelRequest) -> str:
    """Says how many files the latest user message carries, and their names."""
    latest = [message for message in request.messages if message.role == "user"][-1]
    return f"Got {len(latest.attachments)} file(s): {', '.join(ref.name for ref in latest.attachments)}"


def test_attached_paths_are_relative_to_the_scenario_file(tmp_path: Path) -> None:
    [scenario] = load_scenarios(folder(tmp_path))
    assert [turn.attach for turn in scenario.turns] == [
        ["files/receipt.png", "notes.txt"],
        ["files/receipt.png"],
        [],
    ]
    first = scenario.attachments(1)
    assert [(file.name, file.media_type, file.data) for file in first] == [
        ("receipt.png", "image/png", PNG),
        ("notes.txt", "text/plain", b"paid in cash\n"),
    ]
    assert scenario.attachments(3) == []


def test_each_document_of_a_file_finds_its_attachments_beside_the_file(tmp_path: Path) -> None:
    path = folder(tmp_path, TWO_FILES + "---\n" + TWO_FILES.replace("name: receipts", "name: again"))
    scenarios = load_scenarios(path)
    assert [len(scenario.attachments(1)) for scenario in scenarios] == [2, 2]


@pytest.mark.parametrize(
    ("attach", "message"),
    [
        (
            "[missing.pdf]",
            "turn 1 ('here are my receipts'), attach: missing.pdf: no such file (paths are relative to the "
            "scenario file)",
        ),
        ("[archive.zip]", "attach: attachment 'archive.zip': type application/zip is not accepted"),
        (
            "[fake.pdf]",
            "attach: attachment 'fake.pdf' is declared application/pdf but its bytes are image/png",
        ),
        ('[" "]', "attach: an attached file's path cannot be empty"),
    ],
)
def test_a_missing_or_refused_file_is_a_scenario_error_at_load(
    tmp_path: Path, attach: str, message: str
) -> None:
    (tmp_path / "archive.zip").write_bytes(b"PK\x03\x04" + b"\x00" * 20)
    (tmp_path / "fake.pdf").write_bytes(PNG)
    path = folder(tmp_path, TWO_FILES.replace("[files/receipt.png, notes.txt]", attach))
    with pytest.raises(ScenarioError) as caught:
        load_scenarios(path)
    assert str(caught.value).startswith(str(path)) and message in str(caught.value), str(caught.value)


async def test_the_runner_sends_each_turns_files_and_counts_the_checks(tmp_path: Path) -> None:
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        seen.append(request)
        return counting_files(request)

    result = await run_eval(load_scenarios(folder(tmp_path)), [ShopFlow], model=FunctionModel(model), runs=2)
    [scenario] = result.scenarios
    assert scenario.runs_passed == 2
    assert [request.messages[-1].content for request in seen[:3]] == [
        "here are my receipts",
        "and this one",
        "no file now",
    ]
    assert set(seen[0].files.values()) == {PNG, b"paid in cash\n"}
    # Checks: 1 + 2 + 1 reply patterns per run.
    assert scenario.check_counts() == (8, 8) and result.check_counts() == (8, 8)


async def test_checks_passed_are_printed_per_scenario_and_overall(tmp_path: Path) -> None:
    text = TWO_FILES.replace('{reply_contains: "Got 0 file"}', '{reply_contains: ["Got 0 file", "unicorn"]}')
    result = await run_eval(
        load_scenarios(folder(tmp_path, text)), [ShopFlow], model=FunctionModel(counting_files)
    )
    console = Console(record=True, width=120)
    print_result(console, result, min_pass=0.0)
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert "  checks passed   4/5 (80.0%)" in lines
    assert lines[-2:] == ["checks passed: 4/5 (80.0%)", "PASS 0/1 runs passed (0%); minimum 0%"]
