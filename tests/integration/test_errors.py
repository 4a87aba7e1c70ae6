"""Clear errors when the database is down or the schema does not match the code."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import (
    App,
    DatabaseUnavailableError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    Task,
)
from pgtasks._store.migrator import head_version

PASSWORD = "S3cr3t!"
DOWN_URL = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"
DOWN_KEYWORDS = f"host=127.0.0.1 port=1 user=u password={PASSWORD} dbname=db"
Connection = psycopg.Connection[Any]


@pytest.fixture
def down_app() -> Iterator[App]:
    """An app whose server refuses connections (keyword DSN form, short timeout)."""
    with App(DOWN_KEYWORDS, schema="unreachable", connect_timeout=0.25) as app:
        yield app


def run(app: App, make_coroutine: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine on a fresh event loop, closing the app's async pool on that loop."""

    async def main() -> Any:
        try:
            return await make_coroutine()
        finally:
            await app.aclose()

    return asyncio.run(main())


def full_text(error: BaseException) -> str:
    """The message and the whole printed traceback, chained causes included."""
    return str(error) + "".join(traceback.format_exception(error))


def test_enqueue_against_a_down_database_fails_fast_with_a_clear_error() -> None:
    with App(DOWN_URL, schema="unreachable", connect_timeout=1) as app:

        @app.task
        def ping() -> None: ...

        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError) as caught:
            ping.delay()
        elapsed = time.monotonic() - started

    assert elapsed < 6
    message = str(caught.value)
    assert "127.0.0.1:1/db" in message
    assert "cannot reach PostgreSQL" in message
    assert "PGTASKS_DSN" in message
    assert PASSWORD not in full_text(caught.value)


@pytest.mark.parametrize(
    "operation",
    [
        lambda app, task: app.migrate(),
        lambda app, task: app.get_job(1),
        lambda app, task: task.delay_many([{}, {}]),
        lambda app, task: run(app, task.adelay),
    ],
    ids=["migrate", "get_job", "delay_many", "adelay"],
)
def test_every_entry_point_reports_a_down_database_without_the_password(
    down_app: App, operation: Callable[[App, Task[[], None]], Any]
) -> None:
    @down_app.task
    def ping() -> None: ...

    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError) as caught:
        operation(down_app, ping)

    assert time.monotonic() - started < 6
    assert "127.0.0.1" in str(caught.value)
    assert PASSWORD not in full_text(caught.value)


def test_down_database_error_is_one_line(down_app: App) -> None:
    with pytest.raises(DatabaseUnavailableError) as caught:
        down_app.get_job(1)

    assert "\n" not in str(caught.value)


# -- schema version checks -------------------------------------------------------------------------
def test_unmigrated_schema_raises_schema_not_migrated_naming_the_command(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(migrate=False)

    @app.task
    def ping() -> None: ...

    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate") as caught:
        ping.delay()

    assert app.schema in str(caught.value)
    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        run(app, ping.adelay)
    with pytest.raises(SchemaNotMigratedError, match="pgtasks migrate"):
        app.get_job(1)
    exists = admin.execute(
        "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (app.schema,)
    ).fetchone()
    assert exists == (0,)


def test_unmigrated_schema_is_reported_on_a_callers_connection_too(
    make_app: Callable[..., App], dsn: str
) -> None:
    app = make_app(migrate=False)

    @app.task
    def ping() -> None: ...

    with psycopg.connect(dsn) as conn, pytest.raises(SchemaNotMigratedError, match="migrate"):
        ping.apply_async(connection=conn)


def delete_last_version(admin: Connection, schema: str) -> None:
    query = sql.SQL("DELETE FROM {}.migrations WHERE version = %s").format(sql.Identifier(schema))
    admin.execute(query, (head_version(),))


def insert_version(admin: Connection, schema: str, version: int) -> None:
    query = sql.SQL("INSERT INTO {}.migrations (version, name) VALUES (%s, 'future')")
    admin.execute(query.format(sql.Identifier(schema)), (version,))


def test_schema_behind_the_code_raises_schema_not_migrated_naming_the_command(
    make_app: Callable[..., App], admin: Connection
) -> None:
    migrated = make_app()
    delete_last_version(admin, migrated.schema)
    app = make_app(schema=migrated.schema, migrate=False)

    @app.task
    def ping() -> None: ...

    with pytest.raises(SchemaNotMigratedError) as caught:
        ping.delay()

    message = str(caught.value)
    assert f"at version {head_version() - 1}, this code needs {head_version()}" in message
    assert "pgtasks migrate" in message
    with pytest.raises(SchemaNotMigratedError):
        app.check_schema()


def test_schema_ahead_of_the_code_raises_schema_too_new(
    make_app: Callable[..., App], admin: Connection
) -> None:
    migrated = make_app()
    insert_version(admin, migrated.schema, 999)
    app = make_app(schema=migrated.schema, migrate=False)

    @app.task
    def ping() -> None: ...

    with pytest.raises(SchemaTooNewError, match="at version 999, newer than this code") as caught:
        ping.delay()

    assert "upgrade pgtasks" in str(caught.value)
    with pytest.raises(SchemaTooNewError):
        run(app, ping.adelay)
    assert count_rows(admin, migrated.schema) == 0


def test_migrate_then_enqueue_on_a_schema_ahead_of_the_code_raises_schema_too_new(
    make_app: Callable[..., App], admin: Connection
) -> None:
    migrated = make_app()
    insert_version(admin, migrated.schema, 999)
    app = make_app(schema=migrated.schema, migrate=False)

    @app.task
    def ping() -> None: ...

    with pytest.raises(SchemaTooNewError):
        app.migrate()
        ping.delay()


def count_rows(admin: Connection, schema: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.all_jobs").format(sql.Identifier(schema))
    row = admin.execute(query).fetchone()
    assert row is not None
    return int(row[0])
