"""``FallbackModel``: several models behind one, each answering when the ones before it cannot.

A member is skipped when its call fails after its own retries: an outage, a rate limit that did
not clear, a configuration problem (no key, unknown model). A model that answers badly is asked
again by the runner first (its attempts and corrections); with ``on_misbehaviour=True`` a member
whose answers stay unusable — the adapter reports it, or the runner used up the step's attempts —
hands over to the next as well. Every answer names the member that gave it (``answered_by``, kept
on the assistant message), and a fallback is noted as a ``model_fallback`` warning.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from picoflow.exceptions import ModelError, ModelMisbehaved
from picoflow.messages import ModelRequest, ModelResponse, ResponseWarning
from picoflow.models.base import Model, ResponseDone, StreamEvent
from picoflow.models.catalog import ModelSelection, as_selection, create_model

__all__ = ["FallbackModel", "as_model"]


def as_model(choice: Model | ModelSelection | str | Sequence[Model | ModelSelection | str]) -> Model:
    """The model a step's or flow's ``model`` names: a list is a ``FallbackModel`` of its members."""
    if isinstance(choice, Model):
        return choice
    if isinstance(choice, str | ModelSelection):
        return create_model(as_selection(choice))
    members = list(choice)
    return as_model(members[0]) if len(members) == 1 else FallbackModel(*members)


class FallbackModel(Model):
    """Ask ``models`` in order; the first that answers does (``"provider:name"`` strings work too)."""

    def __init__(self, *models: Any, on_misbehaviour: bool = False) -> None:
        flat: Sequence[Model | ModelSelection | str] = models
        if len(models) == 1 and isinstance(models[0], list | tuple):
            flat = models[0]
        if len(flat) < 2:
            raise ValueError("FallbackModel needs at least two models: the first and what to fall back on")
        self.models: tuple[Model, ...] = tuple(as_model(model) for model in flat)
        self.on_misbehaviour = on_misbehaviour
        self.name = "fallback(" + ", ".join(model.name for model in self.models) + ")"
        windows = [model.context_window for model in self.models if model.context_window is not None]
        # A request must fit whichever member answers it.
        self.context_window = min(windows) if windows else None
        self.output_reserve = max(model.output_reserve for model in self.models)
        # Images go to the list when one of its models can see them; a blind one they fall back to
        # refuses them itself.
        self.reads_images = any(model.reads_images for model in self.models)
        # Its answers may come from any member: the strictest grounding any of them asks for.
        self.grounding = "small" if any(model.grounding == "small" for model in self.models) else "default"

    def falls_back(self, error: ModelError) -> bool:
        """Whether ``error`` of one member hands the request to the next."""
        return self.on_misbehaviour or not isinstance(error, ModelMisbehaved)

    def after(self, name: str | None) -> Model | None:
        """The members after ``name`` (one model, or a ``FallbackModel`` of several); None if none."""
        names = [model.name for model in self.models]
        if name not in names:
            return None
        rest = self.models[names.index(name) + 1 :]
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else FallbackModel(*rest, on_misbehaviour=self.on_misbehaviour)

    async def request(self, request: ModelRequest) -> ModelResponse:
        failures: list[tuple[str, ModelError]] = []
        for model in self.models:
            try:
                response = await model.request(request)
            except ModelError as error:
                if not self.falls_back(error):
                    raise
                failures.append((model.name, error))
                continue
            return _answered(response, model, failures)
        raise _exhausted(failures)

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        failures: list[tuple[str, ModelError]] = []
        for model in self.models:
            started = False
            try:
                async for event in model.request_stream(request):
                    if isinstance(event, ResponseDone):
                        _answered(event.response, model, failures)
                    started = True
                    yield event
                return
            except ModelError as error:
                if started or not self.falls_back(error):
                    raise  # part of the answer is out already: another model cannot take it back
                failures.append((model.name, error))
        raise _exhausted(failures)

    async def aclose(self) -> None:
        for model in self.models:
            await model.aclose()


def _answered(
    response: ModelResponse, model: Model, failures: Sequence[tuple[str, ModelError]]
) -> ModelResponse:
    response.answered_by = response.answered_by or model.name
    if failures:
        failed = "; ".join(f"{name} failed ({error.kind})" for name, error in failures)
        response.warnings.append(ResponseWarning("model_fallback", f"{failed}; {model.name} answered"))
    return response


def _exhausted(failures: Sequence[tuple[str, ModelError]]) -> ModelError:
    """The last member's error, its message telling what every member did."""
    last = failures[-1][1]
    story = "; ".join(f"{name}: {error}" for name, error in failures)
    last.args = (f"every model failed — {story}",)
    return last
