"""Two `pgtasks beat` processes compete on an app of two stores: each store elects its own
leader (a session lock in that store), every tick of each store's schedule is inserted
exactly once in that store, and when the leader of one store is SIGKILLed the other
process takes that store over with no tick doubled or missed."""

from __future__ import annotations

import itertools
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.environment import pgtasks_command
from tests.support.processes import ChildProcess, Processes
from tests.support.schemas import SchemaAdmin, new_schema_name
from tests.support.stores_cli import APP, run, stores_env
from tests.support.waiting import sleep_past, wait_until

#: The schedules of tests/apps/stores_app.py (every second), by the store they live in.
TASKS = {"default": "stores_app.double", "bulk": "stores_app.mail"}
#: Seconds watched before and after the kill.
WATCH = 6.0


def ticks(dsn: str, schema: str) -> list[tuple[str, datetime]]:
    """(task, run_at) of every periodic job of ``schema``, in run_at order."""
    query = sql.SQL(
        "SELECT task_name, run_at FROM {}.jobs"
        " WHERE starts_with(idempotency_key, 'pgtasks.periodic:') ORDER BY run_at"
    ).format(sql.Identifier(schema))
    with psycopg.connect(dsn) as conn:
        return [(row[0], row[1]) for row in conn.execute(query)]


def leader_pid(dsn: str, schema: str) -> int:
    """The pid of the beat process holding ``schema``'s leader lock (0: none)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
            " AND l.objid = hashtext(%s)::oid AND a.application_name LIKE 'pgtasks-beat:%%'",
            (schema,),
        ).fetchone()
    return int(row[0].split(":")[1]) if row else 0


@pytest.fixture
def schemas(schema_admin: SchemaAdmin) -> Iterator[dict[str, str]]:
    """The two stores' schemas (made by `pgtasks migrate`, dropped afterwards)."""
    names = {"default": new_schema_name(), "bulk": new_schema_name()}
    yield names
    for schema in names.values():
        schema_admin.drop(schema)


@pytest.fixture
def env(dsn: str, schemas: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return stores_env(dsn, schemas, tmp_path)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    made = Processes(tmp_path, APP)
    yield made
    made.close()


def assert_one_per_tick(found: list[tuple[str, datetime]], task: str, store: str) -> None:
    assert {name for name, _ in found} == {task}, (store, found)
    times = [at for _, at in found]
    assert len(times) == len(set(times)), f"a tick of store {store} inserted twice: {times}"
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap == timedelta(seconds=1) for gap in gaps), f"store {store} missed: {gaps}"


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_two_beats_per_store_one_tick_each_and_a_killed_leader_is_replaced(
    env: dict[str, str],
    schemas: dict[str, str],
    dsn: str,
    processes: Processes,
) -> None:
    migrated = run(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    beats = [processes.spawn(f"beat{n}", pgtasks_command("beat", "-A", APP), env) for n in (1, 2)]
    by_pid = {beat.pid: beat for beat in beats}

    def leaders() -> dict[str, int] | None:
        found = {store: leader_pid(dsn, schema) for store, schema in schemas.items()}
        return found if all(pid in by_pid for pid in found.values()) else None

    first = wait_until(leaders, timeout=20, message="a leader in each store")
    wait_until(
        lambda: all(len(ticks(dsn, schema)) >= 2 for schema in schemas.values()),
        timeout=20,
        message="ticks in both stores",
    )
    sleep_past(WATCH)  # several ticks with both beats competing
    # The leader of store bulk is killed; the other process must lead it from now on.
    killed: ChildProcess = by_pid[first["bulk"]]
    survivor = next(beat for beat in beats if beat is not killed)
    before = {store: len(ticks(dsn, schema)) for store, schema in schemas.items()}
    killed.send(signal.SIGKILL)
    assert killed.wait_exit(10) == -signal.SIGKILL
    # It holds both stores now: the killed beat may have led default too, and then the
    # survivor takes each store over on its own next try, in either order.
    wait_until(
        lambda: all(leader_pid(dsn, schema) == survivor.pid for schema in schemas.values()),
        timeout=15,
        message="the surviving beat to take stores bulk and default over",
    )
    sleep_past(WATCH)  # several ticks after the take-over
    assert survivor.stop() == 0
    for store, schema in schemas.items():
        found = ticks(dsn, schema)
        assert len(found) >= before[store] + WATCH - 1, (store, before[store], len(found))
        assert_one_per_tick(found, TASKS[store], store)
    print(
        f"\nbeats per store: leaders before the kill {first},"
        f" ticks default {len(ticks(dsn, schemas['default']))},"
        f" bulk {len(ticks(dsn, schemas['bulk']))}, none doubled or missed"
    )
