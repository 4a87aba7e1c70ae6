"""Migrators and partition changes never collide: several `pgtasks migrate` processes
started together on one schema all succeed, while a pruner creates jobs_history's days,
and no partition is created or dropped while a migrator holds the schema's migration lock
(every path that changes the schema takes that lock)."""

from __future__ import annotations

import secrets
import subprocess
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, SchemaNotMigratedError
from pgtasks._store.migrator import head_version
from pgtasks._store.queries import Queries
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.schemas import drop_schema

Connection = psycopg.Connection[Any]
#: Rounds of MIGRATORS processes started together on a fresh schema.
ROUNDS, MIGRATORS = 3, 4
#: What the pruner meets before migration jobs_history is in: nothing to create yet.
NOT_MIGRATED_YET = (
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedTable,
)


def day_partitions(admin: Connection, schema: str) -> set[str]:
    query = (
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname ~ '_p[0-9]{8}$'"
    )
    return {row[0] for row in admin.execute(query, (schema,)).fetchall()}


def schema_version(admin: Connection, schema: str) -> int:
    query = sql.SQL("SELECT max(version) FROM {}.migrations").format(sql.Identifier(schema))
    row = admin.execute(query).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


class Pruner(threading.Thread):
    """A worker's pruner creating the coming days on its own connection, over and over,
    until told to stop: every error other than "not migrated yet" is kept."""

    def __init__(self, dsn: str, schema: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.store = dsn, Queries(schema)
        self.stop = threading.Event()
        self.errors: Counter[str] = Counter()
        self.created: list[str] = []

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                try:
                    self.created += self.store.prepare_history_days(conn)
                except (*NOT_MIGRATED_YET, SchemaNotMigratedError):
                    pass
                except psycopg.Error as error:
                    self.errors[f"{type(error).__name__}: {error}".splitlines()[0]] += 1
                self.stop.wait(0.005)


@pytest.mark.timeout(240)  # a few seconds a round, more on a busy machine
@pytest.mark.slow
def test_migrators_started_together_all_succeed_while_a_pruner_creates_days(
    dsn: str, admin: Connection
) -> None:
    for _ in range(ROUNDS):
        schema = f"test_{secrets.token_hex(4)}"
        pruner = Pruner(dsn, schema)
        try:
            pruner.start()
            processes = [
                subprocess.Popen(
                    pgtasks_command("migrate", "-A", "tests.apps.basic:app"),
                    cwd=ROOT,
                    env=pgtasks_env(dsn, schema),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(MIGRATORS)
            ]
            try:
                outputs = [process.communicate(timeout=120) for process in processes]
            finally:
                for process in processes:
                    if process.poll() is None:
                        process.kill()
                        process.wait()
            pruner.stop.set()
            pruner.join(timeout=30)
            for process, (_, stderr) in zip(processes, outputs, strict=True):
                assert process.returncode == 0, stderr
            assert not pruner.errors, pruner.errors
            assert schema_version(admin, schema) == head_version()
            # Today to two days ahead, in both classes, each created once.
            assert len(day_partitions(admin, schema)) == 6
        finally:
            pruner.stop.set()
            drop_schema(dsn, schema)


def test_no_partition_is_created_or_dropped_while_a_migrator_holds_the_lock(
    make_app: Callable[..., App], admin: Connection, dsn: str
) -> None:
    app = make_app()
    schema = app.schema
    days = day_partitions(admin, schema)
    assert len(days) == 6
    today = min(name[-8:] for name in days)
    ahead = sorted(name for name in days if name[-8:] > today)
    for name in ahead:
        admin.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, name)))
    with psycopg.connect(dsn) as migrator, psycopg.connect(dsn, autocommit=True) as conn:
        app.queries.lock_migrations(migrator)  # a migrator mid-migration of this schema
        assert app.queries.prepare_history_days(conn) == []
        assert day_partitions(admin, schema) == days - set(ahead)
        with pytest.raises(psycopg.errors.LockNotAvailable):
            app.queries.drop_history_day(
                conn, history_class="done", partition=f"jobs_history_done_p{today}"
            )
        migrator.rollback()  # the migration is over
        assert sorted(app.queries.prepare_history_days(conn)) == ahead
    assert day_partitions(admin, schema) == days
