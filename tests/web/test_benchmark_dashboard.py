"""benchmarks/dashboard.py runs end to end on tiny sizes (its figures are not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.schemas import drop_schema

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_the_dashboard_benchmark_runs_on_tiny_sizes(dsn: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.dashboard", "--quick", "--dsn", dsn],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    drop_schema(dsn, "pgtasks_bench_dashboard")  # the populated schema is kept for --reuse
    assert result.returncode == 0, result.stdout + result.stderr
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
        assert page in result.stdout
    assert "claim" in result.stdout
    assert "the exact read of `pgtasks workflows list --status`" in result.stdout
    assert "the exact read of `pgtasks limits`" in result.stdout
    assert "size-capped jobs" in result.stdout and "Python memory peak" in result.stdout
