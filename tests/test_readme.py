"""The README's examples run as written and print what they say they print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
#: Runs an example as a program and then holds it to what tests/conftest.py holds every test to:
#: each ScriptedModel it built played its whole script.
PLAYED_THROUGH = """
import runpy, sys
from picoflow.models import ScriptedModel

built = []
init = ScriptedModel.__init__

def recording_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    built.append(self)

ScriptedModel.__init__ = recording_init
runpy.run_path(sys.argv[1], run_name="__main__")
for model in built:
    model.assert_complete()
"""


def runnable_examples() -> list[str]:
    """The README's complete programs: the Python blocks that run themselves."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    return [block for block in blocks if "asyncio.run(main())" in block]


def test_the_readme_has_its_four_runnable_examples() -> None:
    examples = runnable_examples()
    assert len(examples) == 4
    assert "class Orders(Flow)" in examples[0]
    assert "MCPServer.stdio" in examples[1]
    assert "engine.decide" in examples[2]
    assert "run_steps" in examples[3]


@pytest.mark.parametrize(
    "index", [0, 1, 2, 3], ids=["a-flow-in-one-screen", "mcp-tools", "approvals", "composition"]
)
def test_each_readme_example_runs_and_prints_what_it_claims(index: int, tmp_path: Path) -> None:
    example = runnable_examples()[index]
    claimed = [line.split("# ", 1)[1] for line in example.splitlines() if line.strip().startswith("print(")]
    assert claimed, "an example must say what it prints"
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    runner = tmp_path / "played_through.py"
    runner.write_text(PLAYED_THROUGH, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-W", "error", str(runner), str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == claimed
