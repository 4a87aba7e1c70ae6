"""A primary failover under load, with real servers and processes.

A PostgreSQL 15 primary and its synchronous streaming replica of this test's own
(benchmarks/failover.py, scripts/ci-postgres15.sh; the servers other tests share are left
alone), two ``pgtasks worker`` processes, a ``pgtasks beat`` and two producer threads, all
on the multi-host DSN ``host=127.0.0.1,127.0.0.1 port=P1,P2
target_session_attrs=read-write``. Under load the primary is stopped with ``pg_ctl stop -m
immediate`` and the replica promoted with ``pg_ctl promote`` (by hand, as an HA manager
would). Then: every worker runs jobs again without a restart and LISTENs again (jobs
enqueued one at a time to idle workers run well within their 20 s poll interval, and the
producer's ``job.get()`` is answered through its result listener), no
acknowledged enqueue is lost, no job runs twice and no attempt has two owners, and beat's
every-second schedule has one job per tick across the failover. `dev.py test-servers`
(and so .ci/run) runs it (PGTASKS_TEST_FAILOVER=1); the figures are printed (``-s``).
The asynchronous case (what a crash loses) is measured by ``python -m benchmarks
--failover``, not asserted.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from benchmarks.clusters import pg15_available
from benchmarks.failover import pair_of, run_failover, tick_gaps
from pgtasks._cron import format_tick


@pytest.fixture
def enabled() -> None:
    if not pg15_available():
        pytest.skip("Debian's PostgreSQL 15 is not installed (apt-get install postgresql-15)")
    if os.environ.get("PGTASKS_TEST_FAILOVER") != "1":
        pytest.skip(
            "PGTASKS_TEST_FAILOVER is not set: `python3 dev.py test-servers"
            " tests/servers/test_failover.py` runs it (it starts servers of its own)"
        )


def test_a_promoted_synchronous_replica_loses_no_job_and_runs_none_twice(
    enabled: None, tmp_path: Path
) -> None:
    # Ports of its own (the benchmark's pair starts at 54480).
    with pair_of(synchronous=True, directory=tmp_path / "servers", first_port=54490) as pair:
        outcome = run_failover(pair, tmp_path)
    print(outcome.describe())

    assert outcome.lost == 0, outcome.describe()
    assert outcome.acknowledged_before_crash > 0 and outcome.in_flight > 0, outcome.describe()
    # Every worker ran jobs on the new primary, in the same process (run_failover fails
    # when a worker or beat exited), and its listener came back (it LISTENs on connect).
    assert outcome.workers_resumed == outcome.workers == 2, outcome.describe()
    for log in outcome.worker_logs:
        assert re.search(r"listener of worker \S+: database reachable again", log), log
    # The producer's result listener (job.get()) came back too.
    assert outcome.result_listener_healthy, outcome.describe()
    # Fencing: one run per job, and never two owners of one attempt.
    assert outcome.duplicate_runs == 0 and outcome.same_attempt_twice == 0, outcome.describe()
    # Beat: a job per second across the failover, none skipped, none doubled.
    ticks = outcome.ticks
    assert len(ticks) == len(set(ticks)), [format_tick(t) for t in ticks]
    assert tick_gaps(ticks) == 0, [format_tick(t) for t in ticks]
    crashed = datetime.fromtimestamp(outcome.crashed, timezone.utc)
    promoted = datetime.fromtimestamp(outcome.promoted, timezone.utc)
    assert ticks[0] < crashed - timedelta(seconds=1) and ticks[-1] > promoted + timedelta(seconds=1)
