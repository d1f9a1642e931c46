"""Prompt files next to the module and strict ``{{KEY}}`` templating."""

from __future__ import annotations

from pathlib import Path

import pytest

from picoflow.prompts import Prompt, PromptError, render

HERE = Path(__file__).parent


def test_file_is_loaded_relative_to_the_calling_module() -> None:
    prompt = Prompt.file("fixtures/greeting.md")
    assert prompt.slots == frozenset({"NAME", "today"})
    assert prompt.render(NAME="Ada", today="2027-07-15") == "Hello Ada, today is 2027-07-15.\n"


def test_values_that_are_not_text_are_written_as_json() -> None:
    assert (
        render("Found: {{ hotels }}", hotels=[{"name": "A", "total": 12.5}])
        == 'Found: [{"name":"A","total":12.5}]'
    )


def test_missing_values_and_missing_files_are_clear_errors() -> None:
    with pytest.raises(PromptError, match="has no value for NAME, today"):
        Prompt.file("fixtures/greeting.md").render()
    with pytest.raises(PromptError, match=r"cannot read prompt file .*nope\.md"):
        Prompt.file("fixtures/nope.md")
    assert str(Prompt.file("greeting.md", anchor=HERE / "fixtures")).startswith("Hello {{NAME}}")
