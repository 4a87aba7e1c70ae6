"""The benchmark runner, end to end on a tiny N, with the peers when the bench extra is there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from benchmarks.peers import PEERS, Peer
from tests.support.environment import ROOT
from tests.support.examples import run_python
from tests.support.servers import database_with

PGTASKS_FIGURES = {
    "enqueue one by one (delay)",
    "enqueue bulk (delay_many x1000)",
    "enqueue transactional (100 per txn)",
    "raw SQL claim+finish loop (batch 10)",
    "raw SQL claim+finish loop (batch 50)",
    "worker, 1 process, concurrency 1",
    "worker, 1 process, concurrency 10",
    "worker, 1 process, concurrency 50",
    "worker, 1 process, async task, concurrency 50",
    "worker, 2 processes, concurrency 50",
    "idle pickup latency p50",
    "idle pickup latency p95",
    "idle pickup latency p99",
    "duplicates (processing runs)",
    "lost jobs (processing runs)",
}
PEER_FIGURES = (
    "enqueue one by one",
    "enqueue bulk (x1000)",
    "worker, concurrency 10",
    "worker, concurrency 50",
    "idle pickup latency p50",
    "idle pickup latency p95",
    "idle pickup latency p99",
    "duplicates (processing runs)",
    "lost jobs (processing runs)",
)
SUMMARY_NUMBERS = (
    "enqueue_one_by_one",
    "enqueue_bulk",
    "processing_c10",
    "processing_c50",
    "processing_best",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
)


def run_benchmark(
    command: str,
    *arguments: str,
    dsn: str | None = None,
    output: Path | None = None,
    timeout: float,
) -> str:
    """``python -m COMMAND ARGUMENTS [--dsn DSN] [--json OUTPUT]`` (``command``: the module
    and its flags, split at spaces); its output, once it exited 0."""
    where = ("--dsn", dsn) if dsn else ()
    report = ("--json", str(output)) if output else ()
    return run_python("-m", *command.split(), *arguments, *where, *report, timeout=timeout)


@pytest.fixture
def own_database(dsn: str) -> Iterator[str]:
    """A database of its own, dropped after: the runner's schema (pgtasks_bench) is every
    benchmark's, and the suite runs tests in parallel."""
    with database_with(dsn) as database:
        yield database


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_benchmark_runs_end_to_end_with_the_installed_peers(
    own_database: str, tmp_path: Path
) -> None:
    output = tmp_path / "bench.json"
    stdout = run_benchmark("benchmarks --quick", dsn=own_database, output=output, timeout=200)

    report: dict[str, Any] = json.loads(output.read_text())
    figures = {figure["name"]: figure for figure in report["figures"]}
    installed = [peer for peer in PEERS if peer.available()]
    expected = set(PGTASKS_FIGURES)
    for peer in installed:
        expected |= {f"{peer.name}: {name}" for name in PEER_FIGURES}
    assert expected <= figures.keys(), sorted(expected - figures.keys())
    for peer in PEERS:
        if peer not in installed:
            assert f"{peer.name}: not installed" in stdout
    for figure in figures.values():
        assert figure["min"] <= figure["median"] <= figure["max"], figure
        if figure["unit"] in ("jobs/s", "ms"):
            assert figure["min"] > 0, figure

    summary = {row["system"]: row for row in report["summary"]}
    assert list(summary) == ["pgtasks"] + [peer.name for peer in installed]
    assert summary["pgtasks"]["duplicates"] == 0
    assert summary["pgtasks"]["lost"] == 0
    for row in summary.values():
        assert all(isinstance(row[key], float) for key in SUMMARY_NUMBERS), row
        # Reported, whatever they are: a peer's duplicates or losses are a finding, not a crash.
        assert isinstance(row["duplicates"], int) and isinstance(row["lost"], int), row
    assert "side by side" in stdout


def test_a_peer_that_is_not_installed_is_named_with_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    import benchmarks.peers
    from benchmarks.figures import Figure
    from benchmarks.side_by_side import run_peers

    missing = Peer("NoSuchQueue", "1.0", "no_such_queue_library", "benchmarks.peers.nothing")
    monkeypatch.setattr(benchmarks.peers, "PEERS", (missing,))
    added: list[Figure] = []
    arguments = argparse.Namespace(jobs=200, runs=1, quick=True)

    run_peers("dbname=unused", arguments, added.append, explicit=False)

    assert added == []
    assert "NoSuchQueue: not installed (pip install 'pgtasks[bench]')" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(180)
