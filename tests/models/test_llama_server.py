"""picoflow on llama.cpp's own OpenAI-compatible server, serving the embedded model's GGUF with the
model's own chat template — the way users run their own models (issue 19).

The model writes its tool calls as text there (a fenced or bare JSON object), which the server
returns as the answer; picoflow must read them back as calls, and never show that JSON to the user.
Few tokens, temperature 0 and a fixed seed keep these runs short and repeatable on 2 CPUs.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from picoflow import Flow, FlowEngine, Step, tool
from picoflow.events import TextChunk
from picoflow.exceptions import ModelConfigurationError, ModelError
from picoflow.messages import ModelRequest, ModelResponse
from picoflow.models._retry import RetryPolicy
from picoflow.models.base import Model
from picoflow.models.catalog import ModelSelection, create_model
from picoflow.models.openai import OpenAIModel
from picoflow.models.text_calls import RECOVERED
from picoflow.results import TurnFinished

from .fake_servers import RecordingSleep
from .llama_server import llama_server

pytestmark = pytest.mark.local_model

API_KEY = secrets.token_urlsafe(16)
additions: list[tuple[int, int]] = []


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with llama_server(API_KEY) as url:
        yield url


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", API_KEY)
    additions.clear()


class Adder(Step):
    """Add numbers with the add tool, then tell the user the result."""

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        additions.append((a, b))
        return a + b


class Sums(Flow):
    name = "sums"
    steps = [Adder]


class Total(BaseModel):
    total: int
    """The sum the add tool returned."""


totals: list[Total] = []


class Summed(Adder):
    """Add numbers with the add tool, then tell the user the result."""

    output = Total

    def on_response(self, response: Any) -> str:
        totals.append(response)
        return f"The total is {response.total}."


class StructuredSums(Flow):
    name = "structured_sums"
    steps = [Summed]


class Recording(Model):
    """Passes requests on and keeps every response and failure, to see what the server did."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name
        self.responses: list[ModelResponse] = []
        self.failures: list[BaseException] = []

    async def request(self, request: ModelRequest) -> ModelResponse:
        try:
            response = await self.inner.request(request)
        except ModelError as error:
            self.failures.append(error)
            raise
        self.responses.append(response)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def on_llama(url: str) -> Model:
    selection = ModelSelection.parse(
        f"openai-compatible:qwen2.5-coder@{url}/v1", temperature=0.0, seed=7, max_tokens=80
    )
    return create_model(selection)


def assert_added_once_and_recovered(warnings: tuple[str, ...]) -> None:
    assert additions == [(17, 25)]
    assert any("wrote its tool call (add) as text" in warning for warning in warnings), warnings


@pytest.mark.usefixtures("keyed")
async def test_the_tool_round_trip_answers_42_with_the_call_read_from_text(server_url: str) -> None:
    model = Recording(on_llama(server_url))
    engine = FlowEngine([Sums], model=model)
    try:
        result = await engine.run("sums", "What is 17 + 25?")
    finally:
        await engine.aclose()  # the connection belongs to this test's event loop

    assert result.ok, result.error
    assert "42" in result.message
    assert "{" not in result.message and "add" not in result.message
    first = model.responses[0]
    assert [call.name for call in first.tool_calls] == ["add"]
    assert [warning.code for warning in first.warnings] == [RECOVERED]
    assert_added_once_and_recovered(result.warnings)


@pytest.mark.usefixtures("keyed")
async def test_streaming_shows_no_json_and_answers_42(server_url: str) -> None:
    engine = FlowEngine([Sums], model=on_llama(server_url))
    shown: list[str] = []
    finished = None
    try:
        async for event in engine.run_stream("sums", "What is 17 + 25?"):
            if isinstance(event, TextChunk):
                shown.append(event.text)
            elif isinstance(event, TurnFinished):
                finished = event.result
    finally:
        await engine.aclose()
    assert finished is not None and finished.ok, finished
    text = "".join(shown)
    assert "42" in text and "42" in finished.message
    assert "{" not in text and "```" not in text and "arguments" not in text
    assert_added_once_and_recovered(finished.warnings)


async def test_a_wrong_key_is_one_attempt_and_a_configuration_error(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "not-the-servers-key")
    sleep = RecordingSleep()
    inner = OpenAIModel(
        "qwen2.5-coder",
        provider="openai-compatible",
        base_url=f"{server_url}/v1",
        retry=RetryPolicy(sleep=sleep),
    )
    model = Recording(inner)
    engine = FlowEngine([Sums], model=model)
    try:
        result = await engine.run("sums", "What is 17 + 25?")
    finally:
        await engine.aclose()

    assert result.error is not None and result.error.is_a(ModelConfigurationError)
    assert not result.error.retryable
    assert sleep.delays == []  # one HTTP attempt: nothing was retried
    (failure,) = model.failures
    assert isinstance(failure, ModelConfigurationError) and failure.status_code == 401
    assert "OPENAI_COMPATIBLE_API_KEY" in str(failure) and "Invalid API Key" in str(failure)
    assert "not-the-servers-key" not in str(failure)


@pytest.mark.usefixtures("keyed")
async def test_a_step_with_tools_and_output_calls_its_tool_then_returns_the_output(server_url: str) -> None:
    totals.clear()
    model = Recording(on_llama(server_url))
    engine = FlowEngine([StructuredSums], model=model)
    try:
        result = await engine.run("structured_sums", "What is 17 + 25?")
    finally:
        await engine.aclose()

    assert result.ok, result.error
    assert additions == [(17, 25)]
    assert totals == [Total(total=42)]
    assert result.message == "The total is 42."
