"""The docs site: every code block of every page is run here or marked as not runnable, the programs
print what they say they print, the API reference covers the public names, and the site builds
with ``mkdocs build --strict``.

The conventions (docs/contributing.md): a ```python block whose last line is
``asyncio.run(main())`` is a program and runs; a comment on the line right above a block says what
else it is:

* ``<!-- run -->``: run it too (a python block as a program, a bash block as a shell script);
* ``<!-- file: NAME -->``: written as NAME into the folder where the page's later blocks run;
* ``<!-- output -->``: what the run block before it prints (a line ``you › TEXT`` is typed in);
* ``<!-- not run: REASON -->``: not runnable here, and why.

Blocks run offline in a fresh folder holding the page's files and a ``src`` link to the repository's.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TESTS = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>[a-z ]+?)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")
PROGRAM_END = "asyncio.run(main())"
USER_LINE = "you › "

#: Runs a program as tests/test_readme.py runs the README's, and offline: provider keys are gone and
#: any connection beyond this machine fails (tests/network_guard.py); then every ScriptedModel the
#: program built must have played its whole script.
RUNNER = """
import runpy, sys
import pytest
sys.path.insert(0, sys.argv[1])
from network_guard import block_remote_hosts, remove_provider_variables
from picoflow.models import ScriptedModel

patch = pytest.MonkeyPatch()
remove_provider_variables(patch)
block_remote_hosts(patch)
built = []
init = ScriptedModel.__init__

def recording_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    built.append(self)

ScriptedModel.__init__ = recording_init
sys.argv = sys.argv[:1]
runpy.run_path("program.py", run_name="__main__")
for model in built:
    model.assert_complete()
"""


@dataclass(frozen=True, slots=True)
class Block:
    page: str
    line: int
    language: str
    code: str
    marker: str | None
    """The marker's kind: run, file, output, not run (None: unmarked)."""
    argument: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_program(self) -> bool:
        lines = self.code.strip().splitlines()
        return self.language == "python" and self.marker is None and bool(lines) and lines[-1] == PROGRAM_END

    @property
    def runs(self) -> bool:
        return self.is_program or self.marker == "run"


def page_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order, each with the marker on the line above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(DOCS).as_posix()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        fence, info = opened["fence"], opened["info"].strip()
        end = index + 1
        while end < len(lines) and not re.match(rf"^\s*{re.escape(fence)}\s*$", lines[end]):
            end += 1
        assert end < len(lines), f"{page}:{index + 1}: a code block that is never closed"
        above = MARKER.match(lines[index - 1]) if index else None
        blocks.append(
            Block(
                page=page,
                line=index + 1,
                language=info.split()[0] if info else "",
                code="\n".join(line.removeprefix(opened["indent"]) for line in lines[index + 1 : end]) + "\n",
                marker=above["kind"] if above else None,
                argument=(above["arg"] or "") if above else "",
            )
        )
        index = end + 1
    return blocks


PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = [block for page in PAGES for block in page_blocks(page)]
RUN = [block for block in BLOCKS if block.runs]


def test_every_block_is_run_or_marked_not_runnable() -> None:
    problems = []
    for index, block in enumerate(BLOCKS):
        following = BLOCKS[index + 1 :]
        if block.marker is None and not block.is_program:
            problems.append(f"{block.where}: neither a program nor marked (see docs/contributing.md)")
        elif block.marker not in (None, "run", "file", "output", "not run"):
            problems.append(f"{block.where}: unknown marker {block.marker!r}")
        elif block.marker == "not run" and not block.argument:
            problems.append(f"{block.where}: <!-- not run: ... --> says why")
        elif block.marker == "run" and block.language not in ("python", "bash"):
            problems.append(f"{block.where}: only python and bash blocks run")
        elif block.marker == "file" and not any(
            later.page == block.page and later.runs for later in following
        ):
            problems.append(f"{block.where}: no block of the page runs after the file {block.argument}")
        elif block.marker == "output" and not (
            index and BLOCKS[index - 1].runs and BLOCKS[index - 1].page == block.page
        ):
            problems.append(f"{block.where}: an output block follows the block that prints it")
    assert problems == []
    assert len(RUN) >= 20, "the docs run their examples"


def expected_output(block: Block) -> Block | None:
    """The ``<!-- output -->`` block right after ``block``, if any."""
    index = BLOCKS.index(block)
    after = BLOCKS[index + 1] if index + 1 < len(BLOCKS) else None
    return after if after is not None and after.marker == "output" and after.page == block.page else None


def folder_for(block: Block, tmp_path: Path) -> Path:
    """A fresh folder holding the files the page declares before ``block``, and ``src/``: the
    repository's (``picoflow eval src/picoflow_demos/scenarios/...`` runs as written)."""
    (tmp_path / "src").symlink_to(ROOT / "src", target_is_directory=True)
    for other in BLOCKS:
        if other.page == block.page and other.marker == "file" and other.line < block.line:
            target = tmp_path / other.argument
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(other.code, encoding="utf-8")
    return tmp_path


