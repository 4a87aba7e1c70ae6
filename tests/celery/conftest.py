"""Fixtures of tests/celery: corpus projects under pgtasks (fresh migrated schema) and
under real Celery (imports changed back), each from a copy of its sources."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pgtasks import App
from pgtasks.celery import _state as celery_state
from tests.support.celery_projects import CORPUS, Project, forget_modules
from tests.support.processes import Processes


def _reset_celery_globals() -> None:
    for app in celery_state.reset():
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
        forget_modules(item.path)
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
        forget_modules(copy)
