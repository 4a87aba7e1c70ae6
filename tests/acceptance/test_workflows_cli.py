"""``pgtasks workflows list|show|cancel|heal``, the workflow line of ``pgtasks jobs show``,
``jobs list --workflow``, and ``jobs delete|retry`` refusing what would break a workflow,
as real subprocesses against a real PostgreSQL."""

from __future__ import annotations

import json

import pytest
from psycopg import sql

from pgtasks import App, chain, chord, group
from tests.apps.ops_app import register_tasks
from tests.support.cli import Cli, Connection
from tests.support.workflows import settle

pytestmark = pytest.mark.acceptance


def test_show_of_a_large_group_prints_its_first_jobs_and_counts_the_rest(
    cli: Cli, ops_app: App
) -> None:
    """A group of a million members is not read whole: ``--limit`` jobs (1,000 by
    default) are shown, the others counted by status."""
    register_tasks(ops_app)
    add = ops_app.get_task("ops_app.add")
    workflow = group(add.s(n, 0) for n in range(30)).delay()

    shown = cli("workflows", "show", str(workflow.id), "--limit", "10")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 12, lines  # the head, 10 jobs, the count
    assert lines[-1] == "  … and 20 more jobs not shown (all jobs: pending 30)"
    document = json.loads(cli("workflows", "show", str(workflow.id), "--limit=10", "--json").stdout)
    assert len(document["jobs"]) == 10 and document["jobs_by_status"] == {"pending": 30}
    everything = json.loads(
        cli("workflows", "show", str(workflow.id), "--limit=0", "--json").stdout
    )
    assert len(everything["jobs"]) == 30 and "jobs_by_status" not in everything
    assert len(cli("workflows", "show", str(workflow.id)).stdout.splitlines()) == 31


def test_show_and_cancel_a_workflow(cli: Cli, ops_app: App) -> None:
    register_tasks(ops_app)
    add = ops_app.get_task("ops_app.add")
    workflow = chain(add.s(1, 2), chord([add.s(1), add.s(2)], add.si(0, 0)), add.s(3)).delay()
    jobs = ops_app.get_workflow(workflow.id)["jobs"]

    shown = cli("workflows", "show", str(workflow.id))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"workflow {workflow.id} (chain): running")
    assert lines[1].split() == ["0", "ops_app.add", "job", str(jobs[0]["id"]), "pending"]
    assert lines[2].split()[:5] == ["1.0.0", "ops_app.add", "job", str(jobs[1]["id"]), "waiting"]
    assert lines[4].split()[0] == "1.1" and lines[5].split()[0] == "2"

    document = json.loads(cli("workflows", "show", str(workflow.id), "--json").stdout)
    assert [job["status"] for job in document["jobs"]] == ["pending"] + ["waiting"] * 4

    job_text = cli("jobs", "show", str(jobs[2]["id"]))
    assert job_text.returncode == 0, job_text.stderr
    assert f"  workflow:        {workflow.id} (step 1.0.1;" in job_text.stdout
    job_json = json.loads(cli("jobs", "show", str(jobs[2]["id"]), "--json").stdout)
    assert job_json["workflow"] == {"id": workflow.id, "step": "1.0.1"}
    assert json.loads(cli("jobs", "list", "--status", "waiting", "--json").stdout)

    cancelled = cli("workflows", "cancel", str(workflow.id))
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"workflow {workflow.id}: 5 job(s) cancelled or asked to stop\n"
    assert workflow.status == "cancelled"

    missing = cli("workflows", "show", "999999999")
    assert missing.returncode == 1
    assert "workflow 999999999 does not exist" in missing.stderr


def test_list_workflows_and_their_jobs(cli: Cli, ops_app: App) -> None:
    register_tasks(ops_app)
    add = ops_app.get_task("ops_app.add")
    first = chord([add.s(1, 1), add.s(2, 2)], add.si(0, 0)).delay()
    second = chain(add.s(1, 2), add.s(3)).delay()
    jobs = ops_app.get_workflow(first.id)["jobs"]
    settle(ops_app, {jobs[0]["id"]: 2, jobs[1]["id"]: 4})  # the callback starts

    listed = cli("workflows", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "SHAPE", "STEPS", "DONE", "STATE", "STARTED", "FINISHED"]
    assert lines[1].split()[:6] == [
        str(second.id),
        "ops_app.add",
        "→",
        "ops_app.add",
        "0/2",
        "running",
    ]
    assert lines[2].split()[:6] == [
        str(first.id),
        "[2\N{MULTIPLICATION SIGN}ops_app.add]",
        "→",
        "ops_app.add",
        "2/3",
        "running",
    ]

    document = json.loads(cli("workflows", "list", "--json").stdout)
    assert [row["id"] for row in document] == [second.id, first.id]
    assert document[1] | {"created_at": None, "started_at": None} == {
        "id": first.id,
        "kind": "chord",
        "shape": "[2\N{MULTIPLICATION SIGN}ops_app.add] → ops_app.add",
        "steps": 3,
        "steps_done": 2,
        "state": "running",
        "created_at": None,
        "started_at": None,
        "finished_at": None,
        "steps_capped": False,
    }
    # A workflow of more jobs than --steps-cap is counted to the cap: "more than N", its
    # times unread; 0 counts every job.
    capped = cli("workflows", "list", "--steps-cap", "2").stdout.splitlines()
    assert capped[2].split()[4:8] == ["more", "than", "2", "running"]
    assert capped[1].split()[4] == "0/2"
    document = json.loads(cli("workflows", "list", "--steps-cap", "2", "--json").stdout)
    assert [(row["steps"], row["steps_capped"]) for row in document] == [(2, False), (3, True)]
    assert document[1]["started_at"] is None
    whole = cli("workflows", "list", "--steps-cap", "0").stdout.splitlines()
    assert whole[2].split()[4] == "2/3"
    bad_cap = cli("workflows", "list", "--steps-cap", "-1")
    assert bad_cap.returncode == 2 and "--steps-cap" in bad_cap.stderr
    assert cli("workflows", "list", "--status", "done").stdout == "no workflows\n"
    assert (
        json.loads(
            cli("workflows", "list", "--status", "running", "--limit", "1", "--json").stdout
        )[0]["id"]
        == second.id
    )
    bad = cli("workflows", "list", "--status", "stuck")
    assert bad.returncode == 2 and "'stuck' is not one of" in bad.stderr

    by_workflow = json.loads(cli("jobs", "list", "--workflow", str(first.id), "--json").stdout)
    assert [job["id"] for job in by_workflow] == sorted((job["id"] for job in jobs), reverse=True)
    text = cli("jobs", "list", "--workflow", str(second.id)).stdout.splitlines()
    assert len(text) == 3 and text[0].startswith("ID")


