"""Enqueue at the driver's speed: pgtasks beside a bare psycopg loop, in one run (``--enqueue``).

    python -m benchmarks --enqueue [--dsn DSN] [--jobs N] [--runs R] [--quick]

Each pgtasks figure is printed with its reference, measured in the same run, rounds
alternating the order (median of R rounds; the ratio is median / median, the per-round
ratios' range beside it):

- ``delay()``, ``apply_async()`` one by one (N/10 jobs, at least 500) against a bare
  psycopg loop issuing **the same INSERT** pgtasks issues for that call (the same
  statement text and parameters, on a connection with the pool's settings: autocommit);
  a plain ``INSERT … RETURNING id`` of the same row is shown as a second reference;
- ``adelay()`` one by one in an asyncio program against the same loop on an
  ``AsyncConnection``;
- ``delay_many()`` in batches of 1,000 (N jobs) against a bare psycopg ``COPY`` of the
  same rows into pgtasks' own jobs table (same indexes and triggers), 1,000 rows per
  transaction, ``write_row`` per row;
- the same with arguments: ``record.delay(user=…, n=i)`` (a task with two keyword
  arguments) against a loop that JSON-encodes each row's arguments itself.

Every measurement starts from a freshly migrated schema (the same table size for all).
Validation, JSON encoding, idempotency and the instrumentation hook stay on the pgtasks
path as they are by default (no instrumentation installed). The machine's load average
is printed before and after: on a shared machine, compare within one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks._store.db import pool_kwargs
from pgtasks._store.params import job_params

ROOT = Path(__file__).resolve().parent.parent
#: The columns a bare COPY of plain jobs writes (the rest take their defaults, as
#: pgtasks' own rows do).
COPY_COLUMNS = ("task_name", "queue", "priority", "args", "kwargs", "max_attempts")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --enqueue", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per bulk run")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "enqueue.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs = 2000, 1
    return args


class Measures:
    """The runs of every system: name -> jobs/s per round."""

    def __init__(self) -> None:
        self.rates: dict[str, list[float]] = {}

    def add(self, name: str, rate: float) -> None:
        self.rates.setdefault(name, []).append(rate)

    def median(self, name: str) -> float:
        return statistics.median(self.rates[name])

    def line(self, name: str) -> str:
        values = self.rates[name]
        return (
            f"{name:62} {self.median(name):>9,.0f} jobs/s"
            f" [{min(values):,.0f} .. {max(values):,.0f}]"
        )

    def ratio(self, name: str, reference: str) -> tuple[float, float, float]:
        """median/median, and the lowest and highest ratio within one round."""
        pairs = [a / b for a, b in zip(self.rates[name], self.rates[reference], strict=True)]
        return self.median(name) / self.median(reference), min(pairs), max(pairs)


def arguments_of(index: int) -> dict[str, Any]:
    """The keyword arguments of the ``record`` rows: a user and a number."""
    return {"user": f"user{index}@example.com", "n": index}


# -- pgtasks -------------------------------------------------------------------------------------
def one_by_one(count: int, call: Callable[[int], object]) -> float:
    call(0)  # the pool's connection, the statement's preparation: not counted
    started = time.perf_counter()
    for index in range(count):
        call(index)
    return count / (time.perf_counter() - started)


def pgtasks_delay(count: int) -> float:
    from benchmarks.app import noop

    return one_by_one(count, lambda _: noop.delay())


def pgtasks_apply_async(count: int) -> float:
    from benchmarks.app import noop

    return one_by_one(count, lambda _: noop.apply_async())


def pgtasks_delay_arguments(count: int) -> float:
    from benchmarks.app import record

    return one_by_one(count, lambda index: record.delay(**arguments_of(index)))


def pgtasks_adelay(count: int) -> float:
    from benchmarks.app import app, noop

    async def run() -> float:
        await noop.adelay()
        started = time.perf_counter()
        for _ in range(count):
            await noop.adelay()
        rate = count / (time.perf_counter() - started)
        await app.aclose()
        return rate

    return asyncio.run(run())


def pgtasks_delay_many(count: int) -> float:
    from benchmarks.app import noop

    batches = max(1, count // 1000)
    started = time.perf_counter()
    for _ in range(batches):
        noop.delay_many([{}] * 1000)
    return batches * 1000 / (time.perf_counter() - started)


def pgtasks_delay_many_arguments(count: int) -> float:
    from benchmarks.app import record

    batches = max(1, count // 1000)
    started = time.perf_counter()
    for batch in range(batches):
        record.delay_many([arguments_of(batch * 1000 + index) for index in range(1000)])
    return batches * 1000 / (time.perf_counter() - started)


# -- the references: bare psycopg ------------------------------------------------------------------
def the_same_insert() -> tuple[bytes, dict[str, Any]]:
    """The statement and parameters pgtasks sends for ``noop.delay()`` (autocommit)."""
    from benchmarks.app import app, noop

    return app.store._statements["insert_and_notify_job"], dict(job_params(noop.build_spec()))


def bare_same_insert(dsn: str, count: int) -> float:
    statement, params = the_same_insert()
    with psycopg.connect(dsn, **pool_kwargs()) as conn:
        conn.execute(statement, params).fetchone()
        started = time.perf_counter()
        for _ in range(count):
            conn.execute(statement, params).fetchone()
        return count / (time.perf_counter() - started)


def bare_same_insert_arguments(dsn: str, count: int) -> float:
    """The statement of ``record.delay(**arguments)``, each row's kwargs JSON-encoded."""
    from benchmarks.app import app, record

    statement = app.store._statements["insert_and_notify_job"]
    params = dict(job_params(record.build_spec((), arguments_of(0))))
    with psycopg.connect(dsn, **pool_kwargs()) as conn:
        conn.execute(statement, params).fetchone()
        started = time.perf_counter()
        for index in range(count):
            params["kwargs"] = json.dumps(arguments_of(index), separators=(",", ":"))
            conn.execute(statement, params).fetchone()
        return count / (time.perf_counter() - started)


