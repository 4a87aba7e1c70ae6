"""The public surface: ``pgtasks.__all__`` is sorted, complete and importable."""

from __future__ import annotations

import importlib.metadata
import inspect
import types

import pgtasks
from pgtasks import _errors


def public_names() -> set[str]:
    """Names the package namespace offers that are not private and not submodules (its
    ``dir()``: the public names load on first use)."""
    return {
        name
        for name in dir(pgtasks)
        if not name.startswith("_") and not isinstance(getattr(pgtasks, name), types.ModuleType)
    } - {"annotations"}


def test_all_is_sorted() -> None:
    assert pgtasks.__all__ == sorted(pgtasks.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(pgtasks.__all__) == len(set(pgtasks.__all__))


def test_all_lists_every_public_name_of_the_package() -> None:
    assert set(pgtasks.__all__) - {"__version__"} == public_names()


def test_every_name_in_all_is_importable() -> None:
    for name in pgtasks.__all__:
        assert getattr(pgtasks, name, None) is not None, name


def test_every_exported_object_claims_pgtasks_as_its_home() -> None:
    for name in pgtasks.__all__:
        value = getattr(pgtasks, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("pgtasks"), name
            assert value.__name__ == name, f"{name} is exported under another name"


def test_every_error_class_is_exported_and_in_the_documented_tree() -> None:
    error_classes = {
        name
        for name, value in vars(_errors).items()
        if inspect.isclass(value) and issubclass(value, _errors.PgTasksError)
    }

    assert error_classes <= set(pgtasks.__all__)
    for name in error_classes:
        assert name in (_errors.__doc__ or ""), f"{name} is missing from the _errors tree"
        # TaskFailed and JobCancelled are the names users look for (as in Celery), and
        # WorkflowFailed is the TaskFailed of a workflow.
        assert name.endswith("Error") or name in ("TaskFailed", "JobCancelled", "WorkflowFailed"), (
            name
        )


def test_every_error_has_a_default_message() -> None:
    for name in pgtasks.__all__:
        value = getattr(pgtasks, name)
        if inspect.isclass(value) and issubclass(value, pgtasks.PgTasksError):
            assert str(value()), f"{name}() has an empty message"


def test_version_matches_the_installed_distribution() -> None:
    assert pgtasks.__version__ == importlib.metadata.version("pgtasks")
