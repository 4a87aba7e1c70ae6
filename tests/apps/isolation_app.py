"""The app of the isolation scenarios: the fault app's tasks and the limits app's, in one
app, so that one set of ``pgtasks worker`` processes runs limited jobs, workflows and the
stale-lease scenario against a database whose default isolation is not READ COMMITTED.
Configured like ``tests.apps.fault_app``: ``PGTASKS_DSN`` and ``PGTASKS_TEST_SCHEMA``."""

from __future__ import annotations

import os

from pgtasks import App
from tests.apps import lazy_app
from tests.apps._environment import environment_app
from tests.apps.fault_app import register_fault_tasks
from tests.apps.limits_app import register_limit_tasks


def build_app() -> App:
    app = environment_app(
        connect_timeout=float(os.environ.get("PGTASKS_TEST_CONNECT_TIMEOUT", "2")),
        pool_max_size=int(os.environ.get("PGTASKS_TEST_POOL_MAX", "4")),
    )
    register_fault_tasks(app)
    register_limit_tasks(app)
    return app


#: ``app`` is built on first access, so importing this module needs no environment.
__getattr__ = lazy_app(build_app, __name__)
