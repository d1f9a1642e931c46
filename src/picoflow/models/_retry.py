"""Retries shared by every network adapter, so backoff behaves the same whatever the provider.

Provider SDKs are configured with ``max_retries=0``: their own retry loops differ between vendors and
hide the delays from tests. Each adapter instead hands this module a *classifier* that turns an SDK
exception into a provider-neutral ``Failure``; the loop below decides whether and how long to wait.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from picoflow.exceptions import ModelConfigurationError, ModelError, ModelHTTPError, ModelMisbehaved
from picoflow.models.base import StreamEvent

T = TypeVar("T")

#: Statuses worth another attempt: request timeout, lock conflict, rate limit, and server-side failures.
RETRYABLE_STATUSES = frozenset({408, 409, 429})

_STATUS_HINTS = {
    400: "the request was refused as invalid",
    401: "authentication failed; check the API key environment variable",
    403: "the API key is not allowed to use this model",
    404: "the model or endpoint was not found",
    413: "the request is too large",
    422: "the request was refused as invalid",
    429: "rate limited",
}

FailureKind = Literal["outage", "configuration", "misbehaviour"]
"""Who must act: wait for the provider (``outage``), fix a setting (``configuration``: a key, a
model name), or accept that the model's answer was unusable (``misbehaviour``: asking the same
request again would meet the same model)."""

_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-*.]{6,}|\bBearer\s+\S+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Failure:
    """What went wrong with one attempt, independent of the SDK that reported it."""

    message: str
    status_code: int | None = None
    """HTTP status, or ``None`` for transport failures (connection refused, timeout)."""
    retry_after: float | None = None
    """Seconds the provider asked us to wait (``Retry-After``/``retry-after-ms``)."""
    timed_out: bool = False
    kind: FailureKind | None = None
    """What the provider's answer says went wrong; ``None`` judges by the status alone."""
    advice: str | None = None
    """What the operator should do, said after the provider's message (e.g. which variable to set)."""

    @property
    def retryable(self) -> bool:
        if self.kind is not None:
            return self.kind == "outage"
        if self.status_code is None:
            return True
        return self.status_code in RETRYABLE_STATUSES or self.status_code >= 500


Classifier = Callable[[BaseException], Failure | None]
"""Maps an exception to a ``Failure``; ``None`` means "not a provider failure, let it propagate"."""


async def _default_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently a model call is retried."""

    max_retries: int = 3
    """Extra attempts after the first one (0 disables retries)."""
    initial_delay: float = 0.5
    """Seconds before the first retry, before jitter."""
    multiplier: float = 2.0
    """Growth factor of the delay between consecutive retries."""
    max_delay: float = 20.0
    """Upper bound of a computed (not provider-requested) delay."""
    jitter: float = 0.25
    """Relative spread of each delay (0.25 is ±25%), so clients that failed together do not retry together."""
    max_retry_after: float = 60.0
    """A ``Retry-After`` longer than this is not waited for: the error is raised at once, carrying it."""
    sleep: Callable[[float], Awaitable[None]] = field(default=_default_sleep, repr=False)
    """Injected so tests can record the delays instead of waiting."""
    random: Callable[[], float] = field(default=random.random, repr=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def backoff(self, retry: int) -> float:
        """The computed delay before retry number ``retry`` (0-based), jitter included."""
        base = min(self.max_delay, self.initial_delay * self.multiplier**retry)
        spread = 1.0 + self.jitter * (2.0 * self.random() - 1.0)
        return min(self.max_delay, base * spread)

    def delay(self, retry: int, failure: Failure) -> float:
        """How long to wait before retry ``retry``: the provider's ``Retry-After`` wins when given."""
        if failure.retry_after is not None:
            return max(0.0, failure.retry_after)
        return self.backoff(retry)


#: Parameters of picoflow's side of a call (how the adapter calls the provider, how large a request
#: the runner builds), never sent to the provider.
ADAPTER_KNOBS = ("timeout", "max_retries", "context_window")


def split_params(
    params: Mapping[str, Any] | None, retry: RetryPolicy | None, default_timeout: float
) -> tuple[dict[str, Any], float, RetryPolicy]:
    """A selection's params split into those for the provider, the timeout and the retry policy."""
    settings = dict(params or {})
    provider = {key: value for key, value in settings.items() if key not in ADAPTER_KNOBS}
    timeout = float(settings.get("timeout") or default_timeout)
    policy = retry or RetryPolicy()
    if settings.get("max_retries") is not None:
        policy = dataclasses.replace(policy, max_retries=int(settings["max_retries"]))
    return provider, timeout, policy


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait according to ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` without anything that looks like an API key, nor any of ``secrets``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return _KEY_LIKE.sub("[redacted]", text)


def describe_status(status: int) -> str:
    hint = _STATUS_HINTS.get(status)
    if hint is None:
        hint = "server error" if status >= 500 else "request refused"
    return f"HTTP {status} ({hint})"


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    provider: str,
    classify: Classifier,
    policy: RetryPolicy,
    secrets: Iterable[str | None] = (),
) -> T:
    """Run ``attempt`` until it succeeds, retrying transient failures with backoff.

    Raises ``ModelHTTPError`` for an error status (at once when it is not retryable) and
    ``ModelError`` when the provider could not be reached or did not answer in time.
    """
    secret_list = list(secrets)
    retry = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            too_long = failure.retry_after is not None and failure.retry_after > policy.max_retry_after
            if not failure.retryable or retry >= policy.max_retries or too_long:
                raise _final_error(provider, failure, retry + 1, secret_list) from exc
            await policy.sleep(policy.delay(retry, failure))
            retry += 1


def _final_error(provider: str, failure: Failure, attempts: int, secrets: list[str | None]) -> ModelError:
    tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
    detail = redact(failure.message, secrets).strip()
    if failure.status_code is None and failure.kind is None:
        what = "did not answer in time" if failure.timed_out else "could not be reached"
        return ModelError(f"{provider} {what} {tries}: {detail}")
    status = "an error" if failure.status_code is None else describe_status(failure.status_code)
    message = f"{provider} returned {status} {tries}"
    if failure.retry_after is not None:
        message += f"; retry after {failure.retry_after:g}s"
    if detail:
        message += f": {detail}"
    if failure.advice:
        message = f"{message.rstrip('.')}. {failure.advice}"
    if failure.kind == "misbehaviour":
        return ModelMisbehaved(message)
    error = ModelConfigurationError if failure.kind == "configuration" else ModelHTTPError
    return error(message, status_code=failure.status_code, retry_after=failure.retry_after, provider=provider)


async def relay_stream(
    stream: Any,
    feed: Callable[[Any], Iterable[StreamEvent]],
    *,
    name: str,
    classify: Callable[[BaseException], Failure | None],
    secrets: Iterable[str | None] = (),
) -> AsyncIterator[StreamEvent]:
    """Turn an SDK stream into picoflow stream events; a provider failure mid-stream becomes a
    ``ModelError`` (no retry: part of the answer may already have been shown)."""
    try:
        async for item in stream:
            for event in feed(item):
                yield event
    except Exception as exc:
        failure = classify(exc)
        if failure is None:
            raise
        raise ModelError(f"{name} stream failed: {redact(failure.message, secrets)}") from exc
    finally:
        await stream.close()
