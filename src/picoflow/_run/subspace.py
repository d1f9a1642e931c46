"""The workspace of a sub-step run: a private layer over its parent's.

It reads through to its parent and keeps every change to itself until ``merge``:

* **states** are copied on first use and merged back field by field, so runs going on together
  that change different fields of one state both keep their change;
* **memory** is the run's own: a fresh namespace (the default), or a copy of the step's kept
  namespace (``substep_memory = "kept"``) that replaces the original on merge;
* **messages** take their ``seq`` from the turn's session (runs going on together never share
  one) and are kept for the transcript under the run's label, never in the caller's memory;
* **models used** and **warnings** are handed up.

A step of another flow keeps its state and kept memory under ``"<flow>:<name>"`` keys, so it never
mixes with a step of the turn's flow that has the same name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from picoflow._run.observers import TurnObserver
from picoflow._run.workspace import ModelFor, Workspace
from picoflow.exceptions import HookFailure
from picoflow.flow import FlowSpec
from picoflow.outcomes import Direct, Go
from picoflow.runtime import StepState
from picoflow.session import Namespace, Session, copy_json


class SubWorkspace(Workspace):
    """One sub-step run of step ``name`` of ``flow``, under ``parent``."""

    root: Workspace
    __slots__ = (
        "_kept",
        "_namespace",
        "_prefix",
        "_snapshots",
        "depth",
        "memory_out",
        "models_out",
        "parent",
        "root",
        "substep_input",
        "within",
    )

    def __init__(
        self,
        parent: Workspace,
        flow: FlowSpec,
        name: str,
        model_for: ModelFor,
        *,
        observer: TurnObserver,
        depth: int,
        text: str,
    ) -> None:
        root: Workspace = parent.root if isinstance(parent, SubWorkspace) else parent
        main = root.session
        session = Session(
            main.id, flow.name, name, principal=main.principal, turns=main.turns, next_seq=main.next_seq
        )
        config = dataclasses.replace(parent.config, spec=flow, model_for=model_for, observer=observer)
        super().__init__(config, session)
        self.usage = parent.usage  # one turn, one tally: its limits hold across every run
        self.files = parent.files  # the turn's files reach a sub-step's tools too
        self.parent = parent
        self.root = root
        self.substep_input = text
        self.within: str | None = None
        self.depth = depth
        self._prefix = "" if flow.name == root.config.spec.name else f"{flow.name}:"
        self._snapshots: dict[str, dict[str, Any]] = {}
        self.models_out: dict[str, str] = {}
        self.memory_out: dict[str, Namespace] = {}
        step = flow.steps[name]
        self._namespace = step.namespace
        self._kept: str | None = None
        if step.cls.substep_memory == "kept":
            self._kept = self._prefix + step.namespace
            known = _memory(parent, self._kept)
            if known is not None:
                session.memory[step.namespace] = Namespace(known.messages.copy(), known.start, known.summary)
        session.namespace(step.namespace)

    # --- reading through to the parent --------------------------------------------------------

    def state_for(self, step_name: str) -> StepState:
        return self.state_by_key(self._prefix + step_name)

    def state_by_key(self, key: str) -> StepState:
        state = self._states.get(key)
        if state is None:
            source = self.parent.state_by_key(key).raw
            self._snapshots[key] = copy_json(source)
            state = self._states[key] = StepState(copy_json(source))
        return state

    def terminate_target(self) -> str | None:
        return None

    def destination(self, outcome: Go | Direct, here: str) -> str:
        name = super().destination(outcome, here)
        if name != here:
            raise HookFailure(
                f"sub-step {here} cannot go to {name}: a sub-step answers the step that ran it (with "
                "its text, its output or direct(...)) instead of moving the conversation",
                step=here,
            )
        return name

    def _numbered(self, namespace: str) -> tuple[int, str]:
        # Runs going on together take their seqs from the turn's session, so none is used twice;
        # the seq is taken there at once (nothing else runs before the message is appended).
        main = self.root.session
        seq = self.session.next_seq = main.next_seq
        main.next_seq = seq + 1
        if self.within is None:  # named after the step and its first message's seq: unique for good
            self.within = f"{self.session.current_step}@{seq}"
        return seq, self._kept or self.within

    # --- handing the run's changes up ---------------------------------------------------------

    def merge(self) -> None:
        """The run answered: give its parent what it changed."""
        parent = self.parent
        if self.appended:
            mine = parent.appended
            in_order = not mine or mine[-1][1].seq < self.appended[0][1].seq
            mine.extend(self.appended)
            if not in_order:  # a run going on beside this one wrote messages in between
                mine.sort(key=lambda item: item[1].seq)
        for key, state in self._states.items():
            _merge_fields(self._snapshots[key], state.raw, parent.state_by_key(key).raw)
        models = {self._prefix + step: model for step, model in self.session.models.items()}
        models.update(self.models_out)
        memory = dict(self.memory_out)
        if self._kept is not None:
            memory[self._kept] = self.session.memory[self._namespace]
        if isinstance(parent, SubWorkspace):
            parent.models_out.update(models)
            parent.memory_out.update(memory)
        else:
            parent.session.models.update(models)
            parent.session.memory.update(memory)
        parent.warnings.extend(self.warnings)


def _memory(ws: Workspace, label: str) -> Namespace | None:
    """The kept namespace ``label`` as ``ws`` sees it (changed by a run that answered, or stored)."""
    while isinstance(ws, SubWorkspace):
        if label in ws.memory_out:
            return ws.memory_out[label]
        ws = ws.parent
    return ws.session.memory.get(label)


def _merge_fields(before: dict[str, Any], after: dict[str, Any], target: dict[str, Any]) -> None:
    """Apply to ``target`` the fields that went from ``before`` to ``after``."""
    if before == after:
        return
    for field in before.keys() - after.keys():
        target.pop(field, None)
    for field, value in after.items():
        if field not in before or before[field] != value:
            target[field] = value
