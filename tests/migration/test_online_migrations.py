"""Online migrations on a populated schema: the same end state as a new one, the locks the
plan names, lock_timeout with retries, resuming after a failure, invalid index builds,
batched backfills, migrating inside a transaction, and ``pgtasks migrate --plan``."""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import MigrationLockError
from pgtasks._store.migrator import Migrator, plan_migrations
from pgtasks._store.queries import Queries
from pgtasks.sql import Migration, load_migrations
from pgtasks.sql.steps import LOCK_MODES
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.schemas import drop_schema
from tests.support.snapshot import describe_schema
from tests.support.waiting import wait_until

Connection = psycopg.Connection[Any]
SchemaAt = Callable[..., str]

#: pg_locks' names of the table lock modes, as the plan writes them.
PG_LOCK_MODES = {mode.title().replace(" ", "") + "Lock": mode for mode in LOCK_MODES}


@pytest.fixture
def schema_at(dsn: str) -> Iterator[SchemaAt]:
    """``schema_at(version, rows=0, migrations=None)``: a new schema migrated (as a new
    one) up to ``version``, with ``rows`` jobs (half done, half pending); dropped after."""
    made: list[str] = []

    def make(version: int, rows: int = 0) -> str:
        schema = f"test_{secrets.token_hex(4)}"
        made.append(schema)
        with psycopg.connect(dsn, autocommit=True) as conn:
            Migrator(Queries(schema), migrations=load_migrations()[:version]).migrate(conn)
            if rows:
                fill(conn, schema, rows)
        return schema

    yield make
    for schema in made:
        drop_schema(dsn, schema)


