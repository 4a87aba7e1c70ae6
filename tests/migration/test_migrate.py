"""Migrations: empty to head, reruns, two migrating processes, unusual schema names, the CLI."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, JobStatus
from pgtasks._store.migrator import head_version
from pgtasks.sql import load_migrations, load_queries
from tests.support.environment import ROOT, pgtasks_env
from tests.support.schemas import drop_schema
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.basic:app"
PASSWORD = "S3cr3t!"
Connection = psycopg.Connection[Any]


def pgtasks_command() -> list[str]:
    """The installed console script, or ``python -m pgtasks`` when there is none."""
    script = Path(sys.executable).with_name("pgtasks")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pgtasks"]


def spawn_migrate(dsn: str, schema: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*pgtasks_command(), "migrate", "-A", APP_PATH],
        cwd=ROOT,
        env=pgtasks_env(dsn, schema, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_migrate(dsn: str, schema: str, **extra: str) -> subprocess.CompletedProcess[str]:
    process = spawn_migrate(dsn, schema, **extra)
    stdout, stderr = process.communicate(timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    """A fresh schema name, dropped after the test (for apps run in other processes)."""
    name = f"test_{secrets.token_hex(4)}"
    yield name
    drop_schema(dsn, name)


def rows(admin: Connection, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return admin.execute(query, params).fetchall()


def public_objects(admin: Connection) -> set[tuple[str, str]]:
    relations = rows(
        admin,
        "SELECT 'relation', c.relname FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE n.nspname = 'public'",
    )
    functions = rows(
        admin,
        "SELECT 'function', p.proname FROM pg_proc p JOIN pg_namespace n"
        " ON n.oid = p.pronamespace WHERE n.nspname = 'public'",
    )
    types = rows(
        admin,
        "SELECT 'type', t.typname FROM pg_type t JOIN pg_namespace n"
        " ON n.oid = t.typnamespace WHERE n.nspname = 'public'",
    )
    return {(kind, name) for kind, name in relations + functions + types}


def applied_versions(admin: Connection, schema: str) -> list[tuple[int, str]]:
    query = sql.SQL("SELECT version, name FROM {}.migrations ORDER BY version")
    return admin.execute(query.format(sql.Identifier(schema))).fetchall()


# -- empty to head ---------------------------------------------------------------------------------
def test_migrate_from_empty_creates_the_documented_tables_indexes_and_constraints(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(migrate=False)
    public_before = public_objects(admin)

    applied = app.migrate()

    assert [migration.version for migration in applied] == [m.version for m in load_migrations()]
    assert applied[-1].version == head_version()
    tables = {
        name
        for (name,) in rows(
            admin, "SELECT tablename FROM pg_tables WHERE schemaname = %s", app.schema
        )
    }
    assert {"jobs", "workers", "migrations"} <= tables
    indexes = dict(
        rows(admin, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", app.schema)
    )
    assert (
        "(priority DESC, run_at, id) INCLUDE (queue) WHERE (status = 'pending'::text)"
        in indexes["jobs_claim_idx"]
    )
    constraints = dict(
        rows(
            admin,
            "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
            " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = %s",
            app.schema,
        )
    )
    # A partial unique index since migration 0012: jobs without a key have no entry.
    assert "jobs_idempotency_key_key" not in constraints
    assert indexes["jobs_idempotency_key_key"].endswith(
        "(idempotency_key) WHERE (idempotency_key IS NOT NULL)"
    )
    assert "UNIQUE" in indexes["jobs_idempotency_key_key"]
    status_check = constraints["jobs_status_check"]
    assert status_check.startswith("CHECK")
    for status in JobStatus:
        assert f"'{status.value}'" in status_check
    assert public_objects(admin) == public_before


def test_jobs_table_has_the_documented_columns(app: App, admin: Connection) -> None:
    columns = dict(
        rows(
            admin,
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'jobs'",
            app.schema,
        )
    )

    assert columns == {
        **columns,
        "id": "bigint",
        "task_name": "text",
        "queue": "text",
        "priority": "integer",
        "args": "jsonb",
        "kwargs": "jsonb",
        "status": "text",
        "attempts": "integer",
        "max_attempts": "integer",
        "run_at": "timestamp with time zone",
        "locked_at": "timestamp with time zone",
        "locked_by": "bigint",
        "last_error": "text",
        "result": "jsonb",
        "idempotency_key": "text",
        "created_at": "timestamp with time zone",
        "updated_at": "timestamp with time zone",
        "finished_at": "timestamp with time zone",
    }


def test_every_id_column_in_the_schema_is_bigint(app: App, admin: Connection) -> None:
    id_columns = rows(
        admin,
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = %s"
        "   AND (column_name = 'id' OR column_name LIKE '%%\\_id' OR column_name = 'locked_by')",
        app.schema,
    )

    assert {(table, column) for table, column, _ in id_columns} >= {
        ("jobs", "id"),
        ("jobs", "locked_by"),
        ("workers", "id"),
    }
    assert [row for row in id_columns if row[2] != "bigint"] == []


def test_nothing_is_created_in_public_or_outside_the_schema(
    make_app: Callable[..., App], admin: Connection
) -> None:
    app = make_app(migrate=False)
    public_before = public_objects(admin)

    app.migrate()

    assert public_objects(admin) == public_before
    function_schemas = rows(
        admin,
        "SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE p.proname = 'notify_jobs_inserted'",
    )
    assert (app.schema,) in function_schemas
    assert ("public",) not in function_schemas


def test_migrations_are_recorded_once_with_their_names(app: App, admin: Connection) -> None:
    assert applied_versions(admin, app.schema) == [
        (migration.version, migration.name) for migration in load_migrations()
    ]


def test_rerunning_migrate_is_a_no_op(
    app: App, make_app: Callable[..., App], admin: Connection
) -> None:
    query = sql.SQL("SELECT version, applied_at FROM {}.migrations ORDER BY version")
    before = admin.execute(query.format(sql.Identifier(app.schema))).fetchall()

    assert app.migrate() == []
    assert make_app(schema=app.schema, migrate=False).migrate() == []
    assert admin.execute(query.format(sql.Identifier(app.schema))).fetchall() == before


@pytest.mark.parametrize("name", ["select", "MixedCase_Schema"])
def test_a_reserved_word_or_mixed_case_schema_migrates_and_every_query_is_valid(
    make_app: Callable[..., App], admin: Connection, dsn: str, name: str
) -> None:
    drop_schema(dsn, name)
    app = make_app(schema=name)

    @app.task
    def ping(n: int) -> int:
        return n

    job = ping.delay(1)
    assert app.get_job(job.id).status() is JobStatus.PENDING
    assert rows(admin, "SELECT nspname FROM pg_namespace WHERE nspname = %s", name) == [(name,)]
    # Every runtime statement parses and plans against the schema (EXPLAIN runs nothing).
    with psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor) as conn:
        for query_name in load_queries():
            statement = app.queries._statements[query_name]
            # The rendered statement: its fragments' parameters too.
            params = {param: None for param in re.findall(r"%\((\w+)\)s", statement.decode())}
            code = "\n".join(
                line for line in statement.decode().splitlines() if not line.startswith("--")
            )
            explainable = code.split(None, 1)[0].upper() in (
                "SELECT",
                "INSERT",
                "UPDATE",
                "DELETE",
                "WITH",
            )
            with conn.transaction(force_rollback=True):
                if code.split(None, 1)[0].upper() == "COPY":
                    # COPY FROM STDIN of no rows: the table and its columns exist.
                    with conn.cursor().copy(statement):
                        pass
                    continue
                conn.execute(b"EXPLAIN " + statement if explainable else statement, params or None)


# -- concurrent migrators --------------------------------------------------------------------------
def applied_names(output: str) -> list[str]:
    match = re.search(r"migrated: applied (.+)$", output, re.MULTILINE)
    return match[1].split(", ") if match else []


def test_two_processes_migrating_one_schema_at_once_both_succeed(
    make_app: Callable[..., App], admin: Connection, dsn: str, schema: str
) -> None:
    app = make_app(schema=schema, migrate=False)
    waiting = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND objid = hashtext(%s)::oid"
    )

    # Hold the migration lock so that both processes are inside migrate() at once.
    with psycopg.connect(dsn) as holder:
        app.queries.lock_migrations(holder)
        processes = [spawn_migrate(dsn, schema), spawn_migrate(dsn, schema)]
        try:
            wait_until(
                lambda: admin.execute(waiting, (schema,)).fetchone() == (2,),
                timeout=20,
                message="both migrators waiting on the lock",
            )
        finally:
            holder.rollback()
        outputs = [process.communicate(timeout=30) for process in processes]

    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr
    everything = [name for stdout, _ in outputs for name in applied_names(stdout)]
    expected = [f"{m.version:04d}_{m.name}" for m in load_migrations()]
    assert sorted(everything) == expected
    assert applied_versions(admin, schema) == [(m.version, m.name) for m in load_migrations()]
    assert make_app(schema=schema, migrate=False).migrate() == []


# -- the CLI ---------------------------------------------------------------------------------------
def test_cli_migrate_applies_then_reports_up_to_date(
    admin: Connection, dsn: str, schema: str
) -> None:
    first = run_migrate(dsn, schema)
    second = run_migrate(dsn, schema)

    assert first.returncode == 0, first.stderr
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in load_migrations())
    assert first.stdout == f"schema {schema!r} migrated: applied {names}\n"
    assert second.returncode == 0, second.stderr
    assert second.stdout == f"schema {schema!r} is up to date\n"
    assert len(applied_versions(admin, schema)) == len(load_migrations())


@pytest.fixture(scope="module")
def down_migrate() -> subprocess.CompletedProcess[str]:
    """``pgtasks migrate`` against a server that refuses connections (run once)."""
    return run_migrate(
        f"postgresql://u:{PASSWORD}@127.0.0.1:1/db",
        "unreachable",
        PGTASKS_TEST_CONNECT_TIMEOUT="0.5",
    )


def test_cli_migrate_against_a_down_database_exits_1_with_an_error_line(
    down_migrate: subprocess.CompletedProcess[str],
) -> None:
    assert down_migrate.returncode == 1
    assert down_migrate.stdout == ""
    stderr = down_migrate.stderr
    error_lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1
    assert "cannot reach PostgreSQL at 127.0.0.1:1/db" in error_lines[0]
    assert "Traceback" not in stderr
    assert PASSWORD not in stderr


def test_cli_migrate_error_for_a_down_database_is_the_last_and_only_line(
    down_migrate: subprocess.CompletedProcess[str],
) -> None:
    assert down_migrate.stderr.rstrip("\n").splitlines()[-1].startswith("error:")
