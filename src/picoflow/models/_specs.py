"""The built-in model catalog: which models each provider offers and which parameters each accepts.

Parameters are Pydantic models with ``extra="forbid"`` so a typo is refused when the flow is
registered, not discovered as a provider 400 in production. Facts that differ between models of one
family (reasoning-effort levels, refused sampling knobs, native structured output) live on ``ModelSpec``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

LOCAL_MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
#: Providers that serve any model name (no catalog entries): OpenAI-compatible presets.
OPEN_PROVIDERS = ("ollama", "openrouter", "vllm", "llamacpp")


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NetworkParams(_Params):
    """Knobs of the adapter itself, shared by every networked provider. Never sent to the provider."""

    timeout: float | None = Field(None, gt=0, le=3600, description="seconds per attempt")
    max_retries: int | None = Field(None, ge=0, le=10, description="extra attempts on 429/5xx/network errors")
    context_window: int | None = Field(
        None,
        ge=512,
        le=10_000_000,
        description="tokens one call holds (prompt and answer): the server's window, or less to cap cost",
    )


class OpenAIChatParams(NetworkParams):
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    stop: str | list[str] | None = None
    parallel_tool_calls: bool | None = None


class OpenAIReasoningParams(NetworkParams):
    reasoning_effort: str | None = None
    max_tokens: int | None = Field(None, ge=1, description="completion budget, reasoning tokens included")
    seed: int | None = None
    parallel_tool_calls: bool | None = None


class GPT5Params(OpenAIReasoningParams):
    verbosity: Literal["low", "medium", "high"] | None = None


class CompatibleParams(OpenAIChatParams):
    """OpenAI-compatible servers differ widely, so anything else is passed through as is."""

    model_config = ConfigDict(extra="allow", frozen=True)

    reasoning_effort: str | None = None


class AnthropicParams(NetworkParams):
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=1)
    stop_sequences: list[str] | None = None
    thinking_budget: int | None = Field(None, ge=1024, description="extended-thinking token budget")

    @model_validator(mode="after")
    def _thinking_is_exclusive(self) -> Self:
        if self.thinking_budget is not None:
            if self.temperature is not None or self.top_k is not None:
                raise ValueError("temperature and top_k cannot be combined with thinking_budget")
            if self.max_tokens is not None and self.max_tokens <= self.thinking_budget:
                raise ValueError("max_tokens must be greater than thinking_budget")
        return self


class GeminiParams(NetworkParams):
    """Gemini 2.5; the thinking range differs per model (class variables of the subclasses)."""

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1, le=65_536, description="answer budget, thinking included")
    stop_sequences: list[str] | None = Field(None, max_length=5)
    seed: int | None = None
    thinking_budget: int | None = Field(
        None, ge=-1, description="thinking tokens: -1 lets the model decide, 0 turns thinking off"
    )

    thinking_range: ClassVar[tuple[int, int]] = (0, 24_576)
    can_stop_thinking: ClassVar[bool] = True

    @model_validator(mode="after")
    def _budget_fits_the_model(self) -> Self:
        budget = self.thinking_budget
        if budget is None or budget == -1:
            return self
        low, high = self.thinking_range
        off = budget == 0 and self.can_stop_thinking
        if not off and not low <= budget <= high:
            allowed = "-1 (dynamic), " + ("0 (off), " if self.can_stop_thinking else "")
            raise ValueError(f"thinking_budget must be {allowed}or between {low} and {high}")
        if self.max_tokens is not None and budget > 0 and self.max_tokens <= budget:
            raise ValueError("max_tokens must be greater than thinking_budget (thinking counts against it)")
        return self


class GeminiProParams(GeminiParams):
    thinking_range: ClassVar[tuple[int, int]] = (128, 32_768)
    can_stop_thinking: ClassVar[bool] = False


class GeminiFlashLiteParams(GeminiParams):
    thinking_range: ClassVar[tuple[int, int]] = (512, 24_576)


class DeepSeekChatParams(NetworkParams):
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=8192)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    stop: str | list[str] | None = None


class DeepSeekReasonerParams(NetworkParams):
    max_tokens: int | None = Field(None, ge=1, le=65_536, description="answer budget, reasoning included")
    stop: str | list[str] | None = None


class OllamaParams(OpenAIChatParams):
    reasoning_effort: str | None = Field(None, description="for thinking models (low, medium, high)")


class OpenRouterParams(OpenAIChatParams):
    reasoning_effort: str | None = Field(None, description="for reasoning models (minimal ... high)")
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)


class VLLMParams(OpenAIChatParams):
    """vLLM's OpenAI server also takes its own sampling parameters (sent as they are)."""

    reasoning_effort: str | None = Field(None, description="for reasoning models")
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)


