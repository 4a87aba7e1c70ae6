"""Retry decisions (pure): backoff maths, Retry/Discard, and the outcome of a failed attempt."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from pgtasks import Discard, PayloadNotSerializableError, Retry
from pgtasks._retry import Outcome, RetryPolicy, after_error, after_timeout, backoff

NO_JITTER = RetryPolicy(base=1.0, cap=600.0, jitter=False)


def raised(error: BaseException) -> BaseException:
    """``error`` with a traceback, as a task would raise it."""
    try:
        raise error
    except BaseException as caught:
        return caught


# -- backoff --


@pytest.mark.parametrize(
    ("base", "expected"),
    [(1.0, [1.0, 2.0, 4.0, 8.0, 16.0]), (0.05, [0.05, 0.1, 0.2, 0.4, 0.8])],
)
def test_backoff_without_jitter_doubles_from_the_base(base: float, expected: list[float]) -> None:
    policy = RetryPolicy(base=base, cap=600.0, jitter=False)

    delays = [backoff(attempt, policy) for attempt in range(1, 6)]

    assert delays == pytest.approx(expected)


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(base=1.0, cap=10.0, jitter=False)

    assert [backoff(attempt, policy) for attempt in (4, 5, 6, 30)] == [8.0, 10.0, 10.0, 10.0]


def test_backoff_of_an_attempt_too_large_for_a_float_is_the_cap() -> None:
    assert backoff(5000, NO_JITTER) == 600.0


@pytest.mark.parametrize("attempt", [0, -3])
def test_backoff_treats_attempts_below_one_as_the_first(attempt: int) -> None:
    assert backoff(attempt, NO_JITTER) == backoff(1, NO_JITTER) == 1.0


def test_backoff_with_jitter_stays_between_half_and_all_of_the_nominal_delay() -> None:
    policy = RetryPolicy(base=1.0, cap=600.0, jitter=True)
    rng = random.Random(7)

    for attempt in range(1, 8):
        nominal = backoff(attempt, NO_JITTER)
        delays = [backoff(attempt, policy, rng) for _ in range(200)]
        assert all(nominal / 2 <= delay <= nominal for delay in delays)
        assert min(delays) < nominal * 0.6, "the jitter spreads delays down to about half"
        assert max(delays) > nominal * 0.9, "and up to about the whole delay"


def test_backoff_with_jitter_is_reproducible_with_a_seeded_generator() -> None:
    policy = RetryPolicy(base=0.5, cap=600.0, jitter=True)

    first = [backoff(3, policy, random.Random(42)) for _ in range(3)]
    second = [backoff(3, policy, random.Random(42)) for _ in range(3)]

    assert first == second


def test_backoff_with_jitter_never_exceeds_the_cap() -> None:
    policy = RetryPolicy(base=1.0, cap=5.0, jitter=True)
    rng = random.Random(3)

    delays = [backoff(20, policy, rng) for _ in range(200)]

    assert all(2.5 <= delay <= 5.0 for delay in delays)


def test_the_default_policy_starts_at_one_second_and_caps_at_ten_minutes() -> None:
    policy = RetryPolicy()

    assert (policy.base, policy.cap, policy.jitter) == (1.0, 600.0, True)


# -- Retry and Discard --


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [(0, 0.0), (2, 2.0), (0.25, 0.25), (timedelta(minutes=1, milliseconds=500), 60.5)],
    ids=["zero", "int", "float", "timedelta"],
)
def test_retry_takes_seconds_or_a_timedelta(delay: float | timedelta, seconds: float) -> None:
    assert Retry(delay=delay).delay == seconds


def test_retry_message_says_when_or_gives_the_reason() -> None:
    assert str(Retry(delay=2)) == "retry requested in 2 s"
    assert str(Retry(delay=2, reason="rate limited")) == "rate limited"
    assert Retry(reason="rate limited").reason == "rate limited"


@pytest.mark.parametrize("delay", [-1, -0.001, timedelta(seconds=-5)], ids=str)
def test_retry_rejects_a_negative_delay(delay: float | timedelta) -> None:
    with pytest.raises(ValueError, match=r"in \[0, 1e9\]"):
        Retry(delay=delay)


@pytest.mark.parametrize("delay", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_retry_rejects_a_delay_that_is_not_finite(delay: float) -> None:
    with pytest.raises(ValueError):
        Retry(delay=delay)


def test_retry_and_discard_are_exceptions_a_task_raises() -> None:
    assert issubclass(Retry, Exception)
    assert issubclass(Discard, Exception)


# -- after_error --


def test_an_error_before_the_last_attempt_is_retried_after_the_backoff() -> None:
    policy = RetryPolicy(base=0.05, cap=600.0, jitter=False)

    outcome = after_error(raised(ValueError("boom")), attempt=2, max_attempts=3, policy=policy)

    assert (outcome.kind, outcome.status) == ("retry", "pending")
    assert outcome.delay == pytest.approx(0.1)
    assert outcome.summary == "retry in 0.1 s"


def test_an_error_on_the_last_attempt_fails_the_job() -> None:
    outcome = after_error(raised(ValueError("boom")), attempt=3, max_attempts=3, policy=NO_JITTER)

    assert (outcome.kind, outcome.status) == ("failed", "failed")
    assert outcome.summary == "failed"


def test_the_error_keeps_its_type_message_and_traceback() -> None:
    outcome = after_error(
        raised(ValueError("bad row 7")), attempt=1, max_attempts=1, policy=NO_JITTER
    )

    assert outcome.error is not None
    assert outcome.error.startswith("Traceback (most recent call last):")
    assert "in raised" in outcome.error
    assert outcome.error.endswith("ValueError: bad row 7")


def test_an_explicit_retry_uses_its_own_delay() -> None:
    outcome = after_error(
        raised(Retry(delay=timedelta(seconds=7))), attempt=1, max_attempts=5, policy=NO_JITTER
    )

    assert (outcome.kind, outcome.status, outcome.delay) == ("retry", "pending", 7.0)


def test_an_explicit_retry_with_no_attempts_left_fails_the_job() -> None:
    outcome = after_error(raised(Retry(delay=1)), attempt=5, max_attempts=5, policy=NO_JITTER)

    assert (outcome.kind, outcome.status) == ("failed", "failed")
    assert outcome.error is not None
    assert "Retry: retry requested in 1 s" in outcome.error


def test_discard_fails_the_job_at_once() -> None:
    outcome = after_error(
        raised(Discard("customer deleted")), attempt=1, max_attempts=5, policy=NO_JITTER
    )

    assert (outcome.kind, outcome.status) == ("discarded", "failed")
    assert outcome.error is not None
    assert "Discard: customer deleted" in outcome.error


@pytest.mark.parametrize(
    "error", [KeyError("sku"), LookupError("sku")], ids=["listed", "not-a-subclass"]
)
def test_dont_retry_fails_only_the_listed_exceptions(
    error: Exception,
) -> None:
    outcome = after_error(
        raised(error), attempt=1, max_attempts=5, policy=NO_JITTER, dont_retry=(KeyError,)
    )

    expected = "discarded" if isinstance(error, KeyError) else "retry"
    assert outcome.kind == expected


def test_dont_retry_matches_subclasses() -> None:
    class MissingSku(KeyError):
        pass

    outcome = after_error(
        raised(MissingSku("sku")),
        attempt=1,
        max_attempts=5,
        policy=NO_JITTER,
        dont_retry=(KeyError,),
    )

    assert (outcome.kind, outcome.status) == ("discarded", "failed")


def test_a_payload_error_is_not_retried() -> None:
    error = raised(PayloadNotSerializableError("the return value cannot be stored as JSON"))

    outcome = after_error(error, attempt=1, max_attempts=5, policy=NO_JITTER)

    assert (outcome.kind, outcome.status) == ("failed", "failed")


# -- after_timeout and done --


def test_a_timeout_before_the_last_attempt_is_retried_after_the_backoff() -> None:
    outcome = after_timeout(2.5, attempt=1, max_attempts=2, policy=NO_JITTER)

    assert (outcome.kind, outcome.status, outcome.delay) == ("timeout", "pending", 1.0)
    assert outcome.error == "TimeoutError: the task did not finish within its timeout of 2.5 s"


def test_a_timeout_on_the_last_attempt_fails_the_job() -> None:
    outcome = after_timeout(2.5, attempt=2, max_attempts=2, policy=NO_JITTER)

    assert (outcome.kind, outcome.status) == ("timeout", "failed")
    assert outcome.error is not None
    assert "TimeoutError" in outcome.error


def test_a_policy_without_timeout_retries_fails_the_first_timed_out_attempt() -> None:
    policy = RetryPolicy(1.0, 600.0, False, retry_timeouts=False)
    outcome = after_timeout(2.5, attempt=1, max_attempts=5, policy=policy)

    assert (outcome.kind, outcome.status) == ("timeout", "failed")


def test_a_retry_with_its_own_limit_runs_past_the_job_s_max_attempts() -> None:
    past = after_error(Retry(3, max_attempts=5), attempt=2, max_attempts=2, policy=NO_JITTER)
    last = after_error(Retry(3, max_attempts=5), attempt=5, max_attempts=2, policy=NO_JITTER)

    assert (past.status, past.delay) == ("pending", 3.0)
    assert last.status == "failed"
    with pytest.raises(ValueError, match="max_attempts"):
        Retry(1, max_attempts=0)


def test_done_carries_the_encoded_result() -> None:
    assert Outcome.done('{"total": 6}') == Outcome("done", "done", result_json='{"total": 6}')


@pytest.mark.parametrize(
    ("outcome", "kind", "status"),
    [
        (Outcome.retry(2.0, "E", "builtins.E"), "retry", "pending"),
        (Outcome.failed("E", "builtins.E"), "failed", "failed"),
        (Outcome.discarded("E", "builtins.E"), "discarded", "failed"),
        (Outcome.timed_out("E", delay=2.0), "timeout", "pending"),
        (Outcome.timed_out("E", delay=None), "timeout", "failed"),
        (Outcome.cancelled("E"), "cancelled", "failed"),
    ],
)
def test_each_named_constructor_sets_its_kind_and_the_next_status(
    outcome: Outcome, kind: str, status: str
) -> None:
    assert (outcome.kind, outcome.status, outcome.error) == (kind, status, "E")
    assert outcome.delay == (2.0 if status == "pending" else 0.0)
