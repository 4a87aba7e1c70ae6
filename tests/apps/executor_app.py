"""Tasks for the executor tests: process-pool children import this module's ``app``.

Configured from the environment like ``worker_app``: ``PGTASKS_DSN`` and
``PGTASKS_TEST_SCHEMA``. A test builds its own App on the same schema and calls
:func:`register_tasks` on it, so the worker (the test process) and its spawned children
(which import ``tests.apps.executor_app:app``) know the same task names. Tasks that
record their runs write ``<schema>.executions`` (see ``worker_app.create_executions_table``)
through the app's own pool, so each child also proves it can use the database.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from psycopg import sql

from pgtasks import App, JobContext, SoftTimeLimitExceeded
from tests.apps import lazy_app
from tests.apps._environment import environment_app

#: Memory a leaking task holds on to, per process (see ``leak``).
_hoard: list[bytes] = []


def record(app: App, context: JobContext) -> None:
    """One execution row: (job, attempt, worker, pid) of this run."""
    with app.connection() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (token, job_id, attempt, worker_id, pid)"
                " VALUES (%s, %s, %s, %s, %s)"
            ).format(sql.Identifier(app.schema, "executions")),
            (uuid.uuid4(), context.job_id, context.attempt, context.worker_id, os.getpid()),
        )


def resident_mb() -> float:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def wait_for(path: str, limit: float) -> bool:
    """Poll for ``path`` for up to ``limit`` seconds (tasks may sleep; tests may not)."""
    deadline = time.monotonic() + limit
    while not Path(path).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def spin_until_met(directory: str, parties: int, limit: float) -> tuple[bool, int]:
    """Spin (CPU-bound, no sleep) until ``directory`` holds ``parties`` files or ``limit``
    seconds pass: whether they were there, and how many times it looked."""
    deadline = time.monotonic() + limit
    spins = 0
    while time.monotonic() < deadline:
        spins += 1
        if len(os.listdir(directory)) >= parties:
            return True, spins
    return False, spins


@dataclasses.dataclass(frozen=True)
class Tasks:
    pid: Any
    thread_pid: Any
    queue_routed_pid: Any
    burn: Any
    spin: Any
    sleep: Any
    leak: Any
    soft_spin: Any
    soft_sleep: Any
    stubborn: Any
    chatty: Any
    enqueue_pid: Any
    hold: Any
    thread_hold: Any
    async_hold: Any
    cancellable: Any
    printer: Any
    printer_hold: Any
    stubborn_hold: Any


def register_tasks(app: App) -> Tasks:
    """Register the tasks on ``app`` under fixed names (``executor_app.*``)."""
    return Tasks(
        **_routing_tasks(app),
        **_limit_tasks(app),
        **_child_behaviour_tasks(app),
        **_holding_tasks(app),
    )


def _routing_tasks(app: App) -> dict[str, Any]:
    @app.task(name="executor_app.pid", executor="process")
    def pid() -> int:
        return os.getpid()

    @app.task(name="executor_app.thread_pid", executor="thread")
    def thread_pid() -> int:
        return os.getpid()

    @app.task(name="executor_app.queue_routed_pid", queue="cpu")
    def queue_routed_pid() -> int:
        """No executor=: runs where the worker routes its queue."""
        return os.getpid()

    @app.task(name="executor_app.enqueue_pid", executor="process")
    def enqueue_pid() -> int:
        """Enqueue another job from inside a child (through the child's own pool)."""
        return pid.delay().id

    return {
        "pid": pid,
        "thread_pid": thread_pid,
        "queue_routed_pid": queue_routed_pid,
        "enqueue_pid": enqueue_pid,
    }


def _limit_tasks(app: App) -> dict[str, Any]:
    @app.task(name="executor_app.burn", executor="process")
    def burn(directory: str, parties: int, limit: float) -> dict[str, Any]:
        """CPU-bound until ``parties`` jobs run at once: say "started" with a file of
        this run in ``directory``, then spin in pure Python (never sleeping, never
        releasing the interpreter) until ``parties`` files are there or ``limit``
        seconds have passed. Reports whether it met the others, its pid, its parent's
        pid and its wall-clock interval."""
        start = time.time()
        Path(directory, f"{os.getpid()}-{uuid.uuid4()}").touch()
        met, spins = spin_until_met(directory, parties, limit)
        return {
            "pid": os.getpid(),
            "parent": os.getppid(),
            "met": met,
            "spins": spins,
            "start": start,
            "end": time.time(),
        }

    @app.task(name="executor_app.spin", bind=True, executor="process", timeout=0.5, max_attempts=1)
    def spin(context: JobContext) -> None:
        record(app, context)
        while True:
            pass

    @app.task(
        name="executor_app.sleep",
        bind=True,
        executor="process",
        max_attempts=3,
        retry_backoff=0.05,
        retry_jitter=False,
    )
    def sleep(context: JobContext, seconds: float, retry_seconds: float = 0.0) -> int:
        """Record the run, then sleep (``retry_seconds`` on attempts after the first)."""
        record(app, context)
        time.sleep(seconds if context.attempt == 1 else retry_seconds)
        return context.attempt

    @app.task(name="executor_app.leak", executor="process")
    def leak(target_mb: float) -> dict[str, float]:
        """Keep memory until this child's resident set is at least ``target_mb``."""
        while resident_mb() < target_mb:
            _hoard.append(b"\x01" * (8 * 2**20))  # written, so resident
        return {"pid": os.getpid(), "rss": resident_mb()}

    @app.task(name="executor_app.soft_spin", executor="process", soft_timeout=0.3)
    def soft_spin() -> str:
        started = time.monotonic()
        try:
            while True:
                pass
        except SoftTimeLimitExceeded:
            return f"caught after {time.monotonic() - started:.2f} s"

    @app.task(name="executor_app.soft_sleep", executor="process", soft_timeout=0.3, max_attempts=1)
    def soft_sleep() -> None:
        time.sleep(10)  # the soft limit interrupts the sleep (SIGALRM in the main thread)

    return {
        "burn": burn,
        "spin": spin,
        "sleep": sleep,
        "leak": leak,
        "soft_spin": soft_spin,
        "soft_sleep": soft_sleep,
    }


def _child_behaviour_tasks(app: App) -> dict[str, Any]:
    @app.task(name="executor_app.stubborn", executor="process", timeout=0.3, max_attempts=1)
    def stubborn() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL can stop it now
        while True:
            pass

    @app.task(name="executor_app.chatty", executor="process")
    def chatty() -> int:
        logging.getLogger("executor_app").warning("hello from child %d", os.getpid())
        return os.getpid()

    @app.task(name="executor_app.printer", executor="process")
    def printer() -> None:
        print("to stdout")
        print("to stderr", file=sys.stderr)
        sys.stdout.write("no newline")

    @app.task(name="executor_app.printer_hold", bind=True, executor="process", max_attempts=1)
    def printer_hold(context: JobContext, path: str) -> None:
        print("waiting for the file")
        record(app, context)
        wait_for(path, 60)

    @app.task(name="executor_app.stubborn_hold", bind=True, executor="process", max_attempts=1)
    def stubborn_hold(context: JobContext, path: str) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL can stop it now
        record(app, context)
        wait_for(path, 60)

    return {
        "stubborn": stubborn,
        "stubborn_hold": stubborn_hold,
        "chatty": chatty,
        "printer": printer,
        "printer_hold": printer_hold,
    }


def _holding_tasks(app: App) -> dict[str, Any]:
    @app.task(name="executor_app.hold", bind=True, executor="process", max_attempts=3)
    def hold(context: JobContext, path: str) -> str:
        record(app, context)
        wait_for(path, 60)
        return "released"

    @app.task(name="executor_app.thread_hold", bind=True, executor="thread", max_attempts=3)
    def thread_hold(context: JobContext, path: str) -> str:
        record(app, context)
        wait_for(path, 60)
        return "released"

    @app.task(name="executor_app.async_hold", bind=True, max_attempts=3)
    async def async_hold(context: JobContext, path: str) -> str:
        await asyncio.to_thread(record, app, context)
        while not Path(path).exists():
            await asyncio.sleep(0.02)
        return "released"

    @app.task(name="executor_app.cancellable", bind=True, executor="process")
    def cancellable(context: JobContext) -> str:
        record(app, context)
        while not context.cancelled():
            time.sleep(0.01)
        return "stopped early"

    return {
        "hold": hold,
        "thread_hold": thread_hold,
        "async_hold": async_hold,
        "cancellable": cancellable,
    }


def build_app() -> App:
    """The app of a worker process or pool child, from the environment."""
    app = environment_app(
        pool_min_size=0,
        pool_max_size=2,
        lease_timeout=2.0,
        heartbeat_interval=0.3,
        rescue_interval=0.3,
        poll_interval=0.2,
    )
    register_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