class LlamaCppParams(OpenAIChatParams):
    """llama.cpp's server: its sampling parameters and its prompt cache."""

    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, gt=0, le=2)
    cache_prompt: bool | None = Field(None, description="reuse the server's cache of the prompt prefix")


class LocalParams(_Params):
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    repeat_penalty: float | None = Field(None, ge=0.5, le=2)
    max_tokens: int | None = Field(None, ge=1, le=8192)
    seed: int | None = Field(None, ge=0)
    n_ctx: int | None = Field(None, ge=512, le=32768, description="context window in tokens")
    threads: int | None = Field(None, ge=1, le=256)
    parallel_tool_calls: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """What picoflow knows about one model."""

    provider: str
    name: str
    params: type[BaseModel]
    """Pydantic model of the accepted parameters."""
    reasoning_efforts: tuple[str, ...] = ()
    """Accepted ``reasoning_effort`` values; empty for non-reasoning models."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Parameters this model rejects, with the reason shown to the flow author."""
    structured_output: Literal["native", "tool"] = "native"
    """``native``: the provider constrains output to a JSON schema; ``tool``: a forced tool stands in."""
    exclusive_sampling: bool = False
    """``temperature`` and ``top_p`` may not be set together."""
    default_max_tokens: int | None = None
    """``max_tokens`` the adapter sends when the selection gives none."""
    context_window: int | None = None
    """Tokens one call holds, prompt and answer together; None when unknown (requests are not fitted)."""
    max_output: int | None = None
    """Most tokens the model writes in one answer (reasoning included)."""
    description: str = ""

    @property
    def reasoning(self) -> bool:
        return bool(self.reasoning_efforts)

    def param_names(self) -> list[str]:
        return sorted(self.params.model_fields)


def _reasoning_refusals(name: str, efforts: tuple[str, ...]) -> dict[str, str]:
    levels = ", ".join(efforts)
    return {
        param: f"openai:{name} is a reasoning model and does not accept {param!r}; "
        f"use reasoning_effort ({levels})"
        for param in ("temperature", "top_p", "frequency_penalty", "presence_penalty", "logprobs")
    }


def _openai_chat(name: str, window: int, max_output: int, description: str) -> ModelSpec:
    refused = {
        "reasoning_effort": f"openai:{name} is not a reasoning model; reasoning_effort is not accepted"
    }
    return ModelSpec(
        provider="openai",
        name=name,
        params=OpenAIChatParams,
        refused=refused,
        context_window=window,
        max_output=max_output,
        description=description,
    )


def _openai_reasoning(
    name: str, efforts: tuple[str, ...], window: int, max_output: int, description: str
) -> ModelSpec:
    params = GPT5Params if name.startswith("gpt-5") else OpenAIReasoningParams
    return ModelSpec(
        provider="openai",
        name=name,
        params=params,
        reasoning_efforts=efforts,
        refused=_reasoning_refusals(name, efforts),
        context_window=window,
        max_output=max_output,
        description=description,
    )


_GPT5_EFFORTS = ("minimal", "low", "medium", "high")
_GPT51_EFFORTS = ("none", "low", "medium", "high")
_O_EFFORTS = ("low", "medium", "high")


def _anthropic(name: str, *, native: bool, max_tokens: int, max_output: int, description: str) -> ModelSpec:
    return ModelSpec(
        provider="anthropic",
        name=name,
        params=AnthropicParams,
        structured_output="native" if native else "tool",
        exclusive_sampling=True,
        default_max_tokens=max_tokens,
        context_window=_CLAUDE_WINDOW,
        max_output=max_output,
        description=description,
    )


