"""Model selection: ``"provider:name"`` strings, parameters, validation and adapter creation.

This module is the only place that maps a provider name to its adapter; adapters are imported
lazily so an uninstalled SDK costs nothing until it is selected.

A selection never carries credentials: API keys come from the environment when the adapter is
created, so a selection can be recorded in a session, logged and shown without leaking anything.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import ValidationError

from picoflow.exceptions import FlowDefinitionError
from picoflow.models._presets import CHAT_COMPLETIONS, PRESETS, UnconfiguredModel, preset_arguments
from picoflow.models._specs import (
    BUILTIN_SPECS,
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_OPENAI_MODEL,
    LOCAL_MODEL_NAME,
    OPEN_PROVIDERS,
    ContextLimits,
    ModelSpec,
    compatible_spec,
    context_limits,
    normalized_params,
    open_spec,
)
from picoflow.models.base import Model

__all__ = [
    "ADAPTERS",
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_OPENAI_MODEL",
    "LOCAL_MODEL_NAME",
    "ContextLimits",
    "ModelSelection",
    "ModelSpec",
    "as_selection",
    "context_limits_of",
    "create_model",
    "default_selection",
    "known_models",
    "register_model",
    "resolve",
    "validate_selection",
]

#: provider -> "module:Class" of its adapter. ``openai:`` speaks the Responses API (reasoning kept across
#: tool calls); ``openai-chat:`` and OpenAI-compatible servers use the Chat Completions adapter;
#: the presets among them (deepseek, ollama, openrouter, openai-chat) bring their URL and key variable.
ADAPTERS: dict[str, str] = {
    "openai": "picoflow.models.openai_responses:OpenAIResponsesModel",
    "openai-chat": CHAT_COMPLETIONS,
    "openai-compatible": CHAT_COMPLETIONS,
    "deepseek": CHAT_COMPLETIONS,
    "ollama": CHAT_COMPLETIONS,
    "openrouter": CHAT_COMPLETIONS,
    "vllm": CHAT_COMPLETIONS,
    "llamacpp": CHAT_COMPLETIONS,
    "anthropic": "picoflow.models.anthropic:AnthropicModel",
    "google": "picoflow.models.google:GoogleModel",
    "local": "picoflow.models.local:LocalModel",
}
#: Chat Completions parameters the Responses API has no counterpart for.
CHAT_ONLY = ("seed", "stop", "frequency_penalty", "presence_penalty")
#: Providers whose models are another provider's catalog entries.
_SAME_MODELS = {"openai-chat": "openai"}
#: Providers whose selections may name a server (``provider:name@http://host/v1``).
_BASE_URL_PROVIDERS = ("openai", "openai-compatible", *PRESETS)

_SECRET_NAME = re.compile(
    r"(api_?key|apikey|secret|passw(or)?d|credential|authorization|bearer|(^|_)token$|^key$)", re.IGNORECASE
)
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")
_URL_IN_NAME = re.compile(r"^(?P<name>.*?)@(?P<url>https?://.+)$")

_catalog: dict[str, dict[str, ModelSpec]] = {}
for _spec in BUILTIN_SPECS:
    _catalog.setdefault(_spec.provider, {})[_spec.name] = _spec


def _refuse_secrets(where: str, params: Mapping[str, Any], base_url: str | None) -> None:
    for name in params:
        if _SECRET_NAME.search(name):
            raise FlowDefinitionError(
                f"{where}: parameter {name!r} looks like a credential; model selections are recorded in "
                "sessions, so keys come from the environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...)"
            )
    if base_url is None:
        return
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FlowDefinitionError(f"{where}: base_url must be an http(s) URL")
    if parts.username or parts.password:
        raise FlowDefinitionError(
            f"{where}: base_url must not contain credentials; use an environment variable"
        )
    for key, _ in parse_qsl(parts.query):
        if _SECRET_NAME.search(key):
            raise FlowDefinitionError(
                f"{where}: base_url must not carry credentials in its query ({key}=...)"
            )


@dataclass(frozen=True, slots=True, eq=False)
class ModelSelection:
    """Which model a flow or step uses, with its parameters. Holds no secrets."""

    provider: str
    """``openai``, ``anthropic``, ``google``, ``openai-compatible``, a preset (``openai-chat``,
    ``deepseek``, ``ollama``, ``openrouter``) or ``local``."""
    name: str = ""
    """The provider's model name; empty selects the provider's default for ``local``."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Provider parameters (temperature, reasoning_effort, max_tokens, timeout, ...)."""
    base_url: str | None = None
    """Server URL for ``openai-compatible`` (Ollama, vLLM, llama.cpp server, LM Studio); for ``openai``
    and the presets, a different endpoint than their default (a proxy, a remote Ollama)."""

    def __post_init__(self) -> None:
        provider = self.provider.strip().lower()
        name = self.name.strip()
        if provider == "local" and not name:
            name = LOCAL_MODEL_NAME
        base_url = self.base_url.strip().rstrip("/") if self.base_url else None
        _refuse_secrets(f"model {provider}:{name}", self.params, base_url)
        object.__setattr__(self, "provider", provider)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "base_url", base_url)
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @classmethod
    def parse(cls, value: str, *, base_url: str | None = None, **params: Any) -> ModelSelection:
        """Parse ``"provider:name"``, ``"openai-compatible:name@http://host/v1"`` or ``"local"``."""
        text = value.strip()
        provider, sep, name = text.partition(":")
        if not sep:
            provider, name = text, ""
        if not provider.strip():
            raise FlowDefinitionError(f"model selection {value!r} has no provider; write 'provider:name'")
        match = _URL_IN_NAME.match(name.strip())
        if match:
            if base_url is not None:
                raise FlowDefinitionError(f"model selection {value!r} gives a base URL twice")
            name, base_url = match["name"], match["url"]
        return cls(provider, name, params, base_url)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSelection:
        """The inverse of ``public_dict()``, e.g. for a selection read back from a session."""
        return cls(
            str(data["provider"]), str(data.get("name") or ""), data.get("params") or {}, data.get("base_url")
        )

    def with_params(self, **params: Any) -> ModelSelection:
        """A copy with ``params`` merged over the current ones."""
        return ModelSelection(self.provider, self.name, {**self.params, **params}, self.base_url)

    def public_dict(self) -> dict[str, Any]:
        """A JSON-ready description, safe to persist and log (a selection never holds secrets)."""
        return {
            "provider": self.provider,
            "name": self.name,
            "params": dict(self.params),
            "base_url": self.base_url,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        # The read-only params view cannot be pickled or deep-copied; rebuild from a plain dict.
        return (ModelSelection, (self.provider, self.name, dict(self.params), self.base_url))

    def _key(self) -> str:
        return json.dumps(self.public_dict(), sort_keys=True, default=str)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelSelection) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.provider}:{self.name}" if self.name else self.provider
        return f"{text}@{self.base_url}" if self.base_url else text

    def __repr__(self) -> str:
        args = [repr(str(self))] + [f"{key}={value!r}" for key, value in sorted(self.params.items())]
        return f"ModelSelection.parse({', '.join(args)})"


