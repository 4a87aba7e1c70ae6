"""``pgtasks doctor``: registered on the ``pgtasks`` command group by cli.py."""

from __future__ import annotations

import json
import sys

import click

from .._app.doctor import diagnose, exit_code
from ._common import app_option, guard, json_option, load_app

_MARKS = {"ok": "ok      ", "warning": "WARNING ", "critical": "CRITICAL"}


@click.command()
@app_option
@json_option
def doctor(app_path: str, as_json: bool) -> None:
    """Check what slows or endangers the queue: xmin horizon (old transactions, replication
    slots, prepared transactions), dead tuples and vacuum, index bloat, jobs stuck under
    dead workers, backlog age, connections. Exit 0 healthy, 1 warnings, 2 critical."""
    app = load_app(app_path)

    def run() -> list[dict[str, str]]:
        with app.connection() as conn:
            return [finding.as_dict() for finding in diagnose(app, conn)]

    findings = guard(run)
    app.close()
    code = max((("ok", "warning", "critical").index(f["level"]) for f in findings), default=0)
    if as_json:
        click.echo(
            json.dumps({"status": ["ok", "warning", "critical"][code], "findings": findings})
        )
    else:
        click.echo(f"pgtasks doctor: schema {app.schema!r} on {app.describe_database()}")
        for finding in findings:
            click.echo(f"{_MARKS[finding['level']]} {finding['check']}: {finding['summary']}")
            if finding["remedy"]:
                click.echo(f"         → {finding['remedy']}")
    sys.exit(code)


__all__ = ["doctor", "exit_code"]
