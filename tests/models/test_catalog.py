"""Model selection strings, catalog validation, secrets hygiene and the automatic default."""

from __future__ import annotations

import copy
import pickle

import pytest

from picoflow.exceptions import FlowDefinitionError, ModelConfigurationError, ModelError
from picoflow.messages import Message, ModelRequest
from picoflow.models import local
from picoflow.models._specs import BUILTIN_SPECS, AnthropicParams, ModelSpec
from picoflow.models.catalog import (
    ADAPTERS,
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_OPENAI_MODEL,
    LOCAL_MODEL_NAME,
    ModelSelection,
    as_selection,
    context_limits_of,
    create_model,
    default_selection,
    known_models,
    register_model,
    resolve,
    validate_selection,
)
from picoflow.models.openai import OpenAIModel

from .fake_servers import Reply, openai_completion, serving

SECRET = "sk-proj-SUPERSECRET0123456789"


def refused(selection: ModelSelection | str) -> str:
    with pytest.raises(FlowDefinitionError) as caught:
        validate_selection(as_selection(selection))
    return str(caught.value)


def test_selection_strings() -> None:
    assert ModelSelection.parse("openai:gpt-4.1-mini") == ModelSelection("openai", "gpt-4.1-mini")
    assert str(ModelSelection.parse(" Anthropic:claude-sonnet-4-5 ")) == "anthropic:claude-sonnet-4-5"
    ollama = ModelSelection.parse("openai-compatible:llama3.1:8b@http://localhost:11434/v1/")
    assert (ollama.provider, ollama.name, ollama.base_url) == (
        "openai-compatible",
        "llama3.1:8b",
        "http://localhost:11434/v1",
    )
    assert str(ollama) == "openai-compatible:llama3.1:8b@http://localhost:11434/v1"
    assert ModelSelection.parse("local").name == LOCAL_MODEL_NAME
    tuned = ModelSelection.parse("openai:gpt-5.1", reasoning_effort="low")
    assert dict(tuned.params) == {"reasoning_effort": "low"}
    assert tuned.with_params(max_tokens=100).params == {"reasoning_effort": "low", "max_tokens": 100}
    assert dict(tuned.params) == {"reasoning_effort": "low"}
    with pytest.raises(FlowDefinitionError, match="no provider"):
        ModelSelection.parse(":gpt-4.1")
    with pytest.raises(FlowDefinitionError, match="base URL twice"):
        ModelSelection.parse("openai-compatible:x@http://a", base_url="http://b")


def test_selection_is_a_value() -> None:
    one = ModelSelection.parse("openai:gpt-4.1", temperature=0.1, stop=["\n"])
    two = ModelSelection.from_dict(one.public_dict())
    assert one == two
    assert hash(one) == hash(two)
    assert one != one.with_params(temperature=0.2)
    assert repr(one) == "ModelSelection.parse('openai:gpt-4.1', stop=['\\n'], temperature=0.1)"
    with pytest.raises(TypeError):
        one.params["temperature"] = 2  # type: ignore[index]
    assert pickle.loads(pickle.dumps(one)) == one
    assert copy.deepcopy(one) == one


def test_temperature_is_refused_on_reasoning_models() -> None:
    message = refused(ModelSelection.parse("openai:gpt-5.1", temperature=0.2))
    assert message == (
        "openai:gpt-5.1 is a reasoning model and does not accept 'temperature'; "
        "use reasoning_effort (none, low, medium, high)"
    )
    assert "reasoning model" in refused(ModelSelection.parse("openai:o4-mini", top_p=0.5))


def test_reasoning_effort_levels_depend_on_the_model() -> None:
    validate_selection(ModelSelection.parse("openai:gpt-5", reasoning_effort="minimal"))
    validate_selection(ModelSelection.parse("openai:gpt-5.1", reasoning_effort="none"))
    assert "one of none, low, medium, high" in refused(
        ModelSelection.parse("openai:gpt-5.1", reasoning_effort="minimal")
    )
    assert "one of low, medium, high" in refused(
        ModelSelection.parse("openai:o3", reasoning_effort="minimal")
    )
    assert "not a reasoning model" in refused(ModelSelection.parse("openai:gpt-4.1", reasoning_effort="low"))


