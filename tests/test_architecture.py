"""The shape rules of the source tree, checked on every run: module and class sizes, and an
import graph without cycles (typing-only imports included, so the layers stay honest)."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "picoflow"
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


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
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for imported in names:
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
    return targets


def test_no_module_is_longer_than_450_lines() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_class_is_longer_than_250_lines() -> None:
    long: dict[str, int] = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{name}.{node.name}"] = lines
    assert long == {}


def test_the_import_graph_has_no_cycle() -> None:
    found = modules()
    known = set(found)
    # A package's __init__ only re-exports its modules: importing a module through its package is
    # an import of that module, not of everything the package holds.
    graph = {
        name: imports_of(name, path, known) for name, path in found.items() if path.name != "__init__.py"
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*trail[trail.index(target) :], target] if target in trail else [node, target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []
