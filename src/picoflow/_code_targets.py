"""Where a step's code can lead, read from the code itself (its syntax tree), so a flow is checked
and drawn when it is built: the targets of ``go(X)`` / ``direct_to(X, ...)`` (and of a tool handler's
``return X``), and the steps it runs as sub-steps (``run_step(X, ...)``, ``batch(X, ...)``, the
requests of ``run_steps([...])`` / ``run_steps({...})``). Only names that resolve to a step class
(or a step's name as a literal) count; anything computed at run time is checked when it runs.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

from picoflow.step import LogicStep, Step, TerminateStep

Finder = Callable[[ast.AST, bool], Iterator[ast.expr]]


def go_targets(step_cls: type[Step]) -> Iterator[tuple[str, str]]:
    """``(target step name, via)`` for every ``go(X)`` whose ``X`` can be resolved statically."""
    return _targets(step_cls, _go_calls)


def repair_patterns(step_cls: type[Step]) -> Iterator[tuple[str, str]]:
    """``(pattern, via)`` for every ``repair("pattern", ...)`` the step's code returns."""
    for klass in step_cls.__mro__:
        if klass in (Step, LogicStep, TerminateStep, object):
            continue
        for attribute, value in vars(klass).items():
            fn = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            tree = _tree(fn) if inspect.isfunction(fn) else None
            for node in ast.walk(tree) if tree is not None else ():
                if _called(node) == "repair":
                    assert isinstance(node, ast.Call)
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        tool = getattr(fn, "__picoflow_tool__", None)
                        yield first.value, (getattr(tool, "name", None) or attribute) if tool else attribute


def sub_step_targets(step_cls: type[Step]) -> Iterator[tuple[str, str]]:
    """``(sub-step name, via)`` for every step the code runs as a sub-step."""
    return _targets(step_cls, _run_step_calls)


def _targets(step_cls: type[Step], finder: Finder) -> Iterator[tuple[str, str]]:
    for klass in step_cls.__mro__:
        if klass in (Step, LogicStep, TerminateStep, object):
            continue
        for attribute, value in vars(klass).items():
            fn = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            if not inspect.isfunction(fn):
                continue
            via = getattr(fn, "__picoflow_tool__", None)
            label = (getattr(via, "name", None) or attribute) if via is not None else attribute
            tree = _tree(fn)
            if tree is None:
                continue
            for node in finder(tree, via is not None):
                target = _resolve(node, fn)
                if target is not None:
                    yield target, label


@functools.cache
def _tree(fn: Callable[..., Any]) -> ast.AST | None:
    # Cached: the targets, the sub-steps and the repairs of a step are read from the same source.
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None


def _called(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _go_calls(tree: ast.AST, returns: bool) -> Iterator[ast.expr]:
    """The targets of ``go(X)`` / ``direct_to(X, ...)`` calls; with ``returns`` (a tool handler,
    which may return a step class to route like ``go``) also what ``return X`` returns."""
    for node in ast.walk(tree):
        if returns and isinstance(node, ast.Return) and isinstance(node.value, ast.Name | ast.Attribute):
            yield node.value  # only a step class resolves; any other value is not a route
        elif _called(node) in ("go", "direct_to"):
            assert isinstance(node, ast.Call)
            yield node.args[0]


def _run_step_calls(tree: ast.AST, returns: bool) -> Iterator[ast.expr]:
    """The steps of ``run_step(X, ...)`` / ``batch(X, ...)``; in a function that calls
    ``run_steps``, the first item of every ``(X, input)`` tuple it writes (the requests are often
    built in a variable first)."""
    fans_out = False
    for node in ast.walk(tree):
        name = _called(node)
        if name in ("run_step", "batch"):
            assert isinstance(node, ast.Call)
            yield node.args[0]
        fans_out = fans_out or name == "run_steps"
    if fans_out:
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and len(node.elts) in (2, 3):
                yield node.elts[0]  # only a step class resolves


def _resolve(node: ast.expr, fn: Callable[..., Any]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.strip()
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    scope: dict[str, Any] = dict(getattr(fn, "__globals__", {}))
    with contextlib.suppress(TypeError, ValueError):
        scope.update(inspect.getclosurevars(fn).nonlocals)
    if parts[-1] not in scope:
        return None
    value: Any = scope[parts[-1]]
    for attribute in reversed(parts[:-1]):
        value = getattr(value, attribute, None)
    if isinstance(value, type) and issubclass(value, Step):
        return value.name
    return None