def test_unknown_parameters_are_refused_with_the_allowed_list() -> None:
    message = refused(ModelSelection.parse("openai:gpt-4.1-mini", temprature=0.2))
    assert message == (
        "model openai:gpt-4.1-mini: unknown parameter 'temprature'; allowed: context_window, "
        "frequency_penalty, max_retries, max_tokens, parallel_tool_calls, presence_penalty, seed, stop, "
        "temperature, timeout, top_p"
    )
    assert (
        "allowed: context_window, max_retries, max_tokens, parallel_tool_calls, reasoning_effort, seed, "
        "timeout, verbosity" in refused(ModelSelection.parse("openai:gpt-5-mini", logit_bias={}))
    )


def test_invalid_values_name_the_rule_not_the_value() -> None:
    message = refused(ModelSelection.parse("openai:gpt-4.1", temperature=3.75))
    assert "parameter 'temperature'" in message
    assert "less than or equal to 2" in message
    assert "3.75" not in message
    assert "greater than or equal to 1024" in refused(
        ModelSelection.parse("anthropic:claude-haiku-4-5", thinking_budget=10)
    )


def test_known_parameters_are_normalised() -> None:
    spec, params = resolve(ModelSelection.parse("openai:gpt-4.1", temperature="0.5", max_tokens=100))
    assert spec.name == "gpt-4.1"
    assert params == {"temperature": 0.5, "max_tokens": 100}


def test_unknown_model_is_refused_listing_known_ones() -> None:
    message = refused("openai:gpt-99")
    assert message.startswith("unknown model 'gpt-99' for provider 'openai'; known: gpt-4.1, gpt-4.1-mini")
    assert "o4-mini" in message
    assert "claude-sonnet-4-5" in refused("anthropic:claude-2")
    assert LOCAL_MODEL_NAME in refused("local:llama-70b")
    assert "unknown model provider 'gemini'" in refused("gemini:pro")


def test_dated_snapshots_resolve_to_their_family() -> None:
    assert resolve(ModelSelection.parse("openai:gpt-4.1-2025-04-14"))[0].name == "gpt-4.1"
    assert (
        resolve(ModelSelection.parse("anthropic:claude-sonnet-4-5-20250929"))[0].name == "claude-sonnet-4-5"
    )
    assert "reasoning model" in refused(ModelSelection.parse("openai:gpt-5-2025-08-07", temperature=1))


def test_anthropic_sampling_rules() -> None:
    assert "temperature or top_p, not both" in refused(
        ModelSelection.parse("anthropic:claude-sonnet-4-5", temperature=0.5, top_p=0.9)
    )
    assert "cannot be combined with thinking_budget" in refused(
        ModelSelection.parse("anthropic:claude-opus-4-1", temperature=0.5, thinking_budget=2048)
    )
    assert "max_tokens must be greater than thinking_budget" in refused(
        ModelSelection.parse("anthropic:claude-opus-4-1", max_tokens=2000, thinking_budget=2048)
    )
    validate_selection(
        ModelSelection.parse("anthropic:claude-haiku-4-5", thinking_budget=2048, max_tokens=8000)
    )


def test_openai_compatible_needs_a_base_url_and_is_permissive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert "needs a base_url" in refused("openai-compatible:llama3.1")
    assert "give the served model's name" in refused("openai-compatible:@http://localhost:1234/v1")
    validate_selection(
        ModelSelection.parse("openai-compatible:qwen@http://localhost:8000/v1", top_k=20, mirostat=2)
    )
    assert "less than or equal to 2" in refused(
        ModelSelection.parse("openai-compatible:q@http://h/v1", temperature=9)
    )
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    validate_selection(ModelSelection.parse("openai-compatible:llama3.1"))
    assert "only for the openai" in refused(
        ModelSelection.parse("anthropic:claude-haiku-4-5", base_url="http://x")
    )


def test_local_model_parameters() -> None:
    validate_selection(ModelSelection.parse("local", temperature=0.1, n_ctx=4096, threads=1))
    assert "unknown parameter 'reasoning_effort'" in refused(
        ModelSelection.parse("local", reasoning_effort="low")
    )


