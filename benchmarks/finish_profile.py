"""What one finished job costs: the worker's finish (each job moves to jobs_history) beside
the finish before jobs_history (one fenced UPDATE in place), in the same run.

    python -m benchmarks.finish_profile [--dsn DSN] [--jobs 20000] [--runs 3] [--batch 10,50]

Each round, per batch size and per statement (the order alternating between rounds):
``--jobs`` jobs enqueued and claimed (not timed), then finished ``--batch`` at a time by
the worker's own round trip (``finish_and_claim_jobs`` with nothing to claim: the finish
statement alone on an autocommit connection, one transaction per batch), timed:

- wall µs per job: the loop's elapsed time;
- Python µs per job: this process's CPU time over the loop (building the parameters,
  psycopg, reading the rows back);
- server µs per job: the CPU time of the connection's backend process over the loop
  (``/proc/<pid>/stat``: the server must run on this machine);
- WAL bytes per job: ``pg_current_wal_insert_lsn()`` before and after (the whole
  server's WAL: use a server nothing else writes to), full-page images included.

The reference ("before history") is the finish statement of the release before
jobs_history: an UPDATE of the row in place, fenced by the same lease, notifying the
same way, run with triggers off (session_replication_role = replica) so that the row
trigger that moves finished jobs does not move them; its rows are deleted afterwards,
untimed. Figures are medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks import App
from pgtasks._leases import ClaimedJob, ClaimRequest, Finish
from pgtasks._retry import Outcome
from pgtasks._store.claims import finish_params
from pgtasks._worker.connection import WORKER_CONNECTION_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "pgtasks_finish_profile"
TASK = "profile.noop"

#: The finish of the release before jobs_history (migration jobs_history): the job's
#: row updated in place, fenced by its lease, waiters notified.
FINISH_BEFORE_HISTORY = """
WITH finished AS (
    UPDATE {schema}.jobs AS jobs
    SET status = CASE WHEN jobs.cancel_requested THEN 'cancelled' ELSE outcome.status END,
        result = CASE WHEN jobs.cancel_requested THEN NULL ELSE outcome.result END,
        last_error = coalesce(outcome.error, jobs.last_error),
        run_at = CASE WHEN outcome.status = 'pending' AND NOT jobs.cancel_requested
                      THEN now() + make_interval(secs => outcome.delay)
                      ELSE jobs.run_at END,
        finished_at = CASE WHEN outcome.status = 'pending' AND NOT jobs.cancel_requested
                           THEN NULL ELSE now() END,
        attempt_errors = CASE WHEN outcome.error IS NULL OR outcome.status = 'done'
                              THEN jobs.attempt_errors
                              ELSE coalesce(jobs.attempt_errors, '[]'::jsonb)
                                   || jsonb_build_array(jsonb_build_object(
                                          'attempt', outcome.attempt,
                                          'worker_id', jobs.locked_by,
                                          'error', outcome.error,
                                          'exception_type', outcome.exception_type,
                                          'finished_at', now()))
                         END,
        updated_at = now()
    FROM unnest(
        string_to_array(%(id)b, ',')::bigint[], string_to_array(%(attempt)b, ',')::int[],
        string_to_array(%(status)b, ','), %(result)b::jsonb[], %(error)b::text[],
        string_to_array(%(delay)b, ',')::float8[], string_to_array(%(held)b, ','),
        %(exception_type)b::text[]
    ) AS outcome(id, attempt, status, result, error, delay, held, exception_type)
    WHERE jobs.id = outcome.id
      AND jobs.status = outcome.held
      AND jobs.locked_by = %(worker_id)b
      AND jobs.attempts = outcome.attempt
    RETURNING jobs.id, jobs.status
),
notified AS (
    SELECT pg_notify({done_channel}, string_agg(id::text, ','))
    FROM (SELECT id, (row_number() OVER ()) / 500 AS chunk
          FROM finished WHERE status <> 'pending') AS ended
    GROUP BY chunk
    UNION ALL
    (SELECT pg_notify({activity_channel}, 'retried') FROM finished WHERE status = 'pending'
     LIMIT 1)
)
SELECT finished.id, finished.status, notifications.sent
FROM finished
LEFT JOIN (SELECT count(*) AS sent FROM notified) AS notifications ON true
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.finish_profile", description=__doc__
    )
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per measurement")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--batch", default="10,50", help="finish batch sizes, comma-separated")
    return parser.parse_args(argv)


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the server process ``pid`` has used (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wal_position(conn: psycopg.Connection[Any]) -> str:
    return str(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])  # type: ignore[index]


