"""Fixtures of the fault suite; every test under tests/faults is marked ``faults``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pgtasks import App
from tests.conftest import drop_schema, new_schema_name
from tests.faults.harness import FaultEnv, PrivateServer, Processes, prepare_env

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.acceptance)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path)
    yield running
    running.close()


@pytest.fixture
def env(dsn: str, processes: Processes) -> Iterator[FaultEnv]:
    """A fresh schema on the shared test server, with the executions table."""
    app = App(dsn, schema=new_schema_name(), connect_timeout=3.0)
    fault_env = prepare_env(dsn, app, processes)
    yield fault_env
    processes.close()  # before the schema goes
    fault_env.probe.close()
    app.close()
    drop_schema(dsn, app.schema)


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
