"""The start-up benchmark (benchmarks/startup_ab.py), end to end on one round: this
checkout against itself, no database."""

from __future__ import annotations

import pytest

from tests.support.environment import ROOT
from tests.support.examples import run_python


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_startup_ab_benchmark_compares_two_checkouts() -> None:
    stdout = run_python(
        "-m", "benchmarks.startup_ab", "--baseline", str(ROOT), "--runs", "1", timeout=110
    )

    lines = stdout.splitlines()
    for figure in ("import pgtasks", "pgtasks --help", "pgtasks worker --help"):
        row = next(line for line in lines if line.startswith(figure + " "))
        this_cpu, base_cpu, ratio, this_wall, base_wall = map(float, row.split()[-5:])
        assert min(this_cpu, base_cpu, this_wall, base_wall) > 0, row
        assert ratio > 0, row
