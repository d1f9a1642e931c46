"""The one seam between picoflow and a language model: ``Model.request``.

An adapter turns a ``ModelRequest`` into a provider call and the provider's answer into a
``ModelResponse``. Adapters own retries, timeouts and wire-format translation; the runner owns
everything else (validation, routing, budgets).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass

from picoflow.messages import ModelRequest, ModelResponse


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer's text, as the provider streams it."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a tool call: the first delta of a call carries its id and name."""

    index: int
    id: str | None = None
    name: str | None = None
    args_delta: str = ""


@dataclass(frozen=True, slots=True)
class ResponseDone:
    """The stream ended; ``response`` is the whole answer, as ``request()`` would return it."""

    response: ModelResponse


StreamEvent = TextDelta | ToolCallDelta | ResponseDone


class Model(ABC):
    """A configured model that answers requests. One instance may serve many sessions at once."""

    #: ``"provider:name"``, as recorded in sessions and traces.
    name: str = "model"
    #: Tokens one call holds, prompt and answer together. The catalog sets it for the models it
    #: creates; None means unknown, and then requests are sent as they are, never trimmed.
    context_window: int | None = None
    #: Tokens of the window kept free for the answer (the selection's ``max_tokens`` or the model's).
    output_reserve: int = 0
    #: Whether the model can be shown images; a turn that would show one to a model that cannot is
    #: refused (415) before the model is asked.
    reads_images: bool = True
    #: Seconds one request may take, every attempt of the adapter's retries counted (not the waits
    #: between them); None when unknown. A durable executor sizes its activity's time from it.
    time_limit: float | None = None
    #: The grounding profile readings of this model's answers get (``picoflow.slots.Grounding``):
    #: ``"default"`` (the rules that act on evidence against a reading) or ``"small"`` (every rule
    #: and the rescues a small model needs: the embedded model asks for it).
    grounding: str = "default"

    @abstractmethod
    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer one request. Raise ``ModelError`` (or a subclass) when the provider fails."""

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Answer one request as a stream of deltas ending with ``ResponseDone``.

        The default calls ``request()`` and replays the answer; providers that stream override it.
        """
        response = await self.request(request)
        if response.text:
            yield TextDelta(response.text)
        for index, call in enumerate(response.tool_calls):
            yield ToolCallDelta(index, call.id, call.name, call.args_json())
        yield ResponseDone(response)

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a do-nothing default
        """Release connections. The default has nothing to release."""
