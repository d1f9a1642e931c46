"""The README's first example runs as written and prints what it says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_example_runs_and_prints_what_it_claims(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    example = blocks[0]
    claimed = [line.split("# ", 1)[1] for line in example.splitlines() if line.strip().startswith("print(")]
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == claimed
