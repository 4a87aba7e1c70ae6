"""A group of N members (``--big-group``): what enqueueing it, its workflow page and
``pgtasks workflows show`` cost.

    python -m benchmarks --big-group [--members N] [--dsn DSN]

One ``group(...)`` of N no-op members, enqueued with one ``delay()``; then, with every
member pending, the dashboard's page of the workflow (in process, its ASGI app), the
workflows list (median of 3 each) and ``pgtasks workflows show`` (a subprocess; median
of 3, one run from 100,000 members). Sizes: N = 10,000, 100,000 and 1,000,000 by
default (``--members``: one size, repeatable). Printed: seconds, rate, page size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql

from pgtasks import App, group
from pgtasks.web import asgi

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "pgtasks_big_group"
APP_PATH = "benchmarks.big_group:app"


def schema() -> str:
    """The benchmark's own schema (``PGTASKS_BIG_GROUP_SCHEMA``), dropped before and after."""
    return os.environ.get("PGTASKS_BIG_GROUP_SCHEMA", SCHEMA)


def drop_schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema())))


def build(dsn: str) -> App:
    app = App(dsn, schema=schema())

    @app.task(name="big.member")
    def member(n: int) -> int:
        return n

    return app


def __getattr__(name: str) -> object:
    if name == "app":
        return build(os.environ["PGTASKS_DSN"])
    raise AttributeError(name)


def timed(call: object, rounds: int = 3) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = call()  # type: ignore[operator]
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def measure(dsn: str, members: int) -> dict[str, float]:
    drop_schema(dsn)
    app = build(dsn)
    app.migrate()
    member = app.tasks["big.member"]
    try:
        started = time.perf_counter()
        handle = group(member.s(n) for n in range(members)).delay()
        enqueue = time.perf_counter() - started
        from tests.support.web import Client  # the tests' in-process ASGI client

        dashboard = asgi(app)
        web = Client(dashboard)
        page_seconds, page = timed(lambda: web.get(f"/workflows/{handle.id}"))
        list_seconds, _ = timed(lambda: web.get("/workflows"))
        dashboard.close()
        env = dict(os.environ, PGTASKS_DSN=dsn, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-m", "pgtasks", "workflows", "show", str(handle.id)]
        show_seconds, shown = timed(
            lambda: subprocess.run(
                [*command, "-A", APP_PATH], env=env, capture_output=True, text=True, check=True
            ),
            rounds=3 if members < 100_000 else 1,
        )
    finally:
        app.close()
        drop_schema(dsn)
    return {
        "members": members,
        "enqueue_s": enqueue,
        "enqueue_rate": members / enqueue,
        "page_s": page_seconds,
        "page_status": page.status_code,  # type: ignore[attr-defined]
        "page_kib": len(page.content) / 1024,  # type: ignore[attr-defined]
        "list_s": list_seconds,
        "show_s": show_seconds,
        "show_lines": len(shown.stdout.splitlines()),  # type: ignore[attr-defined]
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --big-group", description=__doc__)
    parser.add_argument("--dsn", default=os.environ.get("PGTASKS_DSN"), help="PostgreSQL")
    parser.add_argument("--members", type=int, action="append", help="group size (repeatable)")
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("--dsn (or PGTASKS_DSN) is required")
    for members in args.members or [10_000, 100_000, 1_000_000]:
        figures = measure(args.dsn, members)
        print(
            f"group of {members:,}: enqueue {figures['enqueue_s']:.1f} s"
            f" ({figures['enqueue_rate']:,.0f} members/s); workflow page {figures['page_s']:.3f} s"
            f" ({figures['page_status']:.0f}, {figures['page_kib']:.0f} KiB); workflows list"
            f" {figures['list_s']:.3f} s; `workflows show` {figures['show_s']:.2f} s"
            f" ({figures['show_lines']:.0f} lines)",
            flush=True,
        )
    return 0
