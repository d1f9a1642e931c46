"""The shared retry loop: which failures are retried, how long it waits, what it finally raises."""

from __future__ import annotations

import email.utils

import pytest

from picoflow.exceptions import ModelConfigurationError, ModelError, ModelHTTPError, ModelMisbehaved
from picoflow.models._retry import Failure, RetryPolicy, call_with_retries, parse_retry_after, redact

from .fake_servers import RecordingSleep, fixed_random


class ProviderDown(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def classify(exc: BaseException) -> Failure | None:
    return exc.failure if isinstance(exc, ProviderDown) else None


class Script:
    """An attempt function that fails with the given failures, then returns "ok"."""

    def __init__(self, *failures: Failure) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise ProviderDown(self.failures.pop(0))
        return "ok"


def policy(sleep: RecordingSleep, **overrides: float) -> RetryPolicy:
    return RetryPolicy(sleep=sleep, random=fixed_random(), **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        *[(None, True), (408, True), (409, True), (429, True), (500, True), (503, True), (529, True)],
        *[(400, False), (401, False), (403, False), (404, False), (422, False)],
    ],
)
def test_which_statuses_are_retried(status: int | None, retryable: bool) -> None:
    assert Failure("x", status_code=status).retryable is retryable


def test_what_the_server_said_overrides_the_status() -> None:
    assert not Failure("bad key", 401, kind="configuration").retryable
    assert not Failure("unreadable output", 500, kind="misbehaviour").retryable
    assert Failure("loading", 400, kind="outage").retryable


async def test_a_configuration_failure_is_raised_at_once_with_its_advice() -> None:
    sleep = RecordingSleep()
    attempt = Script(Failure("Invalid API Key.", 401, kind="configuration", advice="Set KEY_VAR"))
    with pytest.raises(ModelConfigurationError) as caught:
        await call_with_retries(attempt, provider="p", classify=classify, policy=policy(sleep))
    assert attempt.calls == 1 and sleep.delays == []
    assert (caught.value.status_code, caught.value.provider, caught.value.retryable) == (401, "p", False)
    assert str(caught.value) == (
        "p returned HTTP 401 (authentication failed; check the API key environment variable) "
        "after 1 attempt: Invalid API Key. Set KEY_VAR"
    )


async def test_a_misbehaviour_is_not_retried_and_blames_the_model() -> None:
    sleep = RecordingSleep()
    attempt = Script(Failure("output does not match the expected format", 500, kind="misbehaviour"))
    with pytest.raises(ModelMisbehaved) as caught:
        await call_with_retries(attempt, provider="p", classify=classify, policy=policy(sleep))
    assert attempt.calls == 1 and sleep.delays == []
    assert type(caught.value) is ModelMisbehaved and caught.value.status == 502


def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    middle = RetryPolicy(initial_delay=0.5, multiplier=2, max_delay=5, jitter=0.2, random=fixed_random(0.5))
    assert [middle.backoff(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 5.0]
    low = RetryPolicy(initial_delay=1, jitter=0.2, random=fixed_random(0.0))
    high = RetryPolicy(initial_delay=1, jitter=0.2, random=fixed_random(0.999999))
    assert low.backoff(0) == pytest.approx(0.8)
    assert high.backoff(0) == pytest.approx(1.2, abs=1e-5)
    assert high.backoff(10) == high.max_delay


def test_retry_after_wins_over_backoff() -> None:
    rule = RetryPolicy(random=fixed_random())
    assert rule.delay(0, Failure("x", 429, retry_after=7.5)) == 7.5
    assert rule.delay(2, Failure("x", 429)) == 2.0


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": "12"}) == 12.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"Retry-After": date}, now=lambda: now) == pytest.approx(30.0)
    assert parse_retry_after({"Retry-After": "-3"}) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None


async def test_transient_failures_are_retried_until_success() -> None:
    sleep = RecordingSleep()
    attempt = Script(Failure("busy", 503), Failure("reset"), Failure("slow", 429, retry_after=4))
    result = await call_with_retries(attempt, provider="p", classify=classify, policy=policy(sleep))
    assert result == "ok"
    assert attempt.calls == 4
    assert sleep.delays == [0.5, 1.0, 4.0]


async def test_non_retryable_status_fails_at_once() -> None:
    sleep = RecordingSleep()
    attempt = Script(Failure("bad schema", 400))
    with pytest.raises(ModelHTTPError) as caught:
        await call_with_retries(attempt, provider="openai:x", classify=classify, policy=policy(sleep))
    assert attempt.calls == 1
    assert sleep.delays == []
    assert caught.value.status_code == 400
    assert (
        str(caught.value)
        == "openai:x returned HTTP 400 (the request was refused as invalid) after 1 attempt: bad schema"
    )


async def test_exhausted_retries_raise_the_last_status() -> None:
    sleep = RecordingSleep()
    attempt = Script(*[Failure("down", 502)] * 3)
    with pytest.raises(ModelHTTPError) as caught:
        await call_with_retries(attempt, provider="p", classify=classify, policy=policy(sleep, max_retries=2))
    assert attempt.calls == 3
    assert caught.value.status_code == 502
    assert caught.value.provider == "p"
    assert sleep.delays == [0.5, 1.0]


async def test_a_retry_after_too_long_to_wait_is_raised_with_its_value() -> None:
    sleep = RecordingSleep()
    attempt = Script(Failure("quota", 429, retry_after=3600))
    with pytest.raises(ModelHTTPError) as caught:
        await call_with_retries(attempt, provider="p", classify=classify, policy=policy(sleep))
    assert attempt.calls == 1
    assert sleep.delays == []
    assert caught.value.retry_after == 3600
    assert "retry after 3600s" in str(caught.value)


async def test_transport_failures_end_as_model_error() -> None:
    sleep = RecordingSleep()
    attempt = Script(*[Failure("read timeout", timed_out=True)] * 2)
    with pytest.raises(ModelError) as caught:
        await call_with_retries(attempt, provider="p", classify=classify, policy=policy(sleep, max_retries=1))
    assert not isinstance(caught.value, ModelHTTPError)
    assert str(caught.value) == "p did not answer in time after 2 attempts: read timeout"


async def test_unclassified_exceptions_propagate_untouched() -> None:
    calls = 0

    async def broken() -> str:
        nonlocal calls
        calls += 1
        raise KeyError("bug")

    sleep = RecordingSleep()
    with pytest.raises(KeyError):
        await call_with_retries(broken, provider="p", classify=classify, policy=policy(sleep))
    assert calls == 1


async def test_messages_never_carry_keys() -> None:
    sleep = RecordingSleep()
    attempt = Script(Failure("key sk-live-abcdefgh1234 and secret hunter22 refused", 401))
    with pytest.raises(ModelHTTPError) as caught:
        await call_with_retries(
            attempt, provider="p", classify=classify, policy=policy(sleep), secrets=["hunter22", None]
        )
    assert "sk-live" not in str(caught.value)
    assert "hunter22" not in str(caught.value)
    assert redact("Authorization: Bearer abc.def") == "Authorization: [redacted]"


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)