def as_selection(value: str | ModelSelection) -> ModelSelection:
    return ModelSelection.parse(value) if isinstance(value, str) else value


def known_models(provider: str) -> list[str]:
    """Names of the catalogued models of ``provider`` (empty for those that serve any model)."""
    return sorted(_catalog.get(_SAME_MODELS.get(provider, provider), {}))


def register_model(spec: ModelSpec) -> None:
    """Add or replace a catalog entry, e.g. for a model released after this picoflow version."""
    if spec.provider not in ADAPTERS or spec.provider in (
        "openai-compatible",
        *OPEN_PROVIDERS,
        *_SAME_MODELS,
    ):
        raise ValueError(f"cannot register models for provider {spec.provider!r}")
    _catalog.setdefault(spec.provider, {})[spec.name] = spec


def _find_spec(selection: ModelSelection) -> ModelSpec:
    provider, name = selection.provider, selection.name
    if provider not in ADAPTERS:
        known = ", ".join(sorted(ADAPTERS))
        raise FlowDefinitionError(f"unknown model provider {provider!r} in {selection}; known: {known}")
    if provider == "openai-compatible":
        if not name:
            raise FlowDefinitionError(
                f"{selection}: give the served model's name, e.g. 'openai-compatible:llama3.1'"
            )
        if not (selection.base_url or os.environ.get("OPENAI_BASE_URL")):
            raise FlowDefinitionError(
                f"{selection}: an openai-compatible model needs a base_url, e.g. "
                f"'openai-compatible:{name}@http://localhost:11434/v1' (or set OPENAI_BASE_URL)"
            )
        return compatible_spec(name)
    if selection.base_url and provider not in _BASE_URL_PROVIDERS:
        raise FlowDefinitionError(
            f"{selection}: base_url is only for the {', '.join(_BASE_URL_PROVIDERS)} providers"
        )
    if provider in OPEN_PROVIDERS:
        return _open_spec(selection)
    models = _catalog.get(_SAME_MODELS.get(provider, provider), {})
    spec = models.get(name) or models.get(_SNAPSHOT_SUFFIX.sub("", name))
    if spec is None:
        raise FlowDefinitionError(
            f"unknown model {name!r} for provider {provider!r}; known: {', '.join(sorted(models))} "
            "(register_model() adds one)"
        )
    return spec


def _open_spec(selection: ModelSelection) -> ModelSpec:
    provider, name = selection.provider, selection.name
    if not name:
        example = "llama3.1:8b" if provider == "ollama" else "anthropic/claude-sonnet-4.5"
        raise FlowDefinitionError(f"{selection}: give the model's name, e.g. '{provider}:{example}'")
    if provider == "openrouter" and not re.fullmatch(r"[\w.-]+/[\w.:-]+", name):
        raise FlowDefinitionError(
            f"{selection}: OpenRouter names a model as 'vendor/model', e.g. 'openrouter:openai/gpt-4.1-mini'"
        )
    return open_spec(provider, name)


