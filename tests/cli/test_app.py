"""The command tree: the root, the console script's entry point, and what importing it costs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from picoflow.cli import app
from picoflow.cli.loading import needs_extra

from .support import invoke


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.output.startswith("picoflow 0.")


def test_without_a_command_it_lists_the_commands() -> None:
    result = invoke()
    for command in ("serve", "chat", "flows", "graph", "eval", "sessions", "db"):
        assert f"│ {command} " in result.output or f"  {command} " in result.output, result.output


def test_the_console_script_entry_point_imports_without_the_server() -> None:
    # `picoflow = "picoflow.cli:main"`; only `serve` needs the server's extra, so only it imports it.
    probe = (
        "import sys; from picoflow.cli import main, app; "
        "print(callable(main), sorted(m for m in sys.modules if m.startswith('picoflow.server')))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "True []"


def test_an_unknown_command_is_one_usage_error() -> None:
    result = invoke("sesions")
    assert result.exit_code == 2 and "No such command 'sesions'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "missing", "said"),
    [
        (("serve",), ("uvicorn",), "picoflow serve needs the HTTP server: pip install 'picoflow-ai[server]'"),
        (
            ("worker", "--temporal", "127.0.0.1:7233"),
            ("temporalio", "temporalio.client"),
            "picoflow worker needs Temporal's SDK: pip install 'picoflow-ai[temporal]'",
        ),
        (
            ("serve", "--temporal", "127.0.0.1:7233"),
            ("temporalio", "temporalio.client"),
            "--temporal needs Temporal's SDK: pip install 'picoflow-ai[temporal]'",
        ),
    ],
)
def test_a_command_without_its_extra_names_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], missing: tuple[str, ...], said: str
) -> None:
    # None in sys.modules makes an import fail as a package that is not installed does; picoflow's
    # Temporal package is imported anew, as it would be without the SDK.
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [name for name in sys.modules if name.startswith("picoflow.temporal")]:
        monkeypatch.delitem(sys.modules, name)
    result = invoke(*args)
    assert (result.exit_code, result.output) == (1, f"error: {said}\n")


def test_a_missing_module_of_picoflow_itself_is_not_called_a_missing_extra() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"picoflow\.nowhere"), needs_extra("server", "serving"):
        import picoflow.nowhere  # type: ignore[import-not-found]  # noqa: F401


def _commands(group: typer.Typer) -> list[tuple[str, ...]]:
    """Every command's words (``("sessions", "show")``), from the tree the console script runs."""
    import click

    def walk(command: click.Command, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        if isinstance(command, click.Group):
            return [found for name, sub in command.commands.items() for found in walk(sub, (*path, name))]
        return [path]

    return walk(typer.main.get_command(group), ())


def test_help_fits_80_columns_with_whole_lines_and_plain_metavars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    root = invoke("--help").output
    # Each command's line is whole: no description cut off with an ellipsis.
    listed = root.split("Commands:", 1)[1].splitlines()
    assert not any(line.rstrip().endswith("...") for line in listed), root
    assert all(len(line) <= 80 for line in root.splitlines()), root
    for words in _commands(app):
        shown = invoke(*words, "--help").output
        # A metavar names what to type (<n>, <file>), never a Python type or a range.
        assert "list[" not in shown and " range>" not in shown, (words, shown)
