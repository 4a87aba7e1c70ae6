"""benchmarks/dashboard.py runs end to end on tiny sizes (its figures are not checked)."""

from __future__ import annotations

import pytest

from tests.support.examples import run_python
from tests.support.servers import database_with


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(330)  # the benchmark's own bound (300 s) on a loaded machine, not 60 s
def test_the_dashboard_benchmark_runs_on_tiny_sizes(dsn: str) -> None:
    # A database of its own: the schemas it populates (kept for --reuse) go with it.
    with database_with(dsn) as database:
        # Two requests a page (--quick: 5): every page is still read and timed.
        stdout = run_python(
            "-m",
            "benchmarks.dashboard",
            "--quick",
            "--requests",
            "2",
            "--dsn",
            database,
            timeout=300,
        )
    for page in (
        "overview",
        "jobs, newest first",
        "job page, failed",
        "job page, a workflow step",
        "bulk counts",
        "workers",
        "schedules",
        "live re-render: job page",
        "workflows, failed",
        "workflow page, chord of 1,000",
        "jobs of a workflow (filter)",
        "live re-render: workflows",
        "limits",
        "limits, per key, the 200 busiest keys",
        "job page, a limited job",
        "live re-render: limits",
    ):
        assert page in stdout
    assert "claim" in stdout
    assert "the exact read of `pgtasks workflows list --status`" in stdout
    assert "the exact read of `pgtasks limits`" in stdout
    assert "size-capped jobs" in stdout and "Python memory peak" in stdout
