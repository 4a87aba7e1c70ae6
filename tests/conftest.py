"""Fixtures: a real PostgreSQL (embedded, or PGTASKS_TEST_DSN) and an isolated schema per test.

With PGTASKS_TEST_VIA_PGBOUNCER=1 (and PGTASKS_TEST_PGBOUNCER_DSN: PgBouncer in transaction
mode in front of PGTASKS_TEST_DSN), every App the tests build, in this process and in the
processes they start, connects through PgBouncer with the test server as its session_dsn
(tests.support.servers.pooled_app_dsn). Assertions and schema setup stay on the server.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgtasks import App, Store
from tests.support.environment import ROOT, forget_connection_environment
from tests.support.schemas import SchemaAdmin, new_schema_name
from tests.support.servers import app_connection_options, embedded_test_dsn


def pytest_configure(config: pytest.Config) -> None:
    # A session or replica DSN set in the developer's shell must not reach test Apps.
    forget_connection_environment()


def distribution_rank(item: pytest.Item) -> int:
    """Where a test goes in a run on several processes: the longest first (``slow``: the
    benchmarks and the tests of half a minute or more in a full run's ``--durations``),
    then those that start processes (``acceptance``), then the rest."""
    if item.get_closest_marker("slow") is not None:
        return 0
    if item.get_closest_marker("acceptance") is not None:
        return 1
    return 2


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """On pytest-xdist's processes (``-n``), hand out the longest tests first.

    xdist hands out tests in collection order; with the benchmarks and the process tests
    last (tests/test_benchmarks.py is collected last), one process ran them alone while
    the other had finished. Longest first, the short tests fill both processes at the end;
    `dev.py test` hands them out one at a time (``--maxschedchunk 1``), so the long ones
    spread over both processes.
    Outermost (a wrapper, tryfirst): after every other hook has ordered the items (pytest-
    django's order is undone by tests/django/conftest.py). Each xdist process collects and
    sorts alike (a stable sort), as xdist requires.
    """
    yield
    if hasattr(config, "workerinput"):
        items.sort(key=distribution_rank)


@pytest.fixture(scope="session")
def dsn() -> str:
    """The test server: PGTASKS_TEST_DSN, or the embedded server in .pgtasks-test/ (run
    without fsync: tests.support.servers.spare_durability)."""
    configured = os.environ.get("PGTASKS_TEST_DSN")
    if configured:
        return configured
    return embedded_test_dsn(ROOT / ".pgtasks-test")


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection for assertions and setup."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def schema_admin(dsn: str) -> Iterator[SchemaAdmin]:
    """Creates migrated schemas in one round trip and drops schemas, on one connection."""
    schemas = SchemaAdmin(dsn)
    yield schemas
    schemas.close()


@pytest.fixture
def premigrated_schemas() -> bool:
    """Whether ``make_app`` creates the migrated schemas it names in one round trip
    (tests/support/schemas.py). tests/migration says no: its tests exercise the real
    Migrator, so ``app.migrate()`` makes all its schemas.
    """
    return True


@pytest.fixture
def make_app(
    dsn: str, schema_admin: SchemaAdmin, premigrated_schemas: bool
) -> Iterator[Callable[..., App]]:
    """Build Apps on the test server, each in its own schema (dropped afterwards).

    ``migrate=True`` gives a migrated schema: made in one round trip when the factory
    names it (see ``premigrated_schemas``), by ``app.migrate()`` when the test passes
    ``schema=``. Either way the App's pool is open and the version checked on return.
    """
    apps: list[App] = []

    def factory(*, migrate: bool = True, **options: Any) -> App:
        premigrated = migrate and premigrated_schemas and "schema" not in options
        if premigrated:
            options["schema"] = schema_admin.take_migrated()
        options.setdefault("schema", new_schema_name())
        options.setdefault("connect_timeout", 3.0)
        app_dsn, connections = app_connection_options(dsn)
        for name, value in connections.items():
            options.setdefault(name, value)
        try:
            app = App(options.pop("dsn", app_dsn), **options)
        except BaseException:
            if premigrated:
                schema_admin.drop_later(options["schema"])
            raise
        apps.append(app)
        if premigrated:
            app.check_schema()
        elif migrate:
            app.migrate()
        return app

    yield factory
    for app in apps:
        app.close()
        schema_admin.drop_later(app.schema)


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    """A migrated App in a fresh schema."""
    return make_app()


@pytest.fixture
def make_stores_app(dsn: str, schema_admin: SchemaAdmin) -> Iterator[Callable[..., App]]:
    """Build Apps of several stores, each store a fresh migrated schema of the test server
    (``dsns``: a store's DSN when not the test server's, its schema made by migrate);
    ``app.migrate()`` numbers them. Schemas dropped afterwards."""
    made: list[tuple[App, dict[str, str]]] = []

    def factory(
        names: tuple[str, ...] = ("default", "bulk"),
        *,
        routes: dict[str, str] | None = None,
        dsns: dict[str, str] | None = None,
        numbers: dict[str, int] | None = None,
        migrate: bool = True,
        **options: Any,
    ) -> App:
        schemas = {}
        stores = {}
        for name in names:
            store_dsn = (dsns or {}).get(name, dsn)
            premigrated = store_dsn == dsn and migrate
            schema = schema_admin.take_migrated() if premigrated else new_schema_name()
            schemas[name] = schema
            stores[name] = Store(store_dsn, schema=schema, number=(numbers or {}).get(name))
        options.setdefault("connect_timeout", 3.0)
        app = App(stores=stores, routes=routes or {}, **options)
        made.append((app, {name: (dsns or {}).get(name, dsn) for name in names}))
        app.schemas = schemas  # type: ignore[attr-defined]
        if migrate:
            app.migrate()
        return app

    yield factory
    for app, dsns in made:
        app.close()
        for name, schema in app.schemas.items():  # type: ignore[attr-defined]
            if dsns[name] == dsn:
                schema_admin.drop_later(schema)
            else:  # elsewhere: gone with its database, or dropped here
                try:
                    with psycopg.connect(dsns[name], autocommit=True) as conn:
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                except psycopg.OperationalError:
                    pass
