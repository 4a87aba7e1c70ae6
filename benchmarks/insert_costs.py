"""What each part of the jobs table costs an insert (``--insert-costs``).

    python -m benchmarks --insert-costs [--dsn DSN] [--rows N] [--runs R] [--quick]

pgtasks' schema migrated into scratch schemas, each with one more part of the insert path
removed than the one before, beside a minimal table (the columns a plain job is given
and a primary key: the physical reference of ``--enqueue``):

0. ``jobs`` as it was before migration 0031 (rebuilt from today's: the claim index
   without the queue, the dashboard's ``jobs_pending_queue_idx``, and a disabled
   ``BEFORE ROW`` insert trigger, as the runtime-limits stamp was: it alone makes a COPY
   insert row by row);
1. ``jobs``, as migrated;
2. without the statement-level notify trigger (its transition table and its query);
3. without every insert trigger (besides 2: the statement triggers of start deadlines
   and undeclared runtime limits, the AFTER ROW triggers of fair keys, sequences and
   idempotency keys, each with a WHEN clause a plain job fails);
4. without the partial indexes a plain pending job does not enter (their predicates are
   still evaluated for every inserted row);
5. without the queue in the claim index (its ``INCLUDE (queue)``, which serves the
   dashboard's per-queue counts since migration 0031 dropped ``jobs_pending_queue_idx``);
6. without the claim index: the primary key alone;
7. the minimal table.

Per configuration and round: an ``INSERT … SELECT`` of N plain jobs (the columns
``delay_many()`` sends; the rest take their defaults), five times, each in its own
transaction; the server's execution time per row (the statement's round trip, without
its commit) and the WAL bytes per row (``pg_current_wal_insert_lsn`` around the five,
commits included); a ``COPY`` of the same N rows, five times (``delay_many()``'s bulk
path: PostgreSQL batches a COPY's rows only into a table without BEFORE ROW triggers),
the client's time per row; then one-row ``INSERT … RETURNING id`` statements, each a transaction
of its own with ``synchronous_commit=off`` (no flush wait: the statement's work and
its commit record). Configurations take turns, the order reversed each round; figures
are medians of R rounds. The schemas are dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from pgtasks import App

#: The columns every configuration's rows are given (as ``delay_many()``'s rows).
COLUMNS = ("task_name", "queue", "priority", "args", "kwargs", "max_attempts")
ROW = ("benchmarks.app.noop", "default", 0, "[]", "{}", 3)
#: Scratch schemas: PREFIX + the configuration's number.
PREFIX = "bench_insert_costs_"
#: One-row inserts per configuration and round.
SINGLES = 200

#: The insert triggers of jobs (migrations 0001, 0010, 0020, 0022, 0023).
NOTIFY_TRIGGER = "jobs_notify_inserted"
OTHER_TRIGGERS = (
    "jobs_keyed_job_inserted",
    "jobs_register_key",
    "jobs_relative_deadlines",
    "jobs_runtime_limits",
    "jobs_sequence_job_inserted",
)
#: The partial indexes a plain pending job enters (besides the primary key).
ENTERED = ("jobs_claim_idx",)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks --insert-costs", description=__doc__
    )
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--rows", type=int, default=1000, help="rows per bulk statement")
    parser.add_argument("--runs", type=int, default=7, help="rounds (median)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.runs = 100, 1
    return args


def drop_triggers(conn: psycopg.Connection[object], schema: str, names: tuple[str, ...]) -> None:
    for name in names:
        conn.execute(
            sql.SQL("DROP TRIGGER {} ON {}").format(
                sql.Identifier(name), sql.Identifier(schema, "jobs")
            )
        )


def drop_indexes(conn: psycopg.Connection[object], schema: str, names: list[str]) -> None:
    for name in names:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, name)))


def unentered_indexes(conn: psycopg.Connection[object], schema: str) -> list[str]:
    """The indexes of jobs besides the primary key and those a plain job enters."""
    rows = conn.execute(
        "SELECT index.relname FROM pg_index"
        " JOIN pg_class AS index ON index.oid = pg_index.indexrelid"
        " WHERE pg_index.indrelid = to_regclass(%s) AND NOT pg_index.indisprimary",
        (f"{sql.Identifier(schema).as_string(conn)}.jobs",),
    ).fetchall()
    return [name for (name,) in rows if name not in ENTERED]


#: Each configuration: its name and what it removes from a freshly migrated schema
#: (cumulative: each removes what the one before it did, and more).
Steps = Callable[[psycopg.Connection[object], str], None]


def _no_notify(conn: psycopg.Connection[object], schema: str) -> None:
    drop_triggers(conn, schema, (NOTIFY_TRIGGER,))


def _no_triggers(conn: psycopg.Connection[object], schema: str) -> None:
    drop_triggers(conn, schema, (NOTIFY_TRIGGER, *OTHER_TRIGGERS))


def _no_unentered(conn: psycopg.Connection[object], schema: str) -> None:
    _no_triggers(conn, schema)
    drop_indexes(conn, schema, unentered_indexes(conn, schema))


def _no_claim_queue(conn: psycopg.Connection[object], schema: str) -> None:
    _no_unentered(conn, schema)
    drop_indexes(conn, schema, ["jobs_claim_idx"])
    conn.execute(
        sql.SQL(
            "CREATE INDEX jobs_claim_idx ON {} (priority DESC, run_at, id) WHERE status = 'pending'"
        ).format(sql.Identifier(schema, "jobs"))
    )


def _primary_key_only(conn: psycopg.Connection[object], schema: str) -> None:
    _no_claim_queue(conn, schema)
    drop_indexes(conn, schema, ["jobs_claim_idx"])


def _before_0031(conn: psycopg.Connection[object], schema: str) -> None:
    table = sql.Identifier(schema, "jobs")
    drop_indexes(conn, schema, ["jobs_claim_idx"])
    for statement in (
        "CREATE INDEX jobs_claim_idx ON {table} (priority DESC, run_at, id)"
        " WHERE status = 'pending'",
        "CREATE INDEX jobs_pending_queue_idx ON {table} (queue, run_at)"
        " WHERE status = 'pending' AND attempts >= 0",
        "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'",
        "CREATE TRIGGER jobs_before_row BEFORE INSERT ON {table}"
        " FOR EACH ROW EXECUTE FUNCTION {function}()",
        "ALTER TABLE {table} DISABLE TRIGGER jobs_before_row",
    ):
        conn.execute(
            sql.SQL(statement).format(
                table=table, function=sql.Identifier(schema, "before_row_noop")
            )
        )


CONFIGURATIONS: dict[str, Steps | None] = {
    "jobs before migration 0031 (rebuilt)": _before_0031,
    "jobs, as migrated": lambda conn, schema: None,
    "- the notify trigger": _no_notify,
    "- every insert trigger": _no_triggers,
    "- partial indexes a plain job skips": _no_unentered,
    "- the claim index's INCLUDE (queue)": _no_claim_queue,
    "- jobs_claim_idx (primary key only)": _primary_key_only,
    "minimal table": None,
}


def prepare(dsn: str, schema: str, steps: Steps | None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    if steps is None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {} (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
                    " task_name text, queue text, priority integer, args jsonb, kwargs jsonb,"
                    " max_attempts integer)"
                ).format(sql.Identifier(schema, "jobs"))
            )
        return
    app = App(dsn, schema=schema)
    try:
        app.migrate()
    finally:
        app.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        steps(conn, schema)  # type: ignore[arg-type]


def statements(schema: str) -> tuple[sql.Composed, sql.Composed]:
    """The bulk INSERT … SELECT (%s rows) and the one-row INSERT … RETURNING id."""
    table = sql.Identifier(schema, "jobs")
    columns = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
    bulk = sql.SQL(
        "INSERT INTO {} ({}) SELECT %s, %s, %s, %s::jsonb, %s::jsonb, %s"
        " FROM generate_series(1, %s)"
    ).format(table, columns)
    single = sql.SQL(
        "INSERT INTO {} ({}) VALUES (%s, %s, %s, %s::jsonb, %s::jsonb, %s) RETURNING id"
    ).format(table, columns)
    return bulk, single


Figures = tuple[float, float, float, float]


def copy_rows(conn: psycopg.Connection[object], schema: str, rows: int) -> None:
    """COPY ``rows`` plain jobs into the schema's jobs (one transaction)."""
    columns = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(schema, "jobs"), columns)
    line = ("\t".join(str(value) for value in ROW) + "\n").encode()
    with conn.cursor().copy(statement) as copy:
        copy.write(line * rows)
    conn.commit()