@pytest.mark.parametrize(
    "name", ["api_key", "apiKey", "token", "access_token", "client_secret", "password", "Authorization"]
)
def test_credentials_are_never_accepted_as_parameters(name: str) -> None:
    with pytest.raises(FlowDefinitionError) as caught:
        ModelSelection.parse("openai:gpt-4.1", **{name: SECRET})
    assert SECRET not in str(caught.value)
    assert "environment" in str(caught.value)


def test_credentials_are_refused_in_base_urls() -> None:
    with pytest.raises(FlowDefinitionError, match="must not contain credentials") as caught:
        ModelSelection.parse(f"openai-compatible:x@http://user:{SECRET}@localhost/v1")
    assert SECRET not in str(caught.value)
    with pytest.raises(FlowDefinitionError, match="query"):
        ModelSelection("openai-compatible", "x", base_url=f"http://localhost/v1?api_key={SECRET}")
    with pytest.raises(FlowDefinitionError, match="http"):
        ModelSelection("openai-compatible", "x", base_url="file:///etc/passwd")


def test_no_secret_in_public_dict_str_or_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    for selection in (
        default_selection(),
        ModelSelection.parse("openai:gpt-4.1-mini", temperature=0.3, max_tokens=10),
        ModelSelection.parse("anthropic:claude-haiku-4-5", max_tokens=10),
        ModelSelection.parse("openai-compatible:llama3.1@http://localhost:11434/v1", top_k=3),
    ):
        model = create_model(selection)
        for text in (str(selection), repr(selection), str(selection.public_dict()), repr(model), model.name):
            assert SECRET not in text
        assert set(selection.public_dict()) == {"provider", "name", "params", "base_url"}


def test_create_model_reuses_one_instance_per_selection() -> None:
    first = create_model(ModelSelection.parse("openai:gpt-4.1-nano", max_tokens=5))
    assert create_model(ModelSelection.parse("openai:gpt-4.1-nano", max_tokens=5)) is first
    assert create_model(ModelSelection.parse("openai:gpt-4.1-nano", max_tokens=6)) is not first
    assert first.name == "openai:gpt-4.1-nano"
    with pytest.raises(FlowDefinitionError):
        create_model(ModelSelection.parse("openai:gpt-4.1-nano", temprature=1))


def test_default_selection_precedence() -> None:
    both = {"OPENAI_API_KEY": "a", "ANTHROPIC_API_KEY": "b"}
    assert default_selection({**both, "PICOFLOW_MODEL": "anthropic:claude-opus-4-1"}) == ModelSelection(
        "anthropic", "claude-opus-4-1"
    )
    assert default_selection(both) == ModelSelection("openai", DEFAULT_OPENAI_MODEL)
    assert default_selection({"ANTHROPIC_API_KEY": "b", "OPENAI_API_KEY": " "}) == ModelSelection(
        "anthropic", DEFAULT_ANTHROPIC_MODEL
    )
    assert default_selection({}) == ModelSelection("local", LOCAL_MODEL_NAME)
    assert default_selection({"PICOFLOW_MODEL": "local"}).provider == "local"
    for selection in (
        default_selection(both),
        default_selection({"ANTHROPIC_API_KEY": "b"}),
        default_selection({}),
    ):
        validate_selection(selection)


def test_register_model_extends_the_catalog() -> None:
    name = "claude-test-9"
    assert name not in known_models("anthropic")
    register_model(
        ModelSpec(provider="anthropic", name=name, params=AnthropicParams, default_max_tokens=1000)
    )
    assert name in known_models("anthropic")
    validate_selection(ModelSelection.parse(f"anthropic:{name}", temperature=0.5))
    with pytest.raises(ValueError, match="cannot register"):
        register_model(ModelSpec(provider="openai-compatible", name="x", params=AnthropicParams))


def window(selection: str, **params: object) -> tuple[int | None, int]:
    limits = context_limits_of(ModelSelection.parse(selection, **params))
    return limits.window, limits.output_reserve


