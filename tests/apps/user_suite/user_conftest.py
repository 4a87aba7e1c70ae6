"""conftest.py of a user's test suite that uses pgtasks.testing (copied as conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pgtasks import App
from pgtasks.testing import run_until_empty  # noqa: F401 - imported before the plugin loads
from tests.apps import user_app

pytest_plugins = ["pgtasks.testing"]


@pytest.fixture(autouse=True)
def shop_app(pgtasks_isolate: Callable[[App], App]) -> App:
    """Every test runs the project's App on a migrated schema of its own."""
    return pgtasks_isolate(user_app.app)
