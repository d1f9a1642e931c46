"""What every command shares: the ``--flows``/``--store``/``--model`` options, loading what they name
into a ``FlowEngine``, and ending on a user's mistake with one red line and an exit code, never a
traceback."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeGuard, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from picoflow.engine import FlowEngine
from picoflow.exceptions import PicoflowError
from picoflow.flow import Flow
from picoflow.messages import ToolCall
from picoflow.models import Model, ScriptedModel
from picoflow.models.catalog import default_selection
from picoflow.sessions import SQLiteStore, open_store
from picoflow.timeline import TimelineSettings

T = TypeVar("T")

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)

FlowsOpt = Annotated[
    str | None,
    typer.Option("--flows", envvar="PICOFLOW_FLOWS", help="Flows to load: module:Class[,module:Class]."),
]
_STORE_HELP = "Session store URL (default sqlite:///picoflow.sqlite3)."
StoreOpt = Annotated[str | None, typer.Option("--store", envvar="PICOFLOW_STORE", help=_STORE_HELP)]
_MODEL_HELP = "Model for every step: provider:name, local, scripted:FILE.json or python:module:attr."
ModelOpt = Annotated[str | None, typer.Option("--model", envvar="PICOFLOW_MODEL", help=_MODEL_HELP)]


clock: Callable[[], float] = time.time
"""The time every command's engine reads: approvals are asked, expire and are decided by it (a test
sets it to show exact times)."""


class CliError(Exception):
    """A problem the user can fix; printed without a traceback."""


USER_ERRORS = (CliError, PicoflowError, ValueError, ImportError)
"""What a user's options, ids and files can cause: each ends the command with one line. An
``ImportError`` is an option whose extra is not installed (a PostgreSQL store, a provider's SDK):
the adapter's message names the extra to install."""


def fail(message: str, code: int = 1) -> typer.Exit:
    """The exit to raise after saying what went wrong (``raise fail(...) from None``)."""
    # soft_wrap: one line whatever its length, for the terminal to fold and for logs and grep to keep whole.
    errors.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


@contextlib.contextmanager
def needs_extra(extra: str, what: str) -> Iterator[None]:
    """Around the imports of a command that needs the extra ``extra``: without it, the command ends
    with one line naming the extra to install (``what`` says what it is for), not a traceback."""
    try:
        yield
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == "picoflow":
            raise  # a module of picoflow itself is missing: a broken install, not a missing extra
        raise fail(f"{what}: pip install 'picoflow-ai[{extra}]'") from None


def run(work: Callable[[], Awaitable[T]]) -> T:
    """Run a command's async part; a user's mistake (or the store's typed failure) ends it in one line."""
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None


@contextlib.contextmanager
def said_here() -> Iterator[None]:
    """While a command says itself why a decision was refused: the engine's warning of the same
    refusal is not printed a second time (with logging not configured, Python prints warnings to
    stderr). Logging someone configured is theirs: left as it is."""
    logger = logging.getLogger("picoflow")
    if logger.hasHandlers():
        yield
        return
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def load_flows(spec: str | None) -> list[type[Flow]]:
    """Flow classes from ``module:Class,...`` (an attribute may also be a list of flows)."""
    _import_from_working_folder()
    items = [item.strip() for item in spec.split(",") if item.strip()] if spec else ["picoflow_demos:FLOWS"]
    flows: list[type[Flow]] = []
    for item in items:
        module_name, sep, attribute = item.partition(":")
        if not sep or not module_name or not attribute:
            raise CliError(f"{item!r}: name flows as module:Class (e.g. myapp.flows:SupportFlow)")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            hint = (
                " (the demo flows; pass --flows module:Class to serve your own)"
                if not spec
                else " (is it importable from here? run from the folder that holds it, or set PYTHONPATH)"
            )
            raise CliError(f"cannot import {module_name}{hint}: {exc}") from None
        value = getattr(module, attribute, None)
        found = [f for f in (value if isinstance(value, list | tuple) else [value]) if _is_flow(f)]
        if not found or (isinstance(value, list | tuple) and len(found) != len(value)):
            raise CliError(f"{item} is not a Flow subclass (or a list of them)")
        flows.extend(found)
    return flows


def _is_flow(value: object) -> TypeGuard[type[Flow]]:
    return isinstance(value, type) and issubclass(value, Flow)


def _import_from_working_folder() -> None:
    # Like uvicorn: modules of the folder the command runs in are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def load_script(path: str) -> list[Any]:
    """A script of replies: ``"text"``, ``{"tool": name, "args": {...}}``, or a list of such calls."""
    try:
        items = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read the model script {path}: {exc}") from None
    if not isinstance(items, list):
        raise CliError(f"{path}: a model script is a JSON list of replies")

    def call(item: Any) -> ToolCall:
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str):
            raise CliError(f'{path}: a tool call is written {{"tool": "name", "args": {{...}}}}')
        return ToolCall(item["tool"], item.get("args") or {})

    return [
        item if isinstance(item, str) else [call(c) for c in item] if isinstance(item, list) else call(item)
        for item in items
    ]


