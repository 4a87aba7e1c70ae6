"""The apps of ``python -m benchmarks --limits``' worker rounds (PGTASKS_DSN, PGTASKS_SCHEMA).

``plain_app`` declares no limit (its workers never ask for limited jobs); ``limited_app``
declares the limits of benchmarks/limits.py's build_app, under the same task names.
``python -m <this module> prepare KIND JOBS`` migrates the schema and enqueues a round's
jobs. Like limits_promises.py, it imports only pgtasks' public API: limits.py copies it
next to any checkout, so a baseline's worker rounds run that checkout's pgtasks.
"""

from __future__ import annotations

from pgtasks import App

plain_app = App()
limited_app = App()


@plain_app.task(name="bench.plain")
def plain(n: int) -> None:
    """A no-op."""


@limited_app.task(name="bench.plain")
def limited_plain(n: int) -> None:
    """A no-op."""


@limited_app.task(name="bench.task_limited", concurrency=50)
def task_limited(n: int) -> None:
    """A no-op; at most 50 running at once across all workers."""


@limited_app.task(name="bench.key_limited", concurrency=1, concurrency_key=lambda key, **_: key)
def key_limited(key: int, n: int) -> None:
    """A no-op; at most one running per key."""


def prepare(kind: str, jobs: int) -> None:
    """Migrate PGTASKS_SCHEMA, empty it and enqueue ``jobs`` jobs of ``kind`` (plain, task,
    key: 1000 keys), with this process's pgtasks (a worker round's checkout)."""
    import psycopg
    from psycopg import sql

    app = limited_app
    app.migrate()
    schema = sql.Identifier(app.schema)
    with app.connection() as conn:
        # Finished jobs and their keys too, where the checkout keeps them apart.
        tables = [
            sql.Identifier(app.schema, name)
            for name in ("jobs", "jobs_history", "job_keys")
            if conn.execute(
                "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text))", [app.schema, name]
            ).fetchone()
            != (None,)
        ]
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(tables)))
        conn.execute(sql.SQL("DELETE FROM {}.limits").format(schema))
        conn.execute(sql.SQL("DELETE FROM {}.workers").format(schema))
    if kind == "key":
        key_limited.delay_many([{"key": n % 1000, "n": n} for n in range(jobs)])
    elif kind == "task":
        task_limited.delay_many([{"n": n} for n in range(jobs)])
    else:
        limited_plain.delay_many([{"n": n} for n in range(jobs)])
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(schema))
    app.close()


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["prepare"] or len(sys.argv) != 4:
        raise SystemExit("usage: python -m MODULE prepare plain|task|key JOBS")
    prepare(sys.argv[2], int(sys.argv[3]))
