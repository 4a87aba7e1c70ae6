"""The start-up benchmark (benchmarks/startup_ab.py), end to end on one round: this
checkout against itself, the figures without a database and those with one."""

from __future__ import annotations

import pytest

from tests.support.environment import ROOT
from tests.support.examples import run_python
from tests.support.schemas import SchemaAdmin, new_schema_name

FIGURES = (
    "import pgtasks",
    "pgtasks --help",
    "pgtasks worker --help",
    "pgtasks jobs list --help",
    "worker to started",
    "beat to starting",
    "jobs list",
    "migrate (nothing to do)",
)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_startup_ab_benchmark_compares_two_checkouts(dsn: str, schema_admin: SchemaAdmin) -> None:
    schema = new_schema_name()
    try:
        stdout = run_python(
            "-m", "benchmarks.startup_ab", "--baseline", str(ROOT), "--runs", "1",
            "--dsn", dsn, "--schema", schema, timeout=230,
        )  # fmt: skip
    finally:
        schema_admin.drop_later(schema)

    lines = stdout.splitlines()
    for figure in FIGURES:
        row = next(line for line in lines if line.startswith(figure + " "))
        this_cpu, base_cpu, ratio, this_wall, base_wall = map(float, row.split()[-5:])
        assert min(this_cpu, base_cpu, this_wall, base_wall) > 0, row
        assert ratio > 0, row