def wal_bytes(conn: psycopg.Connection[Any], before: str) -> int:
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (before,))
    return int(row.fetchone()[0])  # type: ignore[index]


def claimed_jobs(
    app: App, conn: psycopg.Connection[Any], worker_id: int, jobs: int
) -> list[ClaimedJob]:
    app.tasks[TASK].delay_many([{}] * jobs)
    claimed: list[ClaimedJob] = []
    while len(claimed) < jobs:
        got = app.queries.claim_jobs(conn, ClaimRequest(worker_id, 500))
        if not got:
            raise RuntimeError(f"claimed {len(claimed)} of {jobs}")
        claimed += got
    return claimed


def measure(app: App, dsn: str, jobs: int, batch: int, variant: str) -> dict[str, float]:
    """One timed finish loop of ``variant`` ("history": the worker's; "before": the
    reference)."""
    store = app.queries
    done = Outcome.done("null")
    reference = app.queries._render(FINISH_BEFORE_HISTORY)
    with (
        psycopg.connect(dsn, autocommit=True, options=WORKER_CONNECTION_OPTIONS) as conn,
        psycopg.connect(dsn, autocommit=True) as probe,
    ):
        worker_id = store.register_worker(
            conn, hostname="profile", pid=0, queues=None, concurrency=batch
        )
        finishes = [Finish.of(job, done) for job in claimed_jobs(app, conn, worker_id, jobs)]
        if variant == "before":
            conn.execute("SET session_replication_role = replica")
        pid = conn.info.backend_pid
        wal, server, python = wal_position(probe), backend_cpu(pid), time.process_time()
        started = time.perf_counter()
        written = 0
        for low in range(0, jobs, batch):
            group = finishes[low : low + batch]
            if variant == "history":
                written += len(store.finish_and_claim_jobs(conn, group, None).written)
            else:
                (params,) = finish_params(group)
                with conn.cursor() as cursor:
                    cursor.execute(reference, params)
                    written += len(cursor.fetchall())
        elapsed = time.perf_counter() - started
        python = time.process_time() - python
        server = backend_cpu(pid) - server
        wal_used = wal_bytes(probe, wal)
        if written != jobs:
            raise RuntimeError(f"{variant}: finished {written} of {jobs}")
        if variant == "before":  # the reference's done rows stay in jobs: removed, untimed
            conn.execute(
                sql.SQL("DELETE FROM {}.jobs WHERE status = 'done'").format(sql.Identifier(SCHEMA))
            )
            conn.execute("SET session_replication_role = DEFAULT")
        store.deregister_worker(conn, worker_id)
        probe.execute(sql.SQL("VACUUM {}.jobs").format(sql.Identifier(SCHEMA)))
    million = 1e6 / jobs
    return {
        "wall us/job": elapsed * million,
        "python us/job": python * million,
        "server us/job": server * million,
        "WAL bytes/job": wal_used / jobs,
        "jobs/s": jobs / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks import __main__ as runner

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    runner.print_setting(dsn)
    print("load average before: " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    app = App(dsn=dsn, schema=SCHEMA, pool_max_size=2)

    @app.task(name=TASK)
    def noop() -> None:
        """Does nothing."""

    app.migrate()
    batches = [int(part) for part in args.batch.split(",") if part.strip()]
    plan = [(batch, variant) for batch in batches for variant in ("history", "before")]
    figures: dict[tuple[int, str], list[dict[str, float]]] = {entry: [] for entry in plan}
    for round_number in range(args.runs):
        for batch, variant in plan if round_number % 2 == 0 else plan[::-1]:
            figures[(batch, variant)].append(measure(app, dsn, args.jobs, batch, variant))
        print(f"round {round_number + 1} of {args.runs} done", flush=True)
    app.close()
    print(f"\nfinish, {args.jobs:,} jobs per measurement, median of {args.runs} round(s)")
    names = ("wall us/job", "python us/job", "server us/job", "WAL bytes/job", "jobs/s")
    print(f"{'statement':38}" + "".join(f"{name:>15}" for name in names))
    for batch, variant in plan:
        label = f"batch {batch}: " + (
            "finish + move to history" if variant == "history" else "finish before history"
        )
        medians = [
            statistics.median(run[name] for run in figures[(batch, variant)]) for name in names
        ]
        print(f"{label:38}" + "".join(f"{value:>15,.1f}" for value in medians))
    print("load average after: " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
