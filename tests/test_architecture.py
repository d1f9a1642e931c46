"""The shape of the source tree, checked on every run: each module belongs to a layer and imports
only its own layer and those below it, a private module (its name starts with ``_``) is imported
only from inside the package that holds it, and the import graph has no cycle (typing-only imports
included, so the layers stay honest). Sizes are printed, longest first, as a list to look at:
something long is split by concept when it holds two, never to meet a line count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "picoflow"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "values",
        (
            "picoflow._frozen",
            "picoflow.approvals",
            "picoflow.attachments",
            "picoflow.context",
            "picoflow.events",
            "picoflow.exceptions",
            "picoflow.handoffs",
            "picoflow.messages",
            "picoflow.outcomes",
            "picoflow.prompts",
            "picoflow.request_diff",
            "picoflow.results",
            "picoflow.session",
            "picoflow.timeline",
            "picoflow.usage",
        ),
    ),
    ("adapters", ("picoflow.models", "picoflow.sessions")),
    (
        "authoring",
        (
            "picoflow._code_targets",
            "picoflow._schema",
            "picoflow.diagram",
            "picoflow.flow",
            "picoflow.locale",
            "picoflow.mcp",
            "picoflow.memory",
            "picoflow.repairs",
            "picoflow.runtime",
            "picoflow.slots",
            "picoflow.step",
            "picoflow.tools",
            "picoflow.versions",
        ),
    ),
    ("runner", ("picoflow._run",)),
    ("service", ("picoflow.engine", "picoflow.temporal")),
    ("edges", ("picoflow.cli", "picoflow.evals", "picoflow.server", "picoflow.testing", "picoflow")),
]
"""From the bottom up: values (no I/O) < adapters (the ``Model`` and ``SessionStore`` seams and
what is behind them) < authoring (what a flow is written with) < runner (one turn) < service (the
engine and where turns run) < edges (what translates requests into engine calls). A package name
covers every module under it; the longest name that matches a module decides its layer."""


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of the layer ``module`` belongs to."""
    best: tuple[int, int] | None = None  # (length of the matching name, layer)
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[0]):
                best = (len(name), index)
    if best is None:
        raise LookupError(f"{module} belongs to no layer: add it to LAYERS in tests/test_architecture.py")
    return best[1]


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The picoflow modules ``name`` imports (the longest known prefix of each imported name)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).strip(".")
            # ``from pkg import module`` imports that module; ``from pkg import name``, the package.
            names = [f"{base}.{alias.name}" for alias in node.names]
        for imported in names:
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
    return targets


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer, as ``importer (layer) -> imported (layer)``."""
    found = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module)
        for target in sorted(targets):
            theirs = layer_of(target)
            if theirs > mine:
                found.append(f"{module} ({LAYERS[mine][0]}) -> {target} ({LAYERS[theirs][0]})")
    return found


def owner_of_private(module: str) -> str | None:
    """The package a private module belongs to (the name before its last ``_`` part), or None for a
    public module. ``picoflow._run.loop`` is private to ``picoflow``; ``picoflow.mcp._schema`` to
    ``picoflow.mcp``."""
    parts = module.split(".")
    private = [index for index, part in enumerate(parts) if part.startswith("_")]
    return ".".join(parts[: private[-1]]) if private else None


def private_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a private module from outside the package that holds it, as
    ``importer -> imported``: what another folder needs goes through the owner's public module."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            owner = owner_of_private(target)
            if owner is not None and module != owner and not module.startswith(owner + "."):
                found.append(f"{module} -> {target}")
    return found


def cycles_in(graph: dict[str, set[str]]) -> list[list[str]]:
    # A package's __init__ re-exports its modules: it is left out of the cycle search, or every
    # module importing a sibling through its package would close a loop.
    modules_only = {name: targets for name, targets in graph.items() if not _is_package(name)}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(modules_only.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*trail[trail.index(target) :], target] if target in trail else [node, target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for name in sorted(modules_only):
        if name not in state:
            visit(name, [name])
    return cycles


def _is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def test_every_module_belongs_to_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_no_module_imports_a_higher_layer() -> None:
    assert upward_imports(import_graph()) == []


def test_an_import_from_a_higher_layer_is_found() -> None:
    graph = {"picoflow.messages": {"picoflow._run.loop"}, "picoflow._run.loop": {"picoflow.messages"}}
    assert upward_imports(graph) == ["picoflow.messages (values) -> picoflow._run.loop (runner)"]
    with pytest.raises(LookupError, match="belongs to no layer"):
        layer_of("elsewhere.module")


def test_no_private_module_is_imported_from_another_folder() -> None:
    assert private_imports(import_graph()) == []


def test_a_private_import_from_another_folder_is_found() -> None:
    graph = {
        "picoflow.server.contract": {"picoflow.engine._engine", "picoflow.engine"},
        "picoflow.engine": {"picoflow.engine._engine", "picoflow._run.loop"},
        "picoflow.engine.executors": {"picoflow.engine._engine"},
        "picoflow.server.protocols.a2a": {"picoflow.server.protocols._threads"},
        "picoflow.mcp.tools": {"picoflow.mcp._schema"},
        "picoflow.cli.app": {"picoflow.mcp._schema", "picoflow.models.local._weights"},
    }
    assert private_imports(graph) == [
        "picoflow.cli.app -> picoflow.mcp._schema",
        "picoflow.cli.app -> picoflow.models.local._weights",
        "picoflow.server.contract -> picoflow.engine._engine",
    ]


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles_in(import_graph()) == []


def test_the_architecture_page_has_a_row_for_every_module() -> None:
    page = (SOURCE.parents[1] / "docs" / "architecture.md").read_text()
    rows = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    paths = {str(path.relative_to(SOURCE)) for path in modules().values()}
    assert sorted(paths - rows) == [], "modules docs/architecture.md does not describe"
    assert sorted(rows - paths) == [], "rows of docs/architecture.md for modules that are gone"


def test_the_longest_modules_and_classes_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    """Not a rule: the list a reviewer reads to see what has grown (``pytest -s`` shows it)."""
    sizes: list[tuple[int, str]] = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        sizes.append((len(path.read_text().splitlines()), f"module {name}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                sizes.append((node.end_lineno - node.lineno + 1, f"{kind} {name}.{node.name}"))
    longest = sorted(sizes, reverse=True)
    with capsys.disabled():
        for kind in ("module", "class", "function"):
            rows = [f"{lines:>5}  {what}" for lines, what in longest if what.startswith(kind)][:5]
            print(f"\nlongest {kind}s:\n" + "\n".join(rows))
    assert longest