def measure(conn: psycopg.Connection[object], schema: str, rows: int) -> Figures:
    """µs per row in bulk, WAL bytes per row, µs per one-row statement, µs per row of a
    COPY."""
    bulk, single = statements(schema)
    conn.autocommit = False
    conn.execute(bulk, (*ROW, rows))  # plans and caches: not counted
    conn.commit()
    before = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
    conn.commit()
    spent = 0.0
    for _ in range(5):
        started = time.perf_counter()
        conn.execute(bulk, (*ROW, rows))
        spent += time.perf_counter() - started
        conn.commit()
    wal = conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)::float8", (before,)
    ).fetchone()[0]  # type: ignore[index]
    conn.commit()
    copy_rows(conn, schema, rows)  # not counted
    copied = 0.0
    for _ in range(5):
        started = time.perf_counter()
        copy_rows(conn, schema, rows)
        copied += time.perf_counter() - started
    conn.autocommit = True
    conn.execute("SET synchronous_commit = off")
    for _ in range(5):
        conn.execute(single, ROW).fetchone()
    started = time.perf_counter()
    for _ in range(SINGLES):
        conn.execute(single, ROW).fetchone()
    one = (time.perf_counter() - started) / SINGLES
    conn.execute("RESET synchronous_commit")
    return (
        spent / (5 * rows) * 1e6,
        float(wal) / (5 * rows),
        one * 1e6,
        copied / (5 * rows) * 1e6,
    )