def fill(conn: Connection, schema: str, rows: int) -> None:
    """``rows`` jobs with the columns of migration 0001 (so any version takes them)."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (task_name, queue, args, kwargs, max_attempts, status, attempts,"
            " finished_at) SELECT 'task_' || (n %% 7), 'q', '[]', '{{}}', 3,"
            " CASE WHEN n %% 2 = 0 THEN 'done' ELSE 'pending' END, n %% 2,"
            " CASE WHEN n %% 2 = 0 THEN now() END FROM generate_series(1, %s) AS n"
        ).format(sql.Identifier(schema, "jobs")),
        (rows,),
    )


def version_of(admin: Connection, schema: str) -> int:
    query = sql.SQL("SELECT coalesce(max(version), 0) FROM {}.migrations")
    row = admin.execute(query.format(sql.Identifier(schema))).fetchone()
    assert row is not None
    return int(row[0])


def steps_recorded(admin: Connection, schema: str) -> list[tuple[int, int]]:
    query = sql.SQL("SELECT version, step FROM {}.migration_steps ORDER BY 1, 2")
    return [tuple(row) for row in admin.execute(query.format(sql.Identifier(schema)))]


#: The version of the last shipped migration.
LATEST = load_migrations()[-1].version


def with_extra(*texts: str, base: int = 12) -> list[Migration]:
    """The shipped migrations up to ``base`` and then these, numbered on."""
    extra = [
        Migration(base + offset, f"test_extra_{offset}", text)
        for offset, text in enumerate(texts, start=1)
    ]
    return [*load_migrations()[:base], *extra]


# -- the end state ---------------------------------------------------------------------------------
@pytest.mark.parametrize("start", [1, 5, 11])
def test_upgrading_a_populated_schema_online_ends_at_the_committed_snapshot(
    schema_at: SchemaAt, dsn: str, admin: Connection, start: int
) -> None:
    schema = schema_at(start, rows=3000)

    with psycopg.connect(dsn, autocommit=True) as conn:
        applied = Migrator(Queries(schema)).migrate(conn)

    assert [m.version for m in applied] == [m.version for m in load_migrations()[start:]]
    assert describe_schema(admin, schema) == (ROOT / "tests" / "schema.sql").read_text()
    assert steps_recorded(admin, schema) == []
    invalid = admin.execute(
        "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s"
        " AND NOT i.indisvalid",
        (schema,),
    ).fetchone()
    assert invalid == (0,)


# -- the plan against pg_locks ---------------------------------------------------------------------
def held_locks(conn: Connection, schema: str) -> dict[str, tuple[str, str]]:
    """(relkind, strongest mode) of each relation of ``schema`` this session holds a lock on."""
    return {
        relation: (kind, mode) for relation, (kind, mode, _) in held_locks_of(conn, schema).items()
    }


def held_locks_of(conn: Connection, schema: str) -> dict[str, tuple[str, str, str | None]]:
    """(relkind, strongest mode, root partitioned table or None) of each locked relation."""
    rows = conn.execute(
        "SELECT c.relname, c.relkind, l.mode,"
        # The partitioned table at the top of a partition's tree (None: not a partition).
        " (SELECT p.relname FROM pg_partition_ancestors(c.oid) AS a"
        "  JOIN pg_class AS p ON p.oid = a.relid WHERE NOT p.relispartition)"
        " FROM pg_locks l"
        " JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE l.pid = pg_backend_pid() AND l.granted AND n.nspname = %s",
        (schema,),
    ).fetchall()
    held: dict[str, tuple[str, str, str | None]] = {}
    for relation, kind, pg_mode, parent in rows:
        mode = PG_LOCK_MODES[pg_mode]
        if relation not in held or LOCK_MODES.index(mode) > LOCK_MODES.index(held[relation][1]):
            held[relation] = (kind, mode, parent)
    return held


@pytest.mark.parametrize("version", range(2, len(load_migrations()) + 1))
def test_each_transactional_step_takes_the_locks_the_plan_names(
    schema_at: SchemaAt, dsn: str, version: int
) -> None:
    """Run each statement of the migration's transactional steps on a populated schema and
    compare pg_locks with the plan: every existing table (and index the plan names) holds
    exactly the mode the plan gives it so far in the step, and a table the plan does not
    name at most ROW EXCLUSIVE (it blocks nothing). Concurrently steps take SHARE UPDATE
    EXCLUSIVE, as PostgreSQL documents."""
    schema = schema_at(version - 1, rows=50)
    migration = load_migrations()[version - 1]
    plan = plan_migrations([migration])
    store = Queries(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        existing = set(held_locks_names(conn, schema))
        for step in migration.steps:
            if step.kind != "transaction":
                store.run_migration_sql(conn, step.in_transaction_text())
                continue
            expected: dict[str, str] = {}
            with conn.transaction():
                planned_statements = plan[(migration.version, step.number)]
                for text, planned in zip(step.statements, planned_statements, strict=True):
                    store.run_migration_sql(conn, text)
                    for lock in planned.locks:
                        if lock.effect != "none":
                            so_far = expected.get(lock.relation, "ACCESS SHARE")
                            expected[lock.relation] = max(so_far, lock.mode, key=LOCK_MODES.index)
                    where = f"{migration.label} step {step.number}: {planned.summary}"
                    for relation, (kind, mode, parent) in held_locks_of(conn, schema).items():
                        if relation not in existing:
                            continue  # created by this migration: nobody else uses it
                        if relation not in expected and parent in expected:
                            # A partition (of jobs_history, say): a trigger or an index made
                            # on the partitioned table locks each partition as the plan names
                            # the table.
                            assert mode == expected[parent], f"{where}: {relation} ({parent})"
                        elif relation in expected:
                            assert mode == expected[relation], f"{where}: {relation}"
                        elif kind == "r":
                            assert LOCK_MODES.index(mode) <= 2, f"{where}: {relation} {mode}"


def held_locks_names(conn: Connection, schema: str) -> list[str]:
    """The relations of ``schema`` now."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s",
        (schema,),
    )
    return [name for (name,) in rows]


