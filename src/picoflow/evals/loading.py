"""Reading scenario files: YAML documents validated into ``Scenario`` values, with errors people can act on.

A problem is reported as ``file: turn 3 ("Please refund…"), expect.tool_called[0].args: <rule>``; an
unknown field lists the fields allowed there, since a typo is the usual cause.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from picoflow.evals.scenario import Scenario, ScenarioError, short

__all__ = ["load_scenarios"]


def load_scenarios(path: str | Path) -> list[Scenario]:
    """The scenarios of a YAML file (one per ``---`` document), or of every ``*.yaml``/``*.yml`` in a folder.

    Raises ``ScenarioError`` for a missing path, bad YAML or an invalid scenario.
    """
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise ScenarioError(f"{root}: no scenario files (*.yaml, *.yml) in this folder")
    elif root.is_file():
        files = [root]
    else:
        raise ScenarioError(
            f"{root}: no such file or folder; give a scenario file (.yaml) or a folder of them"
        )
    return [scenario for file in files for scenario in _load_file(file)]


def _load_file(path: Path) -> list[Scenario]:
    try:
        loaded = yaml.load_all(path.read_text(encoding="utf-8"), Loader=_loader())  # a SafeLoader subclass
        documents = [doc for doc in loaded if doc is not None]
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read it: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(f"{path}: not valid YAML{where}: {problem}") from None
    if not documents:
        raise ScenarioError(f"{path}: the file holds no scenario")
    scenarios = []
    for number, document in enumerate(documents, 1):
        source = str(path) if len(documents) == 1 else f"{path} (document {number})"
        if not isinstance(document, dict):
            raise ScenarioError(f"{source}: a scenario is a mapping with name, flow and turns")
        document = _dates_as_text(document)
        document.setdefault("name", path.stem if len(documents) == 1 else f"{path.stem}-{number}")
        try:
            scenario = Scenario.model_validate(document)
        except ValidationError as error:
            raise ScenarioError(_explain(source, document, error)) from None
        scenarios.append(scenario.with_source(source))
    names = [scenario.name for scenario in scenarios]
    if len(set(names)) != len(names):
        raise ScenarioError(f"{path}: two scenarios are named {_first_repeat(names)!r}")
    return scenarios


@functools.cache
def _loader() -> type[Any]:
    """A ``SafeLoader`` with YAML 1.2 booleans (only true and false) that refuses repeated keys.

    YAML 1.1 also reads yes, no, on and off as booleans, so ``user: yes`` would not be what the user
    typed and a state key ``on`` would become ``true``.
    """

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            # PyYAML keeps the last of two equal keys: a state path written twice would lose one silently.
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, str | int | float | bool) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{key!r} is written twice in one mapping", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    bool_tag = "tag:yaml.org,2002:bool"
    Loader.yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != bool_tag]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return Loader


def _dates_as_text(value: Any) -> Any:
    """YAML reads ``2026-10-01`` as a date; models send and states hold it as text, so compare text."""
    if isinstance(value, dict):
        return {key: _dates_as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(item) for item in value]
    return value.isoformat() if isinstance(value, date | datetime) else value


def _first_repeat(names: Sequence[str]) -> str:
    return next(name for position, name in enumerate(names) if name in names[:position])


def _explain(source: str, document: dict[str, Any], error: ValidationError) -> str:
    """Each problem on a line of its own: the turn (1-based, with its words), the field and the rule."""
    lines = []
    for item in error.errors():
        loc = list(item["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "turns" and isinstance(loc[1], int):
            turns = document.get("turns")
            said = (
                turns[loc[1]].get("user")
                if isinstance(turns, list) and isinstance(turns[loc[1]], dict)
                else None
            )
            where = f"turn {loc[1] + 1}" + (f" ({short(said)})" if isinstance(said, str) else "") + ", "
            loc = loc[2:]
        field = _field_path(loc)
        if item["type"] == "extra_forbidden":
            allowed = _allowed_fields(list(item["loc"])[:-1])
            problem = f"unknown field; expected one of: {', '.join(allowed)}" if allowed else "unknown field"
        elif item["type"] == "missing":
            problem = "missing (required)"
        else:
            problem = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}{field or 'scenario'}: {problem}")
    if len(lines) == 1:
        return f"{source}: {lines[0]}"
    return f"{source}: {len(lines)} problems\n  " + "\n  ".join(lines)


def _field_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _allowed_fields(loc: Sequence[int | str]) -> list[str]:
    """The field names of the model at ``loc`` in a scenario, to suggest the right spelling of a typo."""
    model: type[BaseModel] = Scenario
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        found = _model_in(field.annotation) if field is not None else None
        if found is None:
            return []
        model = found
    return [field.alias or name for name, field in model.model_fields.items()]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
