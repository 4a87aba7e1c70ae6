"""``pgtasks workflows show|cancel`` and the workflow line of ``pgtasks jobs show``, as
real subprocesses against a real PostgreSQL."""

from __future__ import annotations

import json

import pytest

from pgtasks import App, chain, chord
from tests.apps.ops_app import register_tasks
from tests.support.cli import Cli

pytestmark = pytest.mark.acceptance


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
