"""Providers that are the Chat Completions adapter at another address: DeepSeek, Ollama, OpenRouter,
vLLM and llama.cpp servers, and ``openai-chat`` (OpenAI itself through Chat Completions).

Each preset knows its default base URL, the environment variable that may move it, and the variable
its key comes from. The key is read when the adapter is created and handed to it, so a key meant for
one service is never sent to another (``OPENAI_API_KEY`` never leaves for DeepSeek or OpenRouter).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from picoflow.exceptions import ModelConfigurationError
from picoflow.messages import ModelRequest, ModelResponse
from picoflow.models.base import Model

#: The adapter every preset uses (imported by name: the catalog stays free of SDK imports).
CHAT_COMPLETIONS = "picoflow.models.openai:OpenAIModel"


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    """Where an OpenAI-compatible service lives and where its key comes from."""

    base_url: str | None
    """Default endpoint; None keeps the adapter's own default (``OPENAI_BASE_URL`` or OpenAI's)."""
    base_url_env: str | None = None
    """Environment variable that overrides ``base_url``."""
    key_env: str | None = None
    """Environment variable holding the key; None when the service needs none."""
    adapter_provider: str | None = None
    """Provider name the adapter is built with when it differs (``openai-chat`` is OpenAI itself)."""


PRESETS: Mapping[str, Preset] = {
    "openai-chat": Preset(base_url=None, adapter_provider="openai"),
    "deepseek": Preset(
        base_url="https://api.deepseek.com/v1", base_url_env="DEEPSEEK_BASE_URL", key_env="DEEPSEEK_API_KEY"
    ),
    "ollama": Preset(base_url="http://localhost:11434/v1", base_url_env="OLLAMA_BASE_URL"),
    "vllm": Preset(base_url="http://localhost:8000/v1", base_url_env="VLLM_BASE_URL"),
    "llamacpp": Preset(base_url="http://localhost:8080/v1", base_url_env="LLAMACPP_BASE_URL"),
    "openrouter": Preset(
        base_url="https://openrouter.ai/api/v1",
        base_url_env="OPENROUTER_BASE_URL",
        key_env="OPENROUTER_API_KEY",
    ),
}


def base_url_of(
    provider: str, selection_url: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The endpoint a preset's model talks to: the selection's, else the variable's, else the default."""
    env = os.environ if environ is None else environ
    preset = PRESETS[provider]
    from_env = env.get(preset.base_url_env, "").strip().rstrip("/") if preset.base_url_env else ""
    return selection_url or from_env or preset.base_url


def preset_arguments(
    provider: str, name: str, selection_url: str | None, environ: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """Constructor arguments of the Chat Completions adapter for a preset model; None when its key
    variable is unset (the model then explains that when asked, see ``UnconfiguredModel``)."""
    env = os.environ if environ is None else environ
    preset = PRESETS[provider]
    arguments: dict[str, Any] = {
        "provider": preset.adapter_provider or provider,
        "base_url": base_url_of(provider, selection_url, env),
    }
    if preset.key_env is not None:
        key = env.get(preset.key_env, "").strip()
        if not key:
            return None
        arguments["api_key"] = key
        arguments["key_variable"] = preset.key_env  # what a refusal of the key tells the operator to set
    elif preset.adapter_provider is None:
        # A keyless local server: say so, rather than let the adapter send OPENAI_COMPATIBLE_API_KEY.
        arguments["api_key"] = "not-needed"
    return arguments


class UnconfiguredModel(Model):
    """Stands in for a preset model whose key variable is unset: every request fails with a
    ``ModelConfigurationError`` naming the variable (so a ``FallbackModel`` moves on to its next member)."""

    def __init__(self, name: str, key_env: str) -> None:
        self.name = name
        self.key_env = key_env

    def __repr__(self) -> str:
        return f"UnconfiguredModel({self.name!r})"

    async def request(self, request: ModelRequest) -> ModelResponse:
        # Streaming goes through here too (``Model.request_stream``'s default).
        raise ModelConfigurationError(
            f"{self.name}: set the {self.key_env} environment variable", provider=self.name
        )
