"""The ports of the SQL catalog (pgtasks/_store/ports.py): the catalog has every port's
methods with the same signatures, and each consumer runs only its port's statements.

mypy --strict checks the assignments (ports.py assigns Queries to each port type; the
consumers hold the catalog through their port). The scan below also sees what mypy
cannot: a call on a catalog reached through ``Any`` (a closure's parameter, a default).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from pgtasks._store import ports
from pgtasks._store.queries import Queries
from tests.support.environment import ROOT

PORTS: dict[str, type[Any]] = {
    "WorkerPort": ports.WorkerPort,
    "StepPort": ports.StepPort,
    "EnqueuePort": ports.EnqueuePort,
    "OperatorsPort": ports.OperatorsPort,
    "AdminPort": ports.AdminPort,
    "DashboardPort": ports.DashboardPort,
}

#: The modules that hold the catalog through each port (globs under pgtasks/).
CONSUMERS = {
    "WorkerPort": [
        f"_worker/{name}.py"
        for name in (
            "exchange",
            "batches",
            "registration",
            "pool",
            "shutdown",
            "stuck",
            "cancellations",
        )
    ],
    "StepPort": ["_execution/steps.py", "_execution/step_transactions.py"],
    "EnqueuePort": ["_app/enqueue.py", "_app/workflows.py"],
    "OperatorsPort": ["_app/flow_stats.py"],
    "AdminPort": [
        "_app/admin.py",
        "_app/bulk_edits.py",
        "_app/keyed_admin.py",
        "_app/workflow_admin.py",
    ],
    "DashboardPort": ["web/*.py"],
}

#: Names a consumer holds the catalog by (``store``, ``queries``, ``x.queries``), and the
#: functions that hand it out through a port.
HOLDERS = ("store", "queries")
PORT_GETTERS = ("_admin", "enqueuer", "_steps")

CATALOG_METHODS = {
    name
    for name, member in inspect.getmembers(Queries)
    if not name.startswith("_") and callable(member)
}


def port_methods(port: type[Any]) -> set[str]:
    """The methods a port names, its bases' included."""
    return {
        name
        for klass in port.__mro__
        if klass not in (object,) and klass.__name__.endswith("Port")
        for name, member in vars(klass).items()
        if not name.startswith("_") and callable(member)
    }


def catalog_calls(source: str) -> list[tuple[int, str]]:
    """(line, method) of each catalog method called on a holder of the catalog."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and node.attr in CATALOG_METHODS):
            continue
        holder = node.value
        if (
            (isinstance(holder, ast.Name) and holder.id in HOLDERS)
            or (isinstance(holder, ast.Attribute) and holder.attr == "queries")
            or (
                isinstance(holder, ast.Call)
                and isinstance(holder.func, (ast.Name, ast.Attribute))
                and (getattr(holder.func, "id", None) or getattr(holder.func, "attr", None))
                in PORT_GETTERS
            )
        ):
            found.append((node.lineno, node.attr))
    return found


@pytest.mark.parametrize("name", list(PORTS))
def test_the_catalog_has_each_method_of_the_port_with_the_same_signature(name: str) -> None:
    port = PORTS[name]
    methods = port_methods(port)

    assert methods, f"{name} names no method"
    for method in sorted(methods):
        catalog = getattr(Queries, method, None)
        assert catalog is not None, f"{name}.{method}: Queries has no such method"
        declared = getattr(port, method)
        assert inspect.signature(declared) == inspect.signature(catalog), (
            f"{name}.{method}{inspect.signature(declared)} differs from the catalog's"
            f" {inspect.signature(catalog)}"
        )
        assert inspect.iscoroutinefunction(declared) == inspect.iscoroutinefunction(catalog)


@pytest.mark.parametrize("name", list(CONSUMERS))
def test_each_consumer_calls_only_the_methods_of_its_port(name: str) -> None:
    allowed = port_methods(PORTS[name])
    paths = sorted(path for pattern in CONSUMERS[name] for path in (ROOT / "pgtasks").glob(pattern))
    assert paths, f"no module of {name}'s consumers was found"

    calls = {path: catalog_calls(path.read_text("utf-8")) for path in paths}
    outside = {
        f"{path.relative_to(ROOT)}:{line}": method
        for path, found in calls.items()
        for line, method in found
        if method not in allowed
    }

    assert any(calls.values()), f"found no call of the catalog in {name}'s consumers"
    assert not outside, f"these calls are outside {name} (add them to it, or move them): {outside}"


def test_the_scan_sees_the_catalog_however_it_is_held() -> None:
    source = (
        "def read(database, store, conn):\n"
        "    store.claim_jobs(conn, None)\n"
        "    database.queries.finish_jobs(conn, [])\n"
        "    _admin(app).retry_job(conn, 1)\n"
        "    self._steps().hold_job(conn)\n"
        "    app.pause_queue('q')\n"  # an App method of the same name: not the catalog
        "    store.schema\n"
    )

    assert catalog_calls(source) == [
        (2, "claim_jobs"),
        (3, "finish_jobs"),
        (4, "retry_job"),
        (5, "hold_job"),
    ]


def test_the_dashboard_port_holds_no_worker_statement() -> None:
    dashboard = port_methods(ports.DashboardPort)

    assert not dashboard & port_methods(ports.WorkerPort)
    assert not dashboard & port_methods(ports.StepPort)
    assert "claim_jobs" in CATALOG_METHODS and "claim_jobs" not in dashboard


def test_ports_module_is_checked_by_mypy_against_the_catalog() -> None:
    """The assignment that makes mypy compare each port with Queries stays in ports.py."""
    source = Path(ports.__file__).read_text("utf-8")

    assert "_queries_satisfy_every_port(queries: Queries)" in source
    for name in PORTS:
        assert f"{name}," in source or f"{name}]" in source
