"""The CLI of an app of several stores, configured by PGTASKS_STORES (JSON text or a TOML
file) and PGTASKS_ROUTES: migrate numbers the stores, a worker serves one store (queues
spanning stores refused), beat runs one loop per store."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.processes import Processes
from tests.support.schemas import SchemaAdmin, new_schema_name
from tests.support.waiting import wait_until

APP = "tests.apps.stores_app:app"


@pytest.fixture
def schemas(dsn: str, schema_admin: SchemaAdmin) -> Iterator[dict[str, str]]:
    """The two stores' schemas (made by `pgtasks migrate`, dropped afterwards)."""
    names = {"default": new_schema_name(), "bulk": new_schema_name()}
    yield names
    for schema in names.values():
        schema_admin.drop(schema)


@pytest.fixture
def env(dsn: str, schemas: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """PGTASKS_STORES as a TOML file, PGTASKS_ROUTES as JSON; no PGTASKS_DSN."""
    stores = tmp_path / "stores.toml"
    stores.write_text(
        "".join(
            f'[stores.{name}]\ndsn = "{dsn}"\nschema = "{schema}"\n'
            for name, schema in schemas.items()
        )
    )
    base = pgtasks_env(dsn, schemas["default"])
    base.pop("PGTASKS_DSN")
    base.update(PGTASKS_STORES=str(stores), PGTASKS_ROUTES=json.dumps({"emails": "bulk"}))
    return base


def run(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pgtasks_command(*arguments, "-A", APP),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def jobs_in(dsn: str, schema: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT id, task_name, status FROM {}.jobs ORDER BY id").format(
            sql.Identifier(schema)
        )
        return [(row[0], row[1], row[2]) for row in conn.execute(query)]


def test_migrate_worker_and_beat_of_two_stores(
    env: dict[str, str], schemas: dict[str, str], dsn: str, tmp_path: Path
) -> None:
    migrated = run(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"store default (schema {schemas['default']!r}): number 0" in migrated.stdout
    assert f"store bulk (schema {schemas['bulk']!r}): number 1" in migrated.stdout

    spanning = run(env, "worker", "--queues", "emails,default")
    assert spanning.returncode == 1
    assert "the queues span stores bulk, default (emails → bulk, default → default)" in (
        spanning.stderr
    )
    unnamed = run(env, "worker")
    assert unnamed.returncode == 1 and "this app has stores default, bulk" in unnamed.stderr

    processes = Processes(tmp_path, APP)
    try:
        command = pgtasks_command("worker", "-A", APP, "--store", "bulk")
        worker = processes.spawn("worker", command, env)
        worker.wait_for_log(" started: ", timeout=20)
        beat = processes.spawn("beat", pgtasks_command("beat", "-A", APP), env)
        # Each store's beat enqueues its own schedule's ticks; bulk's worker runs them.
        wait_until(
            lambda: any(status == "done" for _, _, status in jobs_in(dsn, schemas["bulk"])),
            timeout=20,
            message="a tick of the bulk store's schedule to be run by its worker",
        )
        wait_until(lambda: jobs_in(dsn, schemas["default"]), timeout=20, message="a default tick")
        assert {task for _, task, _ in jobs_in(dsn, schemas["bulk"])} == {"stores_app.mail"}
        default_jobs = jobs_in(dsn, schemas["default"])
        assert {task for _, task, _ in default_jobs} == {"stores_app.double"}
        assert {status for _, _, status in default_jobs} == {"pending"}  # no worker there
        assert all(job_id >> 48 == 1 for job_id, _, _ in jobs_in(dsn, schemas["bulk"]))
        assert beat.stop() == 0 and worker.stop() == 0
        bulk_id = jobs_in(dsn, schemas["bulk"])[0][0]
        shown = run(env, "jobs", "show", str(bulk_id), "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["id"] == bulk_id
        assert json.loads(shown.stdout)["task_name"] == "stores_app.mail"
    finally:
        processes.close()


def test_operations_fan_out_and_a_down_store_is_its_own_error(
    dsn: str, schema_admin: SchemaAdmin, schemas: dict[str, str]
) -> None:
    schema_admin.create_migrated(schemas["default"])
    env = pgtasks_env(dsn, schemas["default"])
    env.pop("PGTASKS_DSN")
    env["PGTASKS_TEST_CONNECT_ATTEMPTS"] = "1"
    env["PGTASKS_STORES"] = json.dumps(
        {
            "default": {"dsn": dsn, "schema": schemas["default"]},
            "bulk": {"dsn": "postgresql://pgtasks@127.0.0.1:1/nowhere", "schema": "pgtasks"},
        }
    )
    for command in (
        ("stats",),
        ("queues", "list"),
        ("workers",),
        ("jobs", "list"),
        ("doctor",),
        ("prune",),
    ):
        result = run(env, *command)
        assert result.returncode in (1, 2), (command, result.stdout, result.stderr)
        assert "== store default" in result.stdout or "store default:" in result.stdout, command
        assert "cannot reach PostgreSQL at 127.0.0.1:1" in result.stdout, (command, result.stdout)
        as_json = run(env, *command, "--json")
        document = json.loads(as_json.stdout)
        assert "error" in document["stores"]["bulk"], command
        assert "error" not in document["stores"]["default"], command

    refused = run(env, "purge", "--yes")
    assert refused.returncode == 2
    assert "this app has stores default, bulk: name the queue" in refused.stderr
