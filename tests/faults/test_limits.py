"""Concurrency and rate limits across ten ``pgtasks worker`` processes (migration 0009).

Concurrency: jobs of a task limited to 3, of a task limited to 1 per key, and of a queue
limited to 2 run on ten workers while three of them are SIGKILLed mid-run. A sampler reads
the running counts in the database all along, and the task bodies record their
executions: neither ever shows more than the limit, and every job ends done (the slots of
the killed workers' jobs come free once those are rescued). Rate: 80 jobs of a task
limited to 240/m on ten workers; in every window of 5 s, claims (the database's clock) stay
within the rate plus one."""

from __future__ import annotations

import collections
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from pgtasks import App
from tests.apps.limits_app import (
    CAPPED_QUEUE,
    KEY_CONCURRENCY,
    QUEUE_CONCURRENCY,
    RATE_PER_SECOND,
    TASK_CONCURRENCY,
    LimitTasks,
    register_limit_tasks,
)
from tests.apps.worker_app import create_executions_table
from tests.support.probe import Probe, assert_invariants, wait_all_finished
from tests.support.processes import Processes
from tests.support.waiting import wait_until

APP_PATH = "tests.apps.limits_app:app"
WORKERS = 10


class Env:
    def __init__(self, dsn: str, app: App, processes: Processes) -> None:
        self.dsn, self.app, self.processes = dsn, app, processes
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_executions_table(conn, app.schema)
        self.tasks: LimitTasks = register_limit_tasks(app)
        self.probe = Probe(dsn, app.schema)


@pytest.fixture
def env(make_app: Callable[..., App], dsn: str, tmp_path: Path) -> Iterator[Env]:
    processes = Processes(tmp_path, APP_PATH)
    limits_env = Env(dsn, make_app(), processes)
    yield limits_env
    processes.close()
    limits_env.probe.close()


class Sampler(threading.Thread):
    """Reads the running limited jobs per task, key and queue until stopped; keeps maxima."""

    def __init__(self, dsn: str, schema: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.schema = dsn, schema
        self.maxima: collections.Counter[tuple[str, str]] = collections.Counter()
        self.samples = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        query = psycopg.sql.SQL(
            "SELECT task_name, queue, limit_key FROM {}.all_jobs"
            " WHERE status = 'running' AND limit_groups IS NOT NULL"
        ).format(psycopg.sql.Identifier(self.schema))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.wait(0.01):
                counts: collections.Counter[tuple[str, str]] = collections.Counter()
                for task_name, queue, key in conn.execute(query):
                    counts[("task", task_name)] += 1
                    counts[("queue", queue)] += 1
                    if key is not None:
                        counts[("key", f"{task_name}/{key}")] += 1
                for group, count in counts.items():
                    self.maxima[group] = max(self.maxima[group], count)
                self.samples += 1


def max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, step in events:  # an end sorts before a start at the same instant
        running += step
        most = max(most, running)
    return most


def test_concurrency_limits_hold_across_ten_workers_with_three_killed(env: Env) -> None:
    tasks, probe = env.tasks, env.probe
    jobs = tasks.per_task.delay_many([{"seconds": 0.4} for _ in range(30)])
    jobs += tasks.per_key.delay_many(
        [{"user": f"user-{n % 4}", "seconds": 0.15} for n in range(40)]
    )
    jobs += tasks.in_queue.delay_many([{"seconds": 0.15} for _ in range(30)])
    sampler = Sampler(env.dsn, env.app.schema)
    sampler.start()
    workers = [
        env.processes.worker(env.dsn, env.app.schema, "--concurrency=4", wait_started=False)
        for _ in range(WORKERS)
    ]

    def executions() -> int:
        return int(probe.rows("SELECT count(*) AS n FROM {schema}.executions")[0]["n"])

    wait_until(lambda: executions() >= 25, timeout=60, message="25 executions")
    # Kill three workers that hold limited jobs at this moment.
    holders = {
        row["pid"]
        for row in probe.rows(
            "SELECT workers.pid FROM {schema}.jobs"
            " JOIN {schema}.workers ON workers.id = jobs.locked_by WHERE jobs.status = 'running'"
        )
    }
    victims = [worker for worker in workers if worker.pid in holders][:3]
    victims += [worker for worker in workers if worker not in victims][: 3 - len(victims)]
    for victim in victims:
        victim.send(signal.SIGKILL)
    killed_at = probe.rows("SELECT clock_timestamp() AS now")[0]["now"]
    wait_all_finished(probe, len(jobs), timeout=90)
    sampler.stopping.set()
    sampler.join(5)

    limits = {
        ("task", tasks.per_task.name): TASK_CONCURRENCY,
        ("queue", CAPPED_QUEUE): QUEUE_CONCURRENCY,
    }
    for user in range(4):
        limits[("key", f"{tasks.per_key.name}/user-{user}")] = KEY_CONCURRENCY
    print(f"\n[limits] {sampler.samples} samples; most running: {dict(sampler.maxima)}")
    for group, limit in limits.items():
        assert 0 < sampler.maxima[group] <= limit, (group, sampler.maxima[group])

    # The task bodies: executions of a killed worker ended at the kill at the latest.
    rows = probe.rows(
        "SELECT jobs.task_name, jobs.queue, jobs.limit_key, executions.started,"
        " coalesce(executions.finished, %s) AS ended"
        " FROM {schema}.executions JOIN {schema}.all_jobs AS jobs ON jobs.id = executions.job_id",
        [killed_at],
    )
    intervals: dict[tuple[str, str], list[tuple[datetime, datetime]]] = {}
    for row in rows:
        span = (row["started"], row["ended"])
        intervals.setdefault(("task", row["task_name"]), []).append(span)
        intervals.setdefault(("queue", row["queue"]), []).append(span)
        if row["limit_key"] is not None:
            group = ("key", f"{row['task_name']}/{row['limit_key']}")
            intervals.setdefault(group, []).append(span)
    for group, limit in limits.items():
        assert max_overlap(intervals[group]) <= limit, group
    rescued = probe.rows("SELECT count(*) AS n FROM {schema}.all_jobs WHERE attempts > 1")[0]["n"]
    print(f"[limits] {rescued} job(s) ran again after the kills")
    assert rescued > 0
    assert_invariants(probe, [job.id for job in jobs])


def test_a_rate_limit_holds_across_ten_workers(env: Env) -> None:
    tasks, probe = env.tasks, env.probe
    count = 80
    jobs = tasks.rated.delay_many([{} for _ in range(count)])
    for _ in range(WORKERS):
        env.processes.worker(env.dsn, env.app.schema, "--concurrency=2", wait_started=False)
    wait_all_finished(probe, count, timeout=60)
    claims = [
        row["locked_at"]
        for row in probe.rows("SELECT locked_at FROM {schema}.all_jobs ORDER BY locked_at")
    ]
    window = timedelta(seconds=5)
    allowed = RATE_PER_SECOND * window.total_seconds() + 1
    most = max(
        sum(1 for other in claims[index:] if other < start + window)
        for index, start in enumerate(claims)
    )
    span = (claims[-1] - claims[0]).total_seconds()
    print(f"\n[rate] {count} jobs claimed over {span:.2f} s; at most {most} in any 5 s window")
    assert most <= allowed
    assert_invariants(probe, [job.id for job in jobs])