def test_bloat_benchmark_runs_end_to_end(own_database: str, tmp_path: Path) -> None:
    output = tmp_path / "bloat.json"
    # --quick's sizes but 2,000 jobs through the table (not 20,000) and one window pinned
    # and one released: each phase still measures a window of its own.
    stdout = run_benchmark(
        "benchmarks --bloat --through 2000 --pin-seconds 1 --window 2 --recovery-seconds 1",
        dsn=own_database,
        output=output,
        timeout=150,
    )

    report: dict[str, Any] = json.loads(output.read_text())
    for phase in ("fresh", "after_through", "pinned"):
        assert report[phase]["rate"] > 0, report[phase]
    assert report["after_through"]["jobs_done"] >= 2_000
    assert report["pinned"]["windows"], report["pinned"]
    assert report["released"]["windows"], report["released"]
    # The pinning transaction really held a snapshot (its backend_xmin) during the phase.
    assert report["pinned"]["xmin"] > 0
    assert report["duplicates"] == 0
    assert "bloat resilience" in stdout
    assert "xmin pinned" in stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(300)
def test_in_process_benchmark_runs_end_to_end(own_database: str, tmp_path: Path) -> None:
    output = tmp_path / "in-process.json"
    stdout = run_benchmark(
        "benchmarks --in-process --quick --concurrency 10",
        dsn=own_database,
        output=output,
        timeout=280,
    )

    report: dict[str, Any] = json.loads(output.read_text())
    rows = {row["name"]: row for row in report["rows"]}
    expected = {
        "pgtasks worker (CLI process), c10",
        "pgtasks worker (CLI process), async task, c10",
        "in-process: asyncio.to_thread(Worker.run), sync task, c10",
        "in-process: asyncio.to_thread(Worker.run), async task, c10",
        "in-process: await Worker.arun(), sync task, c10",
    }
    if any(peer.name == "PgQueuer" and peer.available() for peer in PEERS):
        expected.add("in-process: PgQueuer 1.6.0 on the loop, batch_size 10")
    assert expected <= rows.keys(), sorted(expected - rows.keys())
    for row in rows.values():
        assert row["median"] > 0, row
        assert (row["duplicates"], row["lost"]) == (0, 0), row
    assert report["idle_latency_ms"]["p99"] > 0
    assert "threads left" not in stdout
    labels = {row["ratio"] for row in report["ratios"]}
    assert {"async def / sync task, in-process", "async def / sync task, CLI worker"} <= labels
    if "in-process: PgQueuer 1.6.0 on the loop, batch_size 10" in rows:
        assert "in-process sync task / PgQueuer" in labels


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_enqueue_benchmark_prints_each_ratio_with_its_reference(
    own_database: str, tmp_path: Path
) -> None:
    output = tmp_path / "enqueue.json"
    stdout = run_benchmark(
        "benchmarks --enqueue --quick", dsn=own_database, output=output, timeout=220
    )

    report: dict[str, Any] = json.loads(output.read_text())
    ratios = {(row["figure"], row["reference"]): row for row in report["ratios"]}
    assert set(ratios) == {
        ("delay() one by one", "bare loop, the same INSERT (sync)"),
        ("delay() one by one", "bare loop, plain INSERT … RETURNING id"),
        ("delay() one by one", "bare loop, minimal table (sync)"),
        ("apply_async() one by one", "bare loop, the same INSERT (sync)"),
        ("adelay() one by one", "bare loop, the same INSERT (async)"),
        ("adelay() one by one", "bare loop, minimal table (async)"),
        ("delay_many() x1000", "bare COPY, 1,000 per transaction"),
        ("delay_many() x1000", "bare COPY into a minimal table, 1,000 per transaction"),
        ("delay(user=, n=) one by one", "bare loop, the same INSERT, JSON per row"),
        ("delay_many(user=, n=) x1000", "bare COPY, 1,000 per transaction, JSON per row"),
    }
    for row in ratios.values():
        assert row["low"] <= row["ratio"] <= row["high"] or row["low"] == row["high"], row
        assert row["ratio"] > 0, row
    assert all(len(rates) == 1 and rates[0] > 0 for rates in report["rates"].values())
    assert "ratios (pgtasks / its reference in the same run" in stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_enqueue_benchmark_runs_without_synchronous_commits(
    own_database: str, tmp_path: Path
) -> None:
    output = tmp_path / "enqueue.json"
    stdout = run_benchmark(
        "benchmarks --enqueue --quick --synchronous-commit off",
        dsn=own_database,
        output=output,
        timeout=220,
    )

    report: dict[str, Any] = json.loads(output.read_text())
    assert report["postgres"]["synchronous_commit"].startswith("off")
    assert all(rates[0] > 0 for rates in report["rates"].values())
    assert "synchronous_commit=off on every connection of this run" in stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_insert_costs_benchmark_takes_the_jobs_table_apart(own_database: str) -> None:
    stdout = run_benchmark("benchmarks --insert-costs --quick", dsn=own_database, timeout=220)

    lines = stdout[stdout.index("configuration") :].splitlines()[1:9]
    names = [
        "jobs before migration 0031 (rebuilt)",
        "jobs, as migrated",
        "- the notify trigger",
        "- every insert trigger",
        "- partial indexes a plain job skips",
        "- the claim index's INCLUDE (queue)",
        "- jobs_claim_idx (primary key only)",
        "minimal table",
    ]
    assert [line[:40].strip() for line in lines] == names, stdout
    # Figures are printed, not checked (the server's other writes share the WAL): each
    # step has one.
    wal = {line[:40].strip(): float(line[40:].split()[1]) for line in lines}
    assert all(bytes_per_row > 0 for bytes_per_row in wal.values()), stdout
    with psycopg.connect(own_database) as conn:  # the scratch schemas are dropped
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench\\_insert\\_costs\\_%'"
        ).fetchone()
    assert left == (0,)


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_counters_benchmark_compares_with_and_without_the_counters(
    own_database: str, tmp_path: Path
) -> None:
    output = tmp_path / "counters.json"
    run_benchmark("benchmarks --counters --quick", dsn=own_database, output=output, timeout=220)
    report: dict[str, Any] = json.loads(output.read_text())
    assert {row["figure"] for row in report["ratios"]} == {
        "key taken, with",
        "new key, with",
        "drain of unknown-task jobs, counted",
    }
    assert all(rate > 0 for rates in report["rates"].values() for rate in rates)


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(300)
def test_limits_benchmark_runs_end_to_end(own_database: str, tmp_path: Path) -> None:
    output = tmp_path / "limits.json"
    stdout = run_benchmark(
        "benchmarks --limits --quick",
        "--baseline",
        str(ROOT),
        dsn=own_database,
        output=output,
        timeout=280,
    )
    report: dict[str, Any] = json.loads(output.read_text())
    modes = {row["mode"]: row for row in report["results"]}
    throughput = {
        "main's claim",
        "plain",
        "plain, limits stored",
        "task concurrency=50",
        "key concurrency=1, 1000 keys",
    }
    # The worker rounds and the promises run for both checkouts, alternating.
    workers = {
        f"worker: {mode} ({side})"
        for mode in ("plain", "task concurrency=50", "key concurrency=1, 1000 keys")
        for side in ("this", "baseline")
    }
    promises = {
        f"{scenario} ({side})"
        for scenario in ("handoff-same", "handoff-across", "rate-5", "rate-20")
        for side in ("this", "baseline")
    }
    assert set(modes) == throughput | workers | promises
    assert all(modes[mode]["jobs_per_second"] > 0 for mode in throughput | workers)
    assert modes["worker: plain (this)"]["ratio_to_plain_worker"] == 1.0
    for side in ("this", "baseline"):
        for scenario in ("handoff-same", "handoff-across"):
            assert modes[f"{scenario} ({side})"]["handoffs"] > 0
            assert modes[f"{scenario} ({side})"]["handoff_p95_ms"] >= 0
        assert modes[f"rate-5 ({side})"]["achieved_per_second"] > 0
    assert "freed slot taken, to another worker: p95" in stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_enqueue_ab_benchmark_compares_two_checkouts(own_database: str) -> None:
    stdout = run_benchmark(
        "benchmarks.enqueue_ab --jobs 1000 --runs 1",
        "--baseline",
        str(ROOT),
        dsn=own_database,
        timeout=230,
    )
    for figure in ("enqueue_one_by_one", "enqueue_bulk", "enqueue_transactional"):
        assert any(line.startswith(figure) for line in stdout.splitlines()), stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_processing_ab_benchmark_compares_two_checkouts(own_database: str) -> None:
    stdout = run_benchmark(
        "benchmarks.processing_ab --jobs 50 --runs 1 --concurrency 4",
        "--baseline",
        str(ROOT),
        dsn=own_database,
        timeout=230,
    )
    assert any(line.startswith("c4 ") for line in stdout.splitlines()), stdout
    assert "round 1, c4: this" in stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_claim_sql_ab_benchmark_compares_the_statements_of_two_checkouts(own_database: str) -> None:
    stdout = run_benchmark(
        "benchmarks.claim_sql_ab --jobs 400 --batch 16 --runs 1",
        "--baseline",
        str(ROOT),
        dsn=own_database,
        timeout=230,
    )
    for shape in ("pipeline", "claim only"):
        assert f"{shape:10} this/baseline over 1 runs: median trip" in stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_unique_overhead_benchmark_runs_end_to_end(own_database: str) -> None:
    stdout = run_benchmark(
        "benchmarks.unique_overhead --jobs 200 --runs 1", dsn=own_database, timeout=230
    )
    for figure in ("insert one by one", "insert bulk", "claim+finish"):
        assert any(line.startswith(figure) for line in stdout.splitlines()), stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_workflow_races_benchmark_counts_no_stuck_nor_doubled_callback(
    own_database: str, tmp_path: Path
) -> None:
    output = tmp_path / "races.json"
    run_benchmark(
        "benchmarks --workflow-races --chords 20 --rounds 1 --no-reference",
        dsn=own_database,
        output=output,
        timeout=220,
    )
    (row,) = json.loads(output.read_text())["results"]
    assert row["trigger"] == "current" and row["callbacks"] == 40
    assert (row["stuck"], row["doubled"], row["wrong"], row["healed"]) == (0, 0, 0, 0)


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_scaleout_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    from benchmarks.clusters import pg15_available

    if not pg15_available():
        pytest.skip("Debian's PostgreSQL 15 is not installed (apt-get install postgresql-15)")
    output = tmp_path / "scaleout.json"
    # Tiny drains (30 jobs a store) and producer rounds; a capped cluster gets half a CPU,
    # so the capped drains, when cgroups are writable, take no longer than the uncapped.
    stdout = run_benchmark(
        "benchmarks --scaleout --jobs 90 --runs 1 --calls 20 --cpu 0.5", output=output, timeout=280
    )
    report: dict[str, Any] = json.loads(output.read_text())
    modes = ["uncapped"] + (["capped"] if "capped" in report else [])
    if "capped" not in report:
        assert "cgroups are read-only here" in stdout
    for mode in modes:
        rows = report[mode]
        assert [row["stores"] for row in rows] == [1, 2, 3]
        assert all(row["lost"] == 0 and row["duplicates"] == 0 for row in rows)
        assert all(min(row["throughput"]) > 0 for row in rows)
    producer = report["producer_us_per_delay"]
    assert min(producer["one_store"]) > 0 and min(producer["three_stores"]) > 0


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_durable_benchmark_runs_end_to_end(own_database: str) -> None:
    stdout = run_benchmark(
        "benchmarks.durable --no-dbos --jobs 40 --runs 1 --concurrency 10",
        dsn=own_database,
        timeout=230,
    )
    for shape in ("c10 0 steps (plain)", "c10 1 steps", "c10 10 steps"):
        assert any(line.startswith(shape) for line in stdout.splitlines()), stdout
    assert "WAL bytes per step" in stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_producers_benchmark_reports_each_kind_with_the_bare_insert(own_database: str) -> None:
    kinds = "insert+notify,pgtasks,pgtasks-quiet,pgtasks-auto"
    stdout = run_benchmark(
        "benchmarks.producers --producers 2 --seconds 0.5 --rounds 1 --workers 1",
        "--kinds",
        kinds,
        dsn=own_database,
        timeout=230,
    )
    table = stdout.split("medians of 1 rounds", 1)[1].splitlines()
    for producers in (2,):
        for kind in kinds.split(","):
            row = [line.split() for line in table if line.split()[:2] == [str(producers), kind]]
            assert len(row) == 1, stdout
            enqueued = float(row[0][2])
            assert enqueued > 0, stdout
            if kind.startswith("pgtasks"):  # the workers drained some of what was enqueued
                assert float(row[0][5]) > 0, stdout
            if kind == "pgtasks":  # every enqueue notified its queue
                assert float(row[0][6]) > 0, stdout
            if kind == "pgtasks-quiet":  # none did
                assert float(row[0][6]) == 0, stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_producers_benchmark_runs_producers_as_threads_of_one_process(own_database: str) -> None:
    stdout = run_benchmark(
        "benchmarks.producers --producers 3 --seconds 0.5 --rounds 1 --workers 1",
        "--mode",
        "threads",
        "--kinds",
        "insert,pgtasks",
        dsn=own_database,
        timeout=230,
    )
    assert "producers as processes" not in stdout, stdout
    table = stdout.split("producers as threads", 1)[1].splitlines()
    for kind in ("insert", "pgtasks"):
        row = [line.split() for line in table if line.split()[:2] == ["3", kind]]
        assert len(row) == 1, stdout
        assert float(row[0][2]) > 0, stdout
    pgtasks_row = next(line.split() for line in table if line.split()[:2] == ["3", "pgtasks"])
    assert float(pgtasks_row[5]) > 0, stdout  # the worker drained what the threads enqueued


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_job_logs_benchmark_runs_end_to_end(own_database: str) -> None:
    stdout = run_benchmark("benchmarks.job_logs --jobs 100 --runs 2", dsn=own_database, timeout=230)
    lines = stdout.splitlines()
    for task in ("quiet", "logs 10 lines"):
        [row] = [line for line in lines if line.startswith(task)]
        on, off, ratio = row[len(task) :].split()
        assert float(on.replace(",", "")) > 0 and float(off.replace(",", "")) > 0
        assert float(ratio) > 0


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_limit_changes_benchmark_prints_the_propagation_and_its_reference(
    own_database: str,
) -> None:
    stdout = run_benchmark("benchmarks --limit-changes --quick", dsn=own_database, timeout=230)
    lines = stdout.splitlines()
    for figure in ("limit raised 1 -> 4", "reference: a plain job's enqueue to its claim"):
        line = next((line for line in lines if line.startswith(figure)), None)
        assert line is not None and "median" in line and "3 rounds" in line, stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(300)
