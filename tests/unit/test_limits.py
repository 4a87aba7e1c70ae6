"""Declaring concurrency and rate limits: parsing, and the clear errors bad values get at
declaration and at enqueue (before anything is written)."""

from __future__ import annotations

from typing import Any

import pytest

from pgtasks import App, ConfigurationError, LimitKeyError, TaskRegistrationError
from pgtasks._limits import RateLimit, parse_rate_limit

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"


@pytest.mark.parametrize(
    ("text", "count", "period", "burst"),
    [
        # The bucket: one token plus a quarter second's (at most two), or 100 ms of tokens.
        ("100/m", 100, 60.0, 1 + 100 / 60 / 4),
        ("5/s", 5, 1.0, 2.0),
        ("1/s", 1, 1.0, 1.25),
        ("1000/h", 1000, 3600.0, 1 + 1000 / 3600 / 4),
        ("10/30s", 10, 30.0, 1 + 10 / 30 / 4),
        (" 200 / s ", 200, 1.0, 20.0),
    ],
)
def test_rate_limits_parse(text: str, count: int, period: float, burst: float) -> None:
    rate = parse_rate_limit("rate_limit=", text)
    assert (rate.count, rate.period) == (count, period)
    assert rate.burst == pytest.approx(burst)
    assert isinstance(rate, RateLimit)


@pytest.mark.parametrize("value", ["abc", "0/m", "10/d", "10", "/m", "-1/s", "1.5/s", 5, ""])
def test_a_bad_rate_limit_is_refused_at_declaration(value: Any) -> None:
    app = App(UNREACHABLE)
    with pytest.raises(TaskRegistrationError, match="rate_limit= must"):

        @app.task(rate_limit=value)
        def work() -> None: ...

    with pytest.raises(ConfigurationError, match="rate_limit= must"):
        app.queue("q", rate_limit=value)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2", 2**31])
def test_a_bad_concurrency_is_refused_at_declaration(value: Any) -> None:
    app = App(UNREACHABLE)
    with pytest.raises(TaskRegistrationError, match="concurrency= must be an int >= 1"):

        @app.task(concurrency=value)
        def work() -> None: ...

    with pytest.raises(ConfigurationError, match="concurrency= must be an int >= 1"):
        app.queue("q", concurrency=value)


def test_a_concurrency_key_needs_a_function_and_a_concurrency() -> None:
    app = App(UNREACHABLE)
    with pytest.raises(TaskRegistrationError, match="concurrency_key= needs concurrency="):

        @app.task(concurrency_key=lambda user: user)
        def work(user: str) -> None: ...

    with pytest.raises(TaskRegistrationError, match="concurrency_key= must be a function"):

        @app.task(concurrency_key="user", concurrency=1)
        def other(user: str) -> None: ...


def test_a_bad_queue_name_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="queue"):
        App(UNREACHABLE).queue("", concurrency=1)


def _failing_key(user: str) -> str:
    raise KeyError("no such user")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (_failing_key, "concurrency_key raised KeyError"),
        (lambda user: 1.5, "must return a str or an int, got 1.5"),
        (lambda user: None, "must return a str or an int, got None"),
        (lambda user: True, "must return a str or an int, got True"),
        (lambda user: "", "concurrency key must be a non-empty string"),
        (lambda user: "a\x00b", "must not contain NUL"),
        (lambda user: "x" * 100_000, "over the limit"),
    ],
)
def test_a_bad_concurrency_key_fails_the_enqueue_clearly(key: Any, message: str) -> None:
    app = App(UNREACHABLE)

    @app.task(concurrency_key=key, concurrency=1)
    def work(user: str) -> None: ...

    with pytest.raises(LimitKeyError, match=message):
        work.build_spec(["ann"])
    with pytest.raises(ValueError, match=message):  # LimitKeyError is a ValueError too
        work.build_spec([], {"user": "ann"})


def test_the_key_comes_from_the_call_arguments_and_ints_become_text() -> None:
    app = App(UNREACHABLE)
    app.queue("reports", concurrency=2, rate_limit="10/s")

    @app.task(queue="reports", concurrency_key=lambda user_id, **_: user_id, concurrency=1)
    def report(user_id: int, kind: str = "x") -> None: ...

    @app.task(rate_limit="100/m")
    def rated() -> None: ...

    @app.task
    def plain() -> None: ...

    spec = report.build_spec([42], {"kind": "y"})
    assert spec.limit_groups == (f"key:{report.name}\x1f42", "queue:reports")
    assert spec.limit_key == "42"
    elsewhere = report.build_spec([], {"user_id": 7}, queue="other")
    assert elsewhere.limit_groups == (f"key:{report.name}\x1f7",)
    assert rated.build_spec().limit_groups == (f"task:{rated.name}",)
    assert rated.build_spec().limit_key is None
    assert plain.build_spec().limit_groups is None
    assert [definition.name for definition in app.limit_definitions()] == [
        f"key:{report.name}",
        "queue:reports",
        f"task:{rated.name}",
    ]


def test_a_name_with_the_separator_is_refused_under_a_limit() -> None:
    app = App(UNREACHABLE)
    with pytest.raises(TaskRegistrationError, match="x1f"):

        @app.task(name="odd\x1fname", concurrency=1)
        def work() -> None: ...

    with pytest.raises(ConfigurationError, match="x1f"):
        app.queue("odd\x1fqueue", concurrency=1)
