"""Fixtures of the fault suite; every test under tests/faults is marked ``faults``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pgtasks import App
from tests.support.faults import APP_PATH, FaultEnv, prepare_env
from tests.support.processes import Processes
from tests.support.schemas import new_schema_name
from tests.support.servers import PrivateServer, database_with

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.acceptance)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path, APP_PATH)
    yield running
    running.close()


@pytest.fixture
def env(make_app: Callable[..., App], dsn: str, processes: Processes) -> Iterator[FaultEnv]:
    """A fresh migrated schema on the shared test server, with the executions table."""
    fault_env = prepare_env(dsn, make_app(), processes, migrate=False)
    yield fault_env
    processes.close()  # before the schema goes (make_app drops it afterwards)
    fault_env.probe.close()


@pytest.fixture
def private_env(processes: Processes) -> Iterator[Callable[..., tuple[FaultEnv, PrivateServer]]]:
    """A private PostgreSQL (restartable; on TCP with ``tcp=True``) and a schema on it."""
    servers: list[PrivateServer] = []
    envs: list[FaultEnv] = []

    def start(*, tcp: bool = False) -> tuple[FaultEnv, PrivateServer]:
        server = PrivateServer(tcp=tcp)
        servers.append(server)
        app = App(server.dsn, schema=new_schema_name(), connect_timeout=3.0)
        envs.append(prepare_env(server.dsn, app, processes))
        return envs[-1], server

    yield start
    processes.close()
    for fault_env in envs:
        fault_env.probe.close()
        fault_env.app.close()
    for server in servers:
        server.close()


@pytest.fixture
def settings_env(dsn: str, processes: Processes) -> Iterator[Callable[..., FaultEnv]]:
    """A migrated schema in a database of its own on the test server, whose sessions
    default to the settings given (``lock_timeout="500ms"``,
    ``default_transaction_isolation="repeatable read"``): what a DBA may set."""
    databases = contextlib.ExitStack()
    envs: list[FaultEnv] = []

    def start(**settings: str) -> FaultEnv:
        database = databases.enter_context(database_with(dsn, **settings))
        app = App(database, schema=new_schema_name(), connect_timeout=3.0)
        envs.append(prepare_env(database, app, processes))
        return envs[-1]

    yield start
    processes.close()
    for fault_env in envs:
        fault_env.probe.close()
        fault_env.app.close()
    databases.close()