def bare_plain_insert(dsn: str, count: int) -> float:
    """A plain ``INSERT … RETURNING id`` of the same row (no notification)."""
    from benchmarks.app import noop

    columns = sql.SQL(", ").join(map(sql.Identifier, COPY_COLUMNS))
    statement = sql.SQL(
        "INSERT INTO {} ({}) VALUES (%s, %s, %s, %s::jsonb, %s::jsonb, %s) RETURNING id"
    ).format(sql.Identifier(os.environ["PGTASKS_SCHEMA"], "jobs"), columns)
    row = (noop.name, noop.queue, noop.priority, "[]", "{}", noop.max_attempts)
    with psycopg.connect(dsn, **pool_kwargs()) as conn:
        conn.execute(statement, row).fetchone()
        started = time.perf_counter()
        for _ in range(count):
            conn.execute(statement, row).fetchone()
        return count / (time.perf_counter() - started)


def bare_async_same_insert(dsn: str, count: int) -> float:
    statement, params = the_same_insert()

    async def run() -> float:
        async with await psycopg.AsyncConnection.connect(dsn, **pool_kwargs()) as conn:
            await (await conn.execute(statement, params)).fetchone()
            started = time.perf_counter()
            for _ in range(count):
                await (await conn.execute(statement, params)).fetchone()
            return count / (time.perf_counter() - started)

    return asyncio.run(run())


