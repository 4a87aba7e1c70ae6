"""AppSettings and WorkerSettings: one frozen value each, checked once when made (no
database is contacted)."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import pytest

from pgtasks import App, ConfigurationError, Worker
from pgtasks._app.settings import AppSettings
from pgtasks._execution.settings import ExecutorSettings
from pgtasks._store.connecting import DatabaseSettings, PoolSettings
from pgtasks._worker.settings import WorkerSettings

DSN = "postgresql://u:S3cr3t!@127.0.0.1:1/db"


def app_settings(**options: Any) -> AppSettings:
    return AppSettings.resolve(DSN, schema="unit_tests", environ={}, **options)


def test_app_keywords_make_one_frozen_settings_value_its_attributes_read() -> None:
    app = App(DSN, schema="unit_tests", lease_timeout=20, pool_max_size=3, eager=True)
    settings = app.settings
    assert settings.lease_timeout == 20.0 and isinstance(settings.lease_timeout, float)
    assert settings.pools == PoolSettings(max_size=3)
    assert settings.database.dsn == DSN and settings.database.schema == "unit_tests"
    assert (app.lease_timeout, app.pool_max_size, app.schema) == (20.0, 3, "unit_tests")
    assert app.is_eager
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.lease_timeout = 1.0  # type: ignore[misc]


def test_the_former_name_of_app_queries_warns_and_reads_the_same_statements() -> None:
    app = App(DSN, schema="unit_tests")
    former = operator.attrgetter("store")  # the name before app.queries
    with pytest.warns(DeprecationWarning, match=r"App\.store is deprecated: use App\.queries"):
        statements = former(app)
    assert statements is app.queries and statements.schema == "unit_tests"


def test_the_environment_fills_in_only_what_is_not_given() -> None:
    environ = {
        "PGTASKS_DSN": "postgresql://env/db",
        "PGTASKS_SCHEMA": "from_env",
        "PGTASKS_SESSION_DSN": "postgresql://session/db",
    }
    settings = AppSettings.resolve(None, environ=environ)
    assert settings.database.dsn == "postgresql://env/db"
    assert settings.database.schema == "from_env"
    assert settings.database.session_dsn == "postgresql://session/db"
    given = AppSettings.resolve(DSN, schema="mine", session_dsn="postgresql://s/x", environ=environ)
    assert (given.database.dsn, given.database.schema) == (DSN, "mine")
    assert given.database.session_dsn == "postgresql://s/x"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"heartbeat_interval": 30, "lease_timeout": 30}, "must be shorter than"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"prune_interval": float("nan")}, "prune_interval"),
        ({"default_queue": ""}, "default_queue"),
        ({"default_max_attempts": 0}, "default_max_attempts"),
        ({"max_payload_bytes": 10}, "max_payload_bytes"),
        ({"max_error_bytes": True}, "max_error_bytes"),
        ({"prune_done_after": -1}, "prune_done_after"),
        ({"pool_min_size": 5, "pool_max_size": 2}, "pool_min_size"),
        ({"connect_attempts": 0}, "connect_attempts"),
        ({"pooled": "yes"}, "pooled"),
        ({"replica_dsn": 42}, "replica_dsn"),
    ],
)
def test_app_settings_refuse_bad_options_with_the_option_named(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        app_settings(**options)
    with pytest.raises(ConfigurationError, match=message):
        App(DSN, schema="unit_tests", **options)


def test_database_settings_refuse_a_schema_of_its_own_kind_only() -> None:
    with pytest.raises(ConfigurationError, match="schema of its own"):
        DatabaseSettings.resolve(DSN, schema="public", environ={})
    with pytest.raises(ConfigurationError, match="invalid schema name ''"):
        DatabaseSettings.resolve(DSN, schema="", environ={"PGTASKS_SCHEMA": "fine"})


def test_worker_settings_take_the_apps_intervals_unless_given() -> None:
    app = app_settings(lease_timeout=40, heartbeat_interval=4, rescue_interval=6, poll_interval=2)
    derived = WorkerSettings.derive(app)
    assert (derived.lease_timeout, derived.heartbeat_interval) == (40.0, 4.0)
    assert (derived.rescue_interval, derived.poll_interval) == (6.0, 2.0)
    assert derived.prune_interval == app.prune_interval
    assert derived.max_error_bytes == app.max_error_bytes
    own = WorkerSettings.derive(app, [" a ", "", "b"], poll_interval=0.5, concurrency=3)
    assert own.queues == ("a", "b") and own.poll_interval == 0.5
    assert own.concurrency == own.executor.concurrency == 3
    assert own.paused_refresh == 0.25


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"heartbeat_interval": 40}, "must be shorter than"),
        ({"lease_timeout": 2}, "must be shorter than"),
        ({"concurrency": 0}, "concurrency"),
        ({"prefetch": -1}, "prefetch"),
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"pool": "fiber"}, "pool="),
        ({"queue_executors": {"cpu": "gpu"}}, r"queue_executors\['cpu'\]"),
        ({"process_start_method": "forkserver"}, "process_start_method"),
        ({"app_path": "no_colon"}, "app_path"),
        ({"max_memory_per_child": 0}, "max_memory_per_child"),
    ],
)
def test_worker_settings_refuse_bad_options_once_with_the_option_named(
    options: dict[str, Any], message: str
) -> None:
    app = App(DSN, schema="unit_tests")
    with pytest.raises(ConfigurationError, match=message):
        WorkerSettings.derive(app.settings, **options)
    with pytest.raises(ConfigurationError, match=message):
        Worker(app, **options)


@pytest.mark.parametrize("queues", [[], ["", " "], ["nul\x00"], ["q" * 300]])
def test_worker_settings_refuse_queue_lists_that_name_no_valid_queue(queues: list[str]) -> None:
    with pytest.raises(ConfigurationError, match="queues="):
        WorkerSettings.derive(app_settings(), queues)


def test_a_worker_from_settings_runs_with_them() -> None:
    app = App(DSN, schema="unit_tests")
    settings = WorkerSettings.derive(app.settings, ["mail"], concurrency=4, prefetch=0)
    worker = Worker.from_settings(app, settings)
    assert worker.settings is settings
    assert (worker.queues, worker.concurrency, worker.prefetch) == (["mail"], 4, 0)
    assert worker.lease_timeout == app.lease_timeout
    same = Worker(app, ["mail"], concurrency=4, prefetch=0)
    assert same.settings == settings


def test_executor_settings_copy_the_queue_executors_they_are_given() -> None:
    given = {"cpu": "process"}
    settings = ExecutorSettings(queue_executors=given)  # type: ignore[arg-type]
    given["cpu"] = "thread"
    assert settings.queue_executors == {"cpu": "process"}
    assert settings.sync_defaults == {"thread", "process"}
