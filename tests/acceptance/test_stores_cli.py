"""The CLI of an app of several stores, configured by PGTASKS_STORES (JSON text or a TOML
file) and PGTASKS_ROUTES: migrate numbers the stores, a worker serves one store (queues
spanning stores refused), beat runs one loop per store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgtasks import App, Store, chain
from tests.support.environment import pgtasks_command, pgtasks_env
from tests.support.processes import Processes
from tests.support.schemas import SchemaAdmin, new_schema_name
from tests.support.stores_cli import APP, run, stores_env
from tests.support.waiting import wait_until


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
    return stores_env(dsn, schemas, tmp_path)


def jobs_in(dsn: str, schema: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT id, task_name, status FROM {}.all_jobs ORDER BY id").format(
            sql.Identifier(schema)
        )
        return [(row[0], row[1], row[2]) for row in conn.execute(query)]


@pytest.mark.slow
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
        # A finished job of store bulk, read from that store's jobs_history by its id.
        bulk_id = next(job for job, _, status in jobs_in(dsn, schemas["bulk"]) if status == "done")
        shown = run(env, "jobs", "show", str(bulk_id), "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["id"] == bulk_id
        assert json.loads(shown.stdout)["status"] == "done"
        assert json.loads(shown.stdout)["task_name"] == "stores_app.mail"
    finally:
        processes.close()


@pytest.mark.timeout(180)  # 22 commands, most waiting 1 s for the store that is down
@pytest.mark.slow
def test_operations_fan_out_and_a_down_store_is_its_own_error(
    dsn: str, schema_admin: SchemaAdmin, schemas: dict[str, str]
) -> None:
    schema_admin.create_migrated(schemas["default"])
    env = pgtasks_env(dsn, schemas["default"])
    env.pop("PGTASKS_DSN")
    env["PGTASKS_TEST_CONNECT_ATTEMPTS"] = "1"
    env["PGTASKS_TEST_CONNECT_TIMEOUT"] = "1"  # the store that is down: 1 s per command
    env["PGTASKS_STORES"] = json.dumps(
        {
            "default": {"dsn": dsn, "schema": schemas["default"]},
            "bulk": {"dsn": "postgresql://pgtasks@127.0.0.1:1/nowhere", "schema": "pgtasks"},
        }
    )
    commands = (
        ("stats",),
        ("queues", "list"),
        ("workers",),
        ("jobs", "list"),
        ("limits",),
        ("workflows", "list"),
        ("workflows", "heal"),
        ("doctor",),
        ("prune",),
    )
    # Each command waits about a second for the store that is down: they run side by side.
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(lambda command: run(env, *command), commands))
        documents = list(pool.map(lambda command: run(env, *command, "--json"), commands))
    for command, result, as_json in zip(commands, texts, documents, strict=True):
        assert result.returncode in (1, 2), (command, result.stdout, result.stderr)
        assert "== store default" in result.stdout or "store default:" in result.stdout, command
        assert "cannot reach PostgreSQL at 127.0.0.1:1" in result.stdout, (command, result.stdout)
        document = json.loads(as_json.stdout)
        assert "error" in document["stores"]["bulk"], command
        assert "error" not in document["stores"]["default"], command

    alone_commands = (("stats",), ("limits",), ("workflows", "list"))  # asked alone: no error
    with ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda command: run(env, *command, "--store", "default", "--json"), alone_commands
            )
        )
    for command, alone in zip(alone_commands, answers, strict=True):
        assert alone.returncode == 0, (command, alone.stdout, alone.stderr)
        assert list(json.loads(alone.stdout)["stores"]) == ["default"], command

    refused = run(env, "purge", "--yes")
    assert refused.returncode == 2
    assert "this app has stores default, bulk: name the queue" in refused.stderr


@pytest.mark.slow
def test_limits_and_workflows_of_every_store_or_one(
    env: dict[str, str], schemas: dict[str, str], dsn: str
) -> None:
    migrated = run(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    app = App(
        stores={name: Store(dsn, schema=schema) for name, schema in schemas.items()},
        routes={"emails": "bulk"},
    )
    try:

        @app.task(name="stores_app.double")
        def double(n: int) -> int:
            return n * 2

        @app.task(name="stores_app.mail", queue="emails")
        def mail(n: int) -> int:
            return n + 1

        here = chain(double.s(1), double.s()).delay().id
        there = chain(mail.s(1), mail.s()).delay().id
    finally:
        app.close()
    assert here >> 48 == 0 and there >> 48 == 1

    listed = run(env, "workflows", "list")
    assert listed.returncode == 0, listed.stderr
    default_part, bulk_part = listed.stdout.split("== store bulk")
    assert "== store default" in default_part
    assert listed_ids(default_part) == [here] and listed_ids(bulk_part) == [there]
    document = json.loads(run(env, "workflows", "list", "--json").stdout)["stores"]
    assert [found["id"] for found in document["default"]] == [here]
    assert [found["id"] for found in document["bulk"]] == [there]
    only = json.loads(run(env, "workflows", "list", "--store", "bulk", "--json").stdout)
    assert list(only["stores"]) == ["bulk"]
    # --before pages the store that issued the id.
    paged = json.loads(run(env, "workflows", "list", "--before", str(there + 1), "--json").stdout)
    assert [found["id"] for found in paged["stores"]["bulk"]] == [there]
    assert list(paged["stores"]) == ["bulk"]
    shown = run(env, "workflows", "show", str(there), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == there and json.loads(shown.stdout)["incidents"] == []

    healed = json.loads(run(env, "workflows", "heal", "--json").stdout)["stores"]
    assert set(healed) == {"default", "bulk"}
    assert all(result["healed"] == 0 for result in healed.values())
    limits = json.loads(run(env, "limits", "--json").stdout)["stores"]
    assert set(limits) == {"default", "bulk"}
    assert "== store bulk" in run(env, "limits").stdout
    stats = json.loads(run(env, "stats", "--store", "bulk", "--json").stdout)["stores"]
    assert list(stats) == ["bulk"]

    unknown = run(env, "limits", "--store", "nowhere")
    assert unknown.returncode == 1
    assert "no store named 'nowhere' (stores: default, bulk)" in unknown.stderr


def listed_ids(text: str) -> list[int]:
    """The ids a table of ``workflows list`` shows (the first column of its rows)."""
    firsts = [line.split()[0] for line in text.splitlines() if line.strip()]
    return [int(first) for first in firsts if first.isdigit()]


def test_sequences_release_of_every_store_or_one(
    env: dict[str, str], schemas: dict[str, str], dsn: str
) -> None:
    migrated = run(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    app = App(
        stores={name: Store(dsn, schema=schema) for name, schema in schemas.items()},
        routes={"emails": "bulk"},
    )
    waiting = {}
    try:

        @app.task(name="stores_app.double", sequence_key="k")
        def double(n: int) -> int:
            return n * 2

        @app.task(name="stores_app.mail", queue="emails", sequence_key="k")
        def mail(n: int) -> int:
            return n + 1

        # In each store: sequence "k" held (written by hand, naming a failed job no longer
        # kept: id 0) while its first job ends cancelled, its second job waiting.
        for name, task in (("default", double), ("bulk", mail)):
            head, second = task.delay(1).id, task.delay(2).id
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.sequence_holds (sequence_key, job_id) VALUES ('k', %s)"
                    ).format(sql.Identifier(schemas[name])),
                    (0,),
                )
            assert app.cancel(head).outcome == "cancelled"
            waiting[name] = second
    finally:
        app.close()

    def status(name: str) -> str:
        return next(s for job_id, _, s in jobs_in(dsn, schemas[name]) if job_id == waiting[name])

    assert status("default") == status("bulk") == "waiting"
    one = run(env, "sequences", "release", "k", "--store", "bulk", "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout) == {
        "stores": {"bulk": {"sequence": "k", "started": waiting["bulk"]}}
    }
    assert status("bulk") == "pending" and status("default") == "waiting"
    every = run(env, "sequences", "release", "k")
    assert every.returncode == 0, every.stderr
    assert f"sequence k: released; job {waiting['default']} started" in every.stdout
    assert "== store bulk" in every.stdout and status("default") == "pending"
