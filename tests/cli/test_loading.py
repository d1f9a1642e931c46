"""What ``--flows`` and ``--model`` name, loaded; a mistake in either is one line and exit status 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import invoke


def test_flows_option_loads_your_own_and_explains_mistakes() -> None:
    own = invoke("flows", "--flows", "picoflow_demos.hotel:HotelFlow")
    assert own.exit_code == 0 and "│ hotel " in own.output and "orders" not in own.output
    from_env = invoke("flows", env={"PICOFLOW_FLOWS": "picoflow_demos:FLOWS"})
    assert from_env.exit_code == 0 and "orders" in from_env.output
    for spec, problem in [
        ("picoflow_demos.hotel", "name flows as module:Class"),
        ("no_such_module:Flow", "cannot import no_such_module"),
        ("picoflow_demos.hotel:Criteria", "is not a Flow subclass"),
    ]:
        bad = invoke("flows", "--flows", spec)
        assert bad.exit_code == 1 and problem in bad.output, bad.output


def test_a_python_model_is_an_instance_or_a_function_returning_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Like --flows, modules of the folder the command runs in are importable.
    (tmp_path / "cli_models_here.py").write_text(
        "from picoflow.models import FunctionModel, ScriptedModel\n"
        "greeter = ScriptedModel(['{\"found\": []}'])\n"
        "def make():\n"
        "    return FunctionModel(lambda request: '{\"found\": []}')\n"
        "not_a_model = 42\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    for attribute in ("greeter", "make"):
        chat = invoke(
            "chat", "hotel", "--store", "memory://", "--model", f"python:cli_models_here:{attribute}",
            input="hi\n/quit\n",
        )  # fmt: skip
        assert chat.exit_code == 0, chat.output
        assert "Hello! I can help you find a hotel" in chat.output
    for choice, problem in [
        ("python:cli_models_here", "name the model as python:module:attribute"),
        ("python:no_such_module:x", "cannot load the model python:no_such_module:x"),
        ("python:cli_models_here:missing", "cannot load the model python:cli_models_here:missing"),
        ("python:cli_models_here:not_a_model", "is not a picoflow Model"),
        ("nowhere:model", "unknown model provider 'nowhere'"),
    ]:
        bad = invoke("chat", "hotel", "--store", "memory://", "--model", choice)
        assert bad.exit_code == 1 and problem in bad.output, bad.output
        assert "Traceback" not in bad.output


def test_a_model_script_must_be_a_list_of_replies_and_calls(tmp_path: Path) -> None:
    missing = invoke("chat", "hotel", "--store", "memory://", "--model", f"scripted:{tmp_path / 'none.json'}")
    assert missing.exit_code == 1 and "cannot read the model script" in missing.output
    script = tmp_path / "script.json"
    for content, problem in [
        ("[1", "cannot read the model script"),
        ('{"reply": "hi"}', "a model script is a JSON list of replies"),
        ('[{"name": "search"}]', 'a tool call is written {"tool": "name", "args": {...}}'),
    ]:
        script.write_text(content, encoding="utf-8")
        bad = invoke("chat", "hotel", "--store", "memory://", "--model", f"scripted:{script}")
        assert bad.exit_code == 1 and problem in " ".join(bad.output.split()), bad.output