def test_the_catalog_knows_each_models_window_and_what_its_answer_needs() -> None:
    assert window("local") == (local.DEFAULT_CONTEXT, local.DEFAULT_MAX_TOKENS) == (8192, 512)
    assert window("local", n_ctx=4096, max_tokens=256) == (4096, 256)
    assert window("openai:gpt-4.1-mini") == (1_047_576, 32_768)
    assert window("openai:gpt-4o", max_tokens=1000) == (128_000, 1000)
    # A lowered window caps the reserve at a quarter of it unless max_tokens says otherwise.
    assert window("openai:gpt-4.1-mini", context_window=32_000) == (32_000, 8000)
    assert window("openai:o3") == (200_000, 50_000)
    assert window("anthropic:claude-haiku-4-5") == (200_000, 8192)
    assert window("anthropic:claude-sonnet-4-5", thinking_budget=10_000) == (200_000, 18_192)
    assert window("openai-compatible:llama3.1@http://localhost:11434/v1") == (None, 0)
    assert window("openai-compatible:llama3.1@http://localhost:11434/v1", context_window=8192) == (8192, 2048)
    assert all(spec.context_window for spec in BUILTIN_SPECS)


def test_window_parameters_are_checked_when_the_flow_is_registered() -> None:
    assert refused(ModelSelection.parse("openai:gpt-4o", context_window=200_000)) == (
        "model openai:gpt-4o: context_window may not exceed the model's 128,000 tokens"
    )
    assert "parameter 'context_window': Input should be greater than or equal to 512" in refused(
        ModelSelection.parse("openai-compatible:x@http://h/v1", context_window=100)
    )
    assert refused(ModelSelection.parse("local", n_ctx=1024, max_tokens=1024)) == (
        "model local:qwen2.5-coder-1.5b-instruct-q4_k_m: max_tokens (1,024) must be smaller than the "
        "1,024-token context window, which also holds the prompt"
    )


def test_created_models_carry_their_window_and_never_send_it() -> None:
    url = "openai-compatible:qwen@http://127.0.0.1:9/v1"
    served = create_model(ModelSelection.parse(url, context_window=4096, max_tokens=300))
    assert (served.context_window, served.output_reserve) == (4096, 300)
    assert isinstance(served, OpenAIModel)
    kwargs = served.build_kwargs(ModelRequest(system="s", messages=[Message.user("hi")]))
    assert kwargs["max_tokens"] == 300 and "extra_body" not in kwargs
    embedded = create_model(ModelSelection.parse("local"))
    assert (embedded.context_window, embedded.output_reserve) == (8192, 512)
    unknown = create_model(ModelSelection.parse(url))
    assert (unknown.context_window, unknown.output_reserve) == (None, 0)


# --- Google Gemini -------------------------------------------------------------------------------


def test_gemini_models_accept_their_parameters() -> None:
    assert known_models("google") == ["gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro"]
    for name in known_models("google"):
        validate_selection(
            ModelSelection.parse(
                f"google:{name}", temperature=0.2, top_p=0.9, max_tokens=4000, thinking_budget=-1
            )
        )
    spec, params = resolve(ModelSelection.parse("google:gemini-2.5-flash", thinking_budget=0, top_k="40"))
    assert (spec.provider, params) == ("google", {"thinking_budget": 0, "top_k": 40})
    assert window("google:gemini-2.5-pro") == (1_048_576, 65_536)
    assert window("google:gemini-2.5-flash", max_tokens=2048) == (1_048_576, 2048)


def test_gemini_unknown_models_and_parameters_are_refused_with_what_is_allowed() -> None:
    assert refused("google:gemini-1.0-ultra") == (
        "unknown model 'gemini-1.0-ultra' for provider 'google'; known: gemini-2.5-flash, "
        "gemini-2.5-flash-lite, gemini-2.5-pro (register_model() adds one)"
    )
    assert refused(ModelSelection.parse("google:gemini-2.5-flash", frequency_penalty=1)) == (
        "model google:gemini-2.5-flash: unknown parameter 'frequency_penalty'; allowed: context_window, "
        "max_retries, max_tokens, seed, stop_sequences, temperature, thinking_budget, timeout, top_k, top_p"
    )
    assert "thinking_level is for Gemini 3" in refused(
        ModelSelection.parse("google:gemini-2.5-pro", thinking_level="low")
    )
    assert "not reasoning_effort" in refused(
        ModelSelection.parse("google:gemini-2.5-flash", reasoning_effort="low")
    )
    assert "base_url is only for" in refused(
        ModelSelection.parse("google:gemini-2.5-flash", base_url="http://localhost:1/")
    )


