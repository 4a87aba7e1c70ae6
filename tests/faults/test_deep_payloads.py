"""Deeply nested payloads against real worker processes: no payload stops a queue.

A list nested some hundreds deep encodes on a shallow stack (a fresh thread, a web
handler) and used to be decoded inside the worker's claim, on a deeper stack: the
RecursionError lost the whole reply, the batch was released and claimed first again, for
ever. Now enqueues, results and meta refuse values nested past MAX_JSON_DEPTH, and a
worker decodes each claimed job's payloads on their own: a row nested past
MAX_DECODE_DEPTH (written by SQL) fails only its job.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgtasks import PayloadNotSerializableError, PayloadTooDeepError, chord, group
from pgtasks._payload import MAX_DECODE_DEPTH, MAX_JSON_DEPTH
from tests.apps.hostile_app import APP_PATH, register_hostile_tasks
from tests.support.faults import FaultEnv
from tests.support.probe import wait_all_finished
from tests.support.waiting import wait_until


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` levels deep (``[[[]]]`` is 3)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def in_a_fresh_thread(call: Any) -> Any:
    """What ``call()`` returns or raises on a shallow stack (a new thread's)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return outcome[0]


def write_row(env: FaultEnv, task_name: str, **values: str) -> int:
    """A job row written by SQL (jsonb takes thousands of levels): nothing checks it."""
    columns = {"args": "[]", "kwargs": "{}", **values}
    names = ["task_name", "queue", "max_attempts", *columns]
    query = sql.SQL("INSERT INTO {}.jobs ({}) VALUES ({}) RETURNING id").format(
        sql.Identifier(env.schema),
        sql.SQL(", ").join(map(sql.Identifier, names)),
        sql.SQL(", ").join(sql.Placeholder() * len(names)),
    )
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        row = conn.execute(query, [task_name, "default", 3, *columns.values()]).fetchone()
    assert row is not None
    return int(row[0])


def failures(env: FaultEnv, ids: list[int]) -> dict[int, tuple[str, int, str]]:
    """Status, attempts and error of ``ids`` (the payloads themselves are not read)."""
    rows = env.probe.rows(
        "SELECT id, status, attempts, last_error FROM {schema}.all_jobs WHERE id = ANY(%s)",
        (ids,),
    )
    return {row["id"]: (row["status"], row["attempts"], row["last_error"] or "") for row in rows}


def test_an_argument_nested_past_the_bound_is_refused_at_enqueue_on_a_shallow_stack(
    env: FaultEnv,
) -> None:
    tasks = register_hostile_tasks(env.app)
    show_args = tasks["show_args"]

    refused = in_a_fresh_thread(lambda: show_args.delay(nested(975)))
    assert isinstance(refused, PayloadTooDeepError), refused
    assert isinstance(refused, PayloadNotSerializableError)  # the invalid-task kind
    assert "is nested 975 levels deep" in str(refused)
    assert f"at most {MAX_JSON_DEPTH} levels" in str(refused)
    keyword = in_a_fresh_thread(lambda: show_args.delay(value=nested(MAX_JSON_DEPTH)))
    assert isinstance(keyword, PayloadTooDeepError), keyword
    assert "argument 'value'" in str(keyword)
    meta = in_a_fresh_thread(lambda: show_args.apply_async(meta={"tree": nested(MAX_JSON_DEPTH)}))
    assert isinstance(meta, PayloadTooDeepError), meta
    assert "meta['tree']" in str(meta)
    # Up to the bound is stored (the args list is a level of its own).
    accepted = show_args.delay(nested(MAX_JSON_DEPTH - 1))
    assert env.probe.status_counts() == {"pending": 1}, accepted


def test_rows_nested_past_the_bound_fail_only_their_own_job_and_the_queue_runs_on(
    env: FaultEnv,
) -> None:
    """The rows the worker decoded inside its claim: 975 deep fails there on the worker's
    stack, 3,000 anywhere. Each fails alone, at its first attempt."""
    register_hostile_tasks(env.app)
    deep = [
        write_row(env, "hostile.show_args", args=nested_text(975)),
        write_row(env, "hostile.show_args", args=nested_text(3000)),
        write_row(env, "hostile.show_args", kwargs='{"v": ' + nested_text(3000) + "}"),
        write_row(env, "hostile.show_args", meta='{"m": ' + nested_text(3000) + "}"),
        write_row(env, "hostile.depth_of", args="[" + nested_text(MAX_DECODE_DEPTH - 1) + "]"),
        # jsonb takes an integer of 5,000 digits; Python's int() refuses past 4,300.
        write_row(env, "hostile.show_args", args="[" + "9" * 5000 + "]"),
    ]
    good = [handle.id for handle in env.tasks.noop.delay_many([{}] * 20)]
    worker = env.worker("--concurrency=4", app_path=APP_PATH)
    wait_all_finished(env.probe, len(deep) + len(good), timeout=60)
    assert worker.alive(), worker.log()
    ended = failures(env, deep)
    for job_id in deep[:3]:
        status, attempts, error = ended[job_id]
        assert (status, attempts) == ("failed", 1), ended[job_id]
        assert "cannot decode its arguments" in error, error
        assert "levels deep" in error and "written by SQL or another tool" in error, error
    assert ended[deep[3]][:2] == ("failed", 1)
    assert "cannot decode its meta" in ended[deep[3]][2]
    # Within what a worker decodes: it ran.
    assert ended[deep[4]][:2] == ("done", 1), ended[deep[4]]
    assert env.app.get_job(deep[4]).get(timeout=30) == MAX_DECODE_DEPTH - 1
    assert ended[deep[5]][:2] == ("failed", 1), ended[deep[5]]
    assert "cannot decode its arguments: args is not valid JSON" in ended[deep[5]][2]
    # The queue runs on: more jobs of it, on the same worker.
    more = [handle.id for handle in env.tasks.noop.delay_many([{}] * 5)]
    wait_all_finished(env.probe, len(deep) + len(good) + len(more), timeout=60)
    assert "Traceback" not in worker.log(), worker.log()


def test_a_result_nested_past_the_bound_fails_its_job_with_the_reason(env: FaultEnv) -> None:
    deep_result = register_hostile_tasks(env.app)["deep_result"]
    job = deep_result.delay(MAX_JSON_DEPTH + 1)
    fine = deep_result.delay(MAX_JSON_DEPTH)
    worker = env.worker("--concurrency=2", app_path=APP_PATH)
    wait_all_finished(env.probe, 2, timeout=60)
    assert worker.alive(), worker.log()
    status, attempts, error = failures(env, [job.id])[job.id]
    assert (status, attempts) == ("failed", 1), error
    assert f"is nested {MAX_JSON_DEPTH + 1} levels deep" in error, error
    assert fine.get(timeout=30) == nested(MAX_JSON_DEPTH)


def test_a_members_deep_result_fails_only_the_chord_callback(env: FaultEnv) -> None:
    """A member's result written by SQL, nested thousands deep, becomes the callback's
    input: the callback fails alone, the other chords and jobs run."""
    tasks = register_hostile_tasks(env.app)
    show_args = tasks["show_args"]
    poisoned = chord(group([show_args.s(1), show_args.s(2)]), show_args.s()).delay()
    healthy = chord(group([show_args.s(3), show_args.s(4)]), show_args.s()).delay()
    (callback,) = poisoned.results
    (healthy_callback,) = healthy.results
    members = env.probe.rows(
        "SELECT id FROM {schema}.jobs WHERE workflow_id = %s AND id <> %s ORDER BY id",
        (poisoned.id, callback.id),
    )
    member = members[0]["id"]
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {}.jobs SET status = 'done', attempts = 1, finished_at = now(),"
                " result = %s::jsonb WHERE id = %s"
            ).format(sql.Identifier(env.schema)),
            ('{"deep": ' + nested_text(3000) + "}", member),
        )
    noops = [handle.id for handle in env.tasks.noop.delay_many([{}] * 10)]
    worker = env.worker("--concurrency=4", app_path=APP_PATH)

    def shown(*args: Any) -> list[Any]:
        return [list(args), {}]

    assert healthy_callback.get(timeout=60) == shown([shown(3), shown(4)])
    wait_until(
        lambda: failures(env, [callback.id])[callback.id][0] == "failed",
        timeout=60,
        message="the poisoned callback failed",
    )
    _, attempts, error = failures(env, [callback.id])[callback.id]
    assert attempts == 1 and "cannot decode its arguments" in error, error
    wait_until(
        lambda: {status for status, _, _ in failures(env, noops).values()} == {"done"},
        timeout=60,
        message="the other jobs ran",
    )
    assert worker.alive(), worker.log()


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 3000])
def test_doctor_names_rows_nested_past_the_bound(env: FaultEnv, depth: int) -> None:
    from pgtasks._app.doctor import diagnose

    job_id = write_row(env, "hostile.show_args", args=nested_text(depth))
    with env.app.connection() as conn:
        findings = {finding.check: finding for finding in diagnose(env.app, conn)}
    finding = findings["deep payloads"]
    assert finding.level in ("warning", "critical"), finding
    assert str(job_id) in finding.summary and "hostile.show_args" in finding.summary


