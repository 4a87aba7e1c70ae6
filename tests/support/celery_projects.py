"""The corpus of Celery projects (tests/celery/corpus): copies importable in the test's
process, run under pgtasks with real worker processes, or under real Celery eagerly."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

from pgtasks import App
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.processes import TIMING_FLAGS, ChildProcess, Processes

CORPUS = ROOT / "tests" / "celery" / "corpus"


def forget_modules(folder: Path) -> None:
    """Drop the modules imported from ``folder`` (the next run imports its own copies)."""
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        paths = list(getattr(module, "__path__", []) or [])
        if origin.startswith(str(folder)) or any(
            str(path).startswith(str(folder)) for path in paths
        ):
            del sys.modules[name]


@dataclasses.dataclass
class Project:
    """A copy of a corpus project on a migrated schema, importable in this process."""

    path: Path
    app: App
    processes: Processes

    @property
    def env(self) -> dict[str, str]:
        env = pgtasks_env(
            self.app.dsn,
            self.app.schema,
            schema_variable="PGTASKS_SCHEMA",
            PYTHONPATH=f"{self.path}:{ROOT}",
        )
        # A project's processes choose their Django settings as a user's shell would: the
        # project's own ``os.environ.setdefault``, not the settings module that
        # tests/django's conftest put into this process's environment.
        env.pop("DJANGO_SETTINGS_MODULE", None)
        return env

    def module(self, name: str) -> Any:
        return importlib.import_module(name)

    def command(self, *arguments: str) -> list[str]:
        return pgtasks_command(*arguments)

    def worker(self, app_path: str, *arguments: str) -> ChildProcess:
        """``pgtasks -A <app_path> worker -l info ARGUMENTS``, once it has started."""
        command = pgtasks_command("-A", app_path, "worker", "-l", "info", *TIMING_FLAGS, *arguments)
        child = self.processes.spawn("worker", command, self.env)
        child.wait_for_log(" started: ", timeout=30)
        return child

    def spawn(self, kind: str, *arguments: str) -> ChildProcess:
        return self.processes.spawn(kind, pgtasks_command(*arguments), self.env)


def eager_celery(app: Any, *, propagates: bool = True) -> None:
    """Make a real Celery app run everything here (task_always_eager); ``propagates``:
    exceptions raised by the call (False: by ``get()``, and retries re-run the task)."""
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = propagates
    app.conf.broker_url = "memory://"