def test_fairness_benchmark_runs_end_to_end(own_database: str, tmp_path: Path) -> None:
    output = tmp_path / "fairness.json"
    # --quick's starvation sizes (A 600 jobs, then B 10), drains of 100 jobs over 10 keys.
    run_benchmark(
        "benchmarks.fairness --jobs 100 --runs 1 --tenants 10 --backlog 600 --small 10",
        dsn=own_database,
        output=output,
        timeout=280,
    )
    report: dict[str, Any] = json.loads(output.read_text())
    assert set(report["medians"]) == {"plain", "tenant", "fair", "sequence"}
    assert all(rate > 0 for rate in report["medians"].values())
    # Each kind against the same round's plain drain and its tenant-argument drain.
    assert set(report["ratios"]) == {"plain", "tenant"}
    assert report["ratios"]["plain"]["plain"] == 1.0
    assert report["ratios"]["tenant"]["tenant"] == 1.0
    assert all(ratio > 0 for ratio in report["ratios"]["tenant"].values())
    before, after = report["starvation"]
    assert after <= before


def test_flow_benchmark_drains_every_variant(own_database: str) -> None:
    stdout = run_benchmark("benchmarks --flow --jobs 300 --rounds 1", dsn=own_database, timeout=230)
    lines = stdout.splitlines()
    for variant in ("plain", "debounce", "expires", "batch"):
        [row] = [line for line in lines if line.startswith(f"{variant} ")]
        assert float(row.split()[1]) > 0, stdout


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_growth_benchmark_compares_each_state_with_the_empty_schema_and_writes_the_plans(
    own_database: str, tmp_path: Path
) -> None:
    output, plans = tmp_path / "growth.json", tmp_path / "plans.txt"
    run_benchmark(
        "benchmarks.growth --quick",
        "--plans",
        str(plans),
        dsn=own_database,
        output=output,
        timeout=220,
    )

    report: dict[str, Any] = json.loads(output.read_text())
    assert [state["state"] for state in report["states"]] == ["future 20,000", "history 20,000"]
    for state in report["states"]:
        assert set(state["figures"]) == {"enqueue", "claim", "finish", "idle claim"}
        assert all(figure["ratio"] > 0 for figure in state["figures"].values())
    text = plans.read_text()
    for label in ("empty", "future 20,000", "history 20,000"):
        assert f"=== {label}: claim_jobs, nothing due" in text, text
        assert f"=== {label}: finish_jobs, 10 jobs" in text, text
    assert "Execution Time" in text


@pytest.mark.slow
@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_finish_profile_prints_each_figure_beside_the_finish_before_history(
    own_database: str,
) -> None:
    stdout = run_benchmark(
        "benchmarks.finish_profile",
        "--jobs",
        "200",
        "--runs",
        "1",
        "--batch",
        "10",
        dsn=own_database,
        timeout=220,
    )

    for row in ("batch 10: finish + move to history", "batch 10: finish before history"):
        line = next(line for line in stdout.splitlines() if line.startswith(row))
        assert len(line.split()) == len(row.split()) + 5, line  # wall, Python, server, WAL, jobs/s


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_fair_claim_cold_benchmark_times_both_sides_before_any_analyze(
    own_database: str,
) -> None:
    stdout = run_benchmark(
        "benchmarks.fair_claim_cold --jobs 300 --claims 2 --runs 1",
        dsn=own_database,
        timeout=230,
    )
    assert "run 1: claim of 10 on 300 un-analyzed fair jobs:" in stdout
    assert "ms as shipped" in stdout and "ms without its settings" in stdout