def _explain(selection: ModelSelection, spec: ModelSpec, error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "params"
        if item["type"] == "extra_forbidden":
            problems.append(f"unknown parameter {where!r}; allowed: {', '.join(spec.param_names())}")
        else:
            # The rule only, not the submitted value.
            problems.append(f"parameter {where!r}: {item['msg']}")
    return f"model {selection}: " + "; ".join(problems)


def resolve(selection: ModelSelection) -> tuple[ModelSpec, dict[str, Any]]:
    """The catalog entry of ``selection`` and its validated parameters; ``FlowDefinitionError`` if invalid."""
    spec = _find_spec(selection)
    for param in selection.params:
        if param in spec.refused:
            raise FlowDefinitionError(spec.refused[param])
        if selection.provider == "openai" and param in CHAT_ONLY:
            raise FlowDefinitionError(
                f"model {selection}: {param} exists only in Chat Completions, not in the Responses API "
                f"that openai: selections use; select 'openai-chat:{selection.name}' to keep it"
            )
    try:
        params = normalized_params(spec, selection.params)
    except ValidationError as error:
        raise FlowDefinitionError(_explain(selection, spec, error)) from None
    effort = params.get("reasoning_effort")
    # Servers of any model cannot be known to refuse it; the catalogued models can.
    if effort is not None and spec.provider not in ("openai-compatible", *OPEN_PROVIDERS):
        if not spec.reasoning:
            raise FlowDefinitionError(
                f"model {selection} is not a reasoning model; reasoning_effort is not accepted"
            )
        if effort not in spec.reasoning_efforts:
            raise FlowDefinitionError(
                f"model {selection}: reasoning_effort must be one of {', '.join(spec.reasoning_efforts)}"
            )
    if spec.exclusive_sampling and "temperature" in params and "top_p" in params:
        raise FlowDefinitionError(f"model {selection}: set temperature or top_p, not both")
    _check_window(selection, spec, params)
    return spec, params


def _check_window(selection: ModelSelection, spec: ModelSpec, params: dict[str, Any]) -> None:
    asked = params.get("context_window")
    if asked and spec.context_window and asked > spec.context_window:
        raise FlowDefinitionError(
            f"model {selection}: context_window may not exceed the model's {spec.context_window:,} tokens"
        )
    limits = context_limits(spec, params)
    if limits.window is not None and limits.output_reserve >= limits.window:
        # The answer's tokens come out of the same window: nothing would be left for the prompt.
        raise FlowDefinitionError(
            f"model {selection}: max_tokens ({limits.output_reserve:,}) must be smaller than the "
            f"{limits.window:,}-token context window, which also holds the prompt"
        )


def context_limits_of(selection: ModelSelection) -> ContextLimits:
    """The context window of ``selection`` and the tokens kept for its answers (validated first)."""
    spec, params = resolve(selection)
    return context_limits(spec, params)


def validate_selection(selection: ModelSelection) -> None:
    """Refuse an unknown provider or model and invalid parameters early, when the flow is registered."""
    resolve(selection)


_instances: dict[str, Model] = {}
_instances_lock = threading.Lock()


def create_model(selection: ModelSelection) -> Model:
    """The adapter instance for ``selection``, created once per process."""
    key = selection._key()
    with _instances_lock:
        model = _instances.get(key)
        if model is None:
            model = _new_model(selection)
            # The catalog, not each adapter, knows windows: every adapter gets them the same way.
            limits = context_limits_of(selection)
            model.context_window, model.output_reserve = limits.window, limits.output_reserve
            if not isinstance(model, UnconfiguredModel):  # the key may be set later
                _instances[key] = model
    return model


def _new_model(selection: ModelSelection) -> Model:
    spec, params = resolve(selection)
    module_name, _, class_name = ADAPTERS[selection.provider].partition(":")
    adapter = getattr(importlib.import_module(module_name), class_name)
    if selection.provider not in PRESETS:
        model: Model = adapter.from_selection(selection)
        return model
    arguments = preset_arguments(selection.provider, selection.name, selection.base_url)
    preset = PRESETS[selection.provider]
    if arguments is None:
        return UnconfiguredModel(str(selection), preset.key_env or "")
    model = adapter(selection.name, params=params, spec=spec, **arguments)
    model.name = f"{selection.provider}:{selection.name}"
    return model


def default_selection(environ: Mapping[str, str] | None = None) -> ModelSelection:
    """``PICOFLOW_MODEL`` if set; else the provider of an API key found; else the embedded model."""
    env = os.environ if environ is None else environ
    if env.get("PICOFLOW_MODEL", "").strip():
        return ModelSelection.parse(env["PICOFLOW_MODEL"])
    if env.get("OPENAI_API_KEY", "").strip():
        return ModelSelection("openai", DEFAULT_OPENAI_MODEL)
    if env.get("ANTHROPIC_API_KEY", "").strip():
        return ModelSelection("anthropic", DEFAULT_ANTHROPIC_MODEL)
    return ModelSelection("local", LOCAL_MODEL_NAME)
