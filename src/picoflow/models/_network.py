"""What every networked adapter shares: its selection and parameters, the retry policy and time
limit, where the key and endpoint come from, and one SDK client per event loop (an SDK's
connection pool belongs to the loop it was made on).

The SDK itself stays in the adapter: ``new_client`` builds it there, so importing this module
imports no SDK.
"""

from __future__ import annotations

import asyncio
import os
from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar

from picoflow.models._retry import RetryPolicy, split_params
from picoflow.models.base import Model

if TYPE_CHECKING:
    from picoflow.models._specs import ModelSpec
    from picoflow.models.catalog import ModelSelection

C = TypeVar("C")

DEFAULT_TIMEOUT = 60.0
"""Seconds an attempt may take unless the selection's ``timeout`` says otherwise."""


class NetworkModel(Model, Generic[C]):
    """A model behind a provider's API, reached through its SDK client ``C``."""

    #: The provider of a model made without one (``AnthropicModel("claude-haiku-4-5")``).
    default_provider: ClassVar[str]
    #: Environment variable that moves the endpoint when neither the caller nor the selection does.
    base_url_env: ClassVar[str | None] = None

    def __init__(
        self,
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        params: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        spec: ModelSpec | None = None,
    ) -> None:
        self.model = model
        self.provider = provider or self.default_provider
        self.name = f"{self.provider}:{model}"
        self.spec = spec
        self._params, self._timeout, self.retry = split_params(params, retry, DEFAULT_TIMEOUT)
        self.time_limit = self._timeout * (1 + self.retry.max_retries)
        self._api_key = api_key
        moved = os.environ.get(self.base_url_env) if self.base_url_env else None
        self._base_url = base_url or moved or None
        self._client: C | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_selection(cls, selection: ModelSelection) -> Self:
        from picoflow.models.catalog import resolve

        spec, params = resolve(selection)
        return cls(
            selection.name, provider=selection.provider, base_url=selection.base_url, params=params, spec=spec
        )

    def __repr__(self) -> str:
        where = f", base_url={self._base_url!r}" if self._base_url else ""
        return f"{type(self).__name__}({self.name!r}{where})"

    def client(self) -> C:
        """The SDK client for the running event loop (its connection pool is bound to one loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = self.new_client()
            self._client_loop = loop
        return self._client

    @abstractmethod
    def new_client(self) -> C:
        """A new SDK client with the key, the endpoint and the time limit, and no retries of its own
        (``_retry`` decides about the next attempt)."""

    async def close_client(self, client: C) -> None:
        await client.close()  # type: ignore[attr-defined]  # every SDK client but Gemini's has close()

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await self.close_client(client)
