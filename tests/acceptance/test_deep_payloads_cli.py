"""A row whose JSON nests thousands deep (written by SQL: jsonb takes it) breaks no
operator tool: ``pgtasks jobs list`` and ``jobs show`` run as subprocesses show it as
unreadable, with its id, task, queue and status, and the other rows as they are."""

from __future__ import annotations

import json

import pytest

from pgtasks import App
from tests.support.cli import Cli, Connection
from tests.support.inprocess import execute
from tests.support.population import insert_job

pytestmark = pytest.mark.acceptance

DEEP = "[" * 3000 + "]" * 3000


def no_traceback(result: object) -> None:
    for stream in (result.stdout, result.stderr):  # type: ignore[attr-defined]
        assert "Traceback" not in stream and "RecursionError" not in stream, stream


def test_jobs_list_and_show_show_a_row_nested_past_the_bound_as_unreadable(
    ops_app: App, conn: Connection, cli: Cli
) -> None:
    deep = insert_job(conn, ops_app, task="ops.deep_args", queue="poisoned", args=DEEP)
    result_row = insert_job(conn, ops_app, task="ops.deep_result", status="done", finished_ago=1)
    execute(
        conn,
        ops_app,
        "UPDATE {schema}.jobs SET result = %s::jsonb, meta = %s::jsonb WHERE id = %s",
        (DEEP, '{"m": ' + DEEP + "}", result_row),
    )
    fine = insert_job(conn, ops_app, task="ops.fine", args="[1, 2]")

    listed = cli("jobs", "list")
    no_traceback(listed)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert {str(deep), str(result_row), str(fine)} <= set(lines), listed.stdout
    for job_id, task, queue, status in (
        (deep, "ops.deep_args", "poisoned", "pending"),
        (result_row, "ops.deep_result", "default", "done"),
    ):
        line = lines[str(job_id)]
        assert task in line and queue in line and status in line, line
        assert "unreadable" in line, line
    assert "unreadable" not in lines[str(fine)]

    shown = cli("jobs", "show", str(deep))
    no_traceback(shown)
    assert shown.returncode == 0, shown.stderr
    assert f"job {deep}" in shown.stdout
    for text in ("ops.deep_args", "poisoned", "pending", "unreadable:", "3000 levels deep"):
        assert text in shown.stdout, shown.stdout

    shown = cli("jobs", "show", str(result_row))
    no_traceback(shown)
    assert shown.returncode == 0, shown.stderr
    assert "result is nested 3000 levels deep" in shown.stdout, shown.stdout
    assert "meta is nested 3001 levels deep" in shown.stdout, shown.stdout

    document = cli("jobs", "show", str(deep), "--json")
    no_traceback(document)
    assert document.returncode == 0, document.stderr
    job = json.loads(document.stdout)
    assert (job["id"], job["task_name"], job["queue"], job["status"]) == (
        deep,
        "ops.deep_args",
        "poisoned",
        "pending",
    )
    assert job["args"] == [] and "3000 levels deep" in job["unreadable"]

    documents = cli("jobs", "list", "--json")
    no_traceback(documents)
    assert documents.returncode == 0, documents.stderr
    by_id = {job["id"]: job for job in json.loads(documents.stdout)}
    assert by_id[fine]["args"] == [1, 2] and by_id[fine]["unreadable"] is None
    assert by_id[deep]["unreadable"] is not None


def test_a_result_nested_past_the_bound_raises_a_clear_error_from_get(
    ops_app: App, conn: Connection
) -> None:
    from pgtasks import PayloadError

    job_id = insert_job(conn, ops_app, task="ops.deep_result", status="done", finished_ago=1)
    execute(conn, ops_app, "UPDATE {schema}.jobs SET result = %s WHERE id = %s", (DEEP, job_id))
    with pytest.raises(PayloadError, match=f"the result of job {job_id} cannot be decoded"):
        ops_app.get_job(job_id).get(timeout=5)
