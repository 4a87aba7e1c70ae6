"""Running the corpus of Celery projects (tests/celery/corpus): under pgtasks with real
worker processes, and under real Celery in eager mode, from copies of the sources."""

from __future__ import annotations

import dataclasses
import importlib
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pgtasks import App
from pgtasks.celery import app as celery_app_module
from tests.support.environment import ROOT, pgtasks_command, pgtasks_env
from tests.support.processes import TIMING_FLAGS, ChildProcess, Processes

CORPUS = Path(__file__).parent / "corpus"


def _forget_modules(folder: Path) -> None:
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
        return pgtasks_env(
            self.app.dsn,
            self.app.schema,
            schema_variable="PGTASKS_SCHEMA",
            PYTHONPATH=f"{self.path}:{ROOT}",
        )

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


def _reset_celery_globals() -> None:
    with celery_app_module._lock:
        apps = list(celery_app_module._apps)
        celery_app_module._apps.clear()
        celery_app_module._current.clear()
        celery_app_module._shared.clear()
    for app in apps:
        app.close()


@pytest.fixture
def project(
    make_app: Callable[..., App], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], Project]]:
    """``project("next_steps")``: a copy of that corpus project, importable here, whose
    apps use a fresh migrated schema (PGTASKS_DSN, PGTASKS_SCHEMA)."""
    made: list[Project] = []

    def factory(name: str) -> Project:
        app = make_app()
        copy = tmp_path / f"pgtasks_{name}"
        shutil.copytree(CORPUS / name, copy)
        monkeypatch.setenv("PGTASKS_DSN", app.dsn)
        monkeypatch.setenv("PGTASKS_SCHEMA", app.schema)
        monkeypatch.syspath_prepend(str(copy))
        log_dir = tmp_path / f"logs_{name}"
        log_dir.mkdir()
        made.append(Project(copy, app, Processes(log_dir, "")))
        return made[-1]

    _reset_celery_globals()
    yield factory
    for item in made:
        item.processes.close()
        _forget_modules(item.path)
    _reset_celery_globals()


@pytest.fixture
def celery_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], Path]]:
    """``celery_project("next_steps")``: a copy of that corpus project with its imports
    changed back to Celery's (``pgtasks.celery`` -> ``celery``), importable here; its
    apps are to be run eagerly (no broker: PGTASKS_DSN is ``memory://``)."""
    made: list[Path] = []

    def factory(name: str) -> Path:
        copy = tmp_path / f"celery_{name}"
        shutil.copytree(CORPUS / name, copy)
        for source in copy.rglob("*.py"):
            text = source.read_text()
            source.write_text(text.replace("pgtasks.celery", "celery"))
        monkeypatch.setenv("PGTASKS_DSN", "memory://")
        monkeypatch.syspath_prepend(str(copy))
        made.append(copy)
        return copy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Celery's own deprecation notices
        yield factory
    for copy in made:
        _forget_modules(copy)


def eager_celery(app: Any, *, propagates: bool = True) -> None:
    """Make a real Celery app run everything here (task_always_eager); ``propagates``:
    exceptions raised by the call (False: by ``get()``, and retries re-run the task)."""
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = propagates
    app.conf.broker_url = "memory://"