def test_gemini_thinking_budgets_follow_each_model() -> None:
    assert "thinking_budget must be -1 (dynamic), or between 128 and 32768" in refused(
        ModelSelection.parse("google:gemini-2.5-pro", thinking_budget=0)
    )
    assert "-1 (dynamic), 0 (off), or between 512 and 24576" in refused(
        ModelSelection.parse("google:gemini-2.5-flash-lite", thinking_budget=100)
    )
    assert "between 0 and 24576" in refused(
        ModelSelection.parse("google:gemini-2.5-flash", thinking_budget=30_000)
    )
    assert "max_tokens must be greater than thinking_budget" in refused(
        ModelSelection.parse("google:gemini-2.5-flash", thinking_budget=4096, max_tokens=4000)
    )
    assert "less than or equal to 65536" in refused(
        ModelSelection.parse("google:gemini-2.5-flash", max_tokens=70_000)
    )
    validate_selection(ModelSelection.parse("google:gemini-2.5-pro", thinking_budget=128))
    validate_selection(ModelSelection.parse("google:gemini-2.5-flash-lite", thinking_budget=0))


def test_a_gemini_model_is_created_without_reading_or_showing_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from picoflow.models.google import GoogleModel

    monkeypatch.setenv("GOOGLE_API_KEY", SECRET)
    selection = ModelSelection.parse("google:gemini-2.5-flash-lite", temperature=0.4)
    model = create_model(selection)
    assert isinstance(model, GoogleModel)
    assert (model.name, model.context_window, model.output_reserve) == (
        "google:gemini-2.5-flash-lite",
        1_048_576,
        65_536,
    )
    for text in (repr(model), str(selection.public_dict()), repr(selection)):
        assert SECRET not in text


# --- OpenAI-compatible presets -------------------------------------------------------------------


def test_deepseek_models_and_their_parameters() -> None:
    assert known_models("deepseek") == ["deepseek-chat", "deepseek-reasoner"]
    validate_selection(ModelSelection.parse("deepseek:deepseek-chat", temperature=1.3, max_tokens=8000))
    validate_selection(ModelSelection.parse("deepseek:deepseek-reasoner", max_tokens=32_000))
    assert refused(ModelSelection.parse("deepseek:deepseek-reasoner", temperature=0.5)) == (
        "deepseek:deepseek-reasoner ignores 'temperature' in thinking mode; leave it unset"
    )
    assert "known: deepseek-chat, deepseek-reasoner" in refused("deepseek:deepseek-v9")
    assert (
        "allowed: context_window, frequency_penalty, max_retries, max_tokens, presence_penalty, stop, "
        in (refused(ModelSelection.parse("deepseek:deepseek-chat", seed=1)))
    )
    assert window("deepseek:deepseek-chat") == (128_000, 8192)


def test_ollama_serves_any_model_with_checked_parameters() -> None:
    spec, params = resolve(
        ModelSelection.parse("ollama:llama3.1:8b", temperature=0.1, reasoning_effort="low")
    )
    assert (spec.provider, spec.name, params) == (
        "ollama",
        "llama3.1:8b",
        {"temperature": 0.1, "reasoning_effort": "low"},
    )
    assert "give the model's name" in refused("ollama:")
    assert refused(ModelSelection.parse("ollama:qwen3", mirostat=2)) == (
        "model ollama:qwen3: unknown parameter 'mirostat'; allowed: context_window, frequency_penalty, "
        "max_retries, max_tokens, parallel_tool_calls, presence_penalty, reasoning_effort, seed, stop, "
        "temperature, timeout, top_p"
    )
    assert window("ollama:qwen3") == (None, 0)
    assert window("ollama:qwen3", context_window=8192) == (8192, 2048)
    with pytest.raises(ValueError, match="cannot register"):
        register_model(ModelSpec(provider="ollama", name="x", params=AnthropicParams))