# -- lock_timeout and retries ----------------------------------------------------------------------
class Blocker:
    """A session that holds ACCESS SHARE on the jobs table in an open transaction (as a
    long report query would) until released."""

    def __init__(self, dsn: str, schema: str, name: str = "pgtasks test blocker") -> None:
        self.conn = psycopg.connect(dsn, application_name=name)
        self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "jobs")))

    def release(self) -> None:
        if not self.conn.closed:
            self.conn.rollback()
            self.conn.close()


def test_a_catalog_change_behind_a_long_query_is_retried_and_never_queues_enqueues(
    schema_at: SchemaAt, dsn: str, admin: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    schema = schema_at(12, rows=100)
    migrations = with_extra("ALTER TABLE {schema}.jobs ADD COLUMN extra_note text;")
    blocker = Blocker(dsn, schema)
    insert = sql.SQL(
        "INSERT INTO {} (task_name, queue, args, kwargs, max_attempts)"
        " VALUES ('t', 'q', '[]', '{{}}', 3)"
    ).format(sql.Identifier(schema, "jobs"))
    latencies: list[float] = []
    stop = threading.Event()

    def enqueue() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                began = time.monotonic()
                conn.execute(insert)
                latencies.append(time.monotonic() - began)
                stop.wait(0.01)

    def migrate() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            Migrator(Queries(schema), migrations=migrations, lock_timeout=0.1).migrate(conn)

    producer = threading.Thread(target=enqueue)
    migrator = threading.Thread(target=migrate)
    try:
        with caplog.at_level(logging.INFO, logger="pgtasks.migrate"):
            producer.start()
            migrator.start()
            wait_until(
                lambda: sum("was not granted" in r.getMessage() for r in caplog.records) >= 3,
                timeout=20,
                message="three retries of the step",
            )
            during = len(latencies)
            wait_until(lambda: len(latencies) > during + 20, timeout=10, message="enqueues go on")
            assert version_of(admin, schema) == 12
            blocker.release()
            migrator.join(30)
    finally:
        blocker.release()
        stop.set()
        producer.join(10)
        migrator.join(30)

    assert version_of(admin, schema) == 13
    # Each try waited 0.1 s for its lock: no enqueue queued behind it for much longer.
    assert max(latencies) < 1.0, f"an enqueue waited {max(latencies):.2f} s"


def test_a_step_that_never_gets_its_lock_names_the_holder_and_keeps_the_steps_done(
    schema_at: SchemaAt, dsn: str, admin: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    schema = schema_at(12, rows=10)
    migrations = with_extra(
        "-- pgtasks:step transaction\nCREATE TABLE {schema}.extra_table (id int);\n"
        "-- pgtasks:step transaction\nALTER TABLE {schema}.jobs ADD COLUMN extra_flag boolean;"
    )
    blocker = Blocker(dsn, schema, name="nightly report")
    try:
        with (
            psycopg.connect(dsn, autocommit=True) as conn,
            pytest.raises(MigrationLockError) as failure,
        ):
            Migrator(
                Queries(schema), migrations=migrations, lock_timeout=0.05, lock_retry_for=0.5
            ).migrate(conn)
    finally:
        blocker.release()

    message = str(failure.value)
    assert "migration 0013_test_extra_1 step 2 did not get its locks" in message
    assert "nightly report" in message and "AccessShareLock" in message
    assert "steps done so far are kept" in message
    assert version_of(admin, schema) == 12
    assert steps_recorded(admin, schema) == [(13, 1)]

    with (
        caplog.at_level(logging.INFO, logger="pgtasks.migrate"),
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        applied = Migrator(Queries(schema), migrations=migrations).migrate(conn)

    assert [m.version for m in applied] == [13]
    assert any("resumes at step 2 of 2" in r.getMessage() for r in caplog.records)
    assert version_of(admin, schema) == 13 and steps_recorded(admin, schema) == []


def test_an_index_a_failed_concurrent_build_left_invalid_is_built_again(
    schema_at: SchemaAt, dsn: str, admin: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    schema = schema_at(12, rows=20)  # task names repeat: the unique build fails
    migrations = with_extra(
        "-- pgtasks:step concurrently\n"
        "CREATE UNIQUE INDEX CONCURRENTLY jobs_test_task_idx ON {schema}.jobs (task_name);"
    )
    state = (
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = 'jobs_test_task_idx'"
    )
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(psycopg.errors.UniqueViolation),
    ):
        Migrator(Queries(schema), migrations=migrations).migrate(conn)
    assert admin.execute(state, (schema,)).fetchone() == (False,)
    assert version_of(admin, schema) == 12

    admin.execute(
        sql.SQL(
            "DELETE FROM {} WHERE id NOT IN (SELECT min(id) FROM {} GROUP BY task_name)"
        ).format(sql.Identifier(schema, "jobs"), sql.Identifier(schema, "jobs"))
    )
    with (
        caplog.at_level(logging.INFO, logger="pgtasks.migrate"),
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        Migrator(Queries(schema), migrations=migrations).migrate(conn)

    assert admin.execute(state, (schema,)).fetchone() == (True,)
    assert version_of(admin, schema) == 13
    assert any("left invalid" in r.getMessage() for r in caplog.records)


def test_a_batched_backfill_walks_the_ids_one_batch_per_transaction(
    schema_at: SchemaAt, dsn: str, admin: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    schema = schema_at(12, rows=5500)
    migrations = with_extra(
        "-- pgtasks:step transaction\nALTER TABLE {schema}.jobs ADD COLUMN was_tried boolean;\n"
        "-- pgtasks:step batched table=jobs size=1000\n"
        "UPDATE {schema}.jobs SET was_tried = (attempts > 0)"
        " WHERE id >= %(start)s AND id < %(stop)s AND was_tried IS NULL;"
    )

    with (
        caplog.at_level(logging.INFO, logger="pgtasks.migrate"),
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        Migrator(Queries(schema), migrations=migrations).migrate(conn)

    counts = admin.execute(
        sql.SQL("SELECT was_tried, count(*) FROM {} GROUP BY 1 ORDER BY 1").format(
            sql.Identifier(schema, "jobs")
        )
    ).fetchall()
    assert counts == [(False, 2750), (True, 2750)]
    assert any(
        "6 batch(es) of 1000 ids of jobs, 5500 row(s) changed" in r.getMessage()
        for r in caplog.records
    )


# -- inside a transaction (Django's migrations) ----------------------------------------------------
def test_inside_a_transaction_each_migration_is_applied_whole_with_a_warning_when_online(
    schema_at: SchemaAt, dsn: str, admin: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    schema = schema_at(11, rows=10)

    with caplog.at_level(logging.WARNING, logger="pgtasks.migrate"), psycopg.connect(dsn) as conn:
        applied = Migrator(Queries(schema)).migrate(conn)
        conn.commit()

    assert [m.version for m in applied] == [m.version for m in load_migrations()[11:]]
    assert version_of(admin, schema) == LATEST
    assert any(
        "0012_partial_idempotency_index runs inside the caller's transaction" in r.getMessage()
        for r in caplog.records
    )


# -- the plan --------------------------------------------------------------------------------------
def run_plan(dsn: str, schema: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pgtasks_command("migrate", "-A", "tests.apps.basic:app", "--plan", *options),
        cwd=ROOT,
        env=pgtasks_env(dsn, schema),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_migrate_plan_prints_each_step_and_its_locks_and_changes_nothing(
    schema_at: SchemaAt, dsn: str, admin: Connection
) -> None:
    schema = schema_at(11, rows=10)

    result = run_plan(dsn, schema)

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        f"schema {schema!r} is at version 11, this code's is {LATEST}:"
        f" {len(load_migrations()) - 11} migration(s) to apply"
    ) in out
    assert "step 1 of 2: concurrently, outside a transaction" in out
    assert (
        "SHARE UPDATE EXCLUSIVE on jobs: blocks nothing (reads, writes and claims go on);"
        " builds while the table is used"
    ) in out
    assert "step 2 of 2: transaction, one transaction, lock_timeout 0.25 s" in out
    assert "ALTER TABLE jobs DROP CONSTRAINT jobs_idempotency_key_key" in out
    assert "ACCESS EXCLUSIVE on jobs: blocks reads, writes and claims for a catalog change" in out
    assert version_of(admin, schema) == 11

    as_json = json.loads(run_plan(dsn, schema, "--json", "--lock-timeout", "0.5").stdout)
    assert as_json["version"] == 11 and as_json["lock_timeout"] == 0.5
    steps = [(s["migration"], s["step"], s["kind"], s["effect"]) for s in as_json["steps"]]
    assert steps[:2] == [
        ("0012_partial_idempotency_index", 1, "concurrently", "online"),
        ("0012_partial_idempotency_index", 2, "transaction", "brief"),
    ]
    assert all(effect != "blocking" for *_, effect in steps)


def test_the_plan_of_a_new_schema_creates_nothing(dsn: str, admin: Connection) -> None:
    schema = f"test_{secrets.token_hex(4)}"

    result = run_plan(dsn, schema)

    assert result.returncode == 0, result.stderr
    assert f"schema {schema!r} is at version 0, this code's is {LATEST}" in result.stdout
    assert "the schema is new (no migration applied)" in result.stdout
    exists = admin.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,))
    assert exists.fetchone() == (0,)


def test_the_plan_of_a_current_schema_says_so(schema_at: SchemaAt, dsn: str) -> None:
    schema = schema_at(LATEST)

    result = run_plan(dsn, schema)

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"schema {schema!r} is up to date (version {LATEST})\n"


def test_finished_jobs_of_an_existing_install_stay_readable_and_move_in_batches(
    schema_at: SchemaAt, dsn: str, admin: Connection
) -> None:
    """Migration jobs_history on a populated schema: nothing is rewritten; keys of the
    jobs already there (finished ones too) are kept; the pruner moves the finished jobs
    into jobs_history in batches, and reads see them before and after."""
    from pgtasks import App
    from pgtasks._worker.pruner import prune

    history = next(m.version for m in load_migrations() if m.name == "jobs_history")
    schema = schema_at(history - 1, rows=1000)
    jobs = sql.Identifier(schema, "jobs")
    admin.execute(
        sql.SQL(
            "INSERT INTO {} (task_name, queue, args, kwargs, max_attempts, status, attempts,"
            " finished_at, idempotency_key, result) VALUES ('t', 'q', '[]', '{{}}', 1, 'done',"
            " 1, now(), 'kept-key', '42')"
        ).format(jobs)
    )
    admin.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        Migrator(Queries(schema)).migrate(conn)
    with App(dsn=dsn, schema=schema) as app:

        @app.task(name="t")
        def t() -> None: ...

        keyed = t.apply_async(idempotency_key="kept-key")
        assert keyed.existed and keyed.get(timeout=1) == 42
        with psycopg.connect(dsn, autocommit=True) as conn:
            result = prune(app.queries, conn, done_after=None, failed_after=None, batch_size=200)
            assert result.batches == 3  # 501 finished jobs, 200 a batch
            counts = conn.execute(
                sql.SQL(
                    "SELECT (SELECT count(*) FROM {}), (SELECT count(*) FROM {}),"
                    " (SELECT count(*) FROM {})"
                ).format(
                    jobs, sql.Identifier(schema, "jobs_history"), sql.Identifier(schema, "all_jobs")
                )
            ).fetchone()
        assert counts == (500, 501, 1001)
        assert t.apply_async(idempotency_key="kept-key").id == keyed.id
        assert app.get_job(keyed.id).get(timeout=1) == 42
