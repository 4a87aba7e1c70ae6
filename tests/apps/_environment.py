"""The App of a test subprocess (a worker, beat or CLI process, a pool child): the
database and schema ``pgtasks_env`` put in its environment, and the options its app
module gives."""

from __future__ import annotations

import os
from typing import Any

from pgtasks import App


def environment_app(**options: Any) -> App:
    """``App(PGTASKS_DSN, schema=PGTASKS_TEST_SCHEMA, connect_timeout=3.0, **options)``."""
    options.setdefault("connect_timeout", 3.0)
    return App(os.environ["PGTASKS_DSN"], schema=os.environ["PGTASKS_TEST_SCHEMA"], **options)