def main(argv: list[str]) -> int:
    from benchmarks import __main__ as runner

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    runner.print_setting(dsn)
    schemas = {name: f"{PREFIX}{index}" for index, name in enumerate(CONFIGURATIONS)}
    for name, steps in CONFIGURATIONS.items():
        prepare(dsn, schemas[name], steps)
    load_before = os.getloadavg()
    figures: dict[str, list[Figures]] = {name: [] for name in CONFIGURATIONS}
    try:
        with psycopg.connect(dsn) as conn:
            names = list(CONFIGURATIONS)
            for round_number in range(args.runs):
                for name in names if round_number % 2 == 0 else names[::-1]:
                    figures[name].append(measure(conn, schemas[name], args.rows))  # type: ignore[arg-type]
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for schema in schemas.values():
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    load_after = os.getloadavg()
    print(
        f"\ninsert costs: {args.rows} rows per bulk statement, {SINGLES} one-row statements;"
        f" median of {args.runs} round(s); load average "
        + " ".join(f"{value:.2f}" for value in load_before)
        + " -> "
        + " ".join(f"{value:.2f}" for value in load_after)
    )
    print(
        f"{'configuration':40} {'bulk µs/row':>12} {'WAL B/row':>10} {'one-row µs':>11}"
        f" {'COPY µs/row':>12}"
    )
    previous: float | None = None
    for name in CONFIGURATIONS:
        bulk, wal, one, copied = (
            statistics.median(values) for values in zip(*figures[name], strict=True)
        )
        saved = "" if previous is None else f"   (saves {previous - bulk:+.2f} µs/row)"
        print(f"{name:40} {bulk:12.2f} {wal:10.0f} {one:11.1f} {copied:12.2f}{saved}")
        previous = bulk
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