def offline_environment() -> dict[str, str]:
    sys.path.insert(0, str(TESTS))
    try:
        from network_guard import is_provider_variable
    finally:
        sys.path.remove(str(TESTS))
    environment = {name: value for name, value in os.environ.items() if not is_provider_variable(name)}
    environment["PATH"] = f"{BIN}{os.pathsep}{environment.get('PATH', '')}"
    environment["COLUMNS"] = "100"  # what `picoflow chat` prints is wrapped at a known width
    environment["PICOFLOW_STORE"] = "memory://"
    return environment


def holds_in_order(printed: str, expected: list[str]) -> list[str]:
    """The expected lines missing from what was printed, taken in order, spaces aside."""
    text, at, missing = " ".join(printed.split()), 0, []
    for line in expected:
        found = text.find(" ".join(line.split()), at)
        if found < 0:
            missing.append(line)
        else:
            at = found + len(" ".join(line.split()))
    return missing


@pytest.mark.parametrize("block", RUN, ids=[block.where for block in RUN])
def test_each_run_block_runs_and_prints_what_it_says(block: Block, tmp_path: Path) -> None:
    folder = folder_for(block, tmp_path)
    output = expected_output(block)
    shown = output.code.splitlines() if output else []
    typed = [line.removeprefix(USER_LINE) for line in shown if line.startswith(USER_LINE)]
    if block.language == "python":
        (folder / "program.py").write_text(block.code, encoding="utf-8")
        (folder / "runner.py").write_text(RUNNER, encoding="utf-8")
        command = [sys.executable, "-W", "error", "runner.py", str(TESTS)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    run = subprocess.run(
        command,
        cwd=folder,
        env=offline_environment(),
        input="".join(f"{line}\n" for line in typed),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr or run.stdout
    # A print's comment says what it prints; a block followed by an output block may say it there.
    claimed = [
        line.split("# ", 1)[1]
        for line in block.code.splitlines()
        if line.strip().startswith("print(") and "# " in line
    ]
    if block.language == "python" and claimed:
        assert run.stdout.splitlines() == claimed
    if output is not None:
        printed = [line for line in shown if line.strip() and not line.startswith(USER_LINE)]
        assert holds_in_order(run.stdout, printed) == [], run.stdout
    assert claimed or output is not None, f"{block.where}: a run block says what it prints"


# --- the site ------------------------------------------------------------------------------------

#: The modules whose public names (``__all__``) the API reference shows, with ``picoflow`` itself.
MODULES = [
    "picoflow",
    "picoflow.models",
    "picoflow.sessions",
    "picoflow.engine",
    "picoflow.slots",
    "picoflow.approvals",
    "picoflow.handoffs",
    "picoflow.attachments",
    "picoflow.mcp",
    "picoflow.server",
    "picoflow.server.mcp",
    "picoflow.temporal",
    "picoflow.timeline",
    "picoflow.replay",
    "picoflow.versions",
    "picoflow.evals",
    "picoflow.testing",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with ``mkdocs build --strict`` (a few seconds)."""
    mkdocs = shutil.which("mkdocs", path=str(BIN))
    assert mkdocs, "mkdocs is installed with picoflow-ai[dev]"
    built = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(built)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    assert [line for line in build.stderr.splitlines() if line.startswith("WARNING")] == []
    return built


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    for page in PAGES:
        built = page.relative_to(DOCS).with_suffix("")
        built = built.parent if built.name == "index" else built
        assert (site / built / "index.html").is_file(), f"{page.name} was not built"
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "In that turn the model first proposes" in home, (
        "the home page includes the README's first example"
    )


def public_names(module_name: str) -> list[str]:
    """The classes and functions a module's ``__all__`` exports (constants carry no docstring)."""
    module = importlib.import_module(module_name)
    return [
        name
        for name in module.__all__
        if callable(getattr(module, name)) and (getattr(module, name).__doc__ or "").strip()
    ]


def resolve(identifier: str) -> object:
    """The object an anchor of the reference names (the longest importable module, then attributes),
    or None."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name, None)
        return value
    return None


def test_the_reference_shows_every_public_name(site: Path) -> None:
    anchors = {
        anchor
        for page in (site / "reference").rglob("index.html")
        for anchor in re.findall(r'id="(picoflow[\w.]*)"', page.read_text(encoding="utf-8"))
    }
    by_name: dict[str, list[str]] = {}
    for anchor in anchors:
        by_name.setdefault(anchor.rsplit(".", 1)[-1], []).append(anchor)

    def shown(module: str, name: str) -> bool:
        value = getattr(importlib.import_module(module), name)
        return any(resolve(anchor) is value for anchor in by_name.get(name, []))

    missing = {
        module: [name for name in public_names(module) if not shown(module, name)] for module in MODULES
    }
    assert {module: names for module, names in missing.items() if names} == {}
