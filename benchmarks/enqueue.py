"""Enqueue at the driver's speed: pgtasks beside a bare psycopg loop, in one run (``--enqueue``).

    python -m benchmarks --enqueue [--dsn DSN] [--jobs N] [--runs R] [--quick]
                                   [--synchronous-commit off]

Each pgtasks figure is printed with its reference, measured in the same run (median of R
rounds; the ratio is median / median, the per-round ratios' range beside it):

- ``delay()``, ``apply_async()`` one by one (N/4 jobs, at least 500) against a bare
  psycopg loop issuing **the same INSERT** pgtasks issues for that call (the same
  statement text and parameters, on a connection with the pool's settings: autocommit);
  a plain ``INSERT … RETURNING id`` of the same row is shown as a second reference;
- the physical reference of the same columns: a bare ``INSERT … RETURNING id`` loop
  into **a minimal table** (the columns a job's row is given, a primary key and nothing
  else: no default, index, trigger or notification), sync beside ``delay()`` and async
  beside ``adelay()``;
- ``adelay()`` one by one in an asyncio program against the same loop on an
  ``AsyncConnection``, in the same program;
- ``delay_many()`` in batches of 1,000 (N jobs) against a bare psycopg ``COPY`` of the
  same rows into pgtasks' own jobs table (same indexes and triggers), 1,000 rows per
  transaction, ``write_row`` per row, and against the same ``COPY`` into the minimal
  table;
- the same with arguments: ``record.delay(user=…, n=i)`` (a task with two keyword
  arguments) against a loop that JSON-encodes each row's arguments itself.

A machine shared with other work changes speed from one second to the next, so the
systems compared with each other take turns in small blocks (BLOCK calls one by one, one
batch of 1,000 in bulk), the order reversed at each turn, into the same table (a schema
migrated afresh for each round); each figure is its calls over the time of its own
blocks. Rounds reverse the order of the groups too. Validation, JSON encoding,
idempotency and the instrumentation hook stay on the pgtasks path as they are by default
(no instrumentation installed). The machine's load average is printed before and after:
compare within one run only.

``--synchronous-commit off`` runs every connection of the run (pgtasks' pool and the bare
loops) with ``synchronous_commit=off``: a one-by-one commit then waits for no WAL flush,
so the figures show the work of the statement and the client, which a slow disk's flush
(milliseconds on a shared VM) otherwise hides. pgtasks never runs so by default.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgtasks._store.connecting import pool_kwargs
from pgtasks._store.params import job_params

ROOT = Path(__file__).resolve().parent.parent
#: The columns a bare COPY of plain jobs writes (the rest take their defaults, as
#: pgtasks' own rows do).
COPY_COLUMNS = ("task_name", "queue", "priority", "args", "kwargs", "max_attempts")
#: The physical reference's table (in the benchmark's schema): the columns a bare COPY
#: writes and a primary key, nothing else.
MINIMAL_TABLE = "bench_minimal"
#: One-by-one calls per turn.
BLOCK = 50
#: Jobs per bulk batch.
BATCH = 1000

#: What every connection of the run is opened with besides the pool's settings (the
#: bare loops' and, through the App's connection options, pgtasks' own).
CONNECT: dict[str, Any] = {}

#: A system of a group: its name, and one turn (returns the seconds it took).
Turn = Callable[[], float]
ATurn = Callable[[], Awaitable[float]]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --enqueue", description=__doc__)
    parser.add_argument("--dsn", help="PostgreSQL to use (default: the embedded server)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per bulk figure")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument(
        "--synchronous-commit",
        choices=("on", "off"),
        default="on",
        help="every connection's synchronous_commit (off: no commit waits for its flush)",
    )
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "enqueue.json"), help="output"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.runs = 2000, 1
    return args


def arguments_of(index: int) -> dict[str, Any]:
    """The keyword arguments of the ``record`` rows: a user and a number."""
    return {"user": f"user{index}@example.com", "n": index}


def interleave(turns: dict[str, Turn], count: int) -> dict[str, float]:
    """Run ``count`` turns of each system, taking turns (the order reversed each time);
    the seconds each spent."""
    spent = dict.fromkeys(turns, 0.0)
    names = list(turns)
    for index in range(count):
        for name in names if index % 2 == 0 else names[::-1]:
            spent[name] += turns[name]()
    return spent


async def ainterleave(turns: dict[str, ATurn], count: int) -> dict[str, float]:
    spent = dict.fromkeys(turns, 0.0)
    names = list(turns)
    for index in range(count):
        for name in names if index % 2 == 0 else names[::-1]:
            spent[name] += await turns[name]()
    return spent


def timed(body: Callable[[], None]) -> float:
    started = time.perf_counter()
    body()
    return time.perf_counter() - started


# -- the groups: each pgtasks path and its references, taking turns --------------------------------
def create_minimal_table(dsn: str) -> None:
    """The minimal table of the physical references (the schema is migrated afresh per
    round, and this table with it)."""
    from benchmarks.app import app

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
                " task_name text, queue text, priority integer, args jsonb, kwargs jsonb,"
                " max_attempts integer)"
            ).format(sql.Identifier(app.schema, MINIMAL_TABLE))
        )


def minimal_insert() -> tuple[sql.Composed, tuple[Any, ...]]:
    """The physical reference's statement (a no-op job's columns into the minimal table)
    and its parameters."""
    from benchmarks.app import app, noop

    columns = sql.SQL(", ").join(map(sql.Identifier, COPY_COLUMNS))
    statement = sql.SQL(
        "INSERT INTO {} ({}) VALUES (%s, %s, %s, %s::jsonb, %s::jsonb, %s) RETURNING id"
    ).format(sql.Identifier(app.schema, MINIMAL_TABLE), columns)
    return statement, (noop.name, noop.queue, noop.priority, "[]", "{}", noop.max_attempts)


def bare_bodies(conn: psycopg.Connection[Any]) -> dict[str, Callable[[], None]]:
    """The bare psycopg loops of the one-by-one group, on ``conn``: one turn each."""
    from benchmarks.app import app, noop, record

    statement = app.queries._statements["insert_and_notify_job"]
    always = {"notify": True, "gate": None}  # notify="always": no shared gate
    same = {**job_params(noop.build_spec()), **always}
    with_arguments = {**job_params(record.build_spec((), arguments_of(0))), **always}
    columns = sql.SQL(", ").join(map(sql.Identifier, COPY_COLUMNS))
    plain = sql.SQL(
        "INSERT INTO {} ({}) VALUES (%s, %s, %s, %s::jsonb, %s::jsonb, %s) RETURNING id"
    ).format(sql.Identifier(app.schema, "jobs"), columns)
    row = (noop.name, noop.queue, noop.priority, "[]", "{}", noop.max_attempts)
    minimal, minimal_row = minimal_insert()
    counter = iter(range(10**9))

    def bare_same() -> None:
        for _ in range(BLOCK):
            conn.execute(statement, same).fetchone()

    def bare_plain() -> None:
        for _ in range(BLOCK):
            conn.execute(plain, row).fetchone()

    def bare_minimal() -> None:
        for _ in range(BLOCK):
            conn.execute(minimal, minimal_row).fetchone()

    def bare_arguments() -> None:
        for _ in range(BLOCK):
            with_arguments["kwargs"] = json.dumps(
                arguments_of(next(counter)), separators=(",", ":")
            )
            conn.execute(statement, with_arguments).fetchone()

    return {
        "bare loop, the same INSERT (sync)": bare_same,
        "bare loop, plain INSERT … RETURNING id": bare_plain,
        "bare loop, minimal table (sync)": bare_minimal,
        "bare loop, the same INSERT, JSON per row": bare_arguments,
    }


def pgtasks_bodies() -> dict[str, Callable[[], None]]:
    """The pgtasks calls of the one-by-one group: one turn each."""
    from benchmarks.app import noop, record

    counter = iter(range(10**9))

    def delay() -> None:
        for _ in range(BLOCK):
            noop.delay()

    def apply_async() -> None:
        for _ in range(BLOCK):
            noop.apply_async()

    def delay_arguments() -> None:
        for _ in range(BLOCK):
            record.delay(**arguments_of(next(counter)))

    return {
        "delay() one by one": delay,
        "apply_async() one by one": apply_async,
        "delay(user=, n=) one by one": delay_arguments,
    }


def one_by_one(dsn: str, calls: int) -> dict[str, float]:
    """Sync one-by-one enqueues and their bare loops: jobs/s of each."""
    turns = max(1, calls // BLOCK)
    with psycopg.connect(dsn, **pool_kwargs(), **CONNECT) as conn:
        bodies = {**pgtasks_bodies(), **bare_bodies(conn)}
        for body in bodies.values():  # connections, prepared statements: not counted
            body()
        spent = interleave(
            {name: (lambda body=body: timed(body)) for name, body in bodies.items()}, turns
        )
    return {name: turns * BLOCK / seconds for name, seconds in spent.items()}


def one_by_one_async(dsn: str, calls: int) -> dict[str, float]:
    """``adelay()`` and the bare async loop in one asyncio program."""
    from benchmarks.app import app, noop

    statement = app.queries._statements["insert_and_notify_job"]
    params = {**job_params(noop.build_spec()), "notify": True, "gate": None}
    minimal, minimal_row = minimal_insert()

    async def run() -> dict[str, float]:
        async with await psycopg.AsyncConnection.connect(dsn, **pool_kwargs(), **CONNECT) as conn:

            async def bare() -> float:
                started = time.perf_counter()
                for _ in range(BLOCK):
                    await (await conn.execute(statement, params)).fetchone()
                return time.perf_counter() - started

            async def bare_minimal() -> float:
                started = time.perf_counter()
                for _ in range(BLOCK):
                    await (await conn.execute(minimal, minimal_row)).fetchone()
                return time.perf_counter() - started

            async def adelay() -> float:
                started = time.perf_counter()
                for _ in range(BLOCK):
                    await noop.adelay()
                return time.perf_counter() - started

            turns = {
                "adelay() one by one": adelay,
                "bare loop, the same INSERT (async)": bare,
                "bare loop, minimal table (async)": bare_minimal,
            }
            for turn in turns.values():
                await turn()
            spent = await ainterleave(turns, max(1, calls // BLOCK))
        await app.aclose()
        return {name: max(1, calls // BLOCK) * BLOCK / seconds for name, seconds in spent.items()}

    return asyncio.run(run())


def bulk(dsn: str, jobs: int) -> dict[str, float]:
    """``delay_many()`` by 1,000 and bare COPYs of the same rows, 1,000 per transaction."""
    from benchmarks.app import app, noop, record

    columns = sql.SQL(", ").join(map(sql.Identifier, COPY_COLUMNS))
    statements = {
        table: sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(app.schema, table), columns)
        for table in ("jobs", MINIMAL_TABLE)
    }
    counter = iter(range(10**9))

    with psycopg.connect(dsn, **pool_kwargs(), **CONNECT) as conn:

        def bare_copy(arguments: bool, table: str = "jobs") -> None:
            task = record if arguments else noop
            head = (task.name, task.queue, task.priority)
            with conn.transaction(), conn.cursor().copy(statements[table]) as copy:
                for _ in range(BATCH):
                    kwargs = (
                        json.dumps(arguments_of(next(counter)), separators=(",", ":"))
                        if arguments
                        else "{}"
                    )
                    copy.write_row((*head, "[]", kwargs, task.max_attempts))

        def delay_many() -> None:
            noop.delay_many([{}] * BATCH)

        def delay_many_arguments() -> None:
            record.delay_many([arguments_of(next(counter)) for _ in range(BATCH)])

        bodies = {
            "delay_many() x1000": delay_many,
            "bare COPY, 1,000 per transaction": lambda: bare_copy(False),
            "bare COPY into a minimal table, 1,000 per transaction": lambda: bare_copy(
                False, MINIMAL_TABLE
            ),
            "delay_many(user=, n=) x1000": delay_many_arguments,
            "bare COPY, 1,000 per transaction, JSON per row": lambda: bare_copy(True),
        }
        for body in bodies.values():
            body()
        batches = max(1, jobs // BATCH)
        spent = interleave(
            {name: (lambda body=body: timed(body)) for name, body in bodies.items()}, batches
        )
    return {name: batches * BATCH / seconds for name, seconds in spent.items()}


#: (figure, its reference, the reference's second opinion or None)
COMPARISONS = (
    (
        "delay() one by one",
        "bare loop, the same INSERT (sync)",
        "bare loop, plain INSERT … RETURNING id",
    ),
    ("delay() one by one", "bare loop, minimal table (sync)", None),
    ("apply_async() one by one", "bare loop, the same INSERT (sync)", None),
    (
        "adelay() one by one",
        "bare loop, the same INSERT (async)",
        "bare loop, minimal table (async)",
    ),
    ("delay_many() x1000", "bare COPY, 1,000 per transaction", None),
    ("delay_many() x1000", "bare COPY into a minimal table, 1,000 per transaction", None),
    ("delay(user=, n=) one by one", "bare loop, the same INSERT, JSON per row", None),
    ("delay_many(user=, n=) x1000", "bare COPY, 1,000 per transaction, JSON per row", None),
)
#: The order of the printed figures.
ORDER = (
    "delay() one by one",
    "apply_async() one by one",
    "bare loop, the same INSERT (sync)",
    "bare loop, plain INSERT … RETURNING id",
    "bare loop, minimal table (sync)",
    "adelay() one by one",
    "bare loop, the same INSERT (async)",
    "bare loop, minimal table (async)",
    "delay_many() x1000",
    "bare COPY, 1,000 per transaction",
    "bare COPY into a minimal table, 1,000 per transaction",
    "delay(user=, n=) one by one",
    "bare loop, the same INSERT, JSON per row",
    "delay_many(user=, n=) x1000",
    "bare COPY, 1,000 per transaction, JSON per row",
)


class Measures:
    """The runs of every system: name -> jobs/s per round."""

    def __init__(self) -> None:
        self.rates: dict[str, list[float]] = {}

    def add(self, rates: dict[str, float]) -> None:
        for name, rate in rates.items():
            self.rates.setdefault(name, []).append(rate)

    def median(self, name: str) -> float:
        return statistics.median(self.rates[name])

    def line(self, name: str) -> str:
        values = self.rates[name]
        return (
            f"{name:54} {self.median(name):>9,.0f} jobs/s"
            f" [{min(values):,.0f} .. {max(values):,.0f}]"
        )

    def ratio(self, name: str, reference: str) -> tuple[float, float, float]:
        """median/median, and the lowest and highest ratio within one round."""
        pairs = [a / b for a, b in zip(self.rates[name], self.rates[reference], strict=True)]
        return self.median(name) / self.median(reference), min(pairs), max(pairs)


def main(argv: list[str]) -> int:
    from benchmarks import __main__ as runner

    args = parse_args(argv)
    dsn = runner.resolve_dsn(args.dsn)
    facts = runner.print_setting(dsn)
    if args.synchronous_commit == "off":
        # The benchmark's App reads its schema and DSN from the environment at import.
        os.environ["PGTASKS_SCHEMA"], os.environ["PGTASKS_DSN"] = runner.SCHEMA, dsn
        from benchmarks.app import app

        CONNECT["options"] = "-c synchronous_commit=off"
        app.database.extra_kwargs["options"] = CONNECT["options"]
        facts["synchronous_commit"] = "off (every connection of this run)"
        print("synchronous_commit=off on every connection of this run")
    small = max(500, args.jobs // 4)
    load_before = os.getloadavg()
    print(
        f"one by one: {small} jobs per figure and round, in turns of {BLOCK};"
        f" bulk: {args.jobs} jobs per figure and round, in turns of one batch;"
        f" rounds: {args.runs} (median); load average before: "
        + " ".join(f"{value:.2f}" for value in load_before)
        + "\n",
        flush=True,
    )
    measures = Measures()
    groups: list[Callable[[], dict[str, float]]] = [
        lambda: one_by_one(dsn, small),
        lambda: one_by_one_async(dsn, small),
        lambda: bulk(dsn, args.jobs),
    ]
    for round_number in range(args.runs):
        runner.reset_schema(dsn)
        create_minimal_table(dsn)
        for group in groups if round_number % 2 == 0 else groups[::-1]:
            measures.add(group())
        print(f"round {round_number + 1} of {args.runs} done", flush=True)
    load_after = os.getloadavg()
    print(f"\nenqueue (median of {args.runs} round(s), same server, same run)")
    for name in ORDER:
        print(measures.line(name))
    print("\nratios (pgtasks / its reference in the same run; per-round range)")
    ratios = []
    for figure, reference, second in COMPARISONS:
        for against in (reference, second):
            if against is None:
                continue
            ratio, low, high = measures.ratio(figure, against)
            print(f"{figure:30} / {against:54} {ratio:6.1%}  [{low:.1%} .. {high:.1%}]")
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
