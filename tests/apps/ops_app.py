"""The app that ``pgtasks stats|jobs|workers|prune`` acceptance tests load.

Configured from the environment: ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA`` (the test's
migrated schema). The module-level ``app`` is built on first access, so a test process
can import :func:`register_tasks` to enqueue the same task names on its own App.
"""

from __future__ import annotations

from pgtasks import App
from tests.apps import lazy_app
from tests.apps._environment import environment_app

#: Short enough that a worker row made silent by a test is past the lease at once.
LEASE_TIMEOUT = 10.0


def register_tasks(app: App) -> None:
    """Two tasks under fixed names (``ops_app.*``), on two queues."""

    @app.task(name="ops_app.add", queue="default")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="ops_app.send_email", queue="emails", max_attempts=3)
    def send_email(to: str, subject: str = "hi") -> str:
        raise ConnectionError(f"SMTP server refused {to}")


def build_app() -> App:
    app = environment_app(
        lease_timeout=LEASE_TIMEOUT,
        heartbeat_interval=1.0,
    )
    register_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
