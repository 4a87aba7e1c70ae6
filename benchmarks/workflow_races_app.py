"""The app of ``python -m benchmarks --workflow-races`` (PGTASKS_DSN, PGTASKS_SCHEMA).

``member`` returns its argument; ``callback`` records each of its executions in the
schema's ``callback_runs`` table (so a callback started twice shows as two rows) and
returns the list it received. ``PGTASKS_BENCH_HEAL_INTERVAL`` sets the workers' healing
interval (the reference round turns healing off, so that what the old trigger loses shows).
"""

from __future__ import annotations

import os
from typing import Any

from psycopg import sql

from pgtasks import App, JobContext

app = App(
    pool_max_size=2,
    heal_interval=float(os.environ.get("PGTASKS_BENCH_HEAL_INTERVAL", "30")),
)


@app.task(name="race.member")
def member(value: int) -> int:
    return value


@app.task(name="race.callback", bind=True)
def callback(context: JobContext, values: list[Any]) -> list[Any]:
    with app.connection() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {}.callback_runs (job_id, attempt) VALUES (%s, %s)").format(
                sql.Identifier(app.schema)
            ),
            (context.job_id, context.attempt),
        )
    return values
