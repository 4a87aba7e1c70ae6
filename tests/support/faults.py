"""The environment of a fault scenario: a migrated schema with the executions table, the
fault app's tasks on the test's App, a probe, and ``pgtasks`` processes on
``tests.apps.fault_app:app``.

- Faults: signals through :meth:`ChildProcess.send`, :func:`.servers.terminate_backends`
  (``pg_terminate_backend``), :class:`.servers.PrivateServer` (a PostgreSQL of one test
  that may be restarted, made read-only, or put behind :class:`.proxy.Proxy` on TCP).
- :func:`.probe.assert_invariants` ends every scenario.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg

from pgtasks import App
from tests.apps.fault_app import FaultTasks, register_fault_tasks
from tests.apps.worker_app import create_executions_table
from tests.support.probe import Probe
from tests.support.processes import ChildProcess, Processes

APP_PATH = "tests.apps.fault_app:app"


@dataclasses.dataclass
class FaultEnv:
    """A migrated schema with the executions table: the test's App, tasks and probe."""

    dsn: str
    app: App
    tasks: FaultTasks
    probe: Probe
    processes: Processes

    @property
    def schema(self) -> str:
        return self.app.schema

    def worker(self, *arguments: str, dsn: str | None = None, **options: Any) -> ChildProcess:
        return self.processes.worker(dsn or self.dsn, self.schema, *arguments, **options)

    def workers(self, count: int, *arguments: str, **env: str) -> list[ChildProcess]:
        """``count`` workers of the same ``arguments``, started side by side."""
        return self.processes.workers(self.dsn, self.schema, *[arguments] * count, env=env)

    def beat(self, *arguments: str, dsn: str | None = None, **env: str) -> ChildProcess:
        return self.processes.beat(dsn or self.dsn, self.schema, *arguments, **env)


def prepare_env(dsn: str, app: App, processes: Processes, *, migrate: bool = True) -> FaultEnv:
    """Migrate ``app``'s schema (unless it is already) and add the executions side table."""
    if migrate:
        app.migrate()
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_executions_table(conn, app.schema)
    return FaultEnv(dsn, app, register_fault_tasks(app), Probe(dsn, app.schema), processes)