def build_model(choice: str | None) -> Model | str | None:
    """The ``--model`` choice: a model built here (scripted, python), a selection for the catalog, or
    None for each flow's own."""
    if not choice or not choice.strip():
        return None
    if choice.startswith("scripted:"):
        return ScriptedModel(load_script(choice.removeprefix("scripted:")), name="scripted:cli")
    if choice.startswith("python:"):
        return _python_model(choice.removeprefix("python:"))
    return choice.strip()


def _python_model(target: str) -> Model:
    """``module:attr``: a ``Model`` instance, or a function returning one (e.g. a FunctionModel)."""
    _import_from_working_folder()
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise CliError(f"python:{target}: name the model as python:module:attribute")
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"cannot load the model python:{target}: {exc}") from None
    model = value() if callable(value) and not isinstance(value, Model) else value
    if not isinstance(model, Model):
        raise CliError(f"python:{target} is not a picoflow Model (or a function returning one)")
    return model


TIMELINE_ENV = "PICOFLOW_TIMELINE"
"""``off`` (or ``0``, ``false``, ``no``): the command line and ``picoflow serve`` record no timeline."""
TimelineOpt = Annotated[
    bool | None,
    typer.Option(
        "--timeline/--no-timeline",
        help=f"Record each turn's timeline with its session (default: on, unless {TIMELINE_ENV}=off).",
    ),
]


def timeline_setting(wanted: bool | None = None) -> TimelineSettings | None:
    """What the command line records: each turn's timeline, unless ``wanted`` is False or, when it
    is None, ``PICOFLOW_TIMELINE`` says off."""
    if wanted is None:
        wanted = os.environ.get(TIMELINE_ENV, "").strip().lower() not in ("off", "0", "false", "no")
    return TimelineSettings() if wanted else None


def build_engine(flows: str | None, store: str | None, model: str | None) -> FlowEngine:
    """The engine of the ``--flows``, ``--store`` and ``--model`` options (recording timelines)."""
    return FlowEngine(
        load_flows(flows),
        store=open_store(store),
        model=build_model(model),
        clock=clock,
        timeline=timeline_setting(),
    )


def store_engine(store: str | None) -> FlowEngine:
    """An engine for commands that work on stored sessions: no flows to load, no model to build.
    A SQLite file that does not exist is an error, not an empty store created on the spot (a
    command run in the wrong folder would leave a ``picoflow.sqlite3`` behind)."""
    opened = open_store(store)
    if isinstance(opened, SQLiteStore) and not opened.path.exists():
        raise CliError(
            f"no session store at {opened.path}: run this where the sessions were stored, or give "
            "--store (or PICOFLOW_STORE)"
        )
    return FlowEngine(store=opened, clock=clock)


async def resolve_session_id(engine: FlowEngine, given: str) -> str:
    """The id of the one stored session ``given`` starts (an exact id, or a unique prefix as git
    takes); ``CliError`` when none or several match, naming a few of those."""
    matches = await engine.find_sessions(given, limit=6)
    if not matches:
        raise CliError(
            f"no session {given} in this store: `picoflow sessions list` shows them "
            "(is --store the right one?)"
        )
    if len(matches) > 1:
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise CliError(f"{given} is ambiguous: it starts {shown}; give more characters")
    return matches[0]


def describe_model(choice: str | None) -> str:
    return choice or f"each flow's own, else {default_selection()}"
