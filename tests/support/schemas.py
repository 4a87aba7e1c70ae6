"""Test schemas: random names, dropping, and pre-migrated schemas made in one round trip.

``app.migrate()`` on an empty schema runs each migration in a transaction of its own,
after an advisory lock, a CREATE TABLE IF NOT EXISTS and a read of the applied versions:
seven round trips per migration (35 for five) and a commit each. Tests that only need a
migrated schema get one from :func:`create_migrated_schema` instead: the same migration
files, rendered for the schema by the Queries as the Migrator renders them, with the
version rows the Migrator would record, sent as one script (one implicit transaction,
one commit). The result is the same schema: tests/migration/test_schema_snapshot.py
compares the two, and tests in tests/migration keep using the real Migrator.
"""

from __future__ import annotations

import contextlib
import functools
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from pgtasks._store.queries import Queries
from pgtasks.sql import load_migrations, load_queries


def new_schema_name() -> str:
    return f"test_{secrets.token_hex(4)}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


#: The schema name :func:`migrated_schema_script` renders once per process; a name of the
#: same plain shape is written in its place (see :func:`plain_name`).
_TEMPLATE_SCHEMA = "test_00000000"
#: Names that appear in the script as they are (quoted identifier, channel literal).
_PLAIN = re.compile(r"test_[0-9a-f]{8}")


def migrated_schema_script(schema: str) -> bytes:
    """What ``Migrator.migrate`` does to a missing ``schema``, as one SQL script.

    The migrations table as ``create_migrations_table`` makes it, then for each migration
    its version row (``record_migration``) and its steps as a new schema gets them (one
    transaction: CONCURRENTLY dropped), rendered by the Queries. A name of
    :func:`new_schema_name` reuses the script rendered once for the process: the name
    stands verbatim wherever it appears (identifiers, channels), so it is written in place
    of the template's.
    """
    if _PLAIN.fullmatch(schema):
        return _template_script().replace(_TEMPLATE_SCHEMA.encode(), schema.encode())
    return render_migrated_schema_script(schema)


@functools.lru_cache(maxsize=1)
def _template_script() -> bytes:
    script = render_migrated_schema_script(_TEMPLATE_SCHEMA)
    # Every occurrence is the name itself: nothing else in the SQL looks like it.
    assert script.count(_TEMPLATE_SCHEMA.encode()) == script.count(b"test_")
    return script


def render_migrated_schema_script(schema: str) -> bytes:
    """:func:`migrated_schema_script`, rendered for ``schema`` by the Queries."""
    store = Queries(schema)
    parts = [store._render(load_queries()["create_migrations_table"].text)]
    for migration in load_migrations():
        record = sql.SQL("INSERT INTO {}.migrations (version, name) VALUES ({}, {});").format(
            sql.Identifier(schema), sql.Literal(migration.version), sql.Literal(migration.name)
        )
        parts.append(record.as_string(None).encode())
        # A new schema's tables are empty: each step as it runs in one transaction (the
        # Migrator does the same for a schema it creates).
        parts += [store._render(step.in_transaction_text()) for step in migration.steps]
    return b"\n".join(parts)


