"""Read-only looks at a test schema's jobs, workers and executions; waits and invariants.

The ``executions`` side table is written by the tasks of tests/apps/worker_app.py (and
fault_app.py): one row per run of task code, so tests count runs and see which process
ran which attempt.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from tests.support.waiting import wait_until


class Probe:
    """Read-only looks at a schema's jobs, workers and executions, for assertions."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self._conn: psycopg.Connection[Any] | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run ``query`` ({schema} is the test schema); a broken connection is dropped."""
        statement = sql.SQL(query).format(schema=sql.Identifier(self.schema))
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)
            with self._conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(statement, params)
                return cursor.fetchall()
        except psycopg.OperationalError:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
            raise

    def status_counts(self) -> dict[str, int]:
        rows = self.rows("SELECT status, count(*) AS n FROM {schema}.all_jobs GROUP BY status")
        return {row["status"]: row["n"] for row in rows}

    def job(self, job_id: int) -> dict[str, Any]:
        rows = self.rows(
            "SELECT id, status, attempts, locked_by, result, last_error, finished_at"
            " FROM {schema}.all_jobs WHERE id = %s",
            (job_id,),
        )
        assert rows, f"job {job_id} is missing"
        return rows[0]

    def executions(self, job_id: int) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT job_id, attempt, worker_id, pid, started, finished"
            " FROM {schema}.executions WHERE job_id = %s ORDER BY id",
            (job_id,),
        )

    def executions_per_job(self) -> dict[int, int]:
        rows = self.rows("SELECT job_id, count(*) AS n FROM {schema}.executions GROUP BY job_id")
        return {row["job_id"]: row["n"] for row in rows}

    def workers(self) -> list[dict[str, Any]]:
        return self.rows("SELECT id, pid FROM {schema}.workers ORDER BY id")


def wait_started(
    probe: Probe, job_id: int, attempt: int = 1, timeout: float = 10.0
) -> dict[str, Any]:
    """Wait for the execution row of ``attempt`` of the job (its task code is running)."""

    def started() -> dict[str, Any] | None:
        return next((row for row in probe.executions(job_id) if row["attempt"] == attempt), None)

    row: dict[str, Any] = wait_until(
        started, timeout=timeout, message=f"job {job_id} attempt {attempt} to start"
    )
    return row


def wait_status(probe: Probe, job_id: int, status: str, timeout: float = 10.0) -> dict[str, Any]:
    row: dict[str, Any] = wait_until(
        lambda: (job := probe.job(job_id))["status"] == status and job,
        timeout=timeout,
        message=f"job {job_id} to be {status}",
    )
    return row


def safe_counts(probe: Probe) -> dict[str, int]:
    """Status counts, or {} while the database is unreachable."""
    try:
        return probe.status_counts()
    except psycopg.OperationalError:
        return {}


def wait_all_finished(probe: Probe, total: int, timeout: float = 60.0) -> None:
    def finished() -> bool:
        counts = safe_counts(probe)
        ended = sum(counts.get(status, 0) for status in ("done", "failed", "cancelled"))
        return ended == total and sum(counts.values()) == total

    wait_until(finished, timeout=timeout, interval=0.05, message=f"{total} jobs finished")


def assert_invariants(
    probe: Probe,
    job_ids: Collection[int],
    *,
    failed: Collection[int] = (),
    cancelled: Collection[int] = (),
    released: bool = False,
    executed: bool = True,
) -> None:
    """The checks every scenario ends with (in SQL, on the jobs and executions tables).

    - no job is left running;
    - nothing is lost: every job in ``job_ids`` exists and is done, except those
      ``failed`` or ``cancelled`` by design;
    - attempts never exceed max_attempts;
    - executions per job never exceed its attempts (with ``released``, jobs released at a
      shutdown deadline got their attempt back: then distinct attempt numbers are
      counted instead);
    - each done job was completed by the lease that ran last: its final (locked_by,
      attempts) is the (worker, attempt) of its latest execution, which finished.
    """
    rows = probe.rows(
        "SELECT jobs.id, jobs.status, jobs.attempts, jobs.max_attempts, jobs.locked_by,"
        " count(executions.id) AS runs,"
        " count(DISTINCT executions.attempt) AS distinct_attempts,"
        " (array_agg(executions.attempt ORDER BY executions.attempt DESC,"
        "            executions.id DESC))[1] AS last_attempt,"
        " (array_agg(executions.worker_id ORDER BY executions.attempt DESC,"
        "            executions.id DESC))[1] AS last_worker,"
        " (array_agg(executions.finished IS NOT NULL ORDER BY executions.attempt DESC,"
        "            executions.id DESC))[1] AS last_finished"
        " FROM {schema}.all_jobs AS jobs"
        " LEFT JOIN {schema}.executions AS executions ON executions.job_id = jobs.id"
        " GROUP BY jobs.id, jobs.status, jobs.attempts, jobs.max_attempts, jobs.locked_by"
    )
    by_id = {row["id"]: row for row in rows}
    running = [row["id"] for row in rows if row["status"] == "running"]
    assert not running, f"jobs left running: {running}"
    missing = set(job_ids) - set(by_id)
    assert not missing, f"jobs lost: {sorted(missing)}"
    problems: list[str] = []
    for job_id in job_ids:
        row = by_id[job_id]
        expected = "failed" if job_id in failed else "cancelled" if job_id in cancelled else "done"
        if row["status"] != expected:
            problems.append(f"job {job_id} is {row['status']}, expected {expected}")
        if row["attempts"] > row["max_attempts"]:
            problems.append(f"job {job_id}: attempts {row['attempts']} > max {row['max_attempts']}")
        runs = row["distinct_attempts"] if released else row["runs"]
        if runs > row["attempts"]:
            problems.append(f"job {job_id}: {row['runs']} executions > {row['attempts']} attempts")
        if row["status"] == "done" and executed:
            lease = (row["attempts"], row["locked_by"], True)
            last = (row["last_attempt"], row["last_worker"], row["last_finished"])
            if lease != last:
                problems.append(f"job {job_id}: done by lease {lease}, last execution {last}")
    assert not problems, "\n".join(problems[:20]) + f"\n({len(problems)} problems)"
