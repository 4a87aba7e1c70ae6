"""An app of several stores configured like a user's: ``App()`` with PGTASKS_STORES (JSON,
or a .json/.toml file) and PGTASKS_ROUTES; queue "emails" routes to store "bulk"."""

from __future__ import annotations

import os
from datetime import timedelta

from pgtasks import App
from tests.apps import lazy_app


def build() -> App:
    attempts = int(os.environ.get("PGTASKS_TEST_CONNECT_ATTEMPTS", "3"))
    timeout = float(os.environ.get("PGTASKS_TEST_CONNECT_TIMEOUT", "3"))
    app = App(connect_timeout=timeout, connect_attempts=attempts)

    @app.task(name="stores_app.double")
    def double(n: int) -> int:
        return n * 2

    @app.task(name="stores_app.mail", queue="emails")
    def mail(n: int) -> int:
        return n + 1

    app.add_periodic("stores_app.double", every=timedelta(seconds=1), args=(1,))
    app.add_periodic("stores_app.mail", every=timedelta(seconds=1), args=(1,))
    return app


__getattr__ = lazy_app(build, __name__)