def _gemini(name: str, params: type[GeminiParams], description: str) -> ModelSpec:
    return ModelSpec(
        provider="google",
        name=name,
        params=params,
        refused={
            "thinking_level": f"google:{name} takes thinking_budget; thinking_level is for Gemini 3 models",
            "reasoning_effort": f"google:{name} takes thinking_budget (tokens), not reasoning_effort",
        },
        context_window=_GEMINI_WINDOW,
        max_output=65_536,
        description=description,
    )


def _deepseek(name: str, *, reasoner: bool, max_output: int, description: str) -> ModelSpec:
    refused = {}
    if reasoner:
        refused = {
            param: f"deepseek:{name} ignores {param!r} in thinking mode; leave it unset"
            for param in ("temperature", "top_p", "frequency_penalty", "presence_penalty")
        }
    return ModelSpec(
        provider="deepseek",
        name=name,
        params=DeepSeekReasonerParams if reasoner else DeepSeekChatParams,
        refused=refused,
        # DeepSeek takes JSON mode, not JSON-schema-constrained output.
        structured_output="tool",
        context_window=_DEEPSEEK_WINDOW,
        max_output=max_output,
        description=description,
    )


def open_spec(provider: str, name: str) -> ModelSpec:
    """The spec of any model an ``ollama``, ``openrouter``, ``vllm`` or ``llamacpp`` server offers
    (windows unknown)."""
    kinds: dict[str, type[BaseModel]] = {
        "ollama": OllamaParams,
        "vllm": VLLMParams,
        "llamacpp": LlamaCppParams,
    }
    params = kinds.get(provider, OpenRouterParams)
    return ModelSpec(provider=provider, name=name, params=params, description=f"{name} at {provider}")


_GEMINI_WINDOW = 1_048_576
_DEEPSEEK_WINDOW = 128_000
_GPT4O_WINDOW = 128_000
_GPT41_WINDOW = 1_047_576
_GPT5_WINDOW = 400_000
_O_WINDOW = 200_000
# Claude's 1M-token window is a beta that needs a request header picoflow does not send.
_CLAUDE_WINDOW = 200_000


