"""The README's example runs as written and prints what it says it prints. The examples that were
here before the docs site (MCP tools, approvals, sub-steps) are docs pages now, run by
tests/test_docs.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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


def test_the_readme_has_its_runnable_example() -> None:
    # scripts/wheel-smoke.sh runs the first one from an installed wheel; the docs home page shows it.
    examples = runnable_examples()
    assert len(examples) == 1
    assert "class Orders(Flow)" in examples[0]


def test_the_readme_example_runs_and_prints_what_it_claims(tmp_path: Path) -> None:
    (example,) = runnable_examples()
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
