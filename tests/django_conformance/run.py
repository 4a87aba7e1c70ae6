"""Run Django's own tests of ``django.tasks`` (``tests/tasks`` of the Django source
distribution) against pgtasks' backend: ``python3 dev.py test-django-conformance``
fetches the sdist of the Django installed in .venv-django6 and runs this module there::

    python -m tests.django_conformance.run <the sdist's tests/ directory>

Django's tests name its two built-in backends; here pgtasks' backend takes their places
(tests/django_conformance/backends.py): ``RunNowBackend`` where a test uses
ImmediateBackend (the job is stored, then run at once by a real pgtasks worker and read
back), ``StoredBackend`` where it uses DummyBackend (stored, not run). Everything else
is Django's test code as shipped, run by Django's own test runner on a test database
of the suite's PostgreSQL server (PGTASKS_TEST_DSN, else the embedded one).

Only tests that check what an immediate or dummy backend does unlike any stored,
worker-run backend are skipped, each with its reason (SKIPPED): the run prints them and
the counts. tests/tasks/test_custom_backend.py is not run: it tests custom backend
classes of its own, not the backend under test.
"""

from __future__ import annotations

import os
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

MODULES = ("tasks.test_tasks", "tasks.test_immediate_backend", "tasks.test_dummy_backend")

_IMMEDIATE = "tasks.test_immediate_backend.ImmediateBackendTestCase"
_DUMMY = "tasks.test_dummy_backend.DummyBackendTestCase"
_SYNC_IN_ASYNC = (
    "an async test that calls the synchronous get_result() or refresh(): a backend that"
    " reads a database cannot, Django raises SynchronousOnlyOperation in an event loop"
    " (aget_result and arefresh, which it also calls, are what async code uses)"
)
#: Test id: why it does not apply to a backend that stores jobs for workers.
SKIPPED = {
    f"{_IMMEDIATE}.test_throws_keyboard_interrupt": (
        "ImmediateBackend runs the task in the caller, so a KeyboardInterrupt in it stops"
        " the caller; a worker's task never raises into the code that enqueued it"
    ),
    f"{_IMMEDIATE}.test_cannot_get_result": (
        "checks that ImmediateBackend lacks get_result; pgtasks' backend supports it"
        " (supports_get_result = True)"
    ),
    f"{_IMMEDIATE}.test_cannot_refresh_result": (
        "checks that ImmediateBackend cannot refresh a result; pgtasks' backend reads it"
        " again from the database"
    ),
    f"{_IMMEDIATE}.test_cannot_pass_run_after": (
        "checks that ImmediateBackend refuses run_after; pgtasks' backend defers the job"
        " (supports_defer = True)"
    ),
    "tasks.test_immediate_backend.ImmediateBackendTransactionTestCase"
    ".test_doesnt_wait_until_transaction_commit_by_default": (
        "checks that ImmediateBackend runs the task inside the caller's transaction;"
        " pgtasks' backend enqueues in that transaction, so no worker can run the job"
        " before it commits (by design: the job exists exactly if the transaction commits)"
    ),
    "tasks.test_tasks.TaskTestCase.test_get_missing_result": _SYNC_IN_ASYNC,
    "tasks.test_tasks.TaskTestCase.test_refresh_result": _SYNC_IN_ASYNC,
    f"{_DUMMY}.test_get_missing_result": _SYNC_IN_ASYNC,
    f"{_DUMMY}.test_refresh_result": (
        "changes the status of the dummy backend's in-memory result object and expects"
        " refresh() to see it; pgtasks' results are read from the database"
    ),
    f"{_DUMMY}.test_refresh_result_async": (
        "the async twin of test_refresh_result (the dummy backend's in-memory objects)"
    ),
}


def configure(tests_dir: Path) -> None:
    """Django's settings for the run: the suite's server, pgtasks' app and Django's
    ``tasks`` test package as an installed app (its tasks.py is what workers load)."""
    from psycopg.conninfo import conninfo_to_dict

    sys.path[:0] = [str(tests_dir), str(ROOT)]
    dsn = os.environ.get("PGTASKS_TEST_DSN")
    if not dsn:
        from pgtasks._embedded import embedded_dsn

        dsn = embedded_dsn(ROOT / ".pgtasks-test")
    params = conninfo_to_dict(dsn)
    from django.conf import settings

    settings.configure(
        SECRET_KEY="pgtasks-django-conformance",
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "pgtasks.contrib.django",
            "tasks",
        ],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": params.get("dbname", "postgres"),
                "USER": params.get("user", ""),
                "PASSWORD": params.get("password", ""),
                "HOST": params.get("host", ""),
                "PORT": params.get("port", ""),
                "TEST": {"NAME": "pgtasks_django_conformance"},
            }
        },
        TASKS={"default": {"BACKEND": "pgtasks.contrib.django.PgTasksBackend"}},
        PGTASKS={"APP_OPTIONS": {"poll_interval": 0.05}},
    )


def use_pgtasks_backends() -> None:
    """pgtasks' backends where Django's tests import and configure theirs (before the
    test modules are imported), and database access for their SimpleTestCases."""
    import importlib

    from django.test import SimpleTestCase

    from tests.django_conformance.backends import RunNowBackend, StoredBackend

    immediate = importlib.import_module("django.tasks.backends.immediate")
    dummy = importlib.import_module("django.tasks.backends.dummy")
    immediate.ImmediateBackend = RunNowBackend
    dummy.DummyBackend = StoredBackend
    # The backend under test stores results in the database.
    SimpleTestCase.databases = frozenset({"default"})


def tests_of(suite: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from tests_of(item)
        else:
            yield item


def skip_listed(suite: unittest.TestSuite) -> list[str]:
    found = []
    for test in tests_of(suite):
        reason = SKIPPED.get(test.id())
        if reason is not None:
            name = test.id().rsplit(".", 1)[1]
            setattr(type(test), name, unittest.skip(reason)(getattr(type(test), name)))
            found.append(test.id())
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.django_conformance.run <django sdist>/tests")
        return 2
    configure(Path(argv[1]))
    import django

    django.setup()
    use_pgtasks_backends()
    from django.test.runner import DiscoverRunner

    from pgtasks.contrib.django import reset_app

    class Runner(DiscoverRunner):  # type: ignore[misc]
        def get_test_runner_kwargs(self) -> dict[str, Any]:
            # Django 6.0 passes durations= (unittest's on Python >= 3.12 only).
            kwargs: dict[str, Any] = super().get_test_runner_kwargs()
            if sys.version_info < (3, 12):
                kwargs.pop("durations", None)
            return kwargs

    runner = Runner(verbosity=1, interactive=False)
    suite = runner.build_suite(list(MODULES))
    skipped = skip_listed(suite)
    missing = sorted(set(SKIPPED) - set(skipped))
    if missing:
        print(f"skip list names tests this Django does not have: {', '.join(missing)}")
        return 1
    old_config = runner.setup_databases()
    try:
        result: Any = runner.run_suite(suite)
    finally:
        reset_app()  # pgtasks' pools closed before the test database is dropped
        runner.teardown_databases(old_config)
    ran = result.testsRun
    bad = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    print(f"\nDjango {django.__version__} tests/tasks against pgtasks' backend:")
    print(
        f"  {ran} run: {ran - len(result.skipped) - bad} passed, {len(result.skipped)}"
        f" skipped, {len(result.failures)} failed, {len(result.errors)} errors"
    )
    for test, reason in result.skipped:
        print(f"  skipped {test.id()}: {reason}")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
