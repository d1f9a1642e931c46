"""What the runner offers steps and flows during a turn, and the durable state they keep.

``Step`` and ``Flow`` objects live for one turn and reach everything through a runtime the runner
implements (``picoflow._run.workspace.Workspace``). The protocols live here, below both, so the
authoring modules never import each other or the runner.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

if TYPE_CHECKING:
    from picoflow.context import Caller, RunContext
    from picoflow.messages import Message

__all__ = ["FlowRuntime", "FlowView", "StepRuntime", "StepState", "SubSteps"]

T = TypeVar("T")


class FlowView(Protocol):
    """What every flow object offers (``Step.flow``); cast to your ``Flow`` subclass for more."""

    @property
    def session_id(self) -> str: ...

    @property
    def caller(self) -> Caller: ...

    def state_of(self, step: Any) -> StepState: ...


class FlowRuntime(Protocol):
    """What a flow instance can reach during a turn."""

    @property
    def session_id(self) -> str: ...

    @property
    def caller(self) -> Caller: ...

    def state_for(self, step_name: str) -> StepState: ...


class SubSteps(Protocol):
    """Runs sub-steps (``run_step``) for a step of a turn."""

    async def run_steps(
        self,
        runtime: Any,
        caller: str,
        requests: Sequence[tuple[Any, Any, Any]],
        concurrency: int | None,
        keys: Sequence[Any] | None,
    ) -> list[Any]: ...


class StepRuntime(Protocol):
    """What the runner offers a step instance during a turn."""

    attempt: int

    @property
    def session_id(self) -> str: ...

    @property
    def caller(self) -> Caller: ...

    @property
    def flow(self) -> FlowView: ...

    def context_for(self, step_name: str) -> RunContext[Any]: ...

    def state_for(self, step_name: str) -> StepState: ...

    def messages_of(self, namespace: str) -> Sequence[Message]: ...

    def erase(self, namespace: str) -> None: ...

    def terminate_target(self) -> str | None: ...

    def model_of(self, step_name: str) -> Any:
        """The model that serves ``step_name`` in this turn."""
        ...

    def judged(self, step_name: str, verdicts: Sequence[Any]) -> None:
        """Report the verdicts of a reading (``picoflow.slots.Verdict``) to whatever watches the turn."""
        ...

    @property
    def substep_input(self) -> str | None: ...

    @property
    def turn(self) -> int:
        """The number of this turn in the session (1 for the first)."""
        ...

    def flow_repairs(self) -> Any:
        """The flow's repair policy (``Flow.repairs``)."""
        ...

    def last_shown(self) -> str | None:
        """The last message the user was sent (a reply, written in code or by a model)."""
        ...

    def handoff_target(self, named: Any) -> str | None:
        """The step a handoff goes to: ``named``, else the flow's first step that awaits a human."""
        ...

    def cancel_to(self, named: Any) -> str:
        """The step a cancel goes back to: ``named``, else the flow's start step."""
        ...

    def correction_target(self, named: Any, current: str) -> str | None:
        """The step a correction made in ``current`` goes back to: ``named``, else the latest
        step that takes corrections (a ``SlotStep``) the conversation went through; None when
        there is none but ``current``."""
        ...

    def digression_target(self, named: Any) -> str | None:
        """The step that answers a digression: ``named`` (None: the flow has none)."""
        ...

    def interrupt(self, step: str) -> None:
        """Keep ``step`` as the one the digression now starting interrupted."""
        ...

    def resume_target(self) -> str | None:
        """The step the latest digression interrupted, taken off the stack (None: no digression)."""
        ...

    def user_message(self) -> str | None:
        """The user's message this turn answers (the latest, forwarded or not), whatever memory
        was erased since it came."""
        ...

    def step_question(self, name: str) -> str:
        """What step ``name`` is waiting for (its ``question()``), to ask again on resuming there."""
        ...

    def reset_activity(self, target: str) -> str:
        """Forget the state of the steps the conversation went through since ``target`` (and of
        ``target`` itself), so it starts over there; what ``target`` says first."""
        ...

    @property
    def composer(self) -> SubSteps | None:
        """What runs sub-steps (None outside a turn of a ``FlowEngine``)."""
        ...


class StepState(MutableMapping[str, Any]):
    """A step's durable state: a mapping of JSON values.

    Values are converted to JSON form when stored (a Pydantic model becomes a dict, a date an ISO
    string), so what a step reads back is the same in this turn and in every later one, whatever
    the store. ``get_as`` turns a stored value back into a typed object.
    """

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._data[key] = to_jsonable_python(value)

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"StepState({self._data!r})"

    def get_as(self, key: str, kind: type[T], default: T | None = None) -> T | None:
        """The value at ``key`` validated as ``kind`` (a Pydantic model, date, list[...], ...)."""
        if key not in self._data:
            return default
        try:
            adapter = _adapter(cast(Any, kind))
        except TypeError:  # a type that cannot be a cache key (an annotation holding a dict)
            adapter = TypeAdapter(kind)
        value: T = adapter.validate_python(self._data[key])
        return value

    def merge(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            self[key] = value

    @property
    def raw(self) -> dict[str, Any]:
        return self._data


@functools.lru_cache(maxsize=256)
def _adapter(kind: Any) -> TypeAdapter[Any]:
    """One adapter per type (building one costs far more than using it; steps read state every turn)."""
    return TypeAdapter(kind)
