"""Guards every test gets without asking.

* No real provider: provider keys, endpoints and ``PICOFLOW_MODEL`` are removed for the session, and
  a connection or name lookup to any host but this machine raises ``RealNetworkCall`` (see
  ``network_guard``).
* No forgotten script: every ``ScriptedModel`` a test builds must have played all its responses by
  the end of the test. Leftovers mean the flow took another path than the test assumes; a test that
  leaves some on purpose says so with ``model.drop_remaining()``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

from network_guard import block_remote_hosts, remove_provider_variables
from picoflow.models import ScriptedModel

_BUILT_MODELS = pytest.StashKey[list[ScriptedModel]]()


@pytest.fixture(scope="session", autouse=True)
def no_real_providers() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        remove_provider_variables(patch)
        block_remote_hosts(patch)
        yield


@pytest.fixture(autouse=True)
def scripted_models(request: pytest.FixtureRequest) -> Iterator[list[ScriptedModel]]:
    """Every ``ScriptedModel`` built during this test, by its fixtures or its body."""
    built: list[ScriptedModel] = []
    request.node.stash[_BUILT_MODELS] = built
    original = ScriptedModel.__init__

    def recording_init(self: ScriptedModel, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self)

    # A patch of its own, so a test that calls monkeypatch.undo() keeps the recording.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ScriptedModel, "__init__", recording_init)
        yield built


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    # Checked only after a test that passed: a failed one has said what went wrong already.
    __tracebackhide__ = True
    result = yield
    for model in item.stash.get(_BUILT_MODELS, []):
        try:
            model.assert_complete()
        except AssertionError as unplayed:
            raise AssertionError(f"{unplayed} (if on purpose, say so: model.drop_remaining())") from None
    return result
