"""The command tree: the root, the console script's entry point, and what importing it costs."""

from __future__ import annotations

import subprocess
import sys

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