def create_migrated_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create ``schema`` at the head version in one round trip (``conn`` in autocommit).

    Several statements in one simple query run as one transaction: all or nothing.
    """
    if not conn.autocommit:
        raise ValueError("create_migrated_schema needs an autocommit connection")
    conn.execute(migrated_schema_script(schema))


class SchemaAdmin:
    """Creates migrated schemas (:func:`create_migrated_schema`) and drops schemas on
    ``dsn``, on one connection kept for the session (reopened if it breaks).

    Its commits do not wait for the WAL flush (``synchronous_commit=off``): a test server
    can spare durability, and visibility to other sessions is unchanged.

    Off the tests' path, a thread of its own (:class:`_Stock`, its own connection) keeps
    :data:`STOCK` migrated schemas of new names ready (:meth:`take_migrated`) and drops
    the schemas of ended tests (:meth:`drop_later`): a test no longer waits for either
    (about 0.1 s of the server's CPU to create, 0.03 s to drop), and they run while tests
    wait on processes and conditions. :meth:`close` waits for both, then drops the stock.
    """

    def __init__(self, dsn: str, settings: str = "-c synchronous_commit=off") -> None:
        self.dsn = dsn
        self._settings = settings
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._stock: _Stock | None = None

    def take_migrated(self) -> str:
        """The name of a migrated schema at the head version made for this caller alone
        (from the stock; made here if the stock's thread has stopped)."""
        if self._stock is None:
            # A drop that waits on a lock (a session a test left open) gives up, not
            # the stock: the schema stays behind instead.
            self._stock = _Stock(SchemaAdmin(self.dsn, f"{self._settings} -c lock_timeout=20s"))
        return self._stock.take() or self.create_migrated()

    def drop_later(self, schema: str) -> None:
        """:meth:`drop` in the stock's thread (at the latest by :meth:`close`)."""
        if self._stock is None:
            self.drop(schema)
        else:
            self._stock.drop_later(schema)

    def create_migrated(self, schema: str | None = None) -> str:
        """Create ``schema`` (a new name by default) at the head version; return its name."""
        schema = schema or new_schema_name()
        self._run(lambda conn: create_migrated_schema(conn, schema))
        return schema

    def drop(self, schema: str) -> None:
        """``DROP SCHEMA IF EXISTS ... CASCADE``."""
        statement = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        self._run(lambda conn: conn.execute(statement))

    def _run(self, action: Callable[[psycopg.Connection[Any]], object]) -> None:
        with self._lock:
            try:
                action(self._connection())
            except psycopg.OperationalError:
                # A broken session connection (a test terminated it): once more on a new one.
                self._discard()
                action(self._connection())

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, autocommit=True, options=self._settings)
        return self._conn

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        stock, self._stock = self._stock, None
        for schema in stock.close() if stock is not None else ():
            self.drop(schema)
        with self._lock:
            self._discard()


#: Migrated schemas :class:`SchemaAdmin` keeps ready for :meth:`SchemaAdmin.take_migrated`.
STOCK = 2


class _Stock:
    """A thread that keeps :data:`STOCK` migrated schemas ready and drops the schemas
    handed to it, on ``admin`` (a :class:`SchemaAdmin` of its own): an empty stock first,
    then the drops, then the rest of the stock. Should the server fail it, the thread
    stops and takers make their schemas themselves."""

    def __init__(self, admin: SchemaAdmin) -> None:
        self._admin = admin
        self._ready: list[str] = []
        self._to_drop: list[str] = []
        self._closing = False
        self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="schema-stock", daemon=True)
        self._thread.start()

    def take(self) -> str | None:
        """A ready schema (waiting for the one being made); None when the thread stopped."""
        with self._changed:
            self._changed.wait_for(lambda: self._ready or self._stopped, timeout=60)
            if not self._ready:
                return None
            schema = self._ready.pop(0)
            self._changed.notify_all()
            return schema

    def drop_later(self, schema: str) -> None:
        with self._changed:
            self._to_drop.append(schema)
            self._changed.notify_all()

    def _next(self) -> tuple[str, str] | None:
        """What to do next (("drop", name) or ("create", "")); None when done."""
        with self._changed:
            while True:
                if not self._ready and not self._closing:
                    return "create", ""
                if self._to_drop:
                    return "drop", self._to_drop.pop(0)
                if self._closing:
                    return None
                if len(self._ready) < STOCK:
                    return "create", ""
                self._changed.wait()

    def _run(self) -> None:
        try:
            while (task := self._next()) is not None:
                action, schema = task
                if action == "drop":
                    with contextlib.suppress(psycopg.errors.LockNotAvailable):
                        self._admin.drop(schema)
                else:
                    made = self._admin.create_migrated()
                    with self._changed:
                        self._ready.append(made)
                        self._changed.notify_all()
        except psycopg.Error:
            pass  # the server failed: tests that need it fail on their own
        finally:
            with self._changed:
                self._stopped = True
                self._changed.notify_all()

    def close(self) -> list[str]:
        """Wait for the drops handed over; return what is left to drop (the stock, and
        drops the thread could not make)."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join(120)
        with self._changed:
            left, self._ready, self._to_drop = [*self._ready, *self._to_drop], [], []
        self._admin.close()
        return left