@pytest.mark.slow
def test_delete_and_retry_refuse_what_would_break_a_workflow(cli: Cli, ops_app: App) -> None:
    register_tasks(ops_app)
    add = ops_app.get_task("ops_app.add")
    workflow = chain(add.s(1, 2), add.s(3), add.s(4)).delay()
    jobs = [job["id"] for job in ops_app.get_workflow(workflow.id)["jobs"]]
    settle(ops_app, {jobs[0]: 3})

    refused = cli("jobs", "delete", str(jobs[0]))
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: job {jobs[0]} was not deleted: it is step 0 of")
    assert f"workflow {workflow.id}, which has not finished" in refused.stderr
    pending = cli("jobs", "delete", str(jobs[1]))
    assert pending.returncode == 1 and "only finished jobs can be deleted" in pending.stderr

    # The second step fails for good: the third is cancelled before it got its input.
    settle(ops_app, {jobs[1]: RuntimeError("boom")})
    retried = cli("jobs", "retry", str(jobs[2]))
    assert retried.returncode == 1
    assert (
        f"job {jobs[2]} is step 2 of workflow {workflow.id} and never received its input:"
        f" its predecessor step 1 (task ops_app.add, job {jobs[1]}) is failed" in retried.stderr
    )
    assert cli("jobs", "retry", str(jobs[1])).returncode == 0
    waiting = cli("jobs", "retry", str(jobs[2]), "--json")
    assert waiting.returncode == 0, waiting.stderr
    assert json.loads(waiting.stdout)["status"] == "waiting"
    settle(ops_app, {jobs[1]: 6})
    step = ops_app.get_job(jobs[2]).fetch()
    assert (step.status.value, step.args) == ("pending", [6, 4])

    # Finished (cancelled, here), its jobs may be deleted.
    cli("workflows", "cancel", str(workflow.id))
    deleted = cli("jobs", "delete", str(jobs[0]))
    assert deleted.returncode == 0 and deleted.stdout == f"job {jobs[0]} deleted (it was done)\n"
    assert cli("jobs", "delete", str(jobs[0])).returncode == 1  # gone


@pytest.mark.slow
def test_heal_moves_a_stuck_step_on_and_show_lists_the_incident(
    cli: Cli, ops_app: App, conn: Connection
) -> None:
    register_tasks(ops_app)
    add = ops_app.get_task("ops_app.add")
    workflow = chain(add.s(1, 2), add.s(3)).delay()
    first, second = (job["id"] for job in ops_app.get_workflow(workflow.id)["jobs"])
    schema = sql.Identifier(ops_app.schema)
    # The first step done with its triggers off: the second one is left waiting.
    conn.execute(sql.SQL("ALTER TABLE {}.jobs DISABLE TRIGGER USER").format(schema))
    conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET status = 'done', result = '3', finished_at = now() WHERE id = %s"
        ).format(schema),
        (first,),
    )
    conn.execute(sql.SQL("ALTER TABLE {}.jobs ENABLE TRIGGER USER").format(schema))
    doctor = cli("doctor")
    assert "1 waiting step(s) have no unfinished predecessor" in doctor.stdout

    healed = cli("workflows", "heal")
    assert healed.returncode == 0, healed.stderr
    assert healed.stdout.startswith(f"healed 1 stuck step(s): 1 started ({second}), 0 cancelled;")
    assert json.loads(cli("workflows", "heal", "--json").stdout)["healed"] == 0
    assert ops_app.get_job(second).fetch().args == [3, 3]

    shown = cli("workflows", "show", str(workflow.id))
    assert "incidents:" in shown.stdout
    assert f"healed  workflow {workflow.id}  job {second}" in shown.stdout
    document = json.loads(cli("workflows", "show", str(workflow.id), "--json").stdout)
    assert [incident["kind"] for incident in document["incidents"]] == ["healed"]