def bare_copy(dsn: str, count: int, *, arguments: bool = False) -> float:
    """COPY of the same rows into pgtasks' jobs table, 1,000 per transaction."""
    from benchmarks.app import noop, record

    task = record if arguments else noop
    columns = sql.SQL(", ").join(map(sql.Identifier, COPY_COLUMNS))
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(os.environ["PGTASKS_SCHEMA"], "jobs"), columns
    )
    head = (task.name, task.queue, task.priority)
    batches = max(1, count // 1000)
    with psycopg.connect(dsn, **pool_kwargs()) as conn:
        started = time.perf_counter()
        for batch in range(batches):
            with conn.transaction(), conn.cursor().copy(statement) as copy:
                for index in range(batch * 1000, batch * 1000 + 1000):
                    kwargs = (
                        json.dumps(arguments_of(index), separators=(",", ":"))
                        if arguments
                        else "{}"
                    )
                    copy.write_row((*head, "[]", kwargs, task.max_attempts))
        return batches * 1000 / (time.perf_counter() - started)


#: (figure, its reference, the reference's second opinion or None)
COMPARISONS = (
    (
        "delay() one by one",
        "bare loop, the same INSERT (sync)",
        "bare loop, plain INSERT … RETURNING id",
    ),
    ("apply_async() one by one", "bare loop, the same INSERT (sync)", None),
    ("adelay() one by one", "bare loop, the same INSERT (async)", None),
    ("delay_many() x1000", "bare COPY, 1,000 per transaction", None),
    ("delay(user=, n=) one by one", "bare loop, the same INSERT, JSON per row", None),
    ("delay_many(user=, n=) x1000", "bare COPY, 1,000 per transaction, JSON per row", None),
)


def plan(dsn: str, small: int, jobs: int) -> list[tuple[str, Callable[[], float]]]:
    return [
        ("delay() one by one", lambda: pgtasks_delay(small)),
        ("bare loop, the same INSERT (sync)", lambda: bare_same_insert(dsn, small)),
        ("bare loop, plain INSERT … RETURNING id", lambda: bare_plain_insert(dsn, small)),
        ("apply_async() one by one", lambda: pgtasks_apply_async(small)),
        ("adelay() one by one", lambda: pgtasks_adelay(small)),
        ("bare loop, the same INSERT (async)", lambda: bare_async_same_insert(dsn, small)),
        ("delay_many() x1000", lambda: pgtasks_delay_many(jobs)),
        ("bare COPY, 1,000 per transaction", lambda: bare_copy(dsn, jobs)),
        ("delay(user=, n=) one by one", lambda: pgtasks_delay_arguments(small)),
        (
            "bare loop, the same INSERT, JSON per row",
            lambda: bare_same_insert_arguments(dsn, small),
        ),
        ("delay_many(user=, n=) x1000", lambda: pgtasks_delay_many_arguments(jobs)),
        (
            "bare COPY, 1,000 per transaction, JSON per row",
            lambda: bare_copy(dsn, jobs, arguments=True),
        ),
    ]


def main(argv: list[str]) -> int:
    from benchmarks import __main__ as runner

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    facts = runner.print_setting(dsn)
    small = max(500, args.jobs // 10)
    load_before = os.getloadavg()
    print(
        f"one by one: {small} jobs per run; bulk: {args.jobs} jobs per run;"
        f" rounds: {args.runs} (median); load average before: "
        + " ".join(f"{value:.2f}" for value in load_before)
        + "\n",
        flush=True,
    )
    measures = Measures()
    systems = plan(dsn, small, args.jobs)
    for round_number in range(args.runs):
        ordered = systems if round_number % 2 == 0 else systems[::-1]
        for name, run in ordered:
            runner.reset_schema(dsn)
            measures.add(name, run())
        print(f"round {round_number + 1} of {args.runs} done", flush=True)
    load_after = os.getloadavg()
    print(f"\nenqueue (median of {args.runs} round(s), same server, same run)")
    for name, _ in systems:
        print(measures.line(name))
    print("\nratios (pgtasks / its reference in the same run; per-round range)")
    ratios = []
    for figure, reference, second in COMPARISONS:
        for against in (reference, second):
            if against is None:
                continue
            ratio, low, high = measures.ratio(figure, against)
            print(f"{figure:30} / {against:48} {ratio:6.1%}  [{low:.1%} .. {high:.1%}]")
            ratios.append(
                {"figure": figure, "reference": against, "ratio": ratio, "low": low, "high": high}
            )
    print("load average after: " + " ".join(f"{value:.2f}" for value in load_after))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "machine": {
                    "cores": os.cpu_count(),
                    "load_before": load_before,
                    "load_after": load_after,
                },
                "postgres": facts,
                "rates": measures.rates,
                "ratios": ratios,
            },
            indent=2,
        )
    )
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