def test_openrouter_names_a_vendor_and_a_model() -> None:
    validate_selection(ModelSelection.parse("openrouter:anthropic/claude-sonnet-4.5", top_k=40, min_p=0.1))
    validate_selection(ModelSelection.parse("openrouter:meta-llama/llama-3.3-70b-instruct:free"))
    assert "'vendor/model'" in refused("openrouter:gpt-4.1")
    assert "unknown parameter 'temprature'; allowed: context_window, " in refused(
        ModelSelection.parse("openrouter:openai/gpt-4.1", temprature=1)
    )


def test_openai_chat_is_the_chat_completions_adapter_with_the_openai_catalog() -> None:
    assert known_models("openai-chat") == known_models("openai")
    assert "reasoning model" in refused(ModelSelection.parse("openai-chat:gpt-5.1", temperature=0.2))
    assert "known: gpt-4.1, gpt-4.1-mini" in refused("openai-chat:gpt-99")
    model = create_model(ModelSelection.parse("openai-chat:gpt-5-mini", max_tokens=77))
    assert isinstance(model, OpenAIModel)
    assert model.name == "openai-chat:gpt-5-mini"
    kwargs = model.build_kwargs(ModelRequest(system="s", messages=[Message.user("hi")]))
    # OpenAI itself: the reasoning models' field name, not the compatible servers' one.
    assert kwargs["max_completion_tokens"] == 77 and "max_tokens" not in kwargs


def test_openai_speaks_the_responses_api_and_refuses_chat_only_parameters() -> None:
    from picoflow.models.openai_responses import OpenAIResponsesModel

    assert ADAPTERS["openai"] == "picoflow.models.openai_responses:OpenAIResponsesModel"
    model = create_model(ModelSelection.parse("openai:gpt-4.1", max_tokens=78))
    assert isinstance(model, OpenAIResponsesModel) and model.name == "openai:gpt-4.1"
    for param, value in [("seed", 7), ("stop", "END"), ("frequency_penalty", 0.5), ("presence_penalty", 0.5)]:
        message = refused(ModelSelection.parse("openai:gpt-4.1", **{param: value}))
        assert f"{param} exists only in Chat Completions" in message
        assert "select 'openai-chat:gpt-4.1' to keep it" in message
        assert isinstance(
            create_model(ModelSelection.parse("openai-chat:gpt-4.1", **{param: value})), OpenAIModel
        )


def fake_url(received_from: str) -> str:
    return f"{received_from}/v1"


async def test_presets_send_their_own_key_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    deepseek_key, openrouter_key = "sk-deepseek-0123456789", "sk-or-v1-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", SECRET)
    monkeypatch.setenv("DEEPSEEK_API_KEY", deepseek_key)
    monkeypatch.setenv("OPENROUTER_API_KEY", openrouter_key)
    for selection, key in (
        (ModelSelection.parse("deepseek:deepseek-chat", max_tokens=11), deepseek_key),
        (ModelSelection.parse("openrouter:openai/gpt-4.1-mini", max_tokens=12), openrouter_key),
        (ModelSelection.parse("ollama:llama3.1:8b", max_tokens=13), "not-needed"),
    ):
        with serving([Reply(body=openai_completion("ok"))]) as server:
            monkeypatch.setenv(f"{selection.provider.upper()}_BASE_URL", fake_url(server.url))
            model = create_model(selection)
            assert model.name == str(selection)
            response = await model.request(ModelRequest(system="s", messages=[Message.user("hi")]))
            await model.aclose()
        assert response.text == "ok"
        received = server.received[0]
        assert received.path == "/v1/chat/completions"
        assert received.headers["authorization"] == f"Bearer {key}"
        assert received.body["model"] == selection.name
        # Compatible services take the classic field name.
        assert received.body["max_tokens"] == selection.params["max_tokens"]
        assert SECRET not in str(received.headers)


