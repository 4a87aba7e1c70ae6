"""The app of the Celery-style CLI tests (``pgtasks call|purge|tasks list``, global options).

Configured like ops_app (``PGTASKS_DSN``, ``PGTASKS_TEST_SCHEMA``). Building it logs one
warning (``cli_app built``), so a test can see how the command configured logging.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from pgtasks import App
from tests.apps import lazy_app
from tests.apps._environment import environment_app

BUILT = "cli_app built"


def register_tasks(app: App) -> None:
    @app.task(name="cli_app.send_email", queue="emails", max_attempts=3)
    def send_email(to: str, subject: str = "hi") -> str:
        return f"sent {subject} to {to}"

    @app.task(
        name="cli_app.sync_account",
        priority=5,
        retry_backoff=2.0,
        retry_backoff_max=60.0,
        retry_jitter=False,
        timeout=30.0,
        soft_timeout=25.0,
        concurrency=1,
        concurrency_key=lambda account_id: account_id,
        rate_limit="10/s",
        unique_key=lambda account_id: f"sync:{account_id}",
        unique_while="active",
    )
    def sync_account(account_id: int) -> None:
        return None

    @app.task(name="cli_app.digest", unique_key=lambda: "digest", unique_for=timedelta(hours=1))
    def digest() -> None:
        return None

    app.add_periodic(digest, cron="*/5 * * * *")


def build_app() -> App:
    logging.getLogger("tests.apps.cli_app").warning(BUILT)
    app = environment_app(
        connect_timeout=3.0,
    )
    register_tasks(app)
    return app


__getattr__ = lazy_app(build_app, __name__)