def write_history_row(env: FaultEnv, task_name: str, **values: str) -> int:
    """A finished job row written by SQL straight into jobs_history."""
    columns = {"args": "[]", "kwargs": "{}", **values}
    names = ["task_name", "queue", "max_attempts", "status", "finished_at", *columns]
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        id_query = sql.SQL("SELECT nextval(pg_get_serial_sequence({}, 'id'))").format(
            sql.Literal(f'"{env.schema}".jobs')
        )
        id_row = conn.execute(id_query).fetchone()
        assert id_row is not None
        query = sql.SQL(
            "INSERT INTO {}.jobs_history (id, {}) VALUES (%s, {}, now(), {}) RETURNING id"
        ).format(
            sql.Identifier(env.schema),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(sql.Placeholder() * 4),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        )
        row = conn.execute(
            query, [id_row[0], task_name, "default", 3, "done", *columns.values()]
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_doctor_names_finished_rows_nested_past_the_bound_in_jobs_history(env: FaultEnv) -> None:
    from pgtasks._app.doctor import diagnose

    deep_id = write_history_row(env, "hostile.history", result=nested_text(MAX_JSON_DEPTH + 1))
    with env.app.connection() as conn:
        findings = {finding.check: finding for finding in diagnose(env.app, conn)}
        finding = findings["deep payloads (jobs_history)"]
        assert finding.level == "warning", finding
        assert str(deep_id) in finding.summary and "hostile.history" in finding.summary
        assert "result" in finding.summary and "jobs_history" in finding.summary
        # Bounded: only the newest rows are read; a newer shallow row hides the deep one
        # from a scan of one row.
        shallow_id = write_history_row(env, "hostile.history", result="[1]")
        assert shallow_id > deep_id
        store = env.app.queries
        one = store.get_deep_history_payloads(conn, depth=MAX_JSON_DEPTH, decode_depth=3000, scan=1)
        two = store.get_deep_history_payloads(conn, depth=MAX_JSON_DEPTH, decode_depth=3000, scan=2)
    assert one == []
    assert [row["id"] for row in two] == [deep_id] and two[0]["scanned"] == 2