def test_presets_default_to_their_service_and_a_selection_may_move_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in ("DEEPSEEK_BASE_URL", "OLLAMA_BASE_URL", "OPENROUTER_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek-x")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-x")
    expected = {
        "deepseek:deepseek-reasoner": "https://api.deepseek.com/v1",
        "ollama:qwen3": "http://localhost:11434/v1",
        "openrouter:qwen/qwen3-coder": "https://openrouter.ai/api/v1",
        "ollama:qwen3@http://gpu-box:11434/v1": "http://gpu-box:11434/v1",
    }
    for text, url in expected.items():
        model = create_model(ModelSelection.parse(text, timeout=17))
        assert (
            repr(model) == f"OpenAIModel({str(ModelSelection.parse(text)).split('@')[0]!r}, base_url={url!r})"
        )
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://other:11434/v1/")
    moved = create_model(ModelSelection.parse("ollama:qwen3", timeout=18))
    assert "http://other:11434/v1'" in repr(moved)


async def test_a_preset_without_its_key_explains_which_variable_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    selection = ModelSelection.parse("deepseek:deepseek-chat", max_tokens=21)
    validate_selection(selection)  # registration does not need the key
    model = create_model(selection)
    with pytest.raises(ModelError, match="set the DEEPSEEK_API_KEY environment variable"):
        await model.request(ModelRequest(system="s", messages=[Message.user("hi")]))
    assert model.context_window == 128_000
    # Set later, the key is used: a keyless stand-in is never kept.
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek-later")
    assert isinstance(create_model(selection), OpenAIModel)


def test_no_preset_key_in_public_dict_or_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("DEEPSEEK_API_KEY", "OPENROUTER_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(variable, SECRET)
    for text in (
        "deepseek:deepseek-chat",
        "openrouter:openai/gpt-4.1-mini",
        "ollama:llama3.1",
        "openai-chat:gpt-4.1",
        "google:gemini-2.5-flash",
    ):
        selection = ModelSelection.parse(text, max_tokens=31)
        model = create_model(selection)
        assert set(selection.public_dict()) == {"provider", "name", "params", "base_url"}
        for shown in (str(selection.public_dict()), repr(selection), repr(model), model.name):
            assert SECRET not in shown


async def test_vllm_and_llamacpp_presets_take_their_own_sampling_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", SECRET)
    for selection, extra in (
        (
            ModelSelection.parse("vllm:Qwen/Qwen2.5-7B-Instruct", top_k=20, min_p=0.05, seed=3),
            {"top_k": 20, "min_p": 0.05},
        ),
        (
            ModelSelection.parse("llamacpp:qwen2.5", repeat_penalty=1.1, cache_prompt=True, seed=3),
            {"repeat_penalty": 1.1, "cache_prompt": True},
        ),
    ):
        with serving([Reply(body=openai_completion("ok"))]) as server:
            monkeypatch.setenv(f"{selection.provider.upper()}_BASE_URL", fake_url(server.url))
            model = create_model(selection)
            response = await model.request(ModelRequest(system="s", messages=[Message.user("hi")]))
            await model.aclose()
        assert response.text == "ok"
        received = server.received[0]
        assert received.headers["authorization"] == "Bearer not-needed"  # never another service's key
        assert received.body["seed"] == 3
        assert {key: received.body[key] for key in extra} == extra
    assert "repeat_penalty" in refused(ModelSelection.parse("vllm:m", repeat_penalty=1.1))
    assert "less than or equal to 2" in refused(ModelSelection.parse("llamacpp:m", repeat_penalty=3))
    monkeypatch.delenv("VLLM_BASE_URL")
    model = create_model(as_selection("vllm:m"))
    assert isinstance(model, OpenAIModel) and model._base_url == "http://localhost:8000/v1"


async def test_a_refused_preset_key_names_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    deepseek_key = "sk-deepseek-wrong-0123456789"
    monkeypatch.setenv("DEEPSEEK_API_KEY", deepseek_key)
    refusal = Reply(401, {"error": {"message": "Authentication Fails, Your api key is invalid"}})
    with serving([refusal]) as server:
        monkeypatch.setenv("DEEPSEEK_BASE_URL", fake_url(server.url))
        model = create_model(as_selection("deepseek:deepseek-chat"))
        with pytest.raises(ModelConfigurationError) as raised:
            await model.request(ModelRequest(system="s", messages=[Message.user("hi")]))
        await model.aclose()
    assert len(server.received) == 1  # not retried
    assert "DEEPSEEK_API_KEY" in str(raised.value) and "OPENAI_COMPATIBLE_API_KEY" not in str(raised.value)
    assert deepseek_key not in str(raised.value)
