"""What can be checked, when a worker is built, of a flow's fitness to run on Temporal.

On a worker, everything of a turn that is not a model call, a tool handler or a store call runs
again whenever the workflow is replayed: hooks, prompts, ``LogicStep.run_logic``, the flow's own
hooks. They must decide the same way every time. Code cannot prove that, but some breaches can be
read in the source, and those stop the worker before it takes a turn:

* a flow with MCP servers (their calls are not activities yet);
* a sub-step with tools started from a hook rather than from a tool (its tool handlers would run
  inside the workflow, so a replay would run them again);
* a direct read of a clock, of randomness, of a new id or of a file in a hook (``time.time()``,
  ``datetime.now()``, ``date.today()``, ``random.*``, ``uuid.uuid4()``, ``os.urandom()``,
  ``open()``): put it in a tool, whose result Temporal records.

Reads hidden behind a helper function are not seen; the README says what must be deterministic.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator

from picoflow.exceptions import FlowDefinitionError
from picoflow.flow import FlowSpec, StepSpec
from picoflow.step import Step

__all__ = ["check_durable"]

_CLOCKS = {
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "monotonic"),
    ("time", "perf_counter"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("uuid", "uuid1"),
    ("uuid", "uuid4"),
    ("os", "urandom"),
    ("secrets", "token_hex"),
    ("secrets", "token_bytes"),
}


def check_durable(spec: FlowSpec) -> None:
    """Refuse (``FlowDefinitionError``) a flow whose turns could not be replayed faithfully."""
    if spec.mcp_servers or any(step.mcp_servers for step in spec.steps.values()):
        raise FlowDefinitionError(
            f"flow {spec.name}: MCP servers are not supported on Temporal yet (their calls are not "
            "activities); run this flow in process"
        )
    for call in spec.sub_steps:
        step, target = spec.steps[call.source], spec.steps.get(call.target)
        # Started from a hook, a sub-step runs in the workflow: its model calls are activities, but
        # its tool handlers would run again on every replay. One without handlers is safe there.
        has_handlers = target is None or any(_acts(tool.handler) for tool in target.tools.values())
        if call.via not in _handlers(step) and has_handlers:
            raise FlowDefinitionError(
                f"flow {spec.name}, step {call.source}: {call.via} starts sub-step {call.target}, whose "
                "tools would run again whenever the turn is replayed on Temporal; start it from a tool "
                "(its activity runs the sub-step), or give the sub-step no tools"
            )
    for step in spec.steps.values():
        for method, read in _nondeterministic_reads(step):
            raise FlowDefinitionError(
                f"flow {spec.name}, step {step.name}: {method} calls {read}, which gives another value "
                "when a turn is replayed on Temporal; read it in a tool (its result is recorded)"
            )


def _acts(handler: object) -> bool:
    """A handler of the step's own (the built-in ``terminate_session`` only moves the conversation)."""
    return handler is not None and handler is not Step.terminate_session


def _handlers(step: StepSpec) -> set[str]:
    attributes = {tool.attribute for tool in step.tools.values()}
    return attributes | {group.attribute for group in step.groups.values()}


def _nondeterministic_reads(step: StepSpec) -> Iterator[tuple[str, str]]:
    """(method, call) for each direct read of a clock, randomness or a file in a non-tool method
    the step's own class defines."""
    handlers = _handlers(step)
    for name, member in vars(step.cls).items():
        function = getattr(member, "__func__", member)
        if name in handlers or not inspect.isfunction(function):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError, SyntaxError):  # no source to read (built at run time)
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                read = _read_of(node.func)
                if read is not None:
                    yield name, read


def _read_of(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name) and func.id == "open":
        return "open()"
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    owner_name = (
        owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else None
    )
    if owner_name == "random":
        return f"random.{func.attr}()"
    if owner_name is not None and (owner_name, func.attr) in _CLOCKS:
        return f"{owner_name}.{func.attr}()"
    return None