BUILTIN_SPECS: tuple[ModelSpec, ...] = (
    _openai_chat("gpt-4o", _GPT4O_WINDOW, 16_384, "GPT-4o chat model"),
    _openai_chat("gpt-4o-mini", _GPT4O_WINDOW, 16_384, "small GPT-4o chat model"),
    _openai_chat("gpt-4.1", _GPT41_WINDOW, 32_768, "GPT-4.1 chat model"),
    _openai_chat(
        "gpt-4.1-mini", _GPT41_WINDOW, 32_768, "small GPT-4.1 chat model (default with OPENAI_API_KEY)"
    ),
    _openai_chat("gpt-4.1-nano", _GPT41_WINDOW, 32_768, "smallest GPT-4.1 chat model"),
    _openai_reasoning("gpt-5", _GPT5_EFFORTS, _GPT5_WINDOW, 128_000, "GPT-5 reasoning model"),
    _openai_reasoning("gpt-5-mini", _GPT5_EFFORTS, _GPT5_WINDOW, 128_000, "small GPT-5 reasoning model"),
    _openai_reasoning("gpt-5-nano", _GPT5_EFFORTS, _GPT5_WINDOW, 128_000, "smallest GPT-5 reasoning model"),
    _openai_reasoning("gpt-5.1", _GPT51_EFFORTS, _GPT5_WINDOW, 128_000, "GPT-5.1 reasoning model"),
    _openai_reasoning("o3", _O_EFFORTS, _O_WINDOW, 100_000, "o3 reasoning model"),
    _openai_reasoning("o3-mini", _O_EFFORTS, _O_WINDOW, 100_000, "small o3 reasoning model"),
    _openai_reasoning("o4-mini", _O_EFFORTS, _O_WINDOW, 100_000, "small o4 reasoning model"),
    _anthropic(
        "claude-opus-4-5", native=True, max_tokens=8192, max_output=64_000, description="Claude Opus 4.5"
    ),
    _anthropic(
        "claude-opus-4-1", native=True, max_tokens=8192, max_output=32_000, description="Claude Opus 4.1"
    ),
    _anthropic(
        "claude-opus-4-0", native=False, max_tokens=8192, max_output=32_000, description="Claude Opus 4"
    ),
    _anthropic(
        "claude-opus-4-6", native=True, max_tokens=8192, max_output=128_000, description="Claude Opus 4.6"
    ),
    _anthropic(
        "claude-sonnet-4-6",
        native=True,
        max_tokens=8192,
        max_output=64_000,
        description="Claude Sonnet 4.6 (default with key)",
    ),
    _anthropic(
        "claude-sonnet-4-5",
        native=True,
        max_tokens=8192,
        max_output=64_000,
        description="Claude Sonnet 4.5 (end of life 2026-11-30)",
    ),
    _anthropic(
        "claude-sonnet-4-0", native=False, max_tokens=8192, max_output=64_000, description="Claude Sonnet 4"
    ),
    _anthropic(
        "claude-haiku-4-5", native=True, max_tokens=8192, max_output=64_000, description="Claude Haiku 4.5"
    ),
    _gemini("gemini-2.5-pro", GeminiProParams, "Gemini 2.5 Pro (always thinks)"),
    _gemini("gemini-2.5-flash", GeminiParams, "Gemini 2.5 Flash"),
    _gemini(
        "gemini-2.5-flash-lite", GeminiFlashLiteParams, "Gemini 2.5 Flash-Lite (thinking off by default)"
    ),
    _deepseek("deepseek-chat", reasoner=False, max_output=8192, description="DeepSeek chat (non-thinking)"),
    _deepseek("deepseek-reasoner", reasoner=True, max_output=65_536, description="DeepSeek thinking mode"),
    ModelSpec(
        provider="local",
        name=LOCAL_MODEL_NAME,
        params=LocalParams,
        # The engine's defaults (models/local.py DEFAULT_CONTEXT and DEFAULT_MAX_TOKENS); n_ctx and
        # max_tokens override them per selection.
        default_max_tokens=512,
        context_window=8192,
        max_output=8192,
        description="embedded Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), runs offline on CPU",
    ),
)


def compatible_spec(name: str) -> ModelSpec:
    """The permissive spec of a model served by an OpenAI-compatible server."""
    return ModelSpec(provider="openai-compatible", name=name, params=CompatibleParams)


def normalized_params(spec: ModelSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` validated by ``spec`` (raises ``pydantic.ValidationError``), unset ones dropped."""
    return spec.params.model_validate(dict(params)).model_dump(exclude_none=True)


@dataclass(frozen=True, slots=True)
class ContextLimits:
    """How many tokens one call may hold, and how many of them are kept for the answer."""

    window: int | None
    """Prompt and answer together; None when unknown (requests are then sent as they are)."""
    output_reserve: int = 0
    """Tokens kept free for the answer: the prompt may take ``window - output_reserve``."""


def context_limits(spec: ModelSpec, params: Mapping[str, Any]) -> ContextLimits:
    """The window and output reserve of ``spec`` with validated ``params`` (``normalized_params``).

    The reserve is what the adapter lets the model write: ``max_tokens`` when given, else the
    adapter's default, else the model's most but at most a quarter of the window (a model may write
    that much, but an answer rarely does, and the prompt needs the room); extended thinking writes
    its budget on top.
    """
    if spec.provider == "local":
        window = params.get("n_ctx") or spec.context_window
    else:
        # A selection may lower the window (to cap a call's cost), never raise it past the model's.
        asked = params.get("context_window")
        known = spec.context_window
        window = min(asked, known) if asked and known else asked or known
    if not window:
        return ContextLimits(None, 0)
    reserve = int(params.get("max_tokens") or spec.default_max_tokens or 0)
    if not reserve:
        reserve = min(spec.max_output or window, window // 4)
    thinking = params.get("thinking_budget")
    if thinking and reserve <= thinking:
        reserve = int(thinking) + (spec.default_max_tokens or reserve)
    return ContextLimits(int(window), reserve)
