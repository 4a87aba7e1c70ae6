"""``pgtasks limits set|pause|resume|reset|audit`` and ``control rate_limit`` as real
subprocesses: each change printed before and after, bad input a one-line error (exit 1)
that changes nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from pgtasks import App
from pgtasks._app import controls
from pgtasks._errors import LimitChangeError
from tests.apps.limits_app import CAPPED_QUEUE, register_limit_tasks
from tests.support.cli import cli_runner

pytestmark = pytest.mark.acceptance


@pytest.mark.timeout(180)  # seven CLI processes on a loaded machine
@pytest.mark.slow
def test_limits_change_at_runtime_from_the_command_line(make_app: Callable[..., App]) -> None:
    app = make_app()
    tasks = register_limit_tasks(app)
    with app.connection() as conn:  # as a worker stores them at its start
        app.queries.upsert_limits(conn, app.limit_definitions())
    cli = cli_runner(app, "tests.apps.limits_app:app")
    tasks.free.apply_async(kwargs={"seconds": 0}, countdown=3600)

    queue = f"queue:{CAPPED_QUEUE}"
    result = cli("limits", "set", queue, "--rate", "10/s", "--json")
    assert result.returncode == 0, result.stderr
    change = json.loads(result.stdout)
    assert change["before"] == {
        "concurrency": 2,
        "rate": None,
        "paused": False,
        "declared": True,
    }
    assert change["after"]["rate"] == "10/s" and change["after"]["concurrency"] == 2

    free = f"task:{tasks.free.name}"
    result = cli("control", "rate_limit", tasks.free.name, "5/s")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"new rate limit set successfully: {tasks.free.name} 5/s"
    state = {state.name: state for state in app.admin.limits()}[free]
    assert (state.rate, state.declared, state.pending) == ("5/s", False, 1)

    paused = cli("limits", "pause", free)
    assert paused.stdout.strip() == (
        f"{free}: concurrency=- rate=5/s (not declared) -> concurrency=- rate=5/s paused"
        " (not declared)"
    )
    assert cli("limits", "pause", free).stderr.strip() == f"error: {free} is paused already"
    refused = cli("limits", "set", "emails", "--rate", "1/s")
    assert refused.returncode == 1 and refused.stderr.startswith("error: limit name 'emails'")
    for arguments, error in [  # the same checks, without a process each
        (("set", free), "give a concurrency or a rate (or both) to set"),
        (("reset", "task:nothing"), "no limit 'task:nothing' is stored: nothing to reset"),
        (("resume", queue), f"{queue} is not paused"),
    ]:
        with pytest.raises(LimitChangeError, match=re.escape(error)):
            function = {"set": controls.set_limit, "reset": controls.reset_limit}.get(
                arguments[0], controls.resume_limit
            )
            function(app, arguments[1])
    controls.resume_limit(app, free, actor="cli:test")

    audit = cli("limits", "audit", "--json")
    rows = json.loads(audit.stdout)
    assert [(row["action"], row["target"]) for row in rows] == [
        ("resume", f"limit:{free}"),
        ("pause", f"limit:{free}"),
        ("set", f"limit:{free}"),
        ("set", f"limit:{queue}"),
    ]
    assert rows[1]["actor"].startswith("cli:") and rows[2]["actor"].startswith("control:")

    assert cli("limits", "reset", queue).returncode == 0
    controls.reset_limit(app, free)
    states = {state.name: state for state in app.admin.limits()}
    assert free not in states and states[queue].rate == "-"
    listed = cli("limits", app_option=False)
    assert listed.returncode == 2 and "Missing option '-A'" in listed.stderr
