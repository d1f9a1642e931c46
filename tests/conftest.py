"""No test reaches a real provider: provider keys, endpoints and ``PICOFLOW_MODEL`` are removed for
the session, and a connection or name lookup to any host but this machine raises ``RealNetworkCall``
(see ``network_guard``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from network_guard import block_remote_hosts, remove_provider_variables


@pytest.fixture(scope="session", autouse=True)
def no_real_providers() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        remove_provider_variables(patch)
        block_remote_hosts(patch)
        yield
